// Drive the `ai` package (Vercel AI SDK) against the agent's UI message stream and report
// what it assembled.
//
//   node ai_sdk_client.mjs '<json spec>'
//
// spec.mode:
//   "reader"  POST spec.url with spec.body (GET without a body when spec.method is "GET"); the response is read with the SDK's own
//             parseJsonEventStream + uiMessageChunkSchema (every chunk validated) and
//             assembled by readUIMessageStream. With spec.onCue, the request waits for
//             one line on stdin first (the script loaded, so the request is made at once).
//   "chat"    what useChat does: a Chat (AbstractChat with a plain state) over
//             DefaultChatTransport({api: spec.api, body: spec.body}); sendMessage(spec.text)
//             unless spec.text is absent; then, for each line "resume" read from stdin,
//             chat.resumeStream() (what useChat({resume: true}) calls on mount), for
//             "send <text>" sendMessage, for "regenerate [messageId]" chat.regenerate(),
//             for "edit <index> <text>" sendMessage({text, messageId}) replacing the
//             message at that index (what a UI's edit button does), for each
//             line "approve [reason]" / "reject [reason]", addToolApprovalResponse on the
//             waiting tool part (the chat sends it by itself, sendAutomaticallyWhen:
//             lastAssistantMessageIsCompleteWithApprovalResponses, as a useChat app does)
//             and the wait for that request's end, until stdin closes.
//
// Every line on stdout is one JSON record:
//   {kind: "ready"}                             waiting for its cue (reader with spec.onCue)
//   {kind: "response", status, headers}         the raw response (reader)
//   {kind: "chunk", chunk}                      a validated chunk (reader)
//   {kind: "message", message}                  the assembled UI message (reader: the last snapshot)
//   {kind: "update", id, text}                  the assistant message changed (chat): its text so far
//   {kind: "data", part}                        a transient data part (chat: onData)
//   {kind: "error", message}                    the SDK reported an error (chat: onError)
//   {kind: "finish", isAbort, isDisconnect, isError, finishReason, message}   (chat: onFinish)
//   {kind: "state", status, error, messages}    the chat's state after a request (chat)
//   {kind: "done"}                              the script is finished
// The test (tests/test_ai_sdk_stream.py) asserts on these records.

import readline from "node:readline";
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  parseJsonEventStream,
  readUIMessageStream,
  uiMessageChunkSchema,
} from "ai";

const spec = JSON.parse(process.argv[2]);
const out = (record) => process.stdout.write(JSON.stringify(record) + "\n");

async function reader() {
  if (spec.onCue) {
    out({ kind: "ready" });
    const lines = readline.createInterface({ input: process.stdin });
    for await (const _ of lines) break;
  }
  const get = spec.method === "GET"; // the resume request useChat({resume: true}) makes
  const response = await fetch(spec.url, {
    method: get ? "GET" : "POST",
    headers: { ...(get ? {} : { "content-type": "application/json" }), ...(spec.headers ?? {}) },
    body: get ? undefined : JSON.stringify(spec.body),
  });
  out({ kind: "response", status: response.status, headers: Object.fromEntries(response.headers) });
  const parsed = parseJsonEventStream({ stream: response.body, schema: uiMessageChunkSchema });
  const chunks = parsed.pipeThrough(
    new TransformStream({
      transform(result, controller) {
        if (!result.success) throw result.error; // a chunk the SDK's schema refuses
        out({ kind: "chunk", chunk: result.value });
        controller.enqueue(result.value);
      },
    }),
  );
  let last;
  for await (const message of readUIMessageStream({
    stream: chunks,
    terminateOnError: false,
    onError: (error) => out({ kind: "error", message: String(error?.message ?? error) }),
  })) {
    last = message;
  }
  out({ kind: "message", message: last });
}

// The state a UI framework keeps (React's useChat keeps the same in React state).
class PlainState {
  constructor(messages = []) {
    this.status = "ready";
    this.error = undefined;
    this.messages = messages;
  }
  pushMessage(message) {
    this.messages = [...this.messages, message];
    this.report(message);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
    this.report(message);
  }
  report(message) {
    if (message.role === "assistant") {
      const text = message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
      out({ kind: "update", id: message.id, text });
    }
  }
  snapshot(value) {
    return structuredClone(value);
  }
}

class Chat extends AbstractChat {
  constructor({ messages, ...options }) {
    super({ ...options, state: new PlainState(messages) });
  }
}

async function chat() {
  let finished = () => {};
  const session = new Chat({
    id: spec.chatId,
    messages: spec.messages ?? [],
    transport: new DefaultChatTransport({ api: spec.api, body: spec.body ?? {}, headers: spec.headers ?? {} }),
    onData: (part) => out({ kind: "data", part }),
    onError: (error) => out({ kind: "error", message: String(error?.message ?? error) }),
    onFinish: ({ isAbort, isDisconnect, isError, finishReason, message }) => {
      out({ kind: "finish", isAbort, isDisconnect, isError, finishReason: finishReason ?? null, message });
      finished();
    },
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const state = () =>
    out({ kind: "state", status: session.status, error: session.error?.message ?? null, messages: session.messages });
  if (spec.text !== undefined) {
    await session.sendMessage({ text: spec.text });
    state();
  }
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    const [command, ...rest] = line.trim().split(" ");
    if (command === "resume") {
      await session.resumeStream();
      state();
    } else if (command === "send") {
      await session.sendMessage({ text: rest.join(" ") });
      state();
    } else if (command === "regenerate") {
      await session.regenerate(rest.length ? { messageId: rest[0] } : {});
      state();
    } else if (command === "edit") {
      const [index, ...words] = rest;
      await session.sendMessage({ text: words.join(" "), messageId: session.messages[Number(index)].id });
      state();
    } else if (command === "approve" || command === "reject") {
      const waiting = session.messages
        .flatMap((m) => m.parts)
        .filter((p) => p.state === "approval-requested" && p.approval);
      const part = waiting[waiting.length - 1];
      if (!part) {
        out({ kind: "error", message: "no tool part waits for an approval" });
        continue;
      }
      const done = new Promise((resolve) => (finished = resolve));
      await session.addToolApprovalResponse({
        id: part.approval.id,
        approved: command === "approve",
        reason: rest.length ? rest.join(" ") : undefined,
      });
      await done;
      state();
    }
  }
}

try {
  await (spec.mode === "reader" ? reader() : chat());
} catch (error) {
  out({ kind: "error", message: String(error?.message ?? error) });
}
out({ kind: "done" });
