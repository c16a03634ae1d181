// The LangGraph Platform API's resources through the official SDK's
// classic client (@langchain/langgraph-sdk), against the server at
// process.argv[2]: assistants, threads and runs.wait, step by step (of a
// run, what both servers' echo graphs share: the values' members, the
// messages' count). It prints one
// JSON object: each step's answer (or its error's status) with ids and
// timestamps replaced by their kind, so that the answers of two servers
// (agentstream's, the reference LangGraph server's) compare member by
// member (TestPlatformResourcesMatchTheReference in transport/langgraph).
import { Client } from "@langchain/langgraph-sdk";
import { randomUUID } from "node:crypto";

const client = new Client({ apiUrl: process.argv[2], defaultHeaders: {} });
const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const time = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/;

function norm(v) {
  if (Array.isArray(v)) return v.map(norm);
  if (v && typeof v === "object") {
    const out = {};
    for (const k of Object.keys(v).sort()) out[k] = norm(v[k]);
    return out;
  }
  if (typeof v === "string" && uuid.test(v)) return "<uuid>";
  if (typeof v === "string" && /^run-[0-9a-f-]{36}$/.test(v)) return "<run id>";
  if (typeof v === "string" && time.test(v)) return "<time>";
  return v;
}

const steps = {};
const trace = process.env.TRACE;
async function step(name, f) {
  if (trace) console.error("step", name);
  try {
    steps[name] = norm(await f());
  } catch (e) {
    steps[name] = { error: e?.status ?? String(e) };
  }
}

