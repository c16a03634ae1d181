// What the browser tests of usestream/app.jsx share: the page bundled by
// esbuild, and Debian's Chromium launched headless by playwright-core
// (CHROMIUM, or /usr/bin/chromium).
import { build } from "esbuild";
import { chromium } from "playwright-core";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const made = []; // the temporary directories, for cleanup

function tempDir(prefix) {
  const d = mkdtempSync(join(tmpdir(), prefix));
  made.push(d);
  return d;
}

// cleanup removes the temporary directories bundleApp and launchChromium
// made.
export function cleanup() {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
}

// The page's HTML (it loads /app.js) and its script, bundled.
export async function bundleApp(title) {
  const out = tempDir("agentstream-page-");
  await build({
    entryPoints: [join(here, "app.jsx")],
    bundle: true,
    outfile: join(out, "app.js"),
    format: "esm",
    jsx: "automatic",
    define: { "process.env.NODE_ENV": '"production"' },
    logLevel: "warning",
  });
  const html = `<!doctype html><meta charset="utf-8"><title>${title}</title><div id="root"></div><script type="module" src="/app.js"></script>`;
  return { html, script: readFileSync(join(out, "app.js")) };
}

// A headless Chromium with a profile of its own.
export function launchChromium() {
  const profile = tempDir("agentstream-chromium-");
  return chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}
