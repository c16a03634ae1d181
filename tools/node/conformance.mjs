// Conformance suite: drives an agentstream server with the official
// JavaScript SDK (@langchain/langgraph-sdk 1.15) over SSE and WebSocket.
// Usage: node conformance.mjs http://127.0.0.1:PORT
// With AGENTSTREAM_API_KEY set, every client sends it as the SDK's apiKey
// (x-api-key); with AGENTSTREAM_BEARER set, as an Authorization bearer
// header through defaultHeaders. The WebSocket factory sends the same
// header on the handshake. The SDK's WebSocket transport refuses
// defaultHeaders (and so apiKey), as a browser WebSocket cannot send them:
// its clients send the credential through a fetch of their own
// (callerOptions.fetch) for the HTTP reads, and on the handshake.
// Prints one line per scenario and a closing "N passed, M failed" line;
// exits 1 when any scenario failed.
import { Client } from "@langchain/langgraph-sdk";
import WebSocket from "ws";
import { randomUUID } from "node:crypto";

const apiUrl = process.argv[2];
if (!apiUrl) {
  console.error("usage: node conformance.mjs http://host:port");
  process.exit(2);
}

// The assistants the scenarios run: the built-ins by default, or those a
// remote worker serves (the same behaviour: echo streams the user's text
// word by word, honouring config.token_delay_ms, and keeps the
// conversation in the values; the interrupting one asks for approval and,
// approved, finishes its tool and sets values.approved).
const ECHO = process.env.AGENTSTREAM_ECHO_ASSISTANT || "echo";
// How many runs the fast-runs scenarios make (50), and how long one
// scenario may take (30 s): more for an upstream whose runs take long to
// end (the LangGraph server ends each about half a second after its last
// token).
const FAST_RUNS = Number(process.env.CONFORMANCE_FAST_RUNS || 50);
const SCENARIO_MS = Number(process.env.CONFORMANCE_SCENARIO_MS || 30000);
const INTERRUPT = process.env.AGENTSTREAM_INTERRUPT_ASSISTANT || "demo";

const apiKey = process.env.AGENTSTREAM_API_KEY || undefined;
const bearer = process.env.AGENTSTREAM_BEARER || undefined;
const authHeaders = bearer ? { Authorization: `Bearer ${bearer}` } : apiKey ? { "x-api-key": apiKey } : {};
const clientConfig = (transport) => {
  if (transport === "websocket") {
    const authedFetch = (url, init = {}) => fetch(url, { ...init, headers: { ...(init.headers ?? {}), ...authHeaders } });
    return { apiUrl, apiKey: null, callerOptions: { fetch: authedFetch } };
  }
  return { apiUrl, apiKey, defaultHeaders: bearer ? { Authorization: `Bearer ${bearer}` } : undefined };
};

const sockets = [];
const webSocketFactory = (url) => {
  const ws = new WebSocket(url, { headers: authHeaders });
  sockets.push(ws);
  return ws;
};

function stream(threadId, assistantId, transport) {
  const client = new Client(clientConfig(transport));
  return client.threads.stream(threadId, { assistantId, transport, webSocketFactory });
}

