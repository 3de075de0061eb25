"""The built-in routes, described: one ``ApiContribution`` per route module (the
knowledge-base and admin routes in ``app/server/openapi_kb.py``).

The chat body's schema is generated from the struct that decodes it
(``app/server/chat_request.py``); the rest mirrors the checks its route makes (``_after``,
``app/server/bounds.py``, the KB and admin routes), so a client generated from the document
sends what the server accepts, and the statuses listed are the ones the route can answer
(schemathesis checks both against a live server).
"""

from __future__ import annotations

from typing import Any

from app.config import Settings
from app.server.bounds import MAX_SAFE_INTEGER
from app.server.chat_request import chat_request_schema
from app.server.openapi import (
    ApiContribution,
    header,
    json_body,
    json_response,
    path_param,
    problem,
    public,
    query,
    schema_ref,
    sse_response,
)
from app.server.openapi_approvals import approvals_api
from app.server.openapi_attachments import attachments_api
from app.server.openapi_history import history_api
from app.server.openapi_kb import kb_api

RUN_STATUSES = ("queued", "running", "completed", "failed", "cancelled", "interrupted", "waiting_approval")
EVENT_ID = {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER}


def _admission() -> dict[str, Any]:
    """What can refuse a request that starts a run, before anything streams."""
    return {
        "400": problem("The body, a field or a header is invalid (`invalid_json`, `invalid_field`, "
                       "`unknown_field`: a member the body does not have, "
                       "`unknown_context_type`, `invalid_header`, `too_deep`, `number_out_of_range`), or "
                       "`context.buckets` names a bucket that does not exist (`unknown_bucket`; the detail "
                       "lists the buckets that do)"),
        "401": problem("No valid bearer token (`AGENT_AUTH=jwt`)", authenticate=True),
        "408": problem("The body did not arrive within `AGENT_BODY_TIMEOUT_S` (`body_timeout`)"),
        "409": problem("A run of this conversation is in progress and `multitask` is `reject` "
                       "(`conversation_busy`); a run of it waits for an approval and `multitask` is not "
                       "`interrupt` (`approval_pending`: the answer names `run_id`, `tool_use_id`, `tool_name` "
                       "and `decide_url`); or a concurrent retry (`idempotency_conflict`)"),
        "413": problem("The body is larger than `AGENT_MAX_BODY_BYTES` (`payload_too_large`)"),
        "422": problem("This `Idempotency-Key` was used for a different request: another message, context "
                       "type, context or conversation (`idempotency_key_reused`)"),
        "429": problem("Too many requests (`rate_limited`) or runs in progress for this user (`too_many_runs`)",
                       retry_after=True),
        "503": problem("The server is restarting (`shutting_down`), cannot store runs (`storage_unavailable`) "
                       "or is past what it can serve (`replica_busy`: live-run cap or a lasting event-loop lag)",
                       retry_after=True),
    }


def _idempotency_key() -> dict[str, Any]:
    return header(
        "Idempotency-Key",
        {"type": "string", "pattern": r"^[\x21-\x7e]{1,255}$"},
        "Repeat a request safely: the same key (per user) with the same request answers with the run it "
        "started; with a different request, 422 `idempotency_key_reused`.",
    )


def _last_event_id(what: str) -> dict[str, Any]:
    return header("Last-Event-ID", EVENT_ID, what)


def _run_links() -> dict[str, Any]:
    """Where a started run's ids lead (OpenAPI links: for readers and for stateful testers)."""
    run = {"run_id": "$response.body#/run_id"}
    return {
        "events": {"operationId": "streamRunEvents", "parameters": run, "description": "Read the run."},
        "cancel": {"operationId": "cancelRun", "parameters": run, "description": "Stop the run."},
        "conversation": {
            "operationId": "getConversation",
            "parameters": {"conversation_id": "$response.body#/conversation_id"},
            "description": "The run's conversation.",
        },
    }