const t1 = randomUUID();
const mark = randomUUID(); // this run's threads, apart from others on the server
await step("GET /ok", async () => (await fetch(process.argv[2] + "/ok")).json());
await step("GET /info", async () => {
  const info = await (await fetch(process.argv[2] + "/info")).json();
  return { version: typeof info.version, flags: Object.keys(info.flags).sort(), assistants: info.flags.assistants };
});
await step("assistants.search echo", () => client.assistants.search({ graphId: "echo" }));
const echo = (await client.assistants.search({ graphId: "echo" }))[0];
steps["assistant id is the graph's"] = echo.assistant_id;
await step("assistants.get", () => client.assistants.get(echo.assistant_id));
await step("assistants.count echo", () => client.assistants.count({ graphId: "echo" }));
await step("assistants.create, update, versions, latest, delete", async () => {
  const a = await client.assistants.create({ graphId: "echo", name: "Mine", description: "d", config: { configurable: { token_delay_ms: 1 } }, metadata: { mark } });
  const again = await client.assistants.create({ graphId: "echo", assistantId: a.assistant_id, ifExists: "do_nothing" });
  const raise = await client.assistants.create({ graphId: "echo", assistantId: a.assistant_id }).then(() => "made", (e) => e?.status);
  const found = await client.assistants.search({ metadata: { mark } });
  const counted = await client.assistants.count({ metadata: { mark } });
  const up = await client.assistants.update(a.assistant_id, { name: "Mine 2", metadata: { n: 2 } });
  const versions = await client.assistants.getVersions(a.assistant_id);
  const latest = await client.assistants.setLatest(a.assistant_id, 1);
  const got = await client.assistants.get(a.assistant_id);
  const ran = await client.runs.wait(null, a.assistant_id, { input: { messages: [{ role: "user", content: "hi" }] } });
  await client.assistants.delete(a.assistant_id);
  const gone = await client.assistants.get(a.assistant_id).then(() => "found", (e) => e?.status);
  return { created: norm(a), again: again.name, raise, found: found.length, counted, updated: { version: up.version, name: up.name, metadata: up.metadata },
    versions: versions.map((v) => [v.version, v.name]), latest: [latest.version, latest.name], got: got.version, ran: ran.messages.length, gone };
});
await step("assistants.create of an unknown graph", async () => {
  const a = await client.assistants.create({ graphId: "nope" });
  await client.assistants.delete(a.assistant_id); // (the reference makes it; the servers are shared by the tests)
  return a;
});
await step("assistants.create without a name", async () => {
  const a = await client.assistants.create({ graphId: "echo", metadata: { mark } });
  await client.assistants.delete(a.assistant_id);
  return { name: a.name, description: a.description, config: a.config, metadata: Object.keys(a.metadata) };
});
await step("threads.create", () => client.threads.create({ threadId: t1, metadata: { user: "ann", n: 1, mark } }));
await step("threads.create again", () => client.threads.create({ threadId: t1 }));
await step("threads.create do_nothing", () => client.threads.create({ threadId: t1, ifExists: "do_nothing" }));
await step("threads.create without id", () => client.threads.create({ metadata: { user: "bob", mark } }));
await step("threads.get", () => client.threads.get(t1));
await step("threads.update", () => client.threads.update(t1, { metadata: { n: 2 } }));
await step("threads.search metadata", () => client.threads.search({ metadata: { user: "ann", mark } }));
await step("threads.search page", () => client.threads.search({ metadata: { mark }, limit: 1, offset: 1, sortBy: "created_at", sortOrder: "asc" }));
await step("threads.search busy", () => client.threads.search({ metadata: { mark }, status: "busy" }));
await step("threads.count", () => client.threads.count({ metadata: { mark } }));
await step("runs.wait keys", async () => Object.keys(await client.runs.wait(t1, echo.assistant_id, { input: { messages: [{ role: "user", content: "hi" }] } })).sort());
await step("runs.wait messages", async () => (await client.runs.wait(t1, "echo", { input: { messages: [{ role: "user", content: "again" }] } })).messages.length);
await step("runs.wait stateless keys", async () => Object.keys(await client.runs.wait(null, "echo", { input: { messages: [{ role: "user", content: "hi" }] } })).sort());
await step("threads.search values and interrupts", async () => {
  const found = await client.threads.search({ ids: [t1] });
  return found.map((t) => ({ values: Object.keys(t.values ?? {}).sort(), messages: t.values?.messages?.length, interrupts: t.interrupts }));
});
await step("threads.search select", () => client.threads.search({ ids: [t1], select: ["thread_id", "status"] }));
await step("threads.get after runs: status", async () => (await client.threads.get(t1)).status);
await step("runs.list statuses", async () => (await client.runs.list(t1)).map((r) => r.status));
await step("runs.create, join", async () => {
  const run = await client.runs.create(t1, "echo", { input: { messages: [{ role: "user", content: "bg" }] }, metadata: { k: "v" } });
  const values = await client.runs.join(t1, run.run_id);
  const got = await client.runs.get(t1, run.run_id);
  return { created: Object.keys(run).sort(), assistant: run.assistant_id === echo.assistant_id, joined: Object.keys(values).sort(), status: got.status, metadata: got.metadata.k };
});
await step("runs.list after create", async () => (await client.runs.list(t1)).length);
await step("runs.get unknown", () => client.runs.get(t1, randomUUID()));
await step("threads.getHistory", async () => {
  const h = await client.threads.getHistory(t1, { limit: 2 });
  return { n: h.length, keys: Object.keys(h[0]).sort(), next: h[0].next, checkpoint: Object.keys(h[0].checkpoint).sort(), messages: h[0].values.messages.length };
});
await step("threads.getHistory of a thread with no runs", async () => {
  const t = await client.threads.create({ metadata: { mark } });
  return client.threads.getHistory(t.thread_id);
});
await step("threads.copy", async () => {
  const c = await client.threads.copy(t1);
  const got = await client.threads.get(c.thread_id);
  const h = await client.threads.getHistory(c.thread_id, { limit: 1 });
  return { copy: norm(c), other: c.thread_id !== t1, history: h.length, messages: h[0]?.values?.messages?.length };
});
await step("threads.getState of a thread with no runs", async () => {
  const t = await client.threads.create({ metadata: { mark } });
  return client.threads.getState(t.thread_id);
});
await step("threads.getState", async () => {
  const s = await client.threads.getState(t1);
  return { keys: Object.keys(s).sort(), next: s.next, checkpoint: Object.keys(s.checkpoint).sort(), messages: s.values.messages.length, parent: s.parent_checkpoint !== null };
});
await step("threads.getState at a checkpoint", async () => {
  const h = await client.threads.getHistory(t1, { limit: 2 });
  const s = await client.threads.getState(t1, h[1].checkpoint.checkpoint_id);
  const same = await client.threads.getState(t1, { checkpoint_id: h[1].checkpoint.checkpoint_id });
  // (how many messages it holds is the graph's: the reference's echo checkpoints each step, agentstream's each run)
  return { id: s.checkpoint.checkpoint_id === h[1].checkpoint.checkpoint_id, same: same.checkpoint.checkpoint_id === s.checkpoint.checkpoint_id, values: JSON.stringify(s.values) === JSON.stringify(h[1].values) };
});
await step("runs.wait from an older checkpoint (a fork)", async () => {
  const t = (await client.threads.create({ metadata: { mark } })).thread_id;
  await client.runs.wait(t, "echo", { input: { messages: [{ role: "user", content: "one" }] } });
  await client.runs.wait(t, "echo", { input: { messages: [{ role: "user", content: "two" }] } });
  const h = await client.threads.getHistory(t, { limit: 100 });
  const end1 = h.find((s) => s.values?.messages?.length === 2 && s.next.length === 0);
  const v = await client.runs.wait(t, "echo", { input: { messages: [{ role: "user", content: "again" }] }, checkpoint: end1.checkpoint });
  const after = await client.threads.getHistory(t, { limit: 100 });
  // the fork's checkpoints lead back to the one it started from, not to the second run's
  const byId = Object.fromEntries(after.map((s) => [s.checkpoint.checkpoint_id, s]));
  let cur = after[0], reached = false;
  for (let i = 0; cur && i < 100; i++) {
    if (cur.checkpoint.checkpoint_id === end1.checkpoint.checkpoint_id) { reached = true; break; }
    if (cur.values?.messages?.some((m) => m.content === "two")) break;
    cur = byId[cur.parent_checkpoint?.checkpoint_id];
  }
  return { messages: v.messages.map((m) => m.content), branches: reached };
});
await step("runs.wait from an unknown checkpoint", async () => {
  const t = (await client.threads.create({ metadata: { mark } })).thread_id;
  await client.runs.wait(t, "echo", { input: { messages: [{ role: "user", content: "one" }] } });
  return client.runs.wait(t, "echo", { input: { messages: [{ role: "user", content: "x" }] }, checkpointId: "1f1eb9f5-3567-6b20-8000-00fe72aa84d9" });
});
await step("threads.getState at an unknown checkpoint", () => client.threads.getState(t1, "1f1eb9f5-3567-6b20-8000-00fe72aa84d9"));
await step("threads.updateState", async () => {
  const before = await client.threads.getState(t1);
  const res = await client.threads.updateState(t1, { values: { messages: [{ role: "user", content: "added" }] } });
  const after = await client.threads.getState(t1);
  return { res: Object.keys(res).sort(), checkpoint: Object.keys(res.checkpoint).sort(), newest: after.checkpoint.checkpoint_id === res.checkpoint.checkpoint_id,
    parent: after.parent_checkpoint.checkpoint_id === before.checkpoint.checkpoint_id, added: after.values.messages.length - before.values.messages.length,
    last: after.values.messages.at(-1).content, source: after.metadata.source };
});
await step("threads.updateState unknown thread", () => client.threads.updateState(randomUUID(), { values: {} }));
await step("threads.updateState of a thread no graph ran on", async () => {
  const t = await client.threads.create({ metadata: { mark } });
  return client.threads.updateState(t.thread_id, { values: { messages: [] } });
});
await step("threads.getState unknown thread", () => client.threads.getState(randomUUID()));
await step("threads.get unknown", () => client.threads.get(randomUUID()));
await step("threads.delete", () => client.threads.delete(t1));
await step("threads.get deleted", () => client.threads.get(t1));
await step("threads.delete deleted", () => client.threads.delete(t1));

