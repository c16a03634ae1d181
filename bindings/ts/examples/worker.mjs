// A Node worker serving two assistants to an agentstream server:
//  - an echo assistant: answers the last user message with its own text,
//    streamed word by word (config.token_delay_ms between words), and keeps
//    the conversation in the thread's values;
//  - an approval assistant: starts a tool, asks for approval with an
//    interrupt, and on the answer finishes the tool ({"approved": true}) or
//    fails it, then answers.
//
// Run it beside a server:
//   node bindings/ts/examples/worker.mjs http://127.0.0.1:2024
// then run.start the assistant ts-echo or ts-approve on any thread.
// AGENTSTREAM_API_KEY or AGENTSTREAM_TOKEN is sent when the server asks for
// a credential (a producer's). In a project that installed the package,
// import from "@agentstream/protocol/worker".
import { parseArgs } from "node:util";
import { Worker } from "../worker.js";

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    echo: { type: "string", default: "ts-echo" },
    approve: { type: "string", default: "ts-approve" },
    "max-runs": { type: "string", default: "0" },
  },
});
const url = positionals[0] ?? process.env.AGENTSTREAM_URL ?? "http://127.0.0.1:2024";

function userText(run) {
  const msgs = run.input?.messages;
  const last = Array.isArray(msgs) ? msgs.at(-1) : undefined;
  if (!last || typeof last !== "object") throw new Error('input must be {"messages": [{"role": "user", "content": "..."}]}');
  let content = last.content;
  if (Array.isArray(content)) content = content.filter((b) => b?.type === "text").map((b) => b.text ?? "").join("");
  if (typeof content !== "string") throw new Error("input.messages[-1].content must be text");
  return { text: content, user: last };
}

// Tokens that keep the white space after them, so they join back to text.
const words = (text) => text.match(/\s*\S+\s*/g) ?? (text ? [text] : []);

function delayMs(run) {
  const ms = Number(run.config.token_delay_ms ?? run.config.configurable?.token_delay_ms ?? 0);
  return Math.min(Math.max(Number.isFinite(ms) ? ms : 0, 0), 60000);
}

async function echo(run) {
  const { text, user } = userText(run);
  const aiId = await run.text(words(text), { delayMs: delayMs(run) });
  const human = { type: "human", content: text, id: user.id ?? `human_${run.id}` };
  const ai = { type: "ai", content: text, id: aiId };
  run.setValues({ ...run.values, messages: [...(run.values.messages ?? []), human, ai] });
}

async function approve(run) {
  const { text: question } = userText(run);
  const call = `call_${run.id}`;
  await run.text(words("Let me look that up."), { delayMs: delayMs(run) });
  run.event("tools", { event: "tool-started", tool_call_id: call, tool_name: "research", input: { query: question } });
  const answer = await run.interrupt({ question: "Use the research result?", tool_call_id: call });
  const approved = answer?.approved === true;
  let final;
  if (approved) {
    run.event("tools", { event: "tool-finished", tool_call_id: call, output: "agentstream streams agent events to many clients." });
    final = "agentstream streams agent events to many clients at once.";
  } else {
    run.event("tools", { event: "tool-error", tool_call_id: call, message: "not approved" });
    final = "The research was not approved, so I cannot answer.";
  }
  const aiId = await run.text(words(final), { delayMs: delayMs(run) });
  const messages = [
    ...(run.values.messages ?? []),
    { type: "human", content: question, id: `human_${run.id}` },
    { type: "ai", content: final, id: aiId },
  ];
  run.setValues({ ...run.values, messages, approved });
}

const worker = new Worker({
  url,
  token: process.env.AGENTSTREAM_TOKEN,
  apiKey: process.env.AGENTSTREAM_API_KEY,
  maxRuns: Number(opts["max-runs"]),
  onReady: (id) => console.log(`worker ${id} serves ${opts.echo}, ${opts.approve} at ${url}`),
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => worker.stop());
await worker.serve({ [opts.echo]: echo, [opts.approve]: approve });
