"""Serve agentstream assistants from Python: a remote worker, standard
library only.

A worker connects to an agentstream server (``GET /workers/connect``), says
which assistant ids it serves, and is handed runs. Each run is given to
its assistant's handler in a thread of its own; the handler publishes the
run's events through the :class:`Run` and returns to complete the run, or
raises to fail it (with the exception's text as the error). The server
assigns every event its seq, id and timestamp and writes the run's own
lifecycle events::

    from agentstream_protocol.worker import Worker

    def shout(run):
        run.text([run.input["messages"][-1]["content"].upper()])

    Worker("http://127.0.0.1:2024", api_key="k").serve({"shout": shout})

Events are sent in batches (every ``flush_every`` seconds or 256 events),
each numbered so that a batch sent again after a network error is not
published twice. A dropped connection is made again under the same worker
name, keeping the worker's runs while the server's lease lasts. The wire
is ``protocol/worker.cddl``; its types are in :mod:`agentstream_protocol`.
"""

from __future__ import annotations

import http.client
import json
import queue
import socket
import sys
import threading
import time
import urllib.parse
from typing import Any, Callable, Iterable, Mapping, Optional

__all__ = ["Worker", "Run", "Cancelled", "Refused"]

_BATCH = 256
_MAX_QUEUED = 1024  # operations waiting before emit sends a batch itself


class Cancelled(Exception):
    """The run was cancelled (run.cancel, or a newer run took the thread):
    raised by :meth:`Run.sleep`, :meth:`Run.interrupt` and the event
    methods, so that a handler stops where it is. Nothing more is sent for
    the run."""


class Refused(Exception):
    """The server refused a request: ``status`` is the HTTP status, ``code``
    the protocol's error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


Handler = Callable[["Run"], Any]


class _Endpoint:
    """The server's address and the credential sent with each request."""

    def __init__(self, url: str, token: Optional[str], api_key: Optional[str], timeout: float) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"agentstream worker: not an http(s) URL: {url!r}")
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        self.headers: dict[str, str] = {}
        if token:
            self.headers["Authorization"] = "Bearer " + token
        if api_key:
            self.headers["X-API-Key"] = api_key
        self.timeout = timeout

    def connection(self, timeout: Optional[float] = None) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout if timeout is not None else self.timeout)

    def request(self, conn: http.client.HTTPConnection, method: str, path: str,
                body: Optional[bytes] = None, headers: Optional[Mapping[str, str]] = None) -> tuple[int, bytes]:
        h = dict(self.headers)
        if headers:
            h.update(headers)
        conn.request(method, self.prefix + path, body=body, headers=h)
        resp = conn.getresponse()
        return resp.status, resp.read()


def _refused(status: int, body: bytes) -> Refused:
    try:
        e = json.loads(body)
        return Refused(status, str(e.get("error", "unknown_error")), str(e.get("message", "")))
    except ValueError:
        return Refused(status, "unknown_error", body.decode("utf-8", "replace").strip())


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


