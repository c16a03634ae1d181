import { StateGraph, MessagesAnnotation, START, END, interrupt } from "@langchain/langgraph";
import { FakeListChatModel } from "@langchain/core/utils/testing";

const model = new FakeListChatModel({ responses: ["Hello from the upstream graph, word by word."], sleep: 20 });

export const chat = new StateGraph(MessagesAnnotation)
  .addNode("model", async (state) => ({ messages: [await model.invoke(state.messages)] }))
  .addEdge(START, "model").addEdge("model", END).compile();

export const approve = new StateGraph(MessagesAnnotation)
  .addNode("ask", async () => { const a = interrupt({ question: "go on?" }); return { messages: [{ role: "ai", content: "answer: " + JSON.stringify(a) }] }; })
  .addEdge(START, "ask").addEdge("ask", END).compile();
