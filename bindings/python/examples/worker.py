"""A Python worker serving two assistants to an agentstream server:

- an echo assistant: answers the last user message with its own text,
  streamed word by word (``config.token_delay_ms`` between words), and
  keeps the conversation in the thread's values;
- an approval assistant: streams a tool call, asks for approval with an
  interrupt, and on the answer finishes the tool (``{"approved": true}``)
  or fails it, then answers.

Run it beside a server (standard library only):

    PYTHONPATH=bindings/python python3 bindings/python/examples/worker.py http://127.0.0.1:2024

then ``run.start`` the assistant ``py-echo`` or ``py-approve`` on any thread.
AGENTSTREAM_API_KEY or AGENTSTREAM_TOKEN is sent when the server asks for
a credential (a producer's).
"""

import argparse
import os
import re
import signal
import sys

from agentstream_protocol.worker import Run, Worker


def user_text(run: Run) -> tuple[str, dict]:
    msgs = (run.input or {}).get("messages") or []
    if not msgs or not isinstance(msgs[-1], dict):
        raise ValueError('input must be {"messages": [{"role": "user", "content": "..."}]}')
    last = msgs[-1]
    content = last.get("content")
    if isinstance(content, list):
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    if not isinstance(content, str):
        raise ValueError("input.messages[-1].content must be text")
    return content, last


def words(text: str) -> list[str]:
    """Tokens that keep the white space after them, so they join back to text."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def delay(run: Run) -> float:
    cfg = run.config.get("configurable") or {}
    ms = run.config.get("token_delay_ms", cfg.get("token_delay_ms", 0))
    return max(0.0, min(float(ms), 60_000.0)) / 1000.0


def echo(run: Run) -> None:
    text, user = user_text(run)
    ai_id = run.text(words(text), delay=delay(run))
    human = {"type": "human", "content": text, "id": user.get("id") or f"human_{run.id}"}
    ai = {"type": "ai", "content": text, "id": ai_id}
    run.set_values({**run.values, "messages": list(run.values.get("messages", [])) + [human, ai]})


def approve(run: Run) -> None:
    question, _ = user_text(run)
    call = f"call_{run.id}"
    run.text(words("Let me look that up."), delay=delay(run))
    run.event("tools", {"event": "tool-started", "tool_call_id": call, "tool_name": "research", "input": {"query": question}})
    answer = run.interrupt({"question": "Use the research result?", "tool_call_id": call})
    approved = isinstance(answer, dict) and answer.get("approved") is True
    if approved:
        run.event("tools", {"event": "tool-finished", "tool_call_id": call, "output": "agentstream streams agent events to many clients."})
        final = "agentstream streams agent events to many clients at once."
    else:
        run.event("tools", {"event": "tool-error", "tool_call_id": call, "message": "not approved"})
        final = "The research was not approved, so I cannot answer."
    ai_id = run.text(words(final), delay=delay(run))
    msgs = list(run.values.get("messages", [])) + [
        {"type": "human", "content": question, "id": f"human_{run.id}"},
        {"type": "ai", "content": final, "id": ai_id},
    ]
    run.set_values({**run.values, "messages": msgs, "approved": approved})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("url", nargs="?", default=os.environ.get("AGENTSTREAM_URL", "http://127.0.0.1:2024"))
    p.add_argument("--echo", default="py-echo", help="the echo assistant's id")
    p.add_argument("--approve", default="py-approve", help="the approval assistant's id")
    p.add_argument("--max-runs", type=int, default=0, help="runs at once (0: the server's cap)")
    args = p.parse_args()

    def ready(worker_id: str) -> None:
        print(f"worker {worker_id} serves {args.echo}, {args.approve} at {args.url}", flush=True)

    w = Worker(args.url, token=os.environ.get("AGENTSTREAM_TOKEN"), api_key=os.environ.get("AGENTSTREAM_API_KEY"),
               max_runs=args.max_runs, on_ready=ready)
    signal.signal(signal.SIGTERM, lambda *_: w.stop())
    try:
        w.serve({args.echo: echo, args.approve: approve})
    except KeyboardInterrupt:
        w.stop()


if __name__ == "__main__":
    sys.exit(main())