class Run:
    """A run handed to the worker. ``input``, ``config`` and ``metadata`` are
    the run's, as run.start gave them; ``values`` is the thread's state when
    the run was handed out. ``injected`` receives what clients send the
    running run (input.inject); ``cancelled`` is set when the run is
    cancelled."""

    def __init__(self, worker: "Worker", assign: Mapping[str, Any]) -> None:
        self.id: str = assign["run_id"]
        self.thread_id: str = assign["thread_id"]
        self.assistant_id: str = assign["assistant_id"]
        self.input: Any = assign.get("input")
        self.config: dict[str, Any] = dict(assign.get("config") or {})
        self.metadata: dict[str, Any] = dict(assign.get("metadata") or {})
        self.values: dict[str, Any] = dict(assign.get("values") or {})
        self.injected: "queue.Queue[Any]" = queue.Queue()
        self.cancelled = threading.Event()
        self.cancel_reason = ""
        self._worker = worker
        self._lock = threading.Lock()
        self._kick = threading.Condition(self._lock)
        self._queued: list[bytes] = []
        self._batch = 0
        self._error: Optional[Exception] = None
        self._send_lock = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None
        self._waiting: dict[str, "queue.Queue[Any]"] = {}
        self._refs = 0
        self._done = False

    # What a handler calls.

    def emit(self, event: Mapping[str, Any]) -> None:
        """Queue a protocol event (a ServerEvent without seq and event_id)
        to be published in the run's name."""
        self._op({"op": "emit", "event": event})

    def event(self, method: str, data: Any, namespace: Optional[list[str]] = None) -> None:
        """Emit an event of one channel: ``run.event("custom", {...})``."""
        self.emit({"type": "event", "method": method, "params": {"namespace": namespace or [], "data": data}})

    def text(self, chunks: Iterable[str], delay: float = 0.0, message_id: Optional[str] = None,
             namespace: Optional[list[str]] = None) -> str:
        """Stream an AI message made of chunks of text, waiting ``delay``
        seconds before each chunk (raising :class:`Cancelled` if the run is
        cancelled meanwhile), and return the message's id."""
        mid = message_id or f"msg_{self.id}_{self._ref()}"

        def ev(data: dict[str, Any]) -> None:
            data["run_id"] = self.id
            self.event("messages", data, namespace)

        ev({"event": "message-start", "role": "ai", "id": mid})
        ev({"event": "content-block-start", "index": 0, "content": {"type": "text", "text": ""}})
        full = []
        for c in chunks:
            self.sleep(delay)
            full.append(c)
            ev({"event": "content-block-delta", "index": 0, "delta": {"type": "text-delta", "text": c}})
        ev({"event": "content-block-finish", "index": 0, "content": {"type": "text", "text": "".join(full)}})
        ev({"event": "message-finish"})
        return mid

    def set_values(self, values: Mapping[str, Any]) -> None:
        """Emit the thread's new state (a values event): the server saves it."""
        self.values = dict(values)
        self.event("values", self.values)

    def interrupt(self, payload: Any, namespace: Optional[list[str]] = None) -> Any:
        """Ask for input: clients see input.requested with ``payload``; this
        returns the answer input.respond gives, or raises
        :class:`Cancelled`."""
        ref = f"i{self._ref()}"
        answer: "queue.Queue[Any]" = queue.Queue(1)
        with self._lock:
            self._waiting[ref] = answer
        op: dict[str, Any] = {"op": "interrupt", "ref": ref, "payload": payload}
        if namespace:
            op["namespace"] = namespace
        self._op(op)
        self.flush()
        got = answer.get()
        if got is _CANCEL:
            raise Cancelled(self.cancel_reason)
        return got

    def sleep(self, seconds: float) -> None:
        """Wait, or raise :class:`Cancelled` as soon as the run is cancelled."""
        if self.cancelled.wait(seconds) if seconds > 0 else self.cancelled.is_set():
            raise Cancelled(self.cancel_reason)

    def flush(self) -> None:
        """Send what is queued now and wait until the server took it."""
        while True:
            with self._lock:
                if self._error:
                    raise self._error
                if not self._queued:
                    return
            self._send()

    # The worker's side.

    def _ref(self) -> int:
        with self._lock:
            self._refs += 1
            return self._refs

    def _op(self, op: Mapping[str, Any]) -> None:
        b = json.dumps(op, separators=(",", ":")).encode()
        with self._lock:
            if self.cancelled.is_set():
                raise Cancelled(self.cancel_reason)
            if self._error:
                raise self._error
            self._queued.append(b)
            self._kick.notify()
            full = len(self._queued) >= _MAX_QUEUED
        if full:
            # A handler that emits faster than the server takes its batches
            # sends them itself, so that what waits stays bounded.
            self._send()

    def _cancel(self, reason: str) -> None:
        with self._lock:
            self.cancel_reason = reason
            self.cancelled.set()
            waiting, self._waiting = self._waiting, {}
            self._kick.notify()
        for q in waiting.values():
            q.put(_CANCEL)

    def _answer(self, ref: str, response: Any) -> None:
        with self._lock:
            q = self._waiting.pop(ref, None)
        if q is not None:
            q.put(response)

    def _sender(self) -> None:
        """Send queued operations in batches while the run lasts."""
        while True:
            with self._lock:
                while not self._queued and not self._done and not self.cancelled.is_set():
                    self._kick.wait()
                if self._done or self.cancelled.is_set():
                    return
            time.sleep(self._worker.flush_every)
            try:
                self._send()
            except Exception:  # kept in self._error, raised to the handler
                pass

    def _send(self) -> None:
        """Post one batch, retrying it under the same number (so nothing is
        published twice) while the network or the server fails."""
        with self._send_lock:
            with self._lock:
                if self._error:
                    raise self._error
                if not self._queued:
                    return
                ops = self._queued[:_BATCH]
                self._batch += 1
                seq = self._batch
            body = b"\n".join(ops) + b"\n"
            path = f"/workers/{urllib.parse.quote(self._worker.worker_id, safe='')}/runs/{urllib.parse.quote(self.id, safe='')}"
            headers = {"Content-Type": "application/x-ndjson", "Agentstream-Producer-Seq": str(seq)}
            ep = self._worker._endpoint
            for attempt in range(21):
                try:
                    if self._conn is None:
                        self._conn = ep.connection()
                    status, data = ep.request(self._conn, "POST", path, body, headers)
                except (OSError, http.client.HTTPException) as e:
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = None
                    err: Exception = e
                else:
                    if status == 200:
                        with self._lock:
                            del self._queued[:len(ops)]
                        return
                    err = _refused(status, data)
                    if not _retryable(status):
                        with self._lock:
                            self._error = err
                        raise err
                if self.cancelled.wait(0.05 * (attempt + 1)):
                    raise Cancelled(self.cancel_reason)
            raise err

    def _serve(self, handler: Handler) -> None:
        sender = threading.Thread(target=self._sender, name=f"agentstream-send-{self.id}", daemon=True)
        sender.start()
        end: Optional[dict[str, Any]] = {"op": "end", "status": "completed"}
        try:
            handler(self)
        except Cancelled:
            end = None
        except Exception as e:  # the run fails with the handler's error
            end = {"op": "end", "status": "failed", "error": str(e) or type(e).__name__}
        with self._lock:
            if self._error is not None and end is not None:
                # A refused batch published nothing; the run still ends,
                # failed with the refusal.
                end = {"op": "end", "status": "failed", "error": str(self._error)}
                self._error, self._queued = None, []
        try:
            if end is not None and not self.cancelled.is_set():
                self._op(end)
                self.flush()
        except Exception as e:
            if not isinstance(e, Cancelled):
                print(f"agentstream worker: run {self.id}: {e}", file=sys.stderr)
        finally:
            with self._lock:
                self._done = True
                self._kick.notify()
            sender.join()
            if self._conn is not None:
                self._conn.close()
            self._worker._forget(self.id)