def agent_api(settings: Settings) -> ApiContribution:
    """``app/server/http.py``: chat, runs, their events, cancel, conversations."""
    run_id = path_param("run_id", {"type": "string"}, "The run (`run_…` from `POST /v1/agent/runs`).")
    not_found_run = problem("No such run of yours (`not_found`)")
    unauthenticated = problem("No valid bearer token (`AGENT_AUTH=jwt`)", authenticate=True)
    chat_body = json_body(schema_ref("ChatRequest"))
    paths: dict[str, dict[str, Any]] = {
        "/v1/agent/chat": {
            "post": {
                "tags": ["runs"],
                "operationId": "chat",
                "summary": "Start a run and stream its events",
                "description": "The native route: the response is the run's event stream. A retry of the same "
                "request resumes its run instead "
                "of starting another: with the same `Idempotency-Key`, or with `Last-Event-ID` and the same "
                "body. Without a key, the run is cancelled when the client leaves and does not come back "
                "within `AGENT_CHAT_REATTACH_S`.",
                "parameters": [
                    _idempotency_key(),
                    _last_event_id("On a retry: the last event id seen; the stream resumes after it."),
                ],
                "requestBody": chat_body,
                "responses": {
                    "200": sse_response("The run's events; a retry of a finished run with nothing newer "
                                        "answers with an empty stream"),
                    **_admission(),
                },
            }
        },
        "/v1/agent/runs": {
            "post": {
                "tags": ["runs"],
                "operationId": "createRun",
                "summary": "Start a run; read it from `stream_url`",
                "parameters": [_idempotency_key()],
                "requestBody": chat_body,
                "responses": {
                    "201": {**json_response("The run started", schema_ref("RunCreated")), "links": _run_links()},
                    "200": {**json_response("A repeat with the same `Idempotency-Key`: the run it started",
                                            schema_ref("RunCreated")), "links": _run_links()},
                    **_admission(),
                },
            }
        },
        "/v1/agent/runs/{run_id}/events": {
            "get": {
                "tags": ["runs"],
                "operationId": "streamRunEvents",
                "summary": "A run's events: replayed from a point, then live",
                "description": "Resume with `Last-Event-ID` (what `EventSource` sends) or `?after=`. A browser "
                "`EventSource` cannot send headers: it uses `stream_url`, whose `token` authorises this run.",
                "security": [{"bearerAuth": []}, {}],
                "parameters": [
                    run_id,
                    query("token", {"type": "string"}, "The stream token of `stream_url` (instead of a bearer "
                          "token); ignored with `AGENT_AUTH=none`."),
                    query("after", EVENT_ID, "Send the events after this id (0: all)."),
                    _last_event_id("The last event id seen; wins over `after`."),
                ],
                "responses": {
                    "200": sse_response("The events after the given id; live ones follow until `message_complete`"),
                    "204": {"description": "The run has ended and every event was seen: stop reconnecting"},
                    "400": problem("`Last-Event-ID` or `after` is not an integer in range (`invalid_field`)"),
                    "401": problem("No valid bearer or stream token (`unauthenticated`)"),
                    "404": not_found_run,
                    "503": problem("The server is shutting down and will not follow this unfinished run to its "
                                   "end (`shutting_down`): reconnect after `Retry-After`", retry_after=True),
                },
            }
        },
        "/v1/agent/runs/{run_id}/cancel": {
            "post": {
                "tags": ["runs"],
                "operationId": "cancelRun",
                "summary": "Stop a run (idempotent)",
                "description": "The run ends with `message_complete` (`cancelled`); a finished run keeps its status. "
                "Any replica accepts it: the cancel is stored and reaches the replica executing the run (or the "
                "next to claim it); the answer waits a few seconds for the ending.",
                "parameters": [run_id],
                "responses": {
                    "200": json_response("The run's status now", schema_ref("RunStatus")),
                    "202": json_response(
                        "`cancelling`: the cancel is stored; the run has not ended yet", schema_ref("RunStatus")
                    ),
                    "401": unauthenticated,
                    "404": not_found_run,
                },
            }
        },
        "/v1/agent/conversations/{conversation_id}": {
            "get": {
                "tags": ["history"],
                "operationId": "getConversation",
                "summary": "A conversation's messages (owner only)",
                "parameters": [path_param("conversation_id", {"type": "string"}, "The conversation.")],
                "responses": {
                    "200": json_response("The messages, oldest first", schema_ref("Conversation")),
                    "401": unauthenticated,
                    "404": problem("No such conversation of yours (`not_found`)"),
                },
            }
        },
    }
    schemas = {
        "ChatRequest": chat_request_schema(settings.max_message_chars),
        "RunCreated": {
            "type": "object",
            "required": ["run_id", "conversation_id", "stream_url"],
            "properties": {
                "run_id": {"type": "string"},
                "conversation_id": {"type": "string"},
                "stream_url": {"type": "string", "description": "Events of the run, with a short-lived "
                               "signed `token` so a browser `EventSource` (no headers) can read it."},
            },
        },
        "RunStatus": {
            "type": "object",
            "required": ["run_id", "status"],
            "properties": {"run_id": {"type": "string"}, "status": {"enum": [*RUN_STATUSES, "cancelling"]}},
        },
        "Conversation": {
            "type": "object",
            "required": ["conversation_id", "messages"],
            "properties": {
                "conversation_id": {"type": "string"},
                "messages": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["role", "seq", "created_at"],
                        "description": "A stored message (`user`, `assistant` with its tool calls, `tool` results).",
                        "properties": {
                            "role": {"type": "string"},
                            "content": {},
                            "seq": {"type": "integer"},
                            "created_at": {"type": "number", "description": "Unix seconds."},
                        },
                    },
                },
            },
        },
    }
    tags = [{"name": "runs", "description": "Start runs, read their events, cancel them; conversations."}]
    return ApiContribution(paths=paths, schemas=schemas, tags=tags)


