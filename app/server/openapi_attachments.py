"""A conversation's attachments described (``app/server/attachment_routes.py``, issue 25
item 4): upload (multipart), list, remove."""

from __future__ import annotations

from typing import Any

from app.server.attachment_routes import MAX_FORM_FIELDS
from app.server.chat_request import CONVERSATION_ID_PATTERN
from app.server.openapi import ApiContribution, json_response, path_param, problem, schema_ref
from knowledge.attachment_store import MAX_ATTACHMENTS
from knowledge.attachments import MEDIA_TYPES


def attachments_api() -> ApiContribution:
    unauthenticated = problem("No valid bearer token (`AGENT_AUTH=jwt`)", authenticate=True)
    conversation_id = path_param(
        "conversation_id", {"type": "string", "pattern": CONVERSATION_ID_PATTERN}, "The conversation (yours)."
    )
    attachment_id = path_param("attachment_id", {"type": "string"}, "The attachment (`att-…`).")
    no_conversation = problem("No such conversation of yours (`not_found`): another user's id reads the same")
    bad_id = problem("A malformed conversation id (`invalid_field`)")
    kinds = ", ".join(sorted(MEDIA_TYPES))
    paths: dict[str, dict[str, Any]] = {
        "/v1/agent/conversations/{conversation_id}/attachments": {
            "post": {
                "tags": ["attachments"],
                "operationId": "uploadAttachment",
                "summary": "Attach a file to a conversation; its questions search it",
                "description": "The file (a `multipart/form-data` part named `file`) is read by the same "
                f"loaders as the knowledge-base ingest ({kinds}; binary content is refused), chunked and "
                "embedded into a bucket private to this conversation of yours: `knowledge_base_search` in "
                "this conversation searches it along with the configured buckets, and citations name the "
                "file. It is never searched in another conversation or by another user, and is not among "
                "the shared buckets (`GET /v1/kb/buckets`). An id you do not have yet creates that "
                "conversation (as `POST /v1/agent/runs` does), so files may come before the first question. "
                f"At most {MAX_ATTACHMENTS} per conversation; deleting the conversation removes them.",
                "parameters": [conversation_id],
                "requestBody": {
                    "required": True,
                    "content": {
                        "multipart/form-data": {
                            "schema": {
                                "type": "object",
                                "required": ["file"],
                                "properties": {"file": {"type": "string", "format": "binary"}},
                                # Other parts are ignored text fields, at most MAX_FORM_FIELDS of them
                                # (400 `invalid_multipart` past that, as for a second file).
                                "additionalProperties": {"type": "string"},
                                "maxProperties": 1 + MAX_FORM_FIELDS,
                            }
                        }
                    },
                },
                "responses": {
                    "201": json_response("Stored and searchable", schema_ref("Attachment")),
                    "400": problem(
                        "No `file` part, an empty or unreadable file, a malformed body or id "
                        "(`missing_file`, `empty_file`, `unreadable_file`, `invalid_multipart`, `invalid_field`)"
                    ),
                    "401": unauthenticated,
                    "409": problem("The conversation holds the most attachments it may (`too_many_attachments`)"),
                    "413": problem("Larger than `AGENT_ATTACHMENT_MAX_BYTES` (`file_too_large`)"),
                    "415": problem(
                        "Not multipart, or not a kind of file this service reads, or binary content "
                        "(`unsupported_media_type`, `unreadable_file`)"
                    ),
                    "503": problem(
                        "The replica is overloaded, as for a new run (`replica_busy`); nothing was stored",
                        retry_after=True,
                    ),
                },
            },
            "get": {
                "tags": ["attachments"],
                "operationId": "listAttachments",
                "summary": "A conversation's attachments, oldest first",
                "parameters": [conversation_id],
                "responses": {
                    "200": json_response("The attachments", schema_ref("AttachmentList")),
                    "400": bad_id,
                    "401": unauthenticated,
                    "404": no_conversation,
                },
            },
        },
        "/v1/agent/conversations/{conversation_id}/attachments/{attachment_id}": {
            "delete": {
                "tags": ["attachments"],
                "operationId": "deleteAttachment",
                "summary": "Remove one attachment (no longer searched)",
                "parameters": [conversation_id, attachment_id],
                "responses": {
                    "204": {"description": "Removed"},
                    "400": bad_id,
                    "401": unauthenticated,
                    "404": problem("No such conversation or attachment of yours (`not_found`)"),
                },
            }
        },
    }
    attachment = {
        "type": "object",
        "required": ["id", "filename", "size", "media_type", "chunks", "created_at"],
        "properties": {
            "id": {"type": "string"},
            "filename": {"type": "string", "description": "The uploaded file's name (no directory)."},
            "size": {"type": "integer", "description": "Bytes."},
            "media_type": {"enum": sorted(set(MEDIA_TYPES.values()))},
            "title": {"type": ["string", "null"], "description": "From the document (a heading), else the name."},
            "chunks": {"type": "integer"},
            "created_at": {"type": "string", "description": "When it was stored (UTC, ISO 8601)."},
        },
    }
    schemas = {
        "Attachment": attachment,
        "AttachmentList": {
            "type": "object",
            "required": ["attachments"],
            "properties": {"attachments": {"type": "array", "items": schema_ref("Attachment")}},
        },
    }
    tags = [{"name": "attachments", "description": "Files dropped into one conversation, searched only there."}]
    return ApiContribution(paths=paths, schemas=schemas, tags=tags)


__all__ = ["attachments_api"]
