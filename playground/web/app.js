// agentstream playground: watch and steer one thread over the WebSocket
// transport. Plain JavaScript, type-checked against the generated protocol
// bindings (tsc --checkJs --strict in the tests); no build step, no
// external requests.
// @ts-check

/** @typedef {import("../../bindings/ts/protocol").ServerEvent} ServerEvent */
/** @typedef {import("../../bindings/ts/protocol").CommandResponse} CommandResponse */
/** @typedef {import("../../bindings/ts/protocol").ErrorResponse} ErrorResponse */
/** @typedef {import("../../bindings/ts/protocol").ClientCommand} ClientCommand */
/** @typedef {import("../../bindings/ts/protocol").MessagesData} MessagesData */
/** @typedef {import("../../bindings/ts/protocol").EventsMissedData} EventsMissedData */
/** @typedef {import("../../bindings/ts/protocol").Namespace} Namespace */

/**
 * @typedef {{ index: number, type: string, text: string, toolCallId: string, toolName: string, args: string, final: any, done: boolean }} Block
 * @typedef {{ id: string, role: string, ns: Namespace, node: string, blocks: Block[], done: boolean, error: string, el?: HTMLElement, dirty: boolean }} Msg
 * @typedef {{ ns: Namespace, status: string, graph: string, error: string }} Agent
 * @typedef {{ id: string, ns: Namespace, payload: any }} Interrupt
 * @typedef {{ id: string, name: string, input: any, output: any, error: string, streamed: string, done: boolean }} ToolRun
 * @typedef {{ resolve: (r: CommandResponse) => void, reject: (e: Error) => void }} Pending
 */

const $ = (/** @type {string} */ id) => /** @type {HTMLElement} */ (document.getElementById(id));
const input = (/** @type {string} */ id) => /** @type {HTMLInputElement} */ (document.getElementById(id));

const MAX_LOG = 2000;

/** The thread's state as its events built it. */
const state = {
  /** @type {Msg[]} */ messages: [],
  /** @type {Map<string, Msg>} */ current: new Map(),
  /** @type {Map<string, Agent>} */ tree: new Map(),
  /** @type {Interrupt[]} */ interrupts: [],
  /** @type {Map<string, ToolRun>} */ tools: new Map(),
  /** @type {any} */ values: undefined,
  /** @type {{ seq: number, method: string, ns: string, text: string }[]} */ log: [],
  logDropped: 0,
  runStatus: "",
};

/** The connection. */
const conn = {
  /** @type {WebSocket | null} */ socket: null,
  thread: "",
  token: "",
  nextId: 1,
  /** @type {Map<number, Pending>} */ pending: new Map(),
  /** @type {string} */ subscription: "",
  epoch: "",
  seq: 0,
  backoff: 200,
  /** @type {number | undefined} */ retry: undefined,
  closedByUser: false,
};

// ---- rendering, batched per animation frame ----

const dirty = { tree: false, messages: false, interrupts: false, values: false, log: false, status: false };
let frame = 0;
/** @param {keyof typeof dirty} what */
function mark(what) {
  dirty[what] = true;
  if (!frame) frame = requestAnimationFrame(render);
}

function render() {
  frame = 0;
  if (dirty.tree) renderTree();
  if (dirty.messages) renderMessages();
  if (dirty.interrupts) renderInterrupts();
  if (dirty.values) $("values").textContent = state.values === undefined ? "" : JSON.stringify(state.values, null, 2);
  if (dirty.log) renderLog();
  if (dirty.status) $("run-status").textContent = state.runStatus;
  for (const k of /** @type {(keyof typeof dirty)[]} */ (Object.keys(dirty))) dirty[k] = false;
}

/** @param {Namespace} ns */
const nsLabel = (ns) => (ns.length ? ns.join(" / ") : "root");

function renderTree() {
  const ul = $("tree");
  ul.replaceChildren();
  const agents = [...state.tree.values()].sort((a, b) => a.ns.join("/").localeCompare(b.ns.join("/")));
  for (const a of agents) {
    const li = document.createElement("li");
    li.style.paddingLeft = `${a.ns.length * 1.2}rem`;
    const st = document.createElement("span");
    st.className = `status status-${a.status}`;
    st.textContent = a.status;
    li.append(st, ` ${nsLabel(a.ns)}${a.graph ? ` (${a.graph})` : ""}${a.error ? `: ${a.error}` : ""}`);
    li.dataset.ns = a.ns.join("/");
    ul.append(li);
  }
}

