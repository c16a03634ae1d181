// Serve agentstream assistants from Node (18 or later): a remote worker
// over plain HTTP, with nothing but the runtime's fetch.
//
// A worker connects to an agentstream server (GET /workers/connect), says
// which assistant ids it serves, and is handed runs. Each run goes to its
// assistant's handler; the handler publishes the run's events through the
// Run and resolves to complete the run, or throws to fail it (with the
// error's message). The server assigns every event its seq, id and
// timestamp and writes the run's own lifecycle events.
//
// Events are sent in batches (every flushEveryMs or 256 events), each
// numbered so that a batch sent again after a network error is not
// published twice. A dropped connection is made again under the same
// worker name, keeping the worker's runs while the server's lease lasts.
// The wire is protocol/worker.cddl; its types are in ./protocol.ts.

const BATCH = 256;
// Events waiting to be sent past which text() sends them before going on;
// a handler that emits in a tight loop should await flush() as often.
const MAX_QUEUED = 1024;

/** The run was cancelled: nothing more is sent for it. */
export class Cancelled extends Error {
  constructor(reason) {
    super(reason || "cancelled");
    this.name = "Cancelled";
  }
}

/** The server refused a request. */
export class Refused extends Error {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.name = "Refused";
    this.status = status;
    this.code = code;
    this.serverMessage = message;
  }
}

async function refused(res) {
  const text = await res.text().catch(() => "");
  try {
    const e = JSON.parse(text);
    return new Refused(res.status, String(e.error ?? "unknown_error"), String(e.message ?? ""));
  } catch {
    return new Refused(res.status, "unknown_error", text.trim());
  }
}

const retryable = (status) => status === 429 || status >= 500;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A run handed to the worker. */
export class Run {
  #worker;
  #queued = [];
  #batch = 0;
  #error = null;
  #sending = Promise.resolve();
  #timer = null;
  #waiting = new Map();
  #inputs = [];
  #inputWaiters = [];
  #refs = 0;
  #abort = new AbortController();

  constructor(worker, assign) {
    this.#worker = worker;
    this.id = assign.run_id;
    this.threadId = assign.thread_id;
    this.assistantId = assign.assistant_id;
    this.input = assign.input;
    this.config = assign.config ?? {};
    this.metadata = assign.metadata ?? {};
    this.values = assign.values ?? {};
    this.cancelReason = "";
  }

  /** Aborted when the run is cancelled (run.cancel, or a newer run). */
  get signal() {
    return this.#abort.signal;
  }

  get cancelled() {
    return this.#abort.signal.aborted;
  }

  /**
   * Queue a protocol event (a ServerEvent without seq and event_id). It is
   * sent within flushEveryMs; a handler that emits in a tight loop should
   * await flush() every thousand events or so.
   */
  emit(event) {
    this.#op({ op: "emit", event });
  }

  /** Emit an event of one channel: run.event("custom", {...}). */
  event(method, data, namespace = []) {
    this.emit({ type: "event", method, params: { namespace, data } });
  }

