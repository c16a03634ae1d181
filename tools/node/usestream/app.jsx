// A small chat page on React's useStream (@langchain/langgraph-sdk/react),
// as LangGraph front ends use it, for the browser test of the Platform
// API's run streams (usestream-e2e.mjs). The query says where:
// ?api=URL&assistant=ID[&thread=ID][&delay=MS][&watch=1][&reconnect=0]
// [&list=1] (watch: join the run going on in the thread, as a second
// window on it does; reconnect=0: do not rejoin a run on load, show the
// thread's state alone; list: the threads, each by its first message, as
// a chat app's sidebar lists them).
import { createRoot } from "react-dom/client";
import { useEffect, useState } from "react";
import { Client } from "@langchain/langgraph-sdk";
import { useStream } from "@langchain/langgraph-sdk/react";

const params = new URLSearchParams(location.search);

function App() {
  const [threadId, setThreadId] = useState(params.get("thread") ?? null);
  const stream = useStream({
    apiUrl: params.get("api"),
    assistantId: params.get("assistant") ?? "echo",
    messagesKey: "messages",
    threadId,
    onThreadId: (id) => {
      setThreadId(id);
      const q = new URLSearchParams(location.search);
      q.set("thread", id);
      history.replaceState(null, "", "?" + q.toString());
    },
    reconnectOnMount: params.get("reconnect") !== "0",
  });
  const [threads, setThreads] = useState([]);
  useEffect(() => {
    if (!params.has("list")) return;
    new Client({ apiUrl: params.get("api") }).threads.search({ limit: 50, sortBy: "created_at", sortOrder: "desc" })
      .then((found) => setThreads(found.map((t) => ({ id: t.thread_id, first: t.values?.messages?.[0]?.content ?? t.thread_id }))));
  }, []);
  useEffect(() => {
    if (!params.has("watch") || !threadId) return;
    new Client({ apiUrl: params.get("api") }).runs.list(threadId, { status: "running", limit: 1 })
      .then(([run]) => run && stream.joinStream(run.run_id));
  }, [threadId]);
  const send = (e) => {
    e.preventDefault();
    const text = e.target.elements.q.value;
    stream.submit(
      { messages: [{ type: "human", content: text }] },
      { config: { configurable: { token_delay_ms: Number(params.get("delay") ?? 0) } }, streamResumable: true },
    );
  };
  return (
    <main>
      <form onSubmit={send}>
        <input name="q" id="q" />
        <button id="send">send</button>
      </form>
      <p id="loading">{stream.isLoading ? "streaming" : "idle"}</p>
      <ul id="messages">
        {stream.messages.map((m) => (
          <li key={m.id} className={m.type}>{typeof m.content === "string" ? m.content : JSON.stringify(m.content)}</li>
        ))}
      </ul>
      {stream.interrupt ? (
        <div id="interrupt">
          <span id="question">{stream.interrupt.value?.question}</span>
          <button id="approve" onClick={() => stream.submit(undefined, { command: { resume: { approved: true } } })}>approve</button>
        </div>
      ) : null}
      <ul id="threads">
        {threads.map((t) => (
          <li key={t.id} data-thread={t.id}>{t.first}</li>
        ))}
      </ul>
      <p id="error">{stream.error ? String(stream.error.message ?? stream.error) : ""}</p>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<App />);