function renderMessages() {
  const box = $("messages");
  for (const m of state.messages) {
    if (!m.el) {
      m.el = document.createElement("div");
      m.el.className = `msg role-${m.role}`;
      m.el.dataset.id = m.id;
      box.append(m.el);
    }
    if (!m.dirty) continue;
    m.dirty = false;
    const parts = [];
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = `${m.role} · ${nsLabel(m.ns)}${m.done ? "" : " · streaming"}${m.error ? ` · error: ${m.error}` : ""}`;
    parts.push(meta);
    for (const b of m.blocks) {
      const el = document.createElement("div");
      if (b.type === "reasoning") {
        el.className = "reasoning";
        el.textContent = b.text;
      } else if (b.type === "tool_call") {
        el.className = "tool";
        const run = state.tools.get(b.toolCallId);
        const args = b.final ? JSON.stringify(b.final) : b.args;
        let line = `→ ${b.toolName}(${args})`;
        if (run && run.done) line += run.error ? `\n✗ ${run.error}` : `\n← ${JSON.stringify(run.output)}`;
        else if (run) line += "\n… running";
        el.textContent = line;
      } else {
        el.className = "text";
        el.textContent = b.text;
      }
      parts.push(el);
    }
    m.el.replaceChildren(...parts);
  }
}

function renderInterrupts() {
  const box = $("interrupts");
  box.replaceChildren();
  if (!state.interrupts.length) {
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = "none pending";
    box.append(p);
    return;
  }
  for (const it of state.interrupts) {
    const div = document.createElement("div");
    div.className = "interrupt";
    div.dataset.id = it.id;
    const head = document.createElement("div");
    head.textContent = `${nsLabel(it.ns)} asks:`;
    const pre = document.createElement("pre");
    pre.textContent = JSON.stringify(it.payload, null, 2);
    const actions = document.createElement("div");
    actions.className = "actions";
    const approve = document.createElement("button");
    approve.type = "button";
    approve.textContent = "Approve";
    approve.addEventListener("click", () => respond(it, { approved: true }));
    const reject = document.createElement("button");
    reject.type = "button";
    reject.className = "secondary";
    reject.textContent = "Reject";
    reject.addEventListener("click", () => respond(it, { approved: false }));
    const label = document.createElement("label");
    label.textContent = "Other answer (JSON)";
    const ta = document.createElement("textarea");
    ta.rows = 1;
    label.append(ta);
    const send = document.createElement("button");
    send.type = "button";
    send.className = "secondary";
    send.textContent = "Send";
    send.addEventListener("click", () => {
      try {
        respond(it, JSON.parse(ta.value));
      } catch (e) {
        showNotice(`The answer is not JSON: ${e}`);
      }
    });
    actions.append(approve, reject, label, send);
    div.append(head, pre, actions);
    box.append(div);
  }
}

function renderLog() {
  const ch = /** @type {HTMLSelectElement} */ ($("log-channel")).value;
  const ns = input("log-ns").value.trim();
  const ol = $("log");
  const rows = state.log.filter((r) => (!ch || r.method === ch) && (!ns || r.ns.startsWith(ns)));
  const shown = rows.slice(-500);
  ol.replaceChildren(...shown.map((r) => {
    const li = document.createElement("li");
    li.value = r.seq;
    li.textContent = `${r.method} [${r.ns || "root"}] ${r.text}`;
    return li;
  }));
  ol.scrollTop = ol.scrollHeight;
  $("log-count").textContent = `${rows.length} shown of ${state.log.length}${state.logDropped ? ` (${state.logDropped} older dropped)` : ""}`;
}

/** @param {string} text */
function showNotice(text) {
  const n = $("notice");
  n.textContent = text;
  n.hidden = false;
}

/** @param {string} text @param {"live" | "down" | ""} cls */
function setStatus(text, cls) {
  const s = $("status");
  s.textContent = text;
  s.className = cls;
}

// ---- the assembler ----

/** @param {Namespace} ns @param {string} node */
const msgKey = (ns, node) => `${ns.join("\u0000")}\u0001${node}`;

/** @param {Msg} m @param {number} i @returns {Block} */
function block(m, i) {
  let b = m.blocks.find((x) => x.index === i);
  if (!b) {
    b = { index: i, type: "", text: "", toolCallId: "", toolName: "", args: "", final: null, done: false };
    m.blocks.push(b);
    m.blocks.sort((x, y) => x.index - y.index);
  }
  return b;
}

