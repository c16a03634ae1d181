// End-to-end test of the playground page in Debian's Chromium, driven by
// playwright-core: start demo from the page, see the agent tree and the
// assembled text, approve the interrupt by clicking, see the run complete;
// drop the WebSocket mid-run and see the page recover with no duplicated
// text; follow a firehose of 2,000 events/s. A screenshot of each state
// goes to ARTIFACTS. A refused connection says why: an invalid thread id,
// and (on AUTH_URL, a server with authentication) a missing or bad token.
//
// Usage: node playground-e2e.mjs http://host:port ARTIFACTS [AUTH_URL]
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, artifacts, authURL] = process.argv.slice(2);
if (!artifacts) {
  console.error("usage: node playground-e2e.mjs http://host:port ARTIFACTS");
  process.exit(2);
}
const profile = mkdtempSync(join(tmpdir(), "agentstream-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  viewport: { width: 1280, height: 900 },
});
const results = [];
function check(cond, what) {
  if (!cond) throw new Error(`failed: ${what}`);
  results.push(`ok   ${what}`);
}
const external = [];
try {
  const page = await context.newPage();
  page.on("request", (r) => { if (!r.url().startsWith(url) && !(authURL && r.url().startsWith(authURL))) external.push(r.url()); });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));

  // 1. demo: tree, text, interrupt approved by a click, completion.
  await page.goto(`${url}/?thread=e2e-demo`);
  await page.waitForSelector("#status.live", { timeout: 10000 });
  await page.fill("#assistant", "demo");
  await page.fill("#input", "What is agentstream?");
  await page.click("#start");
  const approve = page.locator("#interrupts .interrupt button", { hasText: "Approve" });
  await approve.waitFor({ timeout: 10000 });
  const tree = await page.textContent("#tree");
  check(tree.includes("researcher") && tree.includes("interrupted"), "the tree shows the researcher subagent and the interrupted run");
  const before = await page.textContent("#messages");
  check(before.includes("Let me look that up.") && before.includes("research(") && before.includes("agentstream streams agent events"), "the messages show text, the tool call and the subagent's answer");
  await page.screenshot({ path: join(artifacts, "1-interrupt.png"), fullPage: true });
  await approve.click();
  await page.waitForFunction(() => document.querySelector("#run-status")?.textContent === "run completed", null, { timeout: 10000 });
  const after = await page.textContent("#messages");
  check(after.includes("Here is what I found: agentstream streams agent events to many clients at once."), "the final answer assembled");
  check((await page.textContent("#interrupts")).includes("none pending"), "no interrupt left");
  check((await page.textContent("#messages")).includes('← {"result":'), "the tool's result is shown");
  check(after.includes("What is agentstream?"), "the user's own message is shown");
  await page.screenshot({ path: join(artifacts, "2-completed.png"), fullPage: true });

  // 2. A WebSocket dropped mid-run: the page reconnects and the text is
  // whole, nothing twice.
  const words = Array.from({ length: 60 }, (_, i) => `word${i}`).join(" ");
  await page.goto(`${url}/?thread=e2e-drop`);
  await page.waitForSelector("#status.live", { timeout: 10000 });
  await page.fill("#assistant", "echo");
  await page.fill("#input", words);
  await page.fill("#config", '{"token_delay_ms": 25}');
  // Keyboard: from the config field, Tab reaches Start, and Enter presses it.
  await page.focus("#config");
  await page.keyboard.press("Tab");
  check(await page.evaluate(() => document.activeElement?.id === "start"), "Tab moves from the config to Start");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => (document.querySelector("#messages .role-ai .text")?.textContent || "").length > 60, null, { timeout: 10000 });
  await page.evaluate(() => window.playground.drop());
  await page.screenshot({ path: join(artifacts, "3-dropped.png"), fullPage: true });
  await page.waitForFunction(() => document.querySelector("#run-status")?.textContent === "run completed", null, { timeout: 15000 });
  const text = await page.textContent("#messages .role-ai .text");
  check(text === words, `the streamed text is whole and nothing is twice after the drop (got ${text.length} chars, want ${words.length})`);
  check((await page.textContent("#status")).includes("connected"), "connected again");
  await page.screenshot({ path: join(artifacts, "4-recovered.png"), fullPage: true });

  // 3. 2,000 events/s for 2 s: the page keeps up and answers.
  await page.goto(`${url}/?thread=e2e-firehose`);
  await page.waitForSelector("#status.live", { timeout: 10000 });
  await page.fill("#assistant", "firehose");
  await page.fill("#input", '{"count": 4000, "rate": 2000}');
  await page.fill("#config", "");
  await page.click("#start");
  let slowest = 0;
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    const t0 = Date.now();
    const done = await page.evaluate(() => document.querySelector("#run-status")?.textContent === "run completed");
    slowest = Math.max(slowest, Date.now() - t0);
    if (done) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  check(await page.evaluate(() => document.querySelector("#run-status")?.textContent === "run completed"), "the firehose run completed on the page");
  const log = await page.evaluate(() => ({ kept: window.playground.state.log.length, dropped: window.playground.state.logDropped }));
  check(log.kept === 2000 && log.kept + log.dropped >= 4000, `the log keeps the last 2,000 of every event received (kept ${log.kept}, dropped ${log.dropped})`);
  check(slowest < 5000, `the page answered within 5 s throughout (slowest ${slowest} ms)`);
  check(await page.evaluate(() => { const li = document.querySelector("#log li"); return !!li && getComputedStyle(li).overflow === "visible"; }), "the log's sequence numbers are not clipped");
  await page.screenshot({ path: join(artifacts, "5-firehose.png"), fullPage: true });

  // 4. On the demo's thread: a failed start shows a banner that a later
  // start clears; the new run's tree is its own; a cancel is shown as
  // cancelled, not failed.
  await page.goto(`${url}/?thread=e2e-demo`);
  await page.waitForSelector("#status.live", { timeout: 10000 });
  await page.fill("#assistant", "no-such-assistant");
  await page.fill("#input", "hello");
  await page.click("#start");
  await page.waitForSelector("#notice:not([hidden])", { timeout: 10000 });
  check((await page.textContent("#notice")).includes("unknown assistant"), "a failed start shows why");
  await page.fill("#assistant", "echo");
  await page.fill("#input", "one two three four five six seven eight nine ten eleven twelve");
  await page.fill("#config", '{"token_delay_ms": 300}');
  await page.click("#start");
  await page.waitForFunction(() => document.querySelector("#notice")?.hidden === true, null, { timeout: 10000 });
  check(true, "the banner is cleared by a run that starts");
  await page.waitForFunction(() => document.querySelector("#messages")?.textContent.includes("one two"), null, { timeout: 10000 });
  await page.click("#cancel");
  await page.waitForFunction(() => document.querySelector("#run-status")?.textContent === "run cancelled", null, { timeout: 10000 });
  check((await page.textContent("#tree")).includes("cancelled"), "the tree shows the run cancelled");
  check(!(await page.textContent("#tree")).includes("researcher"), "the tree is the new run's alone (not the demo's researcher)");
  check(!(await page.textContent("#messages")).includes("streaming"), "the cancelled message is not left streaming");

  // 5. Refused handshakes say why instead of reconnecting for ever.
  const refused = async (where) => {
    await page.goto(where);
    await page.waitForSelector("#status", { timeout: 10000 });
    await page.waitForFunction(() => document.querySelector("#status")?.textContent.startsWith("refused:"), null, { timeout: 10000 });
    return page.textContent("#status");
  };
  const bad = await refused(`${url}/?thread=${encodeURIComponent("not a thread id")}`);
  check(bad.includes("400: invalid thread id"), `an invalid thread id is named (${bad})`);
  if (authURL) {
    const noToken = await refused(`${authURL}/?thread=e2e-auth`);
    check(noToken.includes("401: a token is needed"), `a missing token is named (${noToken})`);
    await page.fill("#token", "not-a-key");
    await page.click("#connect-btn");
    await page.waitForFunction(() => document.querySelector("#status")?.textContent.includes("the token is invalid"), null, { timeout: 10000 });
    check(true, "a bad token is named");
    await page.screenshot({ path: join(artifacts, "6-refused.png"), fullPage: true });
    await page.fill("#token", "k-alice");
    await page.click("#connect-btn");
    await page.waitForSelector("#status.live", { timeout: 10000 });
    check(true, "a good token connects");
  } else {
    await page.screenshot({ path: join(artifacts, "6-refused.png"), fullPage: true });
  }

  check(errors.length === 0, `no page errors (${errors.join("; ")})`);
  check(external.length === 0, `no external requests (${external.join(", ")})`);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
  console.log(results.join("\n"));
}
