// The LangGraph Platform API's run streams through the official SDK's
// classic client (client.runs.stream), against the server at
// process.argv[2]: what a front end reads of them, step by step (the
// events' kinds, the text the message chunks assemble, the values'
// messages, the interrupt and its resume). It prints one JSON object, so
// that two servers' answers compare member by member
// (TestRunStreamsMatchTheReference in transport/langgraph).
import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.argv[2], defaultHeaders: {} });
const steps = {};
async function step(name, f) {
  try {
    steps[name] = await f();
  } catch (e) {
    steps[name] = { error: e?.status ?? String(e) };
  }
}
const contents = (msgs) => (msgs ?? []).map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content)));
const input = (text) => ({ messages: [{ role: "user", content: text }] });

// What a reader of one stream sees: the kinds of events, the text of the
// message chunks by message, the last values, the updates' values.
async function read(stream) {
  const kinds = new Set();
  const text = new Map();
  let last = null, first = null, runId = null, interrupt = null;
  const updated = [];
  for await (const ev of stream) {
    kinds.add(ev.event);
    if (ev.event === "metadata") runId = ev.data.run_id;
    if (ev.event === "messages") {
      const [chunk] = ev.data;
      text.set(chunk.id, (text.get(chunk.id) ?? "") + chunk.content);
    }
    if (ev.event === "values") {
      if (ev.data.__interrupt__) interrupt = ev.data.__interrupt__.map((i) => i.value?.question ?? i.value);
      else {
        last = ev.data;
        first ??= ev.data;
      }
    }
    if (ev.event === "updates") {
      for (const [node, v] of Object.entries(ev.data)) {
        if (node === "__interrupt__") interrupt = v.map((i) => i.value?.question ?? i.value);
        else updated.push(...Object.keys(v ?? {}));
      }
    }
  }
  return { kinds: [...kinds].sort(), runId: typeof runId === "string", text: [...text.values()], values: contents(last?.messages), first: contents(first?.messages), updated: [...new Set(updated)].sort(), interrupt };
}

