// Browser test of a chat front end served from another origin than the
// server's (another localhost port, as `npm run dev` serves one) against
// a server started with its default flags: the page (usestream/app.jsx,
// useStream as LangChain's front ends use it) calls the API at API
// directly, across origins (CORS: the server allows loopback pages by
// default). It lists threads by their first message; a page reloaded
// while the answer streams shows the question at once from the thread's
// state alone, and rejoining the run, the text so far and then the whole
// answer; a thread reopened while it waits on an interrupt shows it.
//
// Usage: node chat-e2e.mjs http://host:port
import { bundleApp, cleanup, launchChromium } from "./usestream/page.mjs";
import http from "node:http";

const api = process.argv[2].replace(/\/$/, "");
const app = await bundleApp("chat");
const site = http.createServer((req, res) => {
  if (req.url === "/app.js") {
    res.writeHead(200, { "content-type": "text/javascript" });
    return res.end(app.script);
  }
  res.writeHead(200, { "content-type": "text/html" });
  res.end(app.html);
});
// localhost, not 127.0.0.1: a page origin of its own (a port and a name
// other than the server's), as a developer's front end has.
await new Promise((r) => site.listen(0, "127.0.0.1", r));
const base = `http://localhost:${site.address().port}`;
const context = await launchChromium();
const results = [];
function check(cond, what) {
  if (!cond) throw new Error(`failed: ${what}`);
  results.push(`ok   ${what}`);
}
const messages = (p) => p.$$eval("#messages li", (lis) => lis.map((li) => [li.className, li.textContent]));
const errors = [];
const open = async (query) => {
  const p = await context.newPage();
  p.on("pageerror", (e) => errors.push(String(e)));
  p.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await p.goto(`${base}/?api=${encodeURIComponent(api)}&${query}`);
  return p;
};
const words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu";
try {
  // 1. A conversation, then the list shows it by its first message.
  const p = await open("assistant=echo");
  await p.fill("#q", "the first question");
  await p.click("#send");
  await p.waitForFunction(() => [...document.querySelectorAll("#messages li.ai")].some((li) => li.textContent === "the first question"), null, { timeout: 10000 });
  const thread = new URL(p.url()).searchParams.get("thread");
  const list = await open("assistant=echo&list=1");
  await list.waitForFunction((t) => !!document.querySelector(`#threads li[data-thread="${t}"]`), thread, { timeout: 10000 });
  check((await list.textContent(`#threads li[data-thread="${thread}"]`)) === "the first question", "the list shows the thread by its first message");

  // 2. Reloaded mid-reply: the question from the thread's state alone,
  // then, rejoining the run, the text so far and the whole answer.
  const r = await open("assistant=echo&delay=150");
  await r.fill("#q", words);
  await r.click("#send");
  await r.waitForFunction(() => [...document.querySelectorAll("#messages li.ai")].some((li) => li.textContent.length > 0), null, { timeout: 10000 });
  const t2 = new URL(r.url()).searchParams.get("thread");
  const alone = await open(`assistant=echo&thread=${t2}&reconnect=0`);
  await alone.waitForFunction((w) => [...document.querySelectorAll("#messages li.human")].some((li) => li.textContent === w), words, { timeout: 10000 })
    .catch(async (e) => { throw new Error(`${e.message}: the page shows ${JSON.stringify(await messages(alone))}`); });
  const run = await fetch(`${api}/threads/${t2}/runs?status=running`).then((res) => res.json());
  check(run.length === 1, "reopened while the answer streams, the question shows from the thread's state");
  const back = r; // reloaded: the tab that started the run rejoins it (useStream's reconnectOnMount)
  await back.reload();
  const states = new Set();
  for (let i = 0; i < 400; i++) {
    const ai = (await messages(back)).filter(([type]) => type === "ai").map(([, text]) => text)[0];
    if (ai) states.add(ai);
    if (ai === words) break;
    await back.waitForTimeout(25);
  }
  check([...states].some((t) => t.length > 0 && t.length < words.length), `rejoining, the text so far shows (${states.size} states seen)`);
  check([...states].includes(words), "then the whole answer");
  check((await messages(back)).filter(([type]) => type === "human").length === 1, "the question once");

  // 3. A thread waiting on an interrupt, reopened, shows it.
  const d = await open("assistant=demo");
  await d.fill("#q", "What is agentstream?");
  await d.click("#send");
  await d.waitForSelector("#interrupt #question", { timeout: 10000 });
  const t3 = new URL(d.url()).searchParams.get("thread");
  await d.close();
  const again = await open(`assistant=demo&thread=${t3}&reconnect=0`);
  await again.waitForSelector("#interrupt #question", { timeout: 10000 });
  check((await again.textContent("#question")).includes("Use the research result?"), "reopened at its interrupt, the question it waits on shows");
  check((await messages(again)).some(([type, text]) => type === "human" && text === "What is agentstream?"), "with the conversation so far");
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
