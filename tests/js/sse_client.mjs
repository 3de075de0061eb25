// Drive one of the npm SSE clients against the agent and report what it delivered.
//
//   node sse_client.mjs '<json spec>'
//
// spec: {client: "fetch-event-source" | "eventsource" | "eventsource-parser",
//        url, method?, body?, headers?, maxRetries?, stopOn?}
//
// Every line on stdout is one JSON record, in the order the library produced it:
//   {kind: "open", status, contentType}       a response was opened (fetch-event-source)
//   {kind: "message", id, event, data}          an event as the library delivered it to the app
//   {kind: "retry", ms}                         a retry field (eventsource-parser)
//   {kind: "comment", text}                     a comment (eventsource-parser)
//   {kind: "error", message}                    the library reported an error (and retries)
//   {kind: "close"} / {kind: "done"}            the stream ended / the script is finished
// The test (tests/test_sse_clients.py) asserts on these records.

import { fetchEventSource } from "@microsoft/fetch-event-source";
import { EventSource } from "eventsource";
import { createParser } from "eventsource-parser";

const spec = JSON.parse(process.argv[2]);
const out = (record) => process.stdout.write(JSON.stringify(record) + "\n");
const stopOn = spec.stopOn ?? "message_complete";

// fetch-event-source is written for browsers: it reads `window` and `document`.
globalThis.window ??= globalThis;
globalThis.document ??= { hidden: false, addEventListener() {}, removeEventListener() {} };

async function withFetchEventSource() {
  const controller = new AbortController();
  let errors = 0;
  await fetchEventSource(spec.url, {
    method: spec.method ?? "POST",
    headers: { "content-type": "application/json", ...(spec.headers ?? {}) },
    body: spec.body === undefined ? undefined : JSON.stringify(spec.body),
    signal: controller.signal,
    openWhenHidden: true,
    async onopen(response) {
      out({ kind: "open", status: response.status, contentType: response.headers.get("content-type") });
      if (!response.ok || !(response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
        throw new Error(`unexpected response ${response.status}`);
      }
    },
    onmessage(ev) {
      out({ kind: "message", id: ev.id, event: ev.event, data: ev.data });
      // What applications do with every message; an empty one throws here.
      JSON.parse(ev.data);
      if (ev.event === stopOn) controller.abort();
    },
    onclose() {
      out({ kind: "close" });
    },
    onerror(err) {
      errors += 1;
      out({ kind: "error", message: String(err && err.message ? err.message : err) });
      if (errors > (spec.maxRetries ?? 3)) throw err; // stop retrying
      // undefined: retry after the server's `retry:` interval
    },
  });
}

async function withEventSource() {
  await new Promise((resolve) => {
    const es = new EventSource(spec.url);
    const names = spec.events ?? ["run_started", "tool_selection", "message_start", "content_chunk",
      "tool_call_start", "tool_call_result", "response", "error", "heartbeat", "message_complete"];
    let errors = 0;
    const deliver = (ev) => {
      // EventSource's own connection errors also reach the "error" listener: no data.
      if (ev.type === "error" && ev.data === undefined) return;
      out({ kind: "message", id: ev.lastEventId, event: ev.type, data: ev.data });
      if (ev.type === stopOn) {
        es.close();
        resolve();
      }
    };
    es.onmessage = deliver; // unnamed events (there should be none)
    for (const name of names) es.addEventListener(name, deliver);
    es.onopen = () => out({ kind: "open" });
    es.onerror = (err) => {
      errors += 1;
      out({ kind: "error", message: String(err && err.message ? err.message : "error"), readyState: es.readyState });
      if (es.readyState === EventSource.CLOSED || errors > (spec.maxRetries ?? 3)) {
        es.close();
        resolve();
      }
    };
  });
}

async function withParser() {
  const response = await fetch(spec.url, {
    method: spec.method ?? "POST",
    headers: { "content-type": "application/json", ...(spec.headers ?? {}) },
    body: spec.body === undefined ? undefined : JSON.stringify(spec.body),
  });
  out({ kind: "open", status: response.status, contentType: response.headers.get("content-type") });
  const parser = createParser({
    onEvent: (ev) => out({ kind: "message", id: ev.id, event: ev.event ?? "message", data: ev.data }),
    onRetry: (ms) => out({ kind: "retry", ms }),
    onComment: (text) => out({ kind: "comment", text }),
  });
  const decoder = new TextDecoder();
  for await (const chunk of response.body) parser.feed(decoder.decode(chunk, { stream: true }));
  out({ kind: "close" });
}

const clients = {
  "fetch-event-source": withFetchEventSource,
  eventsource: withEventSource,
  "eventsource-parser": withParser,
};

try {
  await clients[spec.client]();
} catch (err) {
  out({ kind: "error", message: String(err && err.message ? err.message : err), fatal: true });
}
out({ kind: "done" });