/** @param {Namespace} ns @param {string} node @param {any} d */
function onMessage(ns, node, d) {
  const k = msgKey(ns, node);
  let m = state.current.get(k);
  switch (d.event) {
    case "message-start":
      m = { id: d.id, role: d.role, ns, node, blocks: [], done: false, error: "", dirty: true };
      state.current.set(k, m);
      state.messages.push(m);
      break;
    case "content-block-start": {
      if (!m) return;
      const b = block(m, d.index);
      const c = d.content || {};
      if (c.type === "text") { b.type = "text"; b.text = c.text || ""; }
      else if (c.type === "reasoning") { b.type = "reasoning"; b.text = c.reasoning || ""; }
      else if (c.type === "tool_call_chunk" || c.type === "tool_call") { b.type = "tool_call"; b.toolCallId = c.id || ""; b.toolName = c.name || ""; b.args = typeof c.args === "string" ? c.args : ""; }
      else b.type = c.type || "";
      break;
    }
    case "content-block-delta": {
      if (!m) return;
      const b = block(m, d.index);
      const x = d.delta || {};
      if (x.type === "text-delta") { b.type ||= "text"; b.text += x.text; }
      else if (x.type === "reasoning-delta") { b.type ||= "reasoning"; b.text += x.reasoning; }
      else if (x.type === "tool-call-delta") b.args += x.args;
      break;
    }
    case "content-block-finish": {
      if (!m) return;
      const b = block(m, d.index);
      const c = d.content || {};
      b.done = true;
      if (c.type === "text") b.text = c.text;
      else if (c.type === "reasoning") b.text = c.reasoning || b.text;
      else if (c.type === "tool_call") { b.type = "tool_call"; b.toolCallId = c.id || b.toolCallId; b.toolName = c.name; b.final = c.args; }
      break;
    }
    case "message-finish":
      if (m) { m.done = true; state.current.delete(k); }
      break;
    case "error": // the protocol's message error event (a run cancelled or failed mid-message)
    case "message-error":
      if (m) { m.done = true; m.error = d.message; state.current.delete(k); }
      break;
  }
  if (m) m.dirty = true;
  mark("messages");
}

/** @param {ServerEvent} e */
function apply(e) {
  const p = /** @type {any} */ (e).params || {};
  /** @type {Namespace} */
  const ns = p.namespace || [];
  const d = p.data;
  switch (e.method) {
    case "messages":
      onMessage(ns, p.node || "", d);
      break;
    case "values":
      if (!ns.length) { state.values = d; mark("values"); }
      break;
    case "lifecycle": {
      const k = ns.join("/");
      // A new run's root starts a new tree: agents of earlier runs go.
      if (!ns.length && d.event === "started") state.tree = new Map();
      const a = state.tree.get(k) || { ns, status: "", graph: "", error: "" };
      a.status = d.event === "failed" && d.cancelled ? "cancelled" : d.event;
      if (d.graph_name) a.graph = d.graph_name;
      a.error = d.error || "";
      state.tree.set(k, a);
      mark("tree");
      if (!ns.length) {
        state.runStatus = d.event === "failed" && d.cancelled ? "run cancelled" : `run ${d.event}${d.error ? `: ${d.error}` : ""}`;
        mark("status");
        if (d.event === "completed" || d.event === "failed") { state.interrupts = []; mark("interrupts"); }
      }
      break;
    }
    case "input.requested":
      state.interrupts.push({ id: d.interrupt_id, ns, payload: d.payload });
      mark("interrupts");
      break;
    case "input.answered":
      state.interrupts = state.interrupts.filter((i) => !d.interrupt_ids.includes(i.id));
      mark("interrupts");
      break;
    case "tools": {
      const t = state.tools.get(d.tool_call_id) || { id: d.tool_call_id, name: "", input: null, output: null, error: "", streamed: "", done: false };
      if (d.event === "tool-started") { t.name = d.tool_name; t.input = d.input; }
      else if (d.event === "tool-output-delta") t.streamed += d.delta;
      else if (d.event === "tool-finished") { t.output = d.output; t.done = true; }
      else if (d.event === "tool-error") { t.error = d.message; t.done = true; }
      state.tools.set(t.id, t);
      for (const m of state.messages) if (m.blocks.some((b) => b.toolCallId === t.id)) m.dirty = true;
      mark("messages");
      break;
    }
  }
  state.log.push({ seq: e.seq || 0, method: e.method, ns: ns.join("/"), text: JSON.stringify(d) });
  if (state.log.length > MAX_LOG) { state.log.splice(0, state.log.length - MAX_LOG); state.logDropped++; }
  mark("log");
}