_CANCEL = object()


class Worker:
    """Connects to an agentstream server and serves the runs of the
    assistants it is given to :meth:`serve`.

    ``token`` is sent as ``Authorization: Bearer`` (a JWT whose role is
    producer), ``api_key`` as ``X-API-Key`` (a key with the producer
    capability). ``max_runs`` bounds the runs it takes at once (0: the
    server's cap)."""

    def __init__(self, url: str, token: Optional[str] = None, api_key: Optional[str] = None,
                 max_runs: int = 0, flush_every: float = 0.005, timeout: float = 30.0,
                 on_ready: Optional[Callable[[str], None]] = None) -> None:
        self._endpoint = _Endpoint(url, token, api_key, timeout)
        self.max_runs = max_runs
        self.flush_every = flush_every
        self.on_ready = on_ready
        self.worker_id = ""
        self._heartbeat = 5.0
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: Optional[http.client.HTTPConnection] = None

    def serve(self, handlers: Mapping[str, Handler]) -> None:
        """Serve runs of the assistants named by ``handlers`` until
        :meth:`stop` is called (or the server refuses the worker, which
        raises :class:`Refused`). A dropped connection is made again, with
        backoff, under the same name."""
        if not handlers:
            raise ValueError("agentstream worker: no assistant to serve")
        self._handlers = dict(handlers)
        backoff = 0.1
        while not self._stop.is_set():
            try:
                self._connect()
                backoff = 0.1
            except Refused as e:
                if not _retryable(e.status):
                    raise
            except (OSError, http.client.HTTPException, ValueError):
                pass
            if self._stop.wait(backoff):
                break
            backoff = min(backoff * 2, 5.0)
        for run in self._snapshot():
            run._cancel("the worker stopped")
        self._leave()

    def stop(self) -> None:
        """End :meth:`serve`: the connection is closed, running handlers are
        cancelled, and the server is told the worker leaves (the runs it did
        not end fail at once rather than when its lease runs out)."""
        self._stop.set()
        conn = self._stream
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _snapshot(self) -> list[Run]:
        with self._lock:
            return list(self._runs.values())

    def _forget(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def _connect(self) -> None:
        q = {"assistants": ",".join(self._handlers)}
        if self.max_runs > 0:
            q["max_runs"] = str(self.max_runs)
        headers = {"Accept": "application/x-ndjson"}
        if self.worker_id:
            headers["Agentstream-Worker"] = self.worker_id
        ep = self._endpoint
        # No read timeout: the server pings a quiet stream, and stop()
        # shuts the socket down.
        conn = ep.connection(timeout=None)
        self._stream = conn
        stop_beat = threading.Event()
        try:
            h = dict(ep.headers)
            h.update(headers)
            conn.request("GET", ep.prefix + "/workers/connect?" + urllib.parse.urlencode(q), headers=h)
            resp = conn.getresponse()
            if resp.status != 200:
                raise _refused(resp.status, resp.read())
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    self._handle(json.loads(line), stop_beat)
        finally:
            stop_beat.set()
            self._stream = None
            conn.close()

    def _handle(self, m: Mapping[str, Any], stop_beat: threading.Event) -> None:
        kind = m.get("type")
        if kind == "ready":
            self.worker_id = m["worker_id"]
            self._heartbeat = max(m.get("heartbeat_ms", 5000) / 1000.0, 0.01)
            threading.Thread(target=self._beat, args=(stop_beat,), name="agentstream-heartbeat", daemon=True).start()
            if self.on_ready:
                self.on_ready(self.worker_id)
        elif kind == "assign":
            with self._lock:
                if m["run_id"] in self._runs:
                    return
                run = Run(self, m)
                self._runs[run.id] = run
            handler = self._handlers.get(run.assistant_id)
            if handler is None:  # the server hands out only what we serve
                handler = _unknown
            threading.Thread(target=run._serve, args=(handler,), name=f"agentstream-run-{run.id}", daemon=True).start()
        elif kind in ("cancel", "respond", "inject"):
            with self._lock:
                target = self._runs.get(m.get("run_id", ""))
            if target is None:
                return
            if kind == "cancel":
                target._cancel(str(m.get("reason", "")))
            elif kind == "respond":
                target._answer(str(m.get("ref", "")), m.get("response"))
            else:
                target.injected.put(m.get("input"))

    def _leave(self) -> None:
        """Tell the server the worker stops (DELETE /workers/{id})."""
        if not self.worker_id:
            return
        conn = self._endpoint.connection(timeout=2.0)
        try:
            self._endpoint.request(conn, "DELETE", f"/workers/{urllib.parse.quote(self.worker_id, safe='')}")
        except (OSError, http.client.HTTPException, Refused):
            pass
        finally:
            conn.close()

    def _beat(self, stop: threading.Event) -> None:
        """Renew the worker's lease while its connection lasts."""
        ep = self._endpoint
        conn: Optional[http.client.HTTPConnection] = None
        path = f"/workers/{urllib.parse.quote(self.worker_id, safe='')}/heartbeat"
        while not stop.wait(self._heartbeat):
            try:
                if conn is None:
                    conn = ep.connection()
                ep.request(conn, "POST", path)
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()


def _unknown(run: Run) -> None:
    raise RuntimeError(f"this worker does not serve assistant {run.assistant_id}")
