// The graphs the edge-mode tests run on the LangGraph JavaScript server.
//   chat     a fake chat model replying a fixed sentence, streamed
//   approve  asks with interrupt(), then answers with what it was given
//   echo     streams the user's last message word by word (configurable
//            token_delay_ms between words) and keeps the conversation in
//            its values, as agentstream's built-in echo does
//   demo     asks for approval with interrupt(); approved, runs its
//            research tool and sets values.approved, as the built-in demo
import { StateGraph, MessagesAnnotation, Annotation, START, END, interrupt } from "@langchain/langgraph";
import { FakeListChatModel } from "@langchain/core/utils/testing";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, AIMessageChunk } from "@langchain/core/messages";
import { ChatGenerationChunk } from "@langchain/core/outputs";
import { tool } from "@langchain/core/tools";
import { z } from "zod";

const model = new FakeListChatModel({ responses: ["Hello from the upstream graph, word by word."], sleep: 20 });

export const chat = new StateGraph(MessagesAnnotation)
  .addNode("model", async (state) => ({ messages: [await model.invoke(state.messages)] }))
  .addEdge(START, "model").addEdge("model", END).compile();

export const approve = new StateGraph(MessagesAnnotation)
  .addNode("ask", async () => { const a = interrupt({ question: "go on?" }); return { messages: [{ role: "ai", content: "answer: " + JSON.stringify(a) }] }; })
  .addEdge(START, "ask").addEdge("ask", END).compile();

// EchoModel streams the last message back, a word per chunk.
class EchoModel extends BaseChatModel {
  constructor(fields = {}) {
    super(fields);
    this.delay = fields.delay ?? 0;
  }
  _llmType() { return "echo"; }
  async *_streamResponseChunks(messages, options, runManager) {
    const last = messages.at(-1);
    const text = typeof last?.content === "string" ? last.content : "";
    for (const word of text.split(/(?<= )/)) {
      if (this.delay > 0) await new Promise((r) => setTimeout(r, this.delay));
      options?.signal?.throwIfAborted?.(); // a cancelled run stops here
      const chunk = new ChatGenerationChunk({ text: word, message: new AIMessageChunk({ content: word }) });
      yield chunk;
      await runManager?.handleLLMNewToken(word, undefined, undefined, undefined, undefined, { chunk });
    }
  }
  async _generate(messages, options, runManager) {
    let text = "";
    for await (const chunk of this._streamResponseChunks(messages, options, runManager)) text += chunk.text;
    return { generations: [{ text, message: new AIMessage(text) }] };
  }
}

// The upstream keeps only configurable of a run's config: a top-level
// token_delay_ms (as the built-in echo reads it) does not reach the graph,
// so it streams at 15 ms a word unless configurable says otherwise.
const delayOf = (config) => Number(config?.configurable?.token_delay_ms ?? 15);

export const echo = new StateGraph(MessagesAnnotation)
  .addNode("model", async (state, config) => {
    const reply = await new EchoModel({ delay: delayOf(config) }).invoke(state.messages, config);
    return { messages: [new AIMessage({ id: reply.id, content: reply.text })] }; // its text, as a string
  })
  .addEdge(START, "model").addEdge("model", END).compile();

const research = tool(async ({ query }) => `agentstream streams agent events (${query})`, {
  name: "research",
  description: "Looks the question up.",
  schema: z.object({ query: z.string() }),
});

const DemoState = Annotation.Root({ ...MessagesAnnotation.spec, approved: Annotation() });

export const demo = new StateGraph(DemoState)
  .addNode("agent", async (state, config) => {
    const answer = interrupt({ question: "Use the research result?" });
    if (answer?.approved !== true) return { approved: false, messages: [new AIMessage("Not approved.")] };
    const found = await research.invoke({ query: "What is agentstream?" }, config);
    return { approved: true, messages: [new AIMessage(found)] };
  })
  .addEdge(START, "agent").addEdge("agent", END).compile();

// firehose emits input.count custom events named "firehose" at
// input.rate a second (0: at once), each {index, ts (Unix ns), pad}, as
// agentstream's built-in firehose does, for the load tool.
const FirehoseState = Annotation.Root({ count: Annotation(), rate: Annotation(), size: Annotation() });

export const firehose = new StateGraph(FirehoseState)
  .addNode("emit", async (state, config) => {
    const count = Number(state.count ?? 100), rate = Number(state.rate ?? 0);
    const pad = "x".repeat(Math.max(0, Number(state.size ?? 100) - 64));
    const start = performance.now();
    for (let i = 0; i < count; i++) {
      if (rate > 0) {
        const wait = start + (i * 1000) / rate - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      }
      const ts = Math.round((performance.timeOrigin + performance.now()) * 1e6);
      config.writer?.({ name: "firehose", payload: { index: i, ts, pad } });
    }
    return {};
  })
  .addEdge(START, "emit").addEdge("emit", END).compile();
