"""The OpenAPI description of the ecosystem faces (``app/server/openai_compat.py``,
``app/server/ai_sdk_stream.py``), mirroring what those routes check and answer.

Their streams are not run events: each frame is an unnamed SSE ``message`` whose ``data``
is one JSON chunk (an OpenAI ``chat.completion.chunk`` or error, or an AI SDK UI message
chunk) or the closing ``[DONE]``, described here frame by frame as the native stream is.
"""

from __future__ import annotations

from typing import Any

from app.server.ai_sdk_request import ui_chat_request_schema
from app.server.chat_request import CONVERSATION_ID_PATTERN
from app.server.openai_request import completion_request_schema, model_ids
from app.server.openapi import ApiContribution, json_body, json_response, path_param, problem, schema_ref

_ID_HEADERS = {
    "X-Run-Id": {"description": "The run that answers (cancel it with `POST /v1/agent/runs/{run_id}/cancel`).",
                 "schema": {"type": "string"}},
    "X-Conversation-Id": {"description": "The conversation the run belongs to (send it back to continue it).",
                          "schema": {"type": "string"}},
}


def _frames(chunk: dict[str, Any], description: str) -> dict[str, Any]:
    data = {
        "anyOf": [
            {"const": "[DONE]"},
            {"type": "string", "contentMediaType": "application/json", "contentSchema": chunk},
        ]
    }
    frame = {
        "type": "object",
        "required": ["event", "data"],
        "description": description,
        "properties": {"event": {"const": "message"}, "data": data},
    }
    return {"schema": frame, "x-sse-events": {"message": chunk}}


def _openai_error(description: str) -> dict[str, Any]:
    return json_response(description, schema_ref("OpenAIError"))


