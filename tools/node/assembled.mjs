// Prints what the official SDK assembles for one run: starts a run of an
// assistant on a thread and prints, as JSON, the text of each message its
// `thread.messages` projection yields, then the final values' message
// contents. The Go client's tests compare their Assembler with it.
//
// Usage: node assembled.mjs http://host:port THREAD ASSISTANT TEXT
import { Client } from "@langchain/langgraph-sdk";
import WebSocket from "ws";

const [apiUrl, threadId, assistantId, text] = process.argv.slice(2);
if (!text) {
  console.error("usage: node assembled.mjs http://host:port THREAD ASSISTANT TEXT");
  process.exit(2);
}
const client = new Client({ apiUrl });
const thread = client.threads.stream(threadId, { assistantId, transport: "websocket", webSocketFactory: (u) => new WebSocket(u) });
const texts = [];
const collected = (async () => {
  for await (const msg of thread.messages) texts.push(await msg.text);
})();
const output = thread.output;
// A small per-token delay streams the run over time, so that the
// projections opened above see it from its start.
await thread.run.start({ input: { messages: [{ role: "user", content: text }] }, config: { token_delay_ms: 5 } });
const state = await output;
await Promise.race([collected, new Promise((r) => setTimeout(r, 2000))]);
await thread.close();
console.log(JSON.stringify({ texts, values: state.messages.map((m) => m.content) }));
process.exit(0);
