"""The official openai Python SDK against agentstream's OpenAI-compatible
wires, run by hand where `pip install openai` works (the test suite does
not run it: its machines cannot reach PyPI, and nothing may skip in CI):

    echo 'sk-alice alice' > /tmp/keys
    go run ./cmd/agentstream serve --profiles openai --auth-api-keys-file /tmp/keys &
    BASE_URL=http://127.0.0.1:2024/v1 API_KEY=sk-alice python3 tools/python/openai_sdk.py

Prints one line per scenario passed; exits 1 at the first failure. The
same scenarios run with the official Node SDK in transport/openai's
TestOfficialSDK."""
import json
import os
import sys

import openai

base_url, api_key = os.environ["BASE_URL"], os.environ["API_KEY"]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)


def scenario(name, fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - report and stop
        print(f"FAIL {name}: {e!r}")
        sys.exit(1)
    print(f"ok {name}")


def chat_echo():
    text = "streams agent events to many clients at once"
    content, finish = "", None
    for chunk in client.chat.completions.create(model="echo", stream=True, messages=[{"role": "user", "content": text}]):
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert content == text, content
    assert finish == "stop", finish


def chat_tool_call():
    calls = {}
    finish = None
    for chunk in client.chat.completions.create(model="demo", stream=True, messages=[{"role": "user", "content": "what is agentstream?"}]):
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        for tc in c.delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            if tc.function and tc.function.name:
                call["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                call["arguments"] += tc.function.arguments
        finish = c.finish_reason or finish
    assert finish == "tool_calls", finish
    assert calls[0]["name"] == "research", calls
    assert json.loads(calls[0]["arguments"])["query"] == "what is agentstream?", calls


def responses_demo():
    last, reasoning = None, ""
    for ev in client.responses.create(model="demo", input="what is agentstream?", stream=True):
        if ev.type == "response.reasoning_summary_text.delta":
            reasoning += ev.delta
        last = ev
    assert reasoning, "reasoning"
    assert last.type == "response.incomplete", last.type


def wrong_key():
    wrong = openai.OpenAI(base_url=base_url, api_key="not-a-key", max_retries=0)
    try:
        wrong.chat.completions.create(model="echo", messages=[{"role": "user", "content": "x"}])
    except openai.AuthenticationError:
        return
    raise AssertionError("no AuthenticationError")


scenario("chat: a streamed completion of echo equals the input", chat_echo)
scenario("chat: demo's streamed tool call arrives with complete JSON arguments", chat_tool_call)
scenario("responses: demo streams reasoning and ends incomplete", responses_demo)
scenario("a wrong credential is the SDK's AuthenticationError", wrong_key)