def operations_api() -> ApiContribution:
    """Health, readiness and metrics (``app/server/http.py``)."""
    readiness = schema_ref("Readiness")
    paths = {
        "/healthz": {"get": {
            "tags": ["operations"], "operationId": "healthz", "summary": "Liveness", "security": public(),
            "responses": {"200": json_response("Alive", {
                "type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}}})},
        }},
        "/readyz": {"get": {
            "tags": ["operations"], "operationId": "readyz", "security": public(),
            "summary": "Readiness: provider, database, tool index, knowledge base, backend",
            "responses": {"200": json_response("Ready", readiness),
                          "503": json_response("Not ready; `checks` say why", readiness)},
        }},
        "/metrics": {"get": {
            "tags": ["operations"], "operationId": "metrics", "summary": "Prometheus metrics", "security": public(),
            "responses": {"200": {"description": "The Prometheus text format",
                                  "content": {"text/plain": {"schema": {"type": "string"}}}}},
        }},
    }
    schemas = {"Readiness": {
        "type": "object",
        "required": ["ready", "checks"],
        "properties": {
            "ready": {"type": "boolean"},
            "checks": {"type": "object", "additionalProperties": {
                "type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}},
        },
    }}
    tags = [{"name": "operations", "description": "For load balancers and monitoring."}]
    return ApiContribution(paths=paths, schemas=schemas, tags=tags)


def pages_api() -> ApiContribution:
    """The playground (``app/server/playground.py``)."""
    not_found = problem("No such file (`not_found`)")
    paths = {
        "/": {"get": {
            "tags": ["pages"], "operationId": "playground", "summary": "The playground page", "security": public(),
            "responses": {"200": {"description": "The page", "content": {"text/html": {"schema": {"type": "string"}}}}},
        }},
        "/favicon.ico": {"get": {
            "tags": ["pages"], "operationId": "favicon", "summary": "The icon", "security": public(),
            "responses": {"200": {"description": "An SVG",
                                  "content": {"image/svg+xml": {"schema": {"type": "string"}}}}},
        }},
        "/static/{path}": {"get": {
            "tags": ["pages"], "operationId": "staticFile", "summary": "The pages' scripts, styles and icon",
            "security": public(),
            "parameters": [path_param("path", {"type": "string", "minLength": 1}, "A file name.")],
            "responses": {
                "200": {"description": "The file", "content": {
                    media: {"schema": {"type": "string"}}
                    for media in ("text/javascript", "text/css", "image/svg+xml", "text/html")
                }},
                "404": not_found,
            },
        }},
    }
    tags = [{"name": "pages", "description": "What a browser loads."}]
    return ApiContribution(paths=paths, tags=tags)


def builtin_api(settings: Settings) -> list[ApiContribution]:
    """Every built-in route module's contribution, in the order the docs show them."""
    return [
        agent_api(settings),
        history_api(),
        attachments_api(),
        approvals_api(),
        kb_api(),
        operations_api(),
        pages_api(),
    ]
