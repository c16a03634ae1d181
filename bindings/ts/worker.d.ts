// Types of ./worker.js: a remote worker that serves agentstream assistants
// from Node (18 or later) over plain HTTP.
import type { Namespace, WorkerAssign } from "./protocol.ts";

/** The run was cancelled (run.cancel, or a newer run took the thread). */
export declare class Cancelled extends Error {
  constructor(reason?: string);
}

/** The server refused a request. */
export declare class Refused extends Error {
  readonly status: number;
  /** The protocol's error code (ErrorResponse.error). */
  readonly code: string;
  readonly serverMessage: string;
}

/** A handler serves one run: resolve to complete it, throw to fail it. */
export type Handler = (run: Run) => void | Promise<void>;

export interface TextOptions {
  /** Wait this long before each chunk. */
  delayMs?: number;
  messageId?: string;
  namespace?: Namespace;
}

/** A run handed to the worker. */
export declare class Run {
  readonly id: string;
  readonly threadId: string;
  readonly assistantId: string;
  /** The run's input, config and metadata, as run.start gave them. */
  readonly input: WorkerAssign["input"];
  readonly config: Record<string, unknown>;
  readonly metadata: Record<string, unknown>;
  /** The thread's state when the run was handed out (setValues updates it). */
  values: Record<string, unknown>;
  /** Aborted when the run is cancelled. */
  readonly signal: AbortSignal;
  readonly cancelled: boolean;
  readonly cancelReason: string;
  /** Queue a protocol event (a ServerEvent without seq and event_id). */
  emit(event: Record<string, unknown>): void;
  /** Emit an event of one channel. */
  event(method: string, data: unknown, namespace?: Namespace): void;
  /** Stream an AI message made of chunks of text; resolves to its id. */
  text(chunks: Iterable<string>, options?: TextOptions): Promise<string>;
  /** Emit the thread's new state (a values event): the server saves it. */
  setValues(values: Record<string, unknown>): void;
  /** Ask for input; resolves to the answer input.respond gives. */
  interrupt(payload: unknown, namespace?: Namespace): Promise<unknown>;
  /** The next input a client injects (input.inject). */
  nextInput(): Promise<unknown>;
  /** Wait, or reject with Cancelled when the run is cancelled. */
  sleep(ms: number): Promise<void>;
  /** Send what is queued now; resolves once the server took it. */
  flush(): Promise<void>;
}

export interface WorkerOptions {
  /** The server's base URL (http://host:port). */
  url: string;
  /** Sent as Authorization: Bearer (a JWT whose role is producer). */
  token?: string;
  /** Sent as X-API-Key (a key with the producer capability). */
  apiKey?: string;
  /** Runs taken at once (0: the server's cap). */
  maxRuns?: number;
  /** How long an event may wait to go with the next ones (5 ms). */
  flushEveryMs?: number;
  /** Called with the worker's name once the server registered it. */
  onReady?: (workerId: string) => void;
}

/** Connects to an agentstream server and serves runs of its assistants. */
export declare class Worker {
  constructor(options: WorkerOptions);
  /** The name the server gave the worker. */
  readonly workerId: string;
  /** Serve runs of the assistants named by handlers until stop(). */
  serve(handlers: Record<string, Handler>): Promise<void>;
  /** End serve(): the connection is closed, running handlers cancelled. */
  stop(): void;
}