// The store, under a namespace of this run's own.
const ann = [mark, "prefs", "ann"], bob = [mark, "prefs", "bob"];
await step("store.putItem", () => client.store.putItem(ann, "lang", { v: "en", n: 2 }));
await step("store.putItem more", async () => {
  await client.store.putItem(ann, "theme", { color: "dark", n: 1 });
  await client.store.putItem(bob, "theme", { color: "light", n: 3 });
  return client.store.putItem([mark, "docs"], "a", { text: "hello", tags: ["x"] });
});
await step("store.getItem", () => client.store.getItem(ann, "theme"));
await step("store.putItem replaces", async () => {
  const before = await client.store.getItem(ann, "theme");
  await new Promise((r) => setTimeout(r, 5));
  await client.store.putItem(ann, "theme", { color: "blue", n: 1 });
  const after = await client.store.getItem(ann, "theme");
  return { value: after.value, created: after.created_at === before.created_at, updated: after.updated_at > before.updated_at };
});
await step("store.getItem missing", () => client.store.getItem(ann, "nope"));
await step("store.searchItems prefix", () => client.store.searchItems([mark, "prefs"]));
await step("store.searchItems filter", () => client.store.searchItems([mark], { filter: { color: "light" } }));
await step("store.searchItems operator", () => client.store.searchItems([mark], { filter: { n: { $gte: 2 } } }));
await step("store.searchItems page", () => client.store.searchItems([mark, "prefs"], { limit: 1, offset: 1 }));
await step("store.listNamespaces prefix", () => client.store.listNamespaces({ prefix: [mark] }));
await step("store.listNamespaces depth", () => client.store.listNamespaces({ prefix: [mark], maxDepth: 2 }));
await step("store.listNamespaces suffix", () => client.store.listNamespaces({ prefix: [mark], suffix: ["bob"] }));
await step("store.putItem empty namespace", () => client.store.putItem([], "k", { v: 1 }));
await step("store.putItem label with a period", () => client.store.putItem([mark, "a.b"], "k", { v: 1 }));
await step("store.deleteItem", () => client.store.deleteItem(bob, "theme"));
await step("store.getItem deleted", () => client.store.getItem(bob, "theme"));
await step("store.listNamespaces after delete", () => client.store.listNamespaces({ prefix: [mark] }));
// Runs: if_not_exists, human in the loop with command, multitask
// strategies, stateless runs, delete, cancel with rollback.
const slow = { input: { messages: [{ role: "user", content: "a b c d e f g h i j k l m n o p q r s t u v w x y z" }] }, config: { configurable: { token_delay_ms: 100 } } };
const waitStatus = async (thread, run, want) => {
  for (let i = 0; i < 200; i++) {
    const got = await client.runs.get(thread, run).catch(() => null);
    if (got?.status === want) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return false;
};
const busy = async (thread) => {
  for (let i = 0; i < 200; i++) {
    if ((await client.threads.get(thread)).status === "busy") return true;
    await new Promise((r) => setTimeout(r, 10));
  }
  return false;
};
await step("runs.wait if_not_exists reject", () => client.runs.wait(randomUUID(), "echo", { input: { messages: [] }, ifNotExists: "reject" }));
await step("runs.wait if_not_exists create", async () => Object.keys(await client.runs.wait(randomUUID(), "echo", { input: { messages: [{ role: "user", content: "x" }] }, ifNotExists: "create" })).sort());
await step("interrupt, then resume with command", async () => {
  const t = (await client.threads.create({ metadata: { mark } })).thread_id;
  const asked = await client.runs.wait(t, "demo", { input: { messages: [{ role: "user", content: "go" }] } });
  const th = await client.threads.get(t);
  const st = await client.threads.getState(t);
  const done = await client.runs.wait(t, "demo", { command: { resume: { approved: true } } });
  const after = await client.threads.get(t);
  const runs = await client.runs.list(t);
  return { asked: Object.keys(asked).sort(), status: th.status, interrupts: Object.values(th.interrupts).flat().length,
    tasks: st.tasks.length, approved: done.approved, after: after.status, runs: runs.map((r) => r.status) };
});
await step("command.resume on a thread with nothing pending", async () => {
  const t = (await client.threads.create({ metadata: { mark } })).thread_id;
  await client.runs.wait(t, "echo", { input: { messages: [{ role: "user", content: "x" }] } });
  return client.runs.wait(t, "echo", { command: { resume: "yes" } });
});
for (const strategy of [undefined, "reject", "interrupt", "rollback", "enqueue"]) {
  await step(`multitask_strategy ${strategy ?? "by default"}`, async () => {
    const t = (await client.threads.create({ metadata: { mark } })).thread_id;
    const first = await client.runs.create(t, "echo", slow);
    const started = await busy(t);
    let second = null, refused = null;
    try {
      second = await client.runs.create(t, "echo", { input: { messages: [{ role: "user", content: "next" }] }, multitaskStrategy: strategy });
    } catch (e) {
      refused = e?.status ?? String(e);
    }
    if (second) await client.runs.join(t, second.run_id);
    else await client.runs.cancel(t, first.run_id, true);
    const firstNow = await client.runs.get(t, first.run_id).then((r) => r.status, (e) => e?.status);
    const values = await client.threads.getState(t);
    // (How much of the first run the state keeps depends on when it was
    // stopped: not compared.)
    // (Nor, for rollback, what became of the first run: the reference
    // marks it error or deletes it, as the timing falls.)
    return { started, refused, second: second?.status, first: strategy === "rollback" ? null : firstNow, last: second ? values.values.messages?.at(-1)?.content : null };
  });
}
await step("runs.createBatch", async () => {
  const runs = await client.runs.createBatch([
    { assistantId: "echo", input: { messages: [{ role: "user", content: "a" }] } },
    { assistantId: "echo", input: { messages: [{ role: "user", content: "b" }] }, onCompletion: "keep" },
  ]);
  return { n: runs.length, keys: Object.keys(runs[0]).sort(), status: runs.map((r) => r.status) };
});
await step("runs.cancelMany", async () => {
  const t = (await client.threads.create({ metadata: { mark } })).thread_id;
  const run = await client.runs.create(t, "echo", slow);
  await busy(t);
  await client.runs.cancelMany({ threadId: t, runIds: [run.run_id] });
  await client.runs.join(t, run.run_id).catch(() => null);
  return (await client.threads.get(t)).status;
});
await step("threads.prune", async () => {
  const a = (await client.threads.create({ metadata: { mark } })).thread_id;
  const out = await client.threads.prune([a, randomUUID()]);
  const gone = await client.threads.get(a).then(() => "found", (e) => e?.status);
  return { out, gone };
});
await step("select", async () => {
  const t = (await client.threads.create({ metadata: { mark } })).thread_id;
  await client.runs.wait(t, "echo", { input: { messages: [{ role: "user", content: "x" }] } });
  const as = await client.assistants.search({ graphId: "echo", select: ["assistant_id", "graph_id"] });
  const runs = await client.runs.list(t, { select: ["run_id", "status"] });
  const hist = await client.threads.getHistory(t, { limit: 1, select: ["values.messages", "next"] });
  return { assistants: as.map((a) => Object.keys(a).sort()), runs: runs.map((r) => Object.keys(r).sort()), history: hist.map((h) => [Object.keys(h).sort(), Object.keys(h.values ?? {}).sort()]) };
});
await step("threads.patchState", async () => {
  const t = (await client.threads.create({ metadata: { mark } })).thread_id;
  await client.runs.wait(t, "echo", { input: { messages: [{ role: "user", content: "x" }] } });
  await client.threads.patchState(t, { reviewed: true });
  return (await client.threads.getHistory(t, { limit: 1 }))[0].metadata.reviewed;
});
await step("threads.create with a ttl", async () => {
  const t = await client.threads.create({ metadata: { mark }, ttl: 60 });
  return { status: t.status, got: (await client.threads.get(t.thread_id)).thread_id === t.thread_id };
});
await step("runs.create stateless, deleted when done", async () => {
  const run = await client.runs.create(null, "echo", { input: { messages: [{ role: "user", content: "x" }] } });
  await client.runs.join(run.thread_id, run.run_id).catch(() => null);
  for (let i = 0; i < 500; i++) { // 10 s: a loaded machine took more than 2 once, and more than 5 with -race beside four packages
    const gone = await client.threads.get(run.thread_id).then(() => false, (e) => e?.status === 404);
    if (gone) return { keys: Object.keys(run).sort(), status: run.status, gone };
    await new Promise((r) => setTimeout(r, 20));
  }
  return { keys: Object.keys(run).sort(), gone: false };
});
await step("runs.create stateless, kept", async () => {
  const run = await client.runs.create(null, "echo", { input: { messages: [{ role: "user", content: "x" }] }, onCompletion: "keep" });
  const values = await client.runs.join(run.thread_id, run.run_id);
  const th = await client.threads.get(run.thread_id);
  return { values: Object.keys(values).sort(), graph: th.metadata.graph_id };
});
await step("runs.delete", async () => {
  const t = (await client.threads.create({ metadata: { mark } })).thread_id;
  const run = await client.runs.create(t, "echo", { input: { messages: [{ role: "user", content: "x" }] } });
  await client.runs.join(t, run.run_id);
  await waitStatus(t, run.run_id, "success");
  await client.runs.delete(t, run.run_id);
  const got = await client.runs.get(t, run.run_id).then(() => "found", (e) => e?.status);
  return { got, list: (await client.runs.list(t)).length };
});
await step("runs.cancel rollback", async () => {
  const t = (await client.threads.create({ metadata: { mark } })).thread_id;
  await client.runs.wait(t, "echo", { input: { messages: [{ role: "user", content: "kept" }] } });
  const run = await client.runs.create(t, "echo", slow);
  await busy(t);
  await client.runs.cancel(t, run.run_id, true, "rollback");
  const got = await client.runs.get(t, run.run_id).then((r) => r.status, (e) => e?.status);
  const st = await client.threads.getState(t);
  return { got, messages: st.values.messages.length, list: (await client.runs.list(t)).length };
});
console.log(JSON.stringify(steps));
