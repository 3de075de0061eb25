"""The knowledge-base and admin routes (``app/server/kb_routes.py``, ``app/server/admin_routes.py``), described.

Administrative: with ``AGENT_AUTH=none`` they answer 403 unless ``AGENT_ADMIN_OPEN=true``.
Per-document problems of an ingestion are reported in ``rejected``, not refused as a whole,
so the document schema is lenient where the route is.
"""

from __future__ import annotations

from typing import Any

from app.server.openapi import ApiContribution, json_body, json_response, path_param, problem, query, schema_ref

BUCKET_PATTERN = r"^[a-z][a-z0-9_]{0,40}$"
DOC_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
NULLABLE_STRING = {"type": ["string", "null"]}


def _or_empty(pattern: str) -> dict[str, Any]:
    """A query parameter of ``pattern`` that may also be sent empty, which the route reads as
    not sent (schemathesis' negative examples found ``?bucket=`` described as refused)."""
    return {"type": "string", "pattern": f"^(?:{pattern.removeprefix('^').removesuffix('$')})?$"}


def _admin(*, body: bool = False) -> dict[str, Any]:
    """What every administrative route can answer besides its own results."""
    out = {
        "401": problem("No valid bearer token (`AGENT_AUTH=jwt`)", authenticate=True),
        "403": problem("Not an administrator (`AGENT_ADMIN_USERS`); with `AGENT_AUTH=none` closed unless "
                       "`AGENT_ADMIN_OPEN=true` (`forbidden`)"),
        "503": problem("The app runs without this component (`unavailable`)"),
    }
    if body:
        out["408"] = problem("The body did not arrive in time (`body_timeout`)")
        out["413"] = problem("The body is too large (`payload_too_large`)")
    return out