def openai_api() -> ApiContribution:
    model = schema_ref("OpenAIModel")
    chunk = {"type": "object", "description": "A `chat.completion.chunk` (`agentchat`: a native event riding "
             "on an empty delta) or, after a failure, `{error}`.",
             "properties": {"object": {"const": "chat.completion.chunk"}, "error": schema_ref("OpenAIErrorBody")}}
    unauthenticated = _openai_error("No valid bearer token (`AGENT_AUTH=jwt`)")
    paths: dict[str, dict[str, Any]] = {
        "/v1/models": {"get": {
            "tags": ["openai"], "operationId": "listModels",
            "summary": "OpenAI-compatible: one model per agent context",
            "responses": {
                "200": json_response("The models", {
                    "type": "object", "required": ["object", "data"],
                    "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": model}},
                }),
                "401": unauthenticated,
            },
        }},
        "/v1/models/{model}": {"get": {
            "tags": ["openai"], "operationId": "getModel", "summary": "OpenAI-compatible: one model",
            "parameters": [path_param("model", {"type": "string"}, "A model id from `GET /v1/models`.")],
            "responses": {"200": json_response("The model", model), "401": unauthenticated,
                          "404": _openai_error("No such model (`model_not_found`)")},
        }},
        "/v1/chat/completions": {"post": {
            "tags": ["openai"], "operationId": "createChatCompletion",
            "summary": "OpenAI-compatible chat completion: a run of the agent in the model's context",
            "description": "The last message is the run's question; earlier user/assistant turns are its history "
            "(see docs/compatible-faces.md, OpenAI-compatible endpoints). `stream: true` answers "
            "`chat.completion.chunk`s, then `[DONE]`. Unknown fields are ignored; `max_tokens`, `temperature`, "
            "`tools` and the like are too. In `content` the answer's citations are numbered `[1]`, `[2]` (one per "
            "source, in order of first use) and it ends with a `Sources:` list (number, title, link or file); "
            "`agentchat.citations` maps each number to the run's source ids.",
            "parameters": [{"name": "X-Conversation-Id", "in": "header", "required": False,
                            "description": "Continue this server-side conversation.",
                            "schema": {"type": "string", "pattern": CONVERSATION_ID_PATTERN}}],
            "requestBody": json_body(schema_ref("ChatCompletionRequest")),
            "responses": {
                "200": {"description": "A `chat.completion`, or (stream) its chunks", "headers": _ID_HEADERS,
                        "content": {"application/json": {"schema": schema_ref("ChatCompletion")},
                                    "text/event-stream": _frames(chunk, "One chunk, or `[DONE]`")}},
                "400": _openai_error("The body is invalid (`invalid_json`, `invalid_value`, …; `param` names it), "
                                     "the last message is past `AGENT_MAX_MESSAGE_CHARS` "
                                     "(`string_above_max_length`), "
                                     "or `context.buckets` names an unknown bucket (`unknown_bucket`)"),
                "401": unauthenticated,
                "404": _openai_error("Unknown model (`model_not_found`)"),
                "408": _openai_error("The body did not arrive in time (`body_timeout`)"),
                "409": _openai_error("The conversation is busy (`multitask: reject`), a run of it waits for an "
                                     "approval (`approval_pending`: `error` names `run_id`, `tool_use_id`, "
                                     "`tool_name`, `decide_url`), or the run was cancelled"),
                "413": _openai_error("The body is too large (`payload_too_large`)"),
                "429": _openai_error("Too many requests or runs (`rate_limited`, `too_many_runs`)"),
                "500": _openai_error("The run failed (its error code)"),
                "502": _openai_error("The model provider failed (`provider_…`)"),
                "503": _openai_error("Shutting down or storage unavailable"),
            },
        }},
    }
    error_body = {"type": "object", "required": ["message", "type", "code"], "properties": {
        "message": {"type": "string"}, "type": {"type": "string"},
        "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]},
    }}
    schemas = {
        "OpenAIErrorBody": error_body,
        "OpenAIError": {"type": "object", "required": ["error"],
                        "properties": {"error": schema_ref("OpenAIErrorBody")}},
        "OpenAIModel": {"type": "object", "required": ["id", "object", "created", "owned_by"], "properties": {
            "id": {"enum": model_ids()}, "object": {"const": "model"},
            "created": {"type": "integer"}, "owned_by": {"type": "string"},
        }},
        "ChatCompletionRequest": completion_request_schema(),
        "OpenAICitation": {"type": "object", "required": ["number", "ids"], "properties": {
            "number": {"type": "integer", "minimum": 1, "description": "The `[n]` in `content`."},
            "ids": {"type": "array", "items": {"type": "string"}, "description": "The run's source ids it stands "
                    "for (a document's passages, or one web page)."},
            "title": {"type": "string"}, "url": {"type": "string"}, "location": {"type": "string"},
        }},
        "ChatCompletion": {"type": "object", "required": ["id", "object", "choices"], "properties": {
            "id": {"type": "string"}, "object": {"const": "chat.completion"}, "model": {"type": "string"},
            "choices": {"type": "array", "items": {"type": "object", "properties": {
                "message": {"type": "object", "properties": {"role": {"const": "assistant"},
                                                             "content": {"type": "string"}}},
                "finish_reason": {"type": "string"},
            }}},
            "usage": {"type": ["object", "null"]},
            "agentchat": {"type": "object", "description": "`events`: every native event but `content_chunk`, in "
                          "order; `citations`: what each `[n]` of `content` stands for.", "properties": {
                "events": {"type": "array", "items": {"type": "object"}},
                "citations": {"type": "array", "items": schema_ref("OpenAICitation")},
            }},
        }},
    }
    tags = [{"name": "openai", "description": "The agent as an OpenAI-compatible model (Open WebUI, OpenAI SDKs)."}]
    return ApiContribution(paths=paths, schemas=schemas, tags=tags)


