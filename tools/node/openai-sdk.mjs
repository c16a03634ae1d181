// The official openai SDK against agentstream's OpenAI-compatible wires
// (transport/openai's Go test runs it against a server it started).
// Env: BASE_URL (the server's /v1), API_KEY (a key it accepts), and
// SLOW_MODEL (an assistant slow enough to cancel). Prints one line per
// scenario passed; exits 1 at the first failure.
import OpenAI, { AuthenticationError } from "openai";

const baseURL = process.env.BASE_URL;
const client = new OpenAI({ baseURL, apiKey: process.env.API_KEY, maxRetries: 0 });

function check(cond, what) {
  if (!cond) throw new Error(`failed: ${what}`);
}

async function scenario(name, fn) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack || e}`);
    process.exit(1);
  }
}

await scenario("chat: a streamed completion of echo equals the input", async () => {
  const text = "streams agent events to many clients at once";
  const stream = await client.chat.completions.create({
    model: "echo", stream: true, stream_options: { include_usage: true },
    messages: [{ role: "user", content: text }],
  });
  let content = "", finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    role ??= c.delta.role;
    content += c.delta.content ?? "";
    finish = c.finish_reason ?? finish;
  }
  check(role === "assistant", `role ${role}`);
  check(content === text, `content ${JSON.stringify(content)}`);
  check(finish === "stop", `finish_reason ${finish}`);
  check(usage && usage.completion_tokens > 0, "usage");
});

let pending; // demo's tool call, answered below
await scenario("chat: demo's streamed tool call arrives with complete JSON arguments", async () => {
  const stream = await client.chat.completions.create({
    model: "demo", stream: true, messages: [{ role: "user", content: "what is agentstream?" }],
  });
  const calls = [];
  let finish = null, reasoning = "";
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    reasoning += c.delta.reasoning_content ?? "";
    for (const tc of c.delta.tool_calls ?? []) {
      calls[tc.index] ??= { id: "", name: "", arguments: "" };
      if (tc.id) calls[tc.index].id = tc.id;
      if (tc.function?.name) calls[tc.index].name = tc.function.name;
      calls[tc.index].arguments += tc.function?.arguments ?? "";
    }
    finish = c.finish_reason ?? finish;
  }
  check(finish === "tool_calls", `finish_reason ${finish}`);
  check(calls.length === 1 && calls[0].name === "research", JSON.stringify(calls));
  check(JSON.parse(calls[0].arguments).query === "what is agentstream?", calls[0].arguments);
  check(reasoning.length > 0, "reasoning_content");
  pending = calls[0];
});

await scenario("chat: the tool's output resumes the run", async () => {
  const done = await client.chat.completions.create({
    model: "demo",
    messages: [
      { role: "user", content: "what is agentstream?" },
      { role: "assistant", content: null, tool_calls: [{ id: pending.id, type: "function", function: { name: pending.name, arguments: pending.arguments } }] },
      { role: "tool", tool_call_id: pending.id, content: JSON.stringify({ approved: true }) },
    ],
  });
  check(done.choices[0].finish_reason === "stop", done.choices[0].finish_reason);
  check(done.choices[0].message.content.startsWith("Here is what I found"), done.choices[0].message.content);
});

let incomplete;
await scenario("responses: demo streams reasoning, a function call and ends incomplete", async () => {
  const stream = await client.responses.create({ model: "demo", input: "what is agentstream?", stream: true });
  let reasoning = "", last = null, n = 0, args = "";
  for await (const ev of stream) {
    check(ev.sequence_number === n++, `sequence_number ${ev.sequence_number}`);
    if (ev.type === "response.reasoning_summary_text.delta") reasoning += ev.delta;
    if (ev.type === "response.function_call_arguments.done") args = ev.arguments;
    last = ev;
  }
  check(reasoning === "The user asks a question; I will ask the researcher.", reasoning);
  check(JSON.parse(args).query === "what is agentstream?", args);
  check(last.type === "response.incomplete", last.type);
  check(last.response.incomplete_details.reason === "interrupt", JSON.stringify(last.response.incomplete_details));
  incomplete = last.response;
});

await scenario("responses: a dropped stream resumed with starting_after yields every event once", async () => {
  const first = [];
  const stream = await client.responses.retrieve(incomplete.id, { stream: true });
  for await (const ev of stream) {
    first.push(ev);
    if (first.length === 9) break; // the connection dropped
  }
  const rest = [];
  const again = await client.responses.retrieve(incomplete.id, { stream: true, starting_after: first[first.length - 1].sequence_number });
  for await (const ev of again) rest.push(ev);
  const all = [...first, ...rest];
  all.forEach((ev, i) => check(ev.sequence_number === i, `event ${i} is ${ev.sequence_number}`));
  check(all[all.length - 1].type === "response.incomplete", all[all.length - 1].type);
});

await scenario("responses: previous_response_id answers the call and the run completes", async () => {
  const call = incomplete.output.find((o) => o.type === "function_call");
  const next = await client.responses.create({
    model: "demo", previous_response_id: incomplete.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ approved: true }) }],
  });
  check(next.status === "completed", next.status);
  check(next.output_text.startsWith("Here is what I found"), next.output_text);
  const got = await client.responses.retrieve(next.id);
  check(got.status === "completed" && got.output_text === next.output_text, JSON.stringify(got));
});

await scenario("responses: cancel", async () => {
  const stream = await client.responses.create({ model: process.env.SLOW_MODEL, input: "x", stream: true });
  let id, last;
  for await (const ev of stream) {
    if (!id) {
      id = ev.response.id;
      const cancelled = await client.responses.cancel(id);
      check(cancelled.status === "cancelled", cancelled.status);
    }
    last = ev;
  }
  check(last.type === "response.cancelled", last.type);
});

await scenario("a wrong credential is the SDK's AuthenticationError", async () => {
  const wrong = new OpenAI({ baseURL, apiKey: "not-a-key", maxRetries: 0 });
  try {
    await wrong.chat.completions.create({ model: "echo", messages: [{ role: "user", content: "x" }] });
  } catch (e) {
    check(e instanceof AuthenticationError, `${e.constructor.name}: ${e.message}`);
    return;
  }
  throw new Error("no error");
});
