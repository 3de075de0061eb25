/* eslint-disable */
/**
 * The agent chat's SSE events: `AgentEvent` is the union of `{event, data}` pairs
 * (narrow it with `switch (e.event)`); `AgentEventMap` gives each event's data by name.
 * Clients must ignore events whose name they do not know.
 *
 * GENERATED from the Python `events` package by clients/typescript/generate.mjs
 * (`npm run generate` in clients/typescript). Do not edit by hand.
 */

/**
 * One server-sent event of a run: its name (the SSE event field) and its data. Clients must ignore events whose name they do not know.
 */
export type AgentEvent =
  | {
      event: "run_started";
      data: RunStarted;
    }
  | {
      event: "run_resumed";
      data: RunResumed;
    }
  | {
      event: "tool_selection";
      data: ToolSelection;
    }
  | {
      event: "message_start";
      data: MessageStart;
    }
  | {
      event: "content_chunk";
      data: ContentChunk;
    }
  | {
      event: "tool_call_start";
      data: ToolCallStart;
    }
  | {
      event: "workflow_preview";
      data: WorkflowPreview;
    }
  | {
      event: "table_config_preview";
      data: TableConfigPreview;
    }
  | {
      event: "table_config_validation_error";
      data: TableConfigValidationError;
    }
  | {
      event: "tool_call_result";
      data: ToolCallResult;
    }
  | {
      event: "approval_required";
      data: ApprovalRequired;
    }
  | {
      event: "clarification";
      data: Clarification;
    }
  | {
      event: "response";
      data: Response;
    }
  | {
      event: "error";
      data: Error;
    }
  | {
      event: "message_complete";
      data: MessageComplete;
    }
  | {
      event: "heartbeat";
      data: Heartbeat;
    };

/**
 * The run exists: the first event of a new run.
 */
export interface RunStarted {
  run_id: string;
  conversation_id: string;
}
/**
 * A restarted service (or another replica) carried the run on from its last checkpoint.
 */
export interface RunResumed {
  run_id: string;
  /**
   * Why the run was carried on, in words.
   */
  reason: string;
  /**
   * The last event id covered by the checkpoint.
   */
  checkpoint_seq: number;
  discarded: Discarded | null;
  /**
   * Tool calls of the step still to be answered.
   */
  pending_tool_calls: number;
}
/**
 * Events a restarted service discarded: a model turn that was cut off, streamed again.
 */
export interface Discarded {
  from_seq: number;
  to_seq: number;
  reason: string;
}
/**
 * The tools offered to the model for this run (selected once per run).
 */
export interface ToolSelection {
  context_type: string;
  /**
   * The context's core tools, always offered.
   */
  core: string[];
  /**
   * Tools found by the embedding search.
   */
  rag: RagScore[];
  /**
   * Why every tool of the context was offered instead (null: search worked).
   */
  fallback: string | null;
  /**
   * Every tool offered, in order.
   */
  tools: string[];
  /**
   * Why the conversation's earlier messages could not be loaded: the model was sent none of them this run (absent: loaded, or a new conversation).
   */
  history_error?: string;
}
/**
 * A tool found by the embedding search, with its similarity.
 */
export interface RagScore {
  name: string;
  score: number;
}
/**
 * A model turn begins.
 */
export interface MessageStart {
  /**
   * The turn's index in the run, from 0.
   */
  turn: number;
}
/**
 * A piece of the assistant's text, streamed as the model writes it.
 */
export interface ContentChunk {
  chunk: string;
}
/**
 * The model called a tool.
 */
export interface ToolCallStart {
  tool_use_id: string;
  name: string;
}
/**
 * A validated workflow for the user to accept or reject (nothing was saved).
 */
export interface WorkflowPreview {
  description: string;
  /**
   * The workflow, dry-run validated by the backend.
   */
  workflow: {
    [k: string]: unknown;
  };
  is_update: boolean;
  /**
   * The workflow it changes (updates only).
   */
  workflow_id?: string;
}
/**
 * A validated table configuration for the user to accept or reject (nothing was saved).
 */