const thread = (await client.threads.create()).thread_id;
await step("values", async () => {
  const r = await read(client.runs.stream(thread, "echo", { input: input("hi there"), streamMode: "values" }));
  // The first values are the state as the run starts: with the input.
  return { kinds: r.kinds, runId: r.runId, values: r.values, first: r.first };
});
await step("messages-tuple", async () => {
  const r = await read(client.runs.stream(thread, "echo", { input: input("one two three"), streamMode: "messages-tuple" }));
  return { kinds: r.kinds, text: r.text };
});
await step("messages (the legacy mode)", async () => {
  const kinds = new Set();
  let partial = "", complete = [];
  for await (const ev of client.runs.stream(thread, "echo", { input: input("a b c"), streamMode: "messages" })) {
    kinds.add(ev.event);
    if (ev.event === "messages/partial") partial = ev.data[0].content;
    if (ev.event === "messages/complete") complete.push(...ev.data.filter((m) => m.type === "ai").map((m) => m.content));
  }
  return { kinds: [...kinds].sort(), partial, complete };
});
await step("updates", async () => {
  const r = await read(client.runs.stream(thread, "echo", { input: input("up"), streamMode: "updates" }));
  return { kinds: r.kinds, updated: r.updated };
});
await step("modes together", async () => {
  const r = await read(client.runs.stream(thread, "echo", { input: input("all of it"), streamMode: ["values", "updates", "messages-tuple"] }));
  return { kinds: r.kinds, text: r.text, values: r.values.slice(-2), updated: r.updated };
});
await step("modes together: the order of the frames", async () => {
  const order = [];
  for await (const ev of client.runs.stream(thread, "echo", { input: input("in order"), streamMode: ["values", "updates", "messages-tuple", "custom"] })) {
    if (order.at(-1) !== ev.event) order.push(ev.event);
  }
  return order;
});
await step("stateless", async () => {
  const r = await read(client.runs.stream(null, "echo", { input: input("alone"), streamMode: ["messages-tuple"] }));
  return { kinds: r.kinds, text: r.text };
});
await step("interrupt, then resume", async () => {
  const t = (await client.threads.create()).thread_id;
  const asked = await read(client.runs.stream(t, "demo", { input: input("go"), streamMode: ["updates"] }));
  const state = await client.threads.get(t);
  const done = await read(client.runs.stream(t, "demo", { command: { resume: { approved: true } }, streamMode: ["updates"] }));
  const after = await client.threads.getState(t);
  // (What else a node's update holds is the graph's: the reference's demo
  // adds its message in the same update, agentstream's in the values.)
  return { asked: asked.interrupt, status: state.status, resumed: done.updated.includes("approved"), approved: after.values.approved };
});
// The modes that show the graph's steps: what a reader can rely on (the
// node names and the number of checkpoints a step makes are the graph's).
async function frames(stream) {
  const out = [];
  for await (const ev of stream) out.push(ev);
  return out;
}
const keys = (o) => Object.keys(o ?? {}).sort();
await step("tasks", async () => {
  const evs = (await frames(client.runs.stream(thread, "echo", { input: input("task me"), streamMode: "tasks" }))).filter((e) => e.event === "tasks");
  const starts = evs.filter((e) => "triggers" in e.data), results = evs.filter((e) => "result" in e.data);
  return {
    startKeys: keys(starts[0]?.data), resultKeys: keys(results[0]?.data),
    paired: starts.length === results.length && starts.every((s, i) => s.data.id === results[i].data.id && s.data.name === results[i].data.name),
    answer: contents(results.at(-1)?.data.result.messages).at(-1),
  };
});
await step("checkpoints", async () => {
  const evs = (await frames(client.runs.stream(thread, "echo", { input: input("keep me"), streamMode: "checkpoints" }))).filter((e) => e.event === "checkpoints");
  const last = evs.at(-1)?.data;
  return { some: evs.length > 0, has: ["metadata", "next", "values"].filter((k) => k in (last ?? {})), next: last?.next, source: last?.metadata?.source, values: contents(last?.values.messages).slice(-2) };
});
await step("debug", async () => {
  const evs = (await frames(client.runs.stream(thread, "echo", { input: input("debug me"), streamMode: "debug" }))).filter((e) => e.event === "debug");
  return { types: [...new Set(evs.map((e) => e.data.type))].sort(), shape: [...new Set(evs.map((e) => keys(e.data).join()))], answer: contents(evs.filter((e) => e.data.type === "task_result").at(-1)?.data.payload.result.messages).at(-1) };
});
await step("subgraphs: the root's frames", async () => {
  const evs = await frames(client.runs.stream(thread, "echo", { input: input("deep"), streamMode: ["updates", "messages-tuple", "values"], streamSubgraphs: true }));
  return { root: [...new Set(evs.map((e) => e.event).filter((k) => !k.includes("|")))].sort() };
});
const slow = (text) => ({ input: input(text), config: { configurable: { token_delay_ms: 40 } } });
const words = "a b c d e f g h i j k l";
await step("join a running run", async () => {
  const t = (await client.threads.create()).thread_id;
  const run = await client.runs.create(t, "echo", slow(words));
  const r = await read(client.runs.joinStream(t, run.run_id, { streamMode: ["values", "messages-tuple"] }));
  return { values: r.values, kinds: r.kinds.filter((k) => k !== "metadata") };
});
await step("resume a cut stream with Last-Event-ID", async () => {
  const t = (await client.threads.create()).thread_id;
  let runId = null, lastId = null, before = "", after = "", frames = 0;
  for await (const ev of client.runs.stream(t, "echo", { ...slow(words), streamMode: ["messages-tuple"], streamResumable: true })) {
    if (ev.event === "metadata") runId = ev.data.run_id;
    if (ev.event === "messages") {
      before += ev.data[0].content;
      lastId = ev.id;
      if (++frames === 3) break; // the connection is cut here
    }
  }
  for await (const ev of client.runs.joinStream(t, runId, { lastEventId: lastId, streamMode: ["messages-tuple"] })) {
    if (ev.event === "messages") after += ev.data[0].content;
  }
  return { whole: before + after === words, before: before.length > 0, after: after.length > 0 };
});
await step("join from the run's start (-1, as useStream rejoins)", async () => {
  const t = (await client.threads.create()).thread_id;
  const run = await client.runs.create(t, "echo", { ...slow(words), streamMode: ["messages-tuple", "values"], streamResumable: true });
  await new Promise((r) => setTimeout(r, 150)); // some of it streamed before the join
  const r = await read(client.runs.joinStream(t, run.run_id, { lastEventId: "-1", streamMode: ["messages-tuple", "values"] }));
  return { text: r.text, values: r.values };
});
await step("join a run that ended", async () => {
  const t = (await client.threads.create()).thread_id;
  const run = await client.runs.create(t, "echo", { input: input("done") });
  await client.runs.join(t, run.run_id);
  const r = await read(client.runs.joinStream(t, run.run_id));
  return { kinds: r.kinds.filter((k) => k !== "metadata"), values: r.values };
});
await step("cancel a streamed run", async () => {
  const t = (await client.threads.create()).thread_id;
  let runId = null, text = "", cancelled = false, after = 0;
  const kinds = new Set();
  for await (const ev of client.runs.stream(t, "echo", { ...slow(words), streamMode: ["messages-tuple", "values"] })) {
    kinds.add(ev.event);
    if (ev.event === "metadata") runId = ev.data.run_id;
    if (ev.event === "messages") {
      text += ev.data[0].content;
      if (cancelled) after++;
      if (!cancelled && text.split(" ").length > 3) {
        await client.runs.cancel(t, runId);
        cancelled = true;
      }
    }
  }
  const run = await client.runs.get(t, runId);
  const thread = await client.threads.get(t);
  return { partial: text.length > 0 && text !== words, ended: true, few: after <= 2, run: run.status, thread: thread.status };
});
await step("on_disconnect: cancel", async () => {
  const t = (await client.threads.create()).thread_id;
  let runId = null, frames = 0;
  const gone = new AbortController();
  try {
    for await (const ev of client.runs.stream(t, "echo", { ...slow(words), streamMode: ["messages-tuple"], onDisconnect: "cancel", signal: gone.signal })) {
      if (ev.event === "metadata") runId = ev.data.run_id;
      if (ev.event === "messages" && ++frames === 2) {
        gone.abort(); // the client goes
        break;
      }
    }
  } catch (e) {
    if (!gone.signal.aborted) throw e;
  }
  let run;
  for (let i = 0; i < 50; i++) {
    run = await client.runs.get(t, runId);
    if (run.status !== "running" && run.status !== "pending") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const state = await client.threads.getState(t);
  const answered = contents(state.values.messages).filter((m) => m === words).length;
  return { run: run.status, answered };
});
await step("unknown assistant", () => read(client.runs.stream(thread, "nope", { input: input("x") })));
console.log(JSON.stringify(steps));
