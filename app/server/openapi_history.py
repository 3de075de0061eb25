"""A user's history routes described (``app/server/history_routes.py``, issue 25): the
conversation list, rename and delete; run lookup and list; feedback. Request bodies
come from the structs that decode them (``app/server/history_request.py``)."""

from __future__ import annotations

from typing import Any

from app.server.chat_request import CONVERSATION_ID_PATTERN
from app.server.history_request import feedback_schema, rename_schema
from app.server.history_routes import DEFAULT_LIMIT, MAX_LIMIT
from app.server.openapi import ApiContribution, json_body, json_response, path_param, problem, query, schema_ref

RUN_STATUSES = ("queued", "running", "completed", "failed", "cancelled", "interrupted", "waiting_approval")


def _paging(what: str) -> list[dict[str, Any]]:
    return [
        query(
            "limit",
            {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
            f"How many {what} per page.",
        ),
        query(
            "cursor",
            {"type": "string", "maxLength": 512},
            "`next_cursor` of the previous page (opaque); omitted: the first page.",
        ),
    ]


def history_api() -> ApiContribution:
    unauthenticated = problem("No valid bearer token (`AGENT_AUTH=jwt`)", authenticate=True)
    bad_page = problem(
        "`limit` out of range, or a `cursor` this server did not give (`invalid_field`, `invalid_cursor`)"
    )
    # PATCH and DELETE refuse an id not of this form with 400 (GET, in openapi_paths, reads it as not found).
    conversation_id = path_param(
        "conversation_id", {"type": "string", "pattern": CONVERSATION_ID_PATTERN}, "The conversation (yours)."
    )
    run_id = path_param("run_id", {"type": "string"}, "The run (`run_…`).")
    no_conversation = problem("No such conversation of yours (`not_found`): another user's id reads the same")
    no_run = problem("No such run of yours (`not_found`): another user's run reads the same")
    body_refused = problem("The body or a field is invalid (`invalid_json`, `invalid_request`, `invalid_field`; "
                           "`unknown_field`: a member the body does not have)")
    paths: dict[str, dict[str, Any]] = {
        "/v1/agent/conversations": {
            "get": {
                "tags": ["history"],
                "operationId": "listConversations",
                "summary": "Your conversations, newest first (by last update)",
                "parameters": _paging("conversations"),
                "responses": {
                    "200": json_response("A page", schema_ref("ConversationList")),
                    "400": bad_page,
                    "401": unauthenticated,
                },
            }
        },
        "/v1/agent/conversations/{conversation_id}": {
            "patch": {
                "tags": ["history"],
                "operationId": "renameConversation",
                "summary": "Set a conversation's title",
                "parameters": [conversation_id],
                "requestBody": json_body(schema_ref("RenameConversationRequest")),
                "responses": {
                    "200": json_response("The conversation", schema_ref("ConversationSummary")),
                    "400": body_refused,
                    "401": unauthenticated,
                    "404": no_conversation,
                    "413": problem("The body is too large (`payload_too_large`)"),
                },
            },
            "delete": {
                "tags": ["history"],
                "operationId": "deleteConversation",
                "summary": "Delete a conversation and everything of it",
                "description": "Its live runs are cancelled first, on whichever replica executes them, and "
                "their endings awaited; then its messages, runs, event logs, tool-call log rows and the "
                "drafts it started are removed. Keywords and saved web answers it produced stay yours, "
                "without the link.",
                "parameters": [conversation_id],
                "responses": {
                    "204": {"description": "Deleted"},
                    "400": problem("A malformed id (`invalid_field`)"),
                    "401": unauthenticated,
                    "404": no_conversation,
                    "503": problem("A run of it is still ending (`conversation_busy`): retry", retry_after=True),
                },
            },
        },
        "/v1/agent/runs": {
            "get": {
                "tags": ["history"],
                "operationId": "listRuns",
                "summary": "Your runs, newest first",
                "parameters": [
                    query(
                        "conversation_id",
                        {"type": "string", "pattern": CONVERSATION_ID_PATTERN},
                        "Only this conversation's runs.",
                    ),
                    *_paging("runs"),
                ],
                "responses": {
                    "200": json_response("A page", schema_ref("RunList")),
                    "400": bad_page,
                    "401": unauthenticated,
                },
            }
        },
        "/v1/agent/runs/{run_id}": {
            "get": {
                "tags": ["history"],
                "operationId": "getRun",
                "summary": "A run: status, timestamps, turns, usage, tool calls, ending, feedback",
                "parameters": [run_id],
                "responses": {
                    "200": json_response("The run", schema_ref("RunInfo")),
                    "401": unauthenticated,
                    "404": no_run,
                },
            }
        },
        "/v1/agent/runs/{run_id}/feedback": {
            "post": {
                "tags": ["history"],
                "operationId": "postRunFeedback",
                "summary": "Thumbs up or down on a finished run (a second post replaces the first)",
                "parameters": [run_id],
                "requestBody": json_body(schema_ref("RunFeedbackRequest")),
                "responses": {
                    "200": json_response("The run with its feedback", schema_ref("RunInfo")),
                    "400": body_refused,
                    "401": unauthenticated,
                    "404": no_run,
                    "409": problem("The run has not ended (`run_not_finished`)"),
                    "413": problem("The body is too large (`payload_too_large`)"),
                },
            }
        },
    }
    number = {"type": "number", "description": "Unix seconds."}
    maybe_number = {"type": ["number", "null"], "description": "Unix seconds."}
    summary = {
        "type": "object",
        "required": ["id", "title", "created_at", "updated_at", "last_run_status"],
        "properties": {
            "id": {"type": "string"},
            "title": {"type": ["string", "null"], "description": "Set from the first question; yours to rename."},
            "created_at": number,
            "updated_at": number,
            "last_run_status": {"type": ["string", "null"], "description": "The newest run's status."},
        },
    }
    run_info = {
        "type": "object",
        "required": ["run_id", "conversation_id", "status", "created_at", "feedback"],
        "properties": {
            "run_id": {"type": "string"},
            "conversation_id": {"type": "string"},
            "context_type": {"type": "string"},
            "status": {"enum": list(RUN_STATUSES)},
            "created_at": number,
            "started_at": maybe_number,
            "finished_at": maybe_number,
            "turns": {"type": ["integer", "null"]},
            "usage": {
                "type": ["object", "null"],
                "properties": {"input_tokens": {"type": "integer"}, "output_tokens": {"type": "integer"}},
            },
            "tool_call_count": {"type": ["integer", "null"]},
            "resumes": {"type": "integer"},
            "ending": {
                "type": ["object", "null"],
                "description": "`null` while the run has not ended.",
                "properties": {
                    "status": {"type": "string"},
                    "error": {"type": ["object", "null"], "description": "The last `error` event's data."},
                },
            },
            "feedback": {
                "type": ["object", "null"],
                "properties": {"score": {"enum": [1, -1]}, "comment": {"type": ["string", "null"]}, "at": number},
            },
            "events_compacted": {
                "type": "boolean",
                "description": "Its event log was compacted (retention): same text, fewer events.",
            },
        },
    }
    cursor = {"type": ["string", "null"], "description": "Pass as `cursor` for the next page; `null`: the last."}
    schemas = {
        "ConversationSummary": summary,
        "ConversationList": {
            "type": "object",
            "required": ["conversations", "next_cursor"],
            "properties": {
                "conversations": {"type": "array", "items": schema_ref("ConversationSummary")},
                "next_cursor": cursor,
            },
        },
        "RunInfo": run_info,
        "RunList": {
            "type": "object",
            "required": ["runs", "next_cursor"],
            "properties": {"runs": {"type": "array", "items": schema_ref("RunInfo")}, "next_cursor": cursor},
        },
        "RenameConversationRequest": rename_schema(),
        "RunFeedbackRequest": feedback_schema(),
    }
    tags = [{"name": "history", "description": "Your conversations and runs: list, look up, rename, delete, feedback."}]
    return ApiContribution(paths=paths, schemas=schemas, tags=tags)


__all__ = ["history_api"]