const userInput = (text) => ({ messages: [{ role: "user", content: text }] });

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function assertEqual(got, want, what) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`);
}

async function firstMessageText(thread) {
  for await (const msg of thread.messages) {
    return await msg.text;
  }
  throw new Error("no message");
}

async function echo(transport) {
  const text = "The quick brown fox jumps over the lazy dog";
  const thread = stream(randomUUID(), ECHO, transport);
  try {
    // Projections are opened before the run, as applications do.
    const message = firstMessageText(thread);
    const output = thread.output;
    // A small per-token delay makes echo stream over time as a model
    // does; with none the run can end before the SDK's lazily opened
    // projections subscribe, and the SDK closes them at the run's end.
    await thread.run.start({ input: userInput(text), config: { token_delay_ms: 5 } });
    const got = await withTimeout(message, 10000, "echo message");
    assertEqual(got, text, "assembled message text");
    const state = await withTimeout(output, 10000, "echo output");
    assertEqual(state.messages.map((m) => m.type), ["human", "ai"], "state messages");
  } finally {
    await thread.close();
  }
}

// A run cancelled mid-message (by another client, over the commands
// route) leaves no message open: the SDK's message settles with the text
// streamed so far, and the raw stream has the message's error event
// (code cancelled) before the run's end.
async function cancelMidMessage(transport) {
  const words = Array.from({ length: 60 }, (_, i) => `w${i}`).join(" ");
  const threadId = randomUUID();
  const thread = stream(threadId, ECHO, transport);
  try {
    const first = (async () => {
      for await (const msg of thread.messages) return msg;
      throw new Error("no message");
    })();
    const raw = rawEvents(thread, ["messages", "lifecycle"], (e) => e.method === "lifecycle" && e.params.namespace.length === 0 && e.params.data.event === "failed", 20000);
    await thread.run.start({ input: userInput(words), config: { token_delay_ms: 50 } });
    const msg = await withTimeout(first, 10000, "the message starts");
    await new Promise((r) => setTimeout(r, 400)); // a few tokens stream
    const r = await fetch(`${apiUrl}/threads/${threadId}/commands`, {
      method: "POST",
      headers: { "content-type": "application/json", ...authHeaders },
      body: JSON.stringify({ id: 1, method: "run.cancel", params: {} }),
    });
    if (!r.ok) throw new Error(`run.cancel: ${r.status} ${await r.text()}`);
    const text = await withTimeout(msg.text, 10000, "the cancelled message settles");
    if (!(text.length > 0 && text.length < words.length && words.startsWith(text))) throw new Error(`the settled text is not a prefix of the input: ${JSON.stringify(text)}`);
    const events = await raw;
    const i = events.findIndex((e) => e.method === "messages" && e.params.data.event === "error");
    if (i < 0) throw new Error("no message error event");
    assertEqual(events[i].params.data.code, "cancelled", "the message error's code");
    const end = events.findIndex((e) => e.method === "lifecycle" && e.params.namespace.length === 0 && e.params.data.event === "failed");
    if (!(i < end)) throw new Error("the message error comes after the run's end");
  } finally {
    await thread.close();
  }
}

async function waitFor(cond, ms, what) {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const rootCompleted = (e) => e.method === "lifecycle" && e.params.namespace.length === 0 && e.params.data.event === "completed";

async function demoInterrupt(transport) {
  const threadId = randomUUID();
  const thread = stream(threadId, INTERRUPT, transport);
  try {
    await thread.run.start({ input: userInput("What is agentstream?") });
    await waitFor(() => thread.interrupts.length > 0, 10000, "the demo's interrupt");
    const interrupt = thread.interrupts[0];
    const id = interrupt.interruptId ?? interrupt.interrupt_id ?? interrupt.id;
    if (!id) throw new Error(`interrupt without an id: ${JSON.stringify(interrupt)}`);
    const done = rawEvents(thread, ["lifecycle"], rootCompleted, 10000);
    await thread.input.respond({ namespace: [], interrupt_id: id, response: { approved: true } });
    const events = await done;
    const tools = await rawEvents(thread, ["tools"], (e) => e.params.data.event === "tool-finished", 10000);
    assertEqual(tools.at(-1).params.data.event, "tool-finished", "the approved tool finished");
    assertEqual(events.at(-1).params.data.event, "completed", "the run completed");
  } finally {
    await thread.close();
  }
  const state = await new Client(clientConfig()).threads.getState(threadId);
  assertEqual(state.values.approved, true, "the approval reached the run");
}

async function rawEvents(thread, channels, until, ms) {
  const sub = await thread.subscribe({ channels });
  const events = [];
  // The SDK pauses non-lifecycle subscriptions when the run ends, which
  // ends a `for await` loop while events stay buffered (replays after a
  // reconnect can arrive after the end): iterate again until `until`.
  const done = (async () => {
    for (;;) {
      for await (const e of sub) {
        events.push(e);
        if (until(e)) return;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  await withTimeout(done, ms, `events on ${channels}`);
  sub.close?.();
  return events;
}

function textOf(events) {
  return events
    .filter((e) => e.method === "messages" && e.params.data.event === "content-block-delta" && e.params.data.delta.type === "text-delta")
    .map((e) => e.params.data.delta.text)
    .join("");
}

const messageFinished = (e) => e.method === "messages" && e.params.data.event === "message-finish";

async function lateJoiner(transport) {
  const text = "late joiners replay what they missed";
  const threadId = randomUUID();
  const first = stream(threadId, ECHO, transport);
  try {
    await first.run.start({ input: userInput(text) });
    await withTimeout(first.output, 10000, "first run");
  } finally {
    await first.close();
  }
  const late = stream(threadId, ECHO, transport);
  try {
    const events = await rawEvents(late, ["messages"], messageFinished, 10000);
    assertEqual(textOf(events), text, "replayed text");
  } finally {
    await late.close();
  }
}

async function droppedConnection() {
  const words = Array.from({ length: 40 }, (_, i) => `w${i}`);
  const text = words.join(" ");
  const thread = stream(randomUUID(), ECHO, "websocket");
  try {
    const collected = rawEvents(thread, ["messages"], messageFinished, 20000);
    await thread.run.start({ input: userInput(text), config: { token_delay_ms: 15 } });
    await new Promise((r) => setTimeout(r, 200));
    for (const ws of sockets.splice(0)) ws.terminate(); // drop mid-run
    const events = await collected;
    const ids = events.map((e) => e.event_id);
    assertEqual(new Set(ids).size, ids.length, "no duplicate event");
    assertEqual(textOf(events), text, "no lost word");
  } finally {
    await thread.close();
  }
}

async function twoSubscribers(transport) {
  const threadId = randomUUID();
  const a = stream(threadId, ECHO, transport);
  const b = stream(threadId, ECHO, transport);
  try {
    const onlyMessages = rawEvents(a, ["messages"], messageFinished, 10000);
    const onlyLifecycle = rawEvents(b, ["lifecycle"], (e) => e.params.data.event === "completed" && e.params.namespace.length === 0, 10000);
    await new Promise((r) => setTimeout(r, 100));
    const starter = stream(threadId, ECHO, transport);
    await starter.run.start({ input: userInput("two filters") });
    const [m, l] = await Promise.all([onlyMessages, onlyLifecycle]);
    await starter.close();
    assertEqual([...new Set(m.map((e) => e.method))], ["messages"], "first subscriber's channels");
    assertEqual([...new Set(l.map((e) => e.method))], ["lifecycle"], "second subscriber's channels");
    assertEqual(textOf(m), "two filters", "text");
  } finally {
    await a.close();
    await b.close();
  }
}

// A run that ends before the SDK subscribes (echo with no token delay
// finishes in about a millisecond): the SDK sends run.start, then its
// subscribes together; a server that answers the first one's replay alone
// lets the SDK see the run end and close the values projection before its
// replay arrives, and `await thread.values` is undefined. Each of n runs
// must resolve to the final state.
async function fastRuns(transport, n) {
  for (let i = 0; i < n; i++) {
    const thread = stream(randomUUID(), ECHO, transport);
    try {
      await thread.run.start({ input: userInput(`fast run ${i}`) });
      const values = await withTimeout(thread.values, 10000, `run ${i}: thread.values`);
      if (!values || !Array.isArray(values.messages)) {
        throw new Error(`run ${i} of ${n} thread ${thread.threadId}: thread.values resolved to ${JSON.stringify(values)}`);
      }
      assertEqual(values.messages.map((m) => m.type), ["human", "ai"], `run ${i}: final state messages`);
      assertEqual(values.messages.map((m) => m.content), [`fast run ${i}`, `fast run ${i}`], `run ${i}: contents`);
    } finally {
      await thread.close();
    }
  }
}

async function hydration() {
  const threadId = randomUUID();
  const thread = stream(threadId, ECHO, "sse");
  try {
    await thread.run.start({ input: userInput("hydrate me") });
    await withTimeout(thread.output, 10000, "run");
  } finally {
    await thread.close();
  }
  const client = new Client(clientConfig());
  const state = await client.threads.getState(threadId);
  assertEqual(state.values.messages.map((m) => m.content), ["hydrate me", "hydrate me"], "hydrated messages");
  assertEqual(state.next, [], "an idle thread has nothing next");
  let missing = null;
  try {
    await client.threads.getState(randomUUID());
  } catch (e) {
    missing = e;
  }
  if (!missing) throw new Error("an unknown thread's state should be an error (404)");
}

const scenarios = [
  ["echo over SSE", () => echo("sse")],
  ["echo over WebSocket", () => echo("websocket")],
  ["demo interrupt answered over SSE", () => demoInterrupt("sse")],
  ["demo interrupt answered over WebSocket", () => demoInterrupt("websocket")],
  ["late joiner replays a finished run over SSE", () => lateJoiner("sse")],
  ["late joiner replays a finished run over WebSocket", () => lateJoiner("websocket")],
  ["dropped WebSocket mid-run resumes with no loss or duplicate", droppedConnection],
  ["two subscribers with different filters over SSE", () => twoSubscribers("sse")],
  ["two subscribers with different filters over WebSocket", () => twoSubscribers("websocket")],
  ["hydration through GET /state", hydration],
  ["a run cancelled mid-message leaves no message open over SSE", () => cancelMidMessage("sse")],
  ["a run cancelled mid-message leaves no message open over WebSocket", () => cancelMidMessage("websocket")],
  [`${FAST_RUNS} fast runs over WebSocket: thread.values is the final state`, () => fastRuns("websocket", FAST_RUNS)],
  [`${FAST_RUNS} fast runs over SSE: thread.values is the final state`, () => fastRuns("sse", FAST_RUNS)],
];

let passed = 0, failed = 0;
const only = process.env.CONFORMANCE_ONLY;
for (const [name, fn] of scenarios) {
  if (only && !name.includes(only)) continue;
  try {
    await withTimeout(fn(), SCENARIO_MS, name);
    console.log(`ok   ${name}`);
    passed++;
  } catch (e) {
    console.log(`FAIL ${name}: ${e?.stack ?? e}`);
    failed++;
  }
}
console.log(`conformance: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