// ---- the connection ----

/** @param {string} method @param {any} params @returns {Promise<CommandResponse>} */
function command(method, params) {
  const socket = conn.socket;
  if (!socket || socket.readyState !== WebSocket.OPEN) return Promise.reject(new Error("not connected"));
  const id = conn.nextId++;
  /** @type {ClientCommand} */
  const cmd = /** @type {any} */ ({ id, method, params });
  socket.send(JSON.stringify(cmd));
  return new Promise((resolve, reject) => conn.pending.set(id, { resolve, reject }));
}

/** @param {string} id */
function splitId(id) {
  const i = id.lastIndexOf("-");
  return { epoch: id.slice(0, i), seq: Number(id.slice(i + 1)) };
}

/** @param {any} frameData */
function onFrame(frameData) {
  /** @type {any} */
  const msg = JSON.parse(frameData);
  if (msg.type === "success" || msg.type === "error") {
    const p = conn.pending.get(msg.id);
    if (!p) {
      if (msg.type === "error") showNotice(`${msg.error}: ${msg.message}`);
      return;
    }
    conn.pending.delete(msg.id);
    if (msg.type === "success") p.resolve(/** @type {CommandResponse} */ (msg));
    else p.reject(new Error(`${msg.error}: ${msg.message}`));
    return;
  }
  /** @type {ServerEvent} */
  const e = msg;
  if (e.method === "events.missed") {
    /** @type {EventsMissedData} */
    const d = /** @type {any} */ (e).params.data;
    showNotice(`${d.missed} events were missed after ${d.since}${d.reset ? " (the stream began again)" : ""}.`);
    return;
  }
  if (e.event_id) {
    const { epoch, seq } = splitId(e.event_id);
    if (epoch === conn.epoch && seq <= conn.seq) return; // seen before the reconnection
    if (conn.epoch && epoch !== conn.epoch) showNotice("The server's stream began again (it restarted): events after your last one were missed.");
    conn.epoch = epoch;
    conn.seq = seq;
  }
  apply(e);
}

function connect() {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const q = conn.token ? `?access_token=${encodeURIComponent(conn.token)}` : "";
  const socket = new WebSocket(`${proto}//${location.host}/threads/${encodeURIComponent(conn.thread)}/stream${q}`);
  conn.socket = socket;
  setStatus("connecting…", "down");
  let opened = false;
  socket.addEventListener("message", (ev) => onFrame(ev.data));
  socket.addEventListener("open", async () => {
    opened = true;
    conn.backoff = 200;
    try {
      if (conn.subscription) {
        const last = conn.epoch ? `${conn.epoch}-${conn.seq}` : undefined;
        const r = await command("subscription.reconnect", { run_id: "", last_event_id: last, subscriptions: [conn.subscription] });
        if (/** @type {any} */ (r.result).restored) { setStatus(`connected to ${conn.thread} (resumed)`, "live"); return; }
      }
      const r = await command("subscription.subscribe", { channels: [] });
      conn.subscription = /** @type {any} */ (r.result).subscription_id;
      setStatus(`connected to ${conn.thread}`, "live");
    } catch (e) {
      showNotice(`Subscribing failed: ${e}`);
    }
  });
  socket.addEventListener("close", (ev) => {
    if (conn.socket !== socket) return;
    for (const p of conn.pending.values()) p.reject(new Error("the connection closed"));
    conn.pending.clear();
    conn.socket = null;
    if (conn.closedByUser) return;
    if (ev.code === 4401 || ev.code === 4403 || ev.code === 1008) {
      setStatus(`closed: ${ev.reason || ev.code}`, "down");
      showNotice(`The server refused the connection (${ev.code} ${ev.reason}); check the token.`);
      return;
    }
    const retry = () => {
      setStatus(`reconnecting in ${conn.backoff} ms…`, "down");
      conn.retry = window.setTimeout(connect, conn.backoff);
      conn.backoff = Math.min(conn.backoff * 2, 5000);
    };
    if (opened) { retry(); return; }
    // A refused handshake reaches a page as 1006 with no reason: ask the
    // same route over HTTP for its status to say why.
    probe(q).then((why) => {
      if (conn.socket !== null || conn.closedByUser) return;
      if (!why) { retry(); return; }
      setStatus(`refused: ${why}`, "down");
      showNotice(`The server refused the connection: ${why}.`);
    }, retry);
  });
}

