// Browser test of the LangGraph Platform API's run streams: a React page
// on useStream (usestream/app.jsx, bundled here by esbuild) in Debian's
// Chromium, driven by playwright-core, against the server at API: the
// streamed tokens render as they arrive; the demo's interrupt renders and
// is answered from the page; a reload mid-run rejoins the run
// (reconnectOnMount) and shows it whole; a second tab on the thread shows
// the same conversation, and one opened while a run goes on joins it and
// sees it stream. The page is served by a small server here that
// passes /api/* to API (one origin, as a front end behind a proxy that keeps the Host header).
//
// Usage: node usestream-e2e.mjs http://host:port
// (SITE_PORT=N SITE_ONLY=1 serves the page on port N and waits, to open
// it in a browser of one's own.)
import { bundleApp, cleanup, launchChromium } from "./usestream/page.mjs";
import http from "node:http";

const api = new URL(process.argv[2]);
const app = await bundleApp("useStream");
const site = http.createServer((req, res) => {
  if (req.url.startsWith("/api/")) {
    const up = http.request({ host: api.hostname, port: api.port, path: req.url.slice(4), method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on("error", () => { res.writeHead(502); res.end(); });
    req.pipe(up);
    return;
  }
  if (req.url === "/app.js") {
    res.writeHead(200, { "content-type": "text/javascript" });
    return res.end(app.script);
  }
  res.writeHead(200, { "content-type": "text/html" });
  res.end(app.html);
});
await new Promise((r) => site.listen(Number(process.env.SITE_PORT ?? 0), "127.0.0.1", r));
if (process.env.SITE_ONLY) { console.log("site up"); await new Promise(() => {}); }
const base = `http://127.0.0.1:${site.address().port}`;
const context = await launchChromium();
const results = [];
function check(cond, what) {
  if (!cond) throw new Error(`failed: ${what}`);
  results.push(`ok   ${what}`);
}
const messages = (p) => p.$$eval("#messages li", (lis) => lis.map((li) => [li.className, li.textContent]));
const words = "one two three four five six seven eight nine ten eleven twelve";
try {
  const errors = [];
  // 1. Tokens render as they arrive.
  const p = await context.newPage();
  p.on("pageerror", (e) => errors.push(String(e)));
  await p.goto(`${base}/?api=${base}/api&assistant=echo&delay=60`);
  await p.fill("#q", words);
  await p.click("#send");
  const seen = new Set();
  for (let i = 0; i < 200; i++) {
    const ai = (await messages(p)).filter(([type]) => type === "ai").map(([, text]) => text)[0];
    if (ai) seen.add(ai);
    if (ai === words) break;
    await p.waitForTimeout(25);
  }
  check([...seen].some((t) => t.length > 0 && t.length < words.length && words.startsWith(t)), `the answer rendered in parts as it streamed (${seen.size} states seen)`);
  check([...seen].includes(words), "the whole answer rendered");
  await p.waitForFunction(() => document.querySelector("#loading").textContent === "idle", null, { timeout: 10000 });
  const done = await messages(p);
  check(done.length === 2 && done[0][0] === "human" && done[0][1] === words, "the question and the answer, once each");
  const thread = new URL(p.url()).searchParams.get("thread");
  check(!!thread, "the page knows its thread");

  // 2. A second tab on the thread shows the same conversation.
  const second = await context.newPage();
  await second.goto(`${base}/?api=${base}/api&assistant=echo&thread=${thread}`);
  await second.waitForFunction(() => document.querySelectorAll("#messages li").length === 2, null, { timeout: 10000 });
  check(JSON.stringify(await messages(second)) === JSON.stringify(done), "a second tab shows the same conversation");

  // 3. The demo's interrupt renders and is answered from the page.
  const d = await context.newPage();
  d.on("pageerror", (e) => errors.push(String(e)));
  await d.goto(`${base}/?api=${base}/api&assistant=demo`);
  await d.fill("#q", "What is agentstream?");
  await d.click("#send");
  await d.waitForSelector("#interrupt #question", { timeout: 10000 });
  check((await d.textContent("#question")).includes("Use the research result?"), "the interrupt's question renders");
  await d.click("#approve");
  await d.waitForFunction(() => [...document.querySelectorAll("#messages li.ai")].some((li) => li.textContent.includes("agentstream streams agent events")), null, { timeout: 10000 });
  check(!(await d.$("#interrupt")), "answered, the interrupt is gone");

  // 4. A reload mid-run rejoins it and shows it whole.
  const r = await context.newPage();
  r.on("pageerror", (e) => errors.push(String(e)));
  await r.goto(`${base}/?api=${base}/api&assistant=echo&delay=120`);
  await r.fill("#q", words);
  await r.click("#send");
  await r.waitForFunction(() => [...document.querySelectorAll("#messages li.ai")].some((li) => li.textContent.length > 0), null, { timeout: 10000 });
  const partial = (await messages(r)).find(([type]) => type === "ai")?.[1] ?? "";
  check(partial.length < words.length, "reloaded mid-run");
  await r.reload();
  await r.waitForFunction((w) => [...document.querySelectorAll("#messages li.ai")].some((li) => li.textContent === w), words, { timeout: 15000 })
    .catch(async (e) => { throw new Error(`${e.message}: the page shows ${JSON.stringify(await messages(r))}`); });
  const whole = await messages(r);
  check(whole.filter(([type]) => type === "ai").length === 1 && whole.find(([type]) => type === "ai")[1] === words, "after the reload the run is whole, once");
  // 5. A second tab joins a run going on and sees it stream, whole.
  const a = await context.newPage();
  a.on("pageerror", (e) => errors.push(String(e)));
  await a.goto(`${base}/?api=${base}/api&assistant=echo&delay=150`);
  await a.fill("#q", words);
  await a.click("#send");
  await a.waitForFunction(() => [...document.querySelectorAll("#messages li.ai")].some((li) => li.textContent.length > 0), null, { timeout: 10000 });
  const t2 = new URL(a.url()).searchParams.get("thread");
  const b = await context.newPage();
  b.on("pageerror", (e) => errors.push(String(e)));
  await b.goto(`${base}/?api=${base}/api&assistant=echo&thread=${t2}&watch=1`);
  const states = new Set();
  for (let i = 0; i < 400; i++) {
    const ai = (await messages(b)).filter(([type]) => type === "ai").map(([, text]) => text)[0];
    if (ai) states.add(ai);
    if (ai === words) break;
    await b.waitForTimeout(25);
  }
  check([...states].some((t) => t.length > 0 && t.length < words.length), `the second tab saw the run stream (${states.size} states seen)`);
  await b.waitForFunction(() => document.querySelector("#loading").textContent === "idle", null, { timeout: 15000 });
  await a.waitForFunction(() => document.querySelector("#loading").textContent === "idle", null, { timeout: 15000 });
  check(JSON.stringify(await messages(b)) === JSON.stringify(await messages(a)) && (await messages(b)).length === 2, "both tabs show the run whole, once");
  check(errors.length === 0, `no page errors (${errors.join("; ")})`);
  console.log(results.join("\n"));
} catch (e) {
  console.log(results.join("\n"));
  console.error(String(e));
  process.exitCode = 1;
} finally {
  await context.close();
  site.close();
  cleanup();
}