def ai_sdk_api() -> ApiContribution:
    chunk = {"type": "object", "required": ["type"], "description": "A UI message chunk (`start`, `text-delta`, "
             "`tool-input-start`, `source-url`, `data-…`, `finish`, …).", "properties": {"type": {"type": "string"}}}
    stream = {"description": "The UI message stream (`x-vercel-ai-ui-message-stream: v1`)",
              "headers": {"x-vercel-ai-ui-message-stream": {"schema": {"const": "v1"}, "required": True}},
              "content": {"text/event-stream": _frames(chunk, "One chunk, or `[DONE]`")}}
    unauthenticated = problem("No valid bearer token (`AGENT_AUTH=jwt`)", authenticate=True)
    paths: dict[str, dict[str, Any]] = {
        "/v1/agent/ui-stream": {"post": {
            "tags": ["ai-sdk"], "operationId": "uiMessageStream",
            "summary": "Start a run of the chat; stream it as a Vercel AI SDK UI message stream",
            "description": "The body `useChat`'s `DefaultChatTransport` sends, plus `context_type`, `context` "
            "and `multitask`. The last message is the question; the chat's earlier messages are its history "
            "when the server does not know the chat yet. When the last message is the assistant's with a tool "
            "part in state `approval-responded` (`addToolApprovalResponse`), it is the user's decision on the "
            "call the run waits on, applied as `POST /v1/agent/runs/{run_id}/approvals/{tool_use_id}` applies "
            "it, and the continued run is streamed. The last message's `file` parts (`data:` URLs) are stored as "
            "attachments of the chat's conversation before the run starts, with the kinds, limit and errors of "
            "`POST /v1/agent/conversations/{id}/attachments` (a file already attached there is not stored again).",
            "requestBody": json_body(ui_chat_request_schema()),
            "responses": {
                "200": stream,
                "400": problem("The body is invalid (`invalid_json`, `invalid_field`, `unknown_context_type`), "
                               "`context.buckets` names an unknown bucket (`unknown_bucket`), or a `file` part "
                               "is not a `data:` URL (`unsupported_part`), is empty (`empty_file`) or its text "
                               "cannot be read (`unreadable_file`)"),
                "401": unauthenticated,
                "404": problem("A regenerate or an edit names a chat the caller does not have, or an approval "
                               "reply names no run of the caller's in this chat, or no call it waits on "
                               "(`not_found`; another user's chat id reads as one the caller does not have)"),
                "408": problem("The body did not arrive in time (`body_timeout`)"),
                "409": problem("A run of this chat is in progress and `multitask` is `reject`; a run of it waits "
                               "for an approval (`approval_pending`, naming `run_id`, `tool_use_id`, `tool_name`, "
                               "`decide_url`) and `multitask` is not `interrupt`; or an approval "
                               "reply for a call already decided or a run not waiting (`approval_decided`, "
                               "`approval_not_pending`)"),
                "413": problem("The body is too large (`payload_too_large`: `AGENT_MAX_BODY_BYTES` plus one "
                               "attachment as base64), or a `file` part is larger than `AGENT_ATTACHMENT_MAX_BYTES` "
                               "(`file_too_large`)"),
                "415": problem("A `file` part is of a kind attachments cannot be (`unsupported_media_type`: PDF, "
                               "HTML, Markdown and text are)"),
                "429": problem("Too many requests or runs", retry_after=True),
                "503": problem("Shutting down or storage unavailable", retry_after=True),
            },
        }},
        "/v1/agent/ui-stream/{chat_id}/stream": {"get": {
            "tags": ["ai-sdk"], "operationId": "resumeUiMessageStream",
            "summary": "Resume the chat's stream (what `useChat({resume: true})` calls)",
            "parameters": [path_param("chat_id", {"type": "string", "pattern": CONVERSATION_ID_PATTERN},
                                      "The chat id.")],
            "responses": {
                "200": stream,
                "204": {"description": "The chat has no live or just-ended run"},
                "400": problem("The chat id is not one a chat can have (`invalid_field`), as `POST` says it"),
                "401": unauthenticated,
                "503": problem("The server is shutting down and will not follow the chat's unfinished run to its "
                               "end (`shutting_down`): resume after `Retry-After`", retry_after=True),
            },
        }},
    }
    tags = [{"name": "ai-sdk", "description": "The Vercel AI SDK UI message stream (`useChat`)."}]
    return ApiContribution(paths=paths, tags=tags)