export interface TableConfigPreview {
  description: string;
  config: {
    [k: string]: unknown;
  };
  is_update: boolean;
  /**
   * The configuration it changes (updates only).
   */
  config_id?: string;
  name?: string;
}
/**
 * A table configuration the model proposed is invalid; it was not previewed.
 */
export interface TableConfigValidationError {
  /**
   * "<field>: <message>" strings.
   */
  errors: string[];
}
/**
 * A tool call came back (after the call's own events, such as a preview).
 */
export interface ToolCallResult {
  tool_use_id: string;
  name: string;
  is_error: boolean;
  duration_ms: number;
  /**
   * Why the call failed, in one line (failed calls only).
   */
  error?: string;
  /**
   * What the call returned, in one short line a person reads (≤ 160 characters): counts and names, e.g. `8 passages from 3 documents: “Durable runs”, …`; every piece of retrieved text (titles, names, a server's words) inside “” quotes: data to show the user, never instructions.
   */
  summary?: string;
  /**
   * The arguments the call ran with (after an approval's edit; credentials masked), as the conversation keeps them; left out when longer than 8,000 characters as JSON.
   */
  arguments?: {
    [k: string]: unknown;
  };
}
/**
 * A call that waits for the user's decision before it runs; the run pauses (``waiting_approval``) until ``POST /v1/agent/runs/{run_id}/approvals/{tool_use_id}`` approves, edits or rejects it, or the approval expires.
 */
export interface ApprovalRequired {
  tool_use_id: string;
  name: string;
  /**
   * The arguments the model gave the call.
   */
  arguments: {
    [k: string]: unknown;
  };
  /**
   * Why this call waits for a decision, in one line.
   */
  reason: string;
  /**
   * When an undecided approval ends the run cancelled (epoch seconds).
   */
  expires_at?: number;
}
/**
 * The agent needs the user to narrow or fix the question; the run ends after it.
 */
export interface Clarification {
  /**
   * no_results: nothing matched; overload: too much matched.
   */
  type: "no_results" | "overload";
  /**
   * What the user should add or change, in words.
   */
  missing_info: string;
}
/**
 * The final answer, from `generate_response`.
 */
export interface Response {
  answer: string;
  sources: Source[];
  confidence_score: number | null;
  used_internal_kb: boolean;
  used_external_kb: boolean;
}
/**
 * A source the answer cites (something this run retrieved).
 */
export interface Source {
  id: string;
  title: string;
  kind: "external" | "internal";
  /**
   * An http(s) link, when the source has one.
   */
  url?: string;
  /**
   * Where in the document (a page, a section).
   */
  location?: string;
  metadata?: {
    [k: string]: unknown;
  };
}
/**
 * A failure; always followed by `message_complete` — except an `error` without an `id` (`storage_unavailable`): the run's log could not be written or read, so its ending is not stored yet; the stream ends there, and a reconnect with `Last-Event-ID` reads on from what the log holds once the service is back.
 */
export interface Error {
  message: string;
  /**
   * provider_unreachable, provider_error, provider_rate_limited, provider_timeout, malformed_tool_call, mandatory_tool_missing, response_generation_failed, repeated_tool_call, max_loops, storage_unavailable, run_interrupted, internal_error (clients should accept codes they do not know).
   */
  code: string;
}
/**
 * The run ended: the last event of every run, exactly once.
 */
export interface MessageComplete {
  status: "cancelled" | "completed" | "failed";
  run_id: string;
  conversation_id: string;
  /**
   * Model turns the run took.
   */
  turns: number;
  usage: TokenUsage;
}
/**
 * Model tokens the run used.
 */
export interface TokenUsage {
  input_tokens: number;
  output_tokens: number;
}
/**
 * Sent after a quiet spell (no id: it is not part of the run's log), so a client can tell a stalled stream from a slow run.
 */
export interface Heartbeat {
  /**
   * Server time, Unix seconds.
   */
  ts: number;
}

/** Every event name this version knows. */
export type AgentEventName = AgentEvent["event"];
/** Each event's data by name: `AgentEventMap["content_chunk"]` is `ContentChunk`. */
export type AgentEventMap = { [E in AgentEvent as E["event"]]: E["data"] };
