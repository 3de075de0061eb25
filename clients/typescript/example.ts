// How a client uses the generated types (compiled by tests/test_event_types.py with
// `tsc --noEmit --strict`): parse each SSE message into an `AgentEvent` and narrow it by
// name. Unknown names are ignored, as the protocol requires.
import type { AgentEvent, AgentEventMap, AgentEventName } from "./events";

const KNOWN: ReadonlySet<string> = new Set<AgentEventName>([
  "run_started", "run_resumed", "tool_selection", "message_start", "content_chunk",
  "tool_call_start", "workflow_preview", "table_config_preview",
  "table_config_validation_error", "tool_call_result", "clarification", "response",
  "error", "message_complete", "heartbeat",
]);

/** One SSE message (`event:` and `data:`), or `null` for an event this client does not know. */
export function parseEvent(name: string, data: string): AgentEvent | null {
  if (!KNOWN.has(name)) return null;
  return { event: name, data: JSON.parse(data) } as AgentEvent;
}

export interface Transcript {
  text: string;
  tools: string[];
  answer?: AgentEventMap["response"];
  status?: AgentEventMap["message_complete"]["status"];
  errors: string[];
}

export function apply(t: Transcript, e: AgentEvent): Transcript {
  switch (e.event) {
    case "content_chunk":
      return { ...t, text: t.text + e.data.chunk };
    case "tool_call_result":
      return { ...t, tools: [...t.tools, e.data.is_error ? `${e.data.name} (${e.data.error ?? "failed"})` : e.data.name] };
    case "workflow_preview":
      return { ...t, text: t.text + (e.data.workflow_id ?? "new workflow") };
    case "response":
      return { ...t, answer: e.data, text: e.data.sources.map((s) => s.url ?? s.id).join(" ") };
    case "error":
      return { ...t, errors: [...t.errors, `${e.data.code}: ${e.data.message}`] };
    case "message_complete":
      return { ...t, status: e.data.status };
    default:
      return t;
  }
}

export function replay(frames: Array<[string, string]>): Transcript {
  let t: Transcript = { text: "", tools: [], errors: [] };
  for (const [name, data] of frames) {
    const e = parseEvent(name, data);
    if (e !== null) t = apply(t, e);
  }
  return t;
}