def kb_api() -> ApiContribution:
    """``app/server/kb_routes.py`` and ``app/server/admin_routes.py``: the knowledge base and keyword upkeep."""
    report = schema_ref("IngestReport")
    paths: dict[str, dict[str, Any]] = {
        "/v1/kb/documents": {
            "get": {
                "tags": ["knowledge base"],
                "operationId": "listDocuments",
                "summary": "Documents by id, a page at a time (no text)",
                "parameters": [
                    # An empty value reads as none (``kb_routes``): ``?bucket=`` lists every bucket.
                    query("bucket", _or_empty(BUCKET_PATTERN), "Only this bucket; empty: every bucket."),
                    query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}, "Page size."),
                    query("after", _or_empty(DOC_ID_PATTERN), "`next_after` of the last page; empty: the first."),
                ],
                "responses": {
                    "200": json_response("A page", schema_ref("DocumentPage")),
                    "400": problem("A parameter is invalid (`invalid_field`)"),
                    "404": problem("No such bucket (`not_found`)"),
                    **_admin(),
                },
            },
            "post": {
                "tags": ["knowledge base"],
                "operationId": "ingestDocuments",
                "summary": "Add or update documents",
                "description": "Each document is chunked, embedded and indexed; one that cannot be a document is "
                "reported in `rejected` with its 1-based position, not refused as a whole.",
                "requestBody": json_body(schema_ref("IngestRequest")),
                "responses": {
                    "200": json_response("What was ingested", report),
                    "202": json_response("Stored and found by text search now, but the embedder failed: "
                                         "`queued_for_embedding` documents are re-embedded in the background", report),
                    "422": json_response("Nothing was added, updated or skipped (see `rejected`)", report),
                    "400": problem("Not `{documents: [...]}`, empty, too many, a member other than `documents` and "
                                   "`bucket` (`unknown_field`), or a bad bucket (`invalid_request`, "
                                   "`invalid_field`, `invalid_json`, `too_deep`, `number_out_of_range`)"),
                    **_admin(body=True),
                },
            },
        },
        "/v1/kb/documents/{doc_id}": {
            "delete": {
                "tags": ["knowledge base"],
                "operationId": "deleteDocument",
                "summary": "Remove a document (chunks, vectors, typed fields)",
                "parameters": [path_param("doc_id", {"type": "string"}, "The document id.")],
                "responses": {
                    "200": json_response("Removed", {"type": "object", "required": ["deleted"],
                                                     "properties": {"deleted": {"type": "string"}}}),
                    "404": problem("No such document (`not_found`)"),
                    **_admin(),
                },
            }
        },
        "/v1/kb/buckets": {
            "get": {
                "tags": ["knowledge base"],
                "operationId": "listBuckets",
                "summary": "Buckets with their typed fields and counts",
                "responses": {
                    "200": json_response("The buckets", {
                        "type": "object", "required": ["buckets"],
                        "properties": {"buckets": {"type": "array", "items": schema_ref("Bucket")}},
                    }),
                    **_admin(),
                },
            }
        },
        "/v1/kb/buckets/{name}": {
            "delete": {
                "tags": ["knowledge base"],
                "operationId": "deleteBucket",
                "summary": "Remove a bucket with every document in it",
                "parameters": [path_param("name", {"type": "string"}, "The bucket.")],
                "responses": {
                    "200": json_response("Removed", {
                        "type": "object", "required": ["bucket", "deleted_documents"],
                        "properties": {"bucket": {"type": "string"}, "deleted_documents": {"type": "integer"}},
                    }),
                    "404": problem("No such bucket (`not_found`)"),
                    **_admin(),
                },
            }
        },
        "/v1/admin/keywords/prune": {
            "post": {
                "tags": ["admin"],
                "operationId": "pruneKeywords",
                "summary": "Forget keywords used fewer than `min_usage` times and idle `older_than_days`",
                "requestBody": json_body({
                    "type": "object",
                    "required": ["min_usage", "older_than_days"],
                    "additionalProperties": False,
                    "properties": {
                        "min_usage": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
                        "older_than_days": {"type": "number", "minimum": 0, "maximum": 100 * 366},
                    },
                }),
                "responses": {
                    "200": json_response("How many were removed", {
                        "type": "object", "required": ["removed"], "properties": {"removed": {"type": "integer"}},
                    }),
                    "400": problem("Not an object, a field out of range, or another member (`invalid_request`, "
                                   "`invalid_field`, `unknown_field`)"),
                    **_admin(body=True),
                },
            }
        },
    }
    rejection = {
        "type": "object",
        "required": ["source", "reason"],
        "properties": {
            "source": {"type": "string"},
            "reason": {"type": "string"},
            "line": {"type": ["integer", "null"], "description": "1-based position in the request."},
            "kind": {"type": "string"},
        },
    }
    count = {"type": "integer", "minimum": 0}
    schemas: dict[str, dict[str, Any]] = {
        "IngestRequest": {
            "type": "object",
            "required": ["documents"],
            "additionalProperties": False,
            "description": "Another member is a 400 `unknown_field`; a document's members are a record's (see "
            "`DocumentIn`), its problems reported per document in `rejected`.",
            "properties": {
                "documents": {"type": "array", "minItems": 1, "maxItems": 5000, "items": schema_ref("DocumentIn")},
                "bucket": {"type": "string", "pattern": BUCKET_PATTERN, "default": "default",
                           "description": "Created on first use."},
            },
        },
        "DocumentIn": {
            "type": "object",
            "anyOf": [{"required": ["text"]}, {"required": ["content"]}, {"required": ["body"]}],
            "description": "`text` (or `content`, `body`) is required and not blank; without `id` a stable one "
            "is derived from the title and text.",
            "properties": {
                "text": {"type": "string"},
                "content": {"type": "string"},
                "body": {"type": "string"},
                "title": {"type": "string"},
                "id": {"type": ["string", "integer"], "pattern": DOC_ID_PATTERN},
                "source": {"type": "string"},
                "url": {"type": "string"},
                "metadata": {"type": "object", "description": "Typed fields of the bucket, and anything else."},
            },
        },
        "IngestReport": {
            "type": "object",
            "required": ["added", "updated", "skipped", "rejected"],
            "properties": {
                "added": count, "updated": count, "skipped": count, "deleted": count, "chunks": count,
                "files": count,
                "unread_files": {**count, "description": "Files a folder ingest skipped unopened (size and "
                                 "modification time unchanged); 0 for documents posted over HTTP."},
                "rejected": {"type": "array", "items": rejection},
                "elapsed_seconds": {"type": "number"},
                "embed_seconds": {"type": "number"},
                "skipped_files": {"type": "object", "additionalProperties": count},
                "skipped_examples": {"type": "array", "items": rejection},
                "queued_for_embedding": {**count, "description": "Stored without vectors (the embedder failed), "
                                         "re-embedded in the background."},
                "embedding_error": {"type": ["string", "null"]},
                "rechunked": {**count, "description": "Of `updated`, documents whose content was unchanged but "
                              "whose stored chunks were cut by older chunking rules: cut again and replaced."},
                "reused_vectors": {**count, "description": "Chunks of updated documents whose text was unchanged: "
                                   "they kept the vector their document stored (same embedder and width), "
                                   "not embedded again."},
                "embedding": {
                    "type": "object",
                    "properties": {
                        "state": {"type": "string", "enum": ["done", "queued", "no embedder"]},
                        "documents": count,
                        "searchable_by": {"type": "array", "items": {"type": "string", "enum": ["text", "meaning"]}},
                        "detail": {"type": "string"},
                    },
                },
            },
        },
        "DocumentPage": {
            "type": "object",
            "required": ["documents", "next_after"],
            "properties": {
                "documents": {"type": "array", "items": {
                    "type": "object",
                    "required": ["doc_id", "bucket", "title", "source", "chars", "chunks"],
                    "properties": {
                        "doc_id": {"type": "string"}, "bucket": {"type": "string"}, "title": {"type": "string"},
                        "source": {"type": "string"}, "url": NULLABLE_STRING, "chars": count, "chunks": count,
                        "updated_at": {"type": "string"},
                    },
                }},
                "next_after": {**NULLABLE_STRING, "description": "Pass as `after` for the next page; null at the end."},
            },
        },
        "Bucket": {
            "type": "object",
            "required": ["name", "fields", "documents", "chunks"],
            "properties": {
                "name": {"type": "string"},
                "fields": {"type": "object", "additionalProperties": {
                    "enum": ["TEXT", "INTEGER", "REAL", "DATE", "BOOLEAN"]}},
                "documents": count, "chunks": count, "created_at": {"type": "string"},
            },
        },
    }
    tags = [
        {"name": "knowledge base", "description": "Administrative: documents and buckets of the knowledge base."},
        {"name": "admin", "description": "Administrative upkeep."},
    ]
    return ApiContribution(paths=paths, schemas=schemas, tags=tags)