/**
 * Why the server refuses this thread's stream, from the status of a HEAD
 * request to the route the WebSocket used; "" when it does not (the
 * server was down, or is busy: reconnecting may work).
 * @param {string} q the query string the WebSocket used
 * @returns {Promise<string>}
 */
async function probe(q) {
  const r = await fetch(`/threads/${encodeURIComponent(conn.thread)}/stream${q}`, { method: "HEAD" });
  switch (r.status) {
    case 400: return "400: invalid thread id (1 to 256 of A-Z a-z 0-9 . _ : -)";
    case 401: return conn.token ? "401: the token is invalid or expired" : "401: a token is needed (paste one in the token field)";
    case 403: return "403: this token may not use this thread";
    default: return "";
  }
}

/** Connects to a thread, forgetting the previous one. @param {string} thread */
function open(thread) {
  conn.closedByUser = true;
  if (conn.retry) clearTimeout(conn.retry);
  conn.socket?.close();
  conn.closedByUser = false;
  Object.assign(conn, { thread, token: input("token").value.trim(), subscription: "", epoch: "", seq: 0, backoff: 200 });
  Object.assign(state, { messages: [], current: new Map(), tree: new Map(), interrupts: [], tools: new Map(), values: undefined, log: [], logDropped: 0, runStatus: "" });
  $("messages").replaceChildren();
  $("notice").hidden = true;
  for (const k of /** @type {(keyof typeof dirty)[]} */ (Object.keys(dirty))) mark(k);
  history.replaceState(null, "", `?thread=${encodeURIComponent(thread)}`);
  connect();
}

/** @param {Interrupt} it @param {any} response */
async function respond(it, response) {
  try {
    await command("input.respond", { namespace: it.ns, interrupt_id: it.id, response });
  } catch (e) {
    showNotice(`Answering failed: ${e}`);
  }
}

// ---- the forms ----

$("connect").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const t = input("thread").value.trim();
  if (t) open(t);
});

$("run").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const assistant = input("assistant").value.trim();
  const text = /** @type {HTMLTextAreaElement} */ ($("input")).value;
  /** @type {any} */
  let runInput = { messages: [{ role: "user", content: text }] };
  if (text.trim().startsWith("{")) {
    try { runInput = JSON.parse(text); } catch { /* plain text after all */ }
  }
  /** @type {any} */
  const params = { assistant_id: assistant, input: runInput };
  const config = input("config").value.trim();
  if (config) {
    try { params.config = JSON.parse(config); } catch (e) { showNotice(`The config is not JSON: ${e}`); return; }
  }
  try {
    await command("run.start", params);
    $("notice").hidden = true; // an earlier failure's banner goes once a run starts
    if (runInput === null || typeof runInput !== "object" || !Array.isArray(runInput.messages)) return;
    // The user's own message, as the run received it (the stream carries
    // only what the agent writes).
    for (const um of runInput.messages) {
      if (!um || typeof um.content !== "string") continue;
      state.messages.push({ id: "", role: um.role || "user", ns: [], node: "", blocks: [{ index: 0, type: "text", text: um.content, toolCallId: "", toolName: "", args: "", final: null, done: true }], done: true, error: "", dirty: true });
    }
    mark("messages");
  } catch (e) {
    showNotice(`Starting the run failed: ${e}`);
  }
});

$("cancel").addEventListener("click", async () => {
  try {
    await command("run.cancel", {});
  } catch (e) {
    showNotice(`Cancelling failed: ${e}`);
  }
});

$("log-channel").addEventListener("change", () => mark("log"));
$("log-ns").addEventListener("input", () => mark("log"));

// For tests and debugging: the state, and a way to drop the connection as
// a network failure would.
/** @type {any} */ (window).playground = { state, conn, drop: () => conn.socket?.close(4000, "dropped by the test") };

const initial = new URLSearchParams(location.search).get("thread") || `thread-${Math.random().toString(36).slice(2, 8)}`;
input("thread").value = initial;
open(initial);