  /**
   * Stream an AI message made of chunks of text, waiting delayMs before
   * each (rejecting with Cancelled if the run is cancelled meanwhile);
   * resolves to the message's id.
   */
  async text(chunks, { delayMs = 0, messageId, namespace = [] } = {}) {
    const id = messageId ?? `msg_${this.id}_${++this.#refs}`;
    const ev = (data) => this.event("messages", { ...data, run_id: this.id }, namespace);
    ev({ event: "message-start", role: "ai", id });
    ev({ event: "content-block-start", index: 0, content: { type: "text", text: "" } });
    let full = "";
    for (const c of chunks) {
      await this.sleep(delayMs);
      if (this.#queued.length >= MAX_QUEUED) await this.flush();
      full += c;
      ev({ event: "content-block-delta", index: 0, delta: { type: "text-delta", text: c } });
    }
    ev({ event: "content-block-finish", index: 0, content: { type: "text", text: full } });
    ev({ event: "message-finish" });
    return id;
  }

  /** Emit the thread's new state (a values event): the server saves it. */
  setValues(values) {
    this.values = { ...values };
    this.event("values", this.values);
  }

  /**
   * Ask for input: clients see input.requested with payload; resolves to
   * the answer input.respond gives, or rejects with Cancelled.
   */
  async interrupt(payload, namespace) {
    const ref = `i${++this.#refs}`;
    const answer = new Promise((resolve, reject) => this.#waiting.set(ref, { resolve, reject }));
    answer.catch(() => {});
    const op = { op: "interrupt", ref, payload };
    if (namespace?.length) op.namespace = namespace;
    this.#op(op);
    await this.flush();
    return answer;
  }

  /** The next input a client injects (input.inject) into the running run. */
  nextInput() {
    if (this.#inputs.length) return Promise.resolve(this.#inputs.shift());
    if (this.cancelled) return Promise.reject(new Cancelled(this.cancelReason));
    return new Promise((resolve, reject) => this.#inputWaiters.push({ resolve, reject }));
  }

  /** Wait, or reject with Cancelled as soon as the run is cancelled. */
  sleep(ms) {
    if (this.cancelled) return Promise.reject(new Cancelled(this.cancelReason));
    if (!(ms > 0)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        clearTimeout(t);
        reject(new Cancelled(this.cancelReason));
      };
      const t = setTimeout(() => {
        this.signal.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      this.signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** Send what is queued now; resolves once the server took it. */
  async flush() {
    while (this.#queued.length || this.#error) {
      if (this.#error) throw this.#error;
      await this.#send();
    }
  }

  #op(op) {
    if (this.cancelled) throw new Cancelled(this.cancelReason);
    if (this.#error) throw this.#error;
    this.#queued.push(JSON.stringify(op));
    if (!this.#timer) {
      this.#timer = setTimeout(() => {
        this.#timer = null;
        this.#send().catch(() => {}); // kept in #error, thrown to the handler
      }, this.#worker.flushEveryMs);
    }
  }

  // One batch at a time, in order.
  #send() {
    const next = this.#sending.then(() => this.#post());
    this.#sending = next.catch(() => {});
    return next;
  }

  async #post() {
    if (this.#error) throw this.#error;
    if (!this.#queued.length) return;
    const n = Math.min(this.#queued.length, BATCH);
    const body = this.#queued.slice(0, n).join("\n") + "\n";
    const seq = ++this.#batch;
    const w = this.#worker;
    const url = `${w.base}/workers/${encodeURIComponent(w.workerId)}/runs/${encodeURIComponent(this.id)}`;
    let err;
    for (let attempt = 0; attempt <= 20; attempt++) {
      try {
        const res = await fetch(url, {
          method: "POST",
          body,
          headers: { ...w.headers, "Content-Type": "application/x-ndjson", "Agentstream-Producer-Seq": String(seq) },
        });
        if (res.ok) {
          await res.arrayBuffer();
          this.#queued.splice(0, n);
          return;
        }
        err = await refused(res);
        if (!retryable(res.status)) {
          this.#error = err;
          throw err;
        }
      } catch (e) {
        if (e === this.#error) throw e;
        err = e;
      }
      if (this.cancelled) throw new Cancelled(this.cancelReason);
      await sleep(50 * (attempt + 1));
    }
    throw err;
  }

  // The worker's side.

  _cancel(reason) {
    if (this.cancelled) return;
    this.cancelReason = reason;
    this.#abort.abort(new Cancelled(reason));
    clearTimeout(this.#timer);
    this.#timer = null;
    for (const { reject } of this.#waiting.values()) reject(new Cancelled(reason));
    this.#waiting.clear();
    for (const { reject } of this.#inputWaiters.splice(0)) reject(new Cancelled(reason));
  }

  _answer(ref, response) {
    const w = this.#waiting.get(ref);
    this.#waiting.delete(ref);
    w?.resolve(response);
  }

  _inject(input) {
    const w = this.#inputWaiters.shift();
    if (w) w.resolve(input);
    else this.#inputs.push(input);
  }

  async _serve(handler) {
    let end = { op: "end", status: "completed" };
    try {
      await handler(this);
    } catch (e) {
      end = e instanceof Cancelled || this.cancelled ? null : { op: "end", status: "failed", error: String(e?.message ?? e) || "error" };
    }
    if (this.#error && end) {
      // A refused batch published nothing; the run still ends, failed
      // with the refusal.
      end = { op: "end", status: "failed", error: this.#error.message };
      this.#error = null;
      this.#queued = [];
    }
    try {
      if (end && !this.cancelled) {
        this.#op(end);
        await this.flush();
      }
    } catch (e) {
      if (!(e instanceof Cancelled)) console.error(`agentstream worker: run ${this.id}: ${e?.message ?? e}`);
    } finally {
      clearTimeout(this.#timer);
      this.#worker._forget(this.id);
    }
  }
}

/**
 * Connects to an agentstream server and serves the runs of the assistants
 * given to serve(). token is sent as Authorization: Bearer (a JWT whose
 * role is producer), apiKey as X-API-Key (a key with the producer
 * capability); maxRuns bounds the runs taken at once (0: the server's cap).
 */
export class Worker {
  #runs = new Map();
  #stop = new AbortController();
  #handlers = {};
  #beat = null;

  constructor({ url, token, apiKey, maxRuns = 0, flushEveryMs = 5, onReady } = {}) {
    if (!/^https?:\/\//.test(url ?? "")) throw new TypeError(`agentstream worker: not an http(s) URL: ${url}`);
    this.base = url.replace(/\/+$/, "");
    this.headers = {};
    if (token) this.headers.Authorization = `Bearer ${token}`;
    if (apiKey) this.headers["X-API-Key"] = apiKey;
    this.maxRuns = maxRuns;
    this.flushEveryMs = flushEveryMs;
    this.onReady = onReady;
    this.workerId = "";
  }

  /**
   * Serve runs of the assistants named by handlers until stop() (or the
   * server refuses the worker: rejects with Refused). A dropped connection
   * is made again, with backoff, under the same name.
   */
  async serve(handlers) {
    this.#handlers = { ...handlers };
    if (!Object.keys(this.#handlers).length) throw new TypeError("agentstream worker: no assistant to serve");
    let backoff = 100;
    while (!this.#stop.signal.aborted) {
      try {
        await this.#connect();
        backoff = 100;
      } catch (e) {
        if (e instanceof Refused && !retryable(e.status)) {
          this.#cancelAll("the worker stopped");
          throw e;
        }
      }
      if (this.#stop.signal.aborted) break;
      await sleep(backoff);
      backoff = Math.min(backoff * 2, 5000);
    }
    this.#cancelAll("the worker stopped");
    await this.#leave();
  }

  /** Tell the server the worker stops, so that the runs it did not end fail now. */
  async #leave() {
    if (!this.workerId) return;
    const url = `${this.base}/workers/${encodeURIComponent(this.workerId)}`;
    try {
      const res = await fetch(url, { method: "DELETE", headers: this.headers, signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
    } catch {
      // the server is gone: the worker's lease ends its runs
    }
  }

  /**
   * End serve(): the connection is closed, running handlers cancelled, and
   * the server told the worker leaves (its unfinished runs fail at once).
   */
  stop() {
    this.#stop.abort();
  }

  #cancelAll(reason) {
    for (const run of this.#runs.values()) run._cancel(reason);
  }

  _forget(id) {
    this.#runs.delete(id);
  }

  async #connect() {
    const q = new URLSearchParams({ assistants: Object.keys(this.#handlers).join(",") });
    if (this.maxRuns > 0) q.set("max_runs", String(this.maxRuns));
    const headers = { ...this.headers, Accept: "application/x-ndjson" };
    if (this.workerId) headers["Agentstream-Worker"] = this.workerId;
    const res = await fetch(`${this.base}/workers/connect?${q}`, { headers, signal: this.#stop.signal });
    if (!res.ok) throw await refused(res);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += decoder.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (line) this.#handle(JSON.parse(line));
        }
      }
    } finally {
      clearInterval(this.#beat);
      this.#beat = null;
      reader.cancel().catch(() => {});
    }
  }

  #handle(m) {
    switch (m.type) {
      case "ready": {
        this.workerId = m.worker_id;
        clearInterval(this.#beat);
        const url = `${this.base}/workers/${encodeURIComponent(this.workerId)}/heartbeat`;
        this.#beat = setInterval(() => {
          fetch(url, { method: "POST", headers: this.headers })
            .then((r) => r.arrayBuffer())
            .catch(() => {});
        }, Math.max(m.heartbeat_ms ?? 5000, 10));
        this.onReady?.(this.workerId);
        return;
      }
      case "assign": {
        if (this.#runs.has(m.run_id)) return;
        const run = new Run(this, m);
        this.#runs.set(run.id, run);
        const handler =
          this.#handlers[run.assistantId] ??
          (() => {
            throw new Error(`this worker does not serve assistant ${run.assistantId}`);
          });
        void run._serve(handler);
        return;
      }
      case "cancel":
        this.#runs.get(m.run_id)?._cancel(String(m.reason ?? ""));
        return;
      case "respond":
        this.#runs.get(m.run_id)?._answer(String(m.ref ?? ""), m.response);
        return;
      case "inject":
        this.#runs.get(m.run_id)?._inject(m.input);
        return;
    }
  }
}
