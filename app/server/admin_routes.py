"""Knowledge-base ingestion over HTTP and keyword-index maintenance.

``POST /v1/kb/documents`` takes ``{"documents": [...], "bucket"?}`` (each document
``{text|content, title?, id?, source?, url?, metadata?}``) and answers with the
ingestion report; rejected records come back with their 1-based position. When the
embedder failed the documents are stored all the same, found by text search at once,
and queued for re-embedding in the background: the answer is ``202 Accepted`` with
``queued_for_embedding`` and ``embedding: {state: "queued", searchable_by: ["text"], …}``.
``POST /v1/admin/keywords/prune`` takes ``{"min_usage", "older_than_days"}``.
Both are administrative: in ``jwt`` mode only users in ``AGENT_ADMIN_USERS`` may call them;
with ``AGENT_AUTH=none`` (anyone who can reach the port is "the user") they answer 403
unless ``AGENT_ADMIN_OPEN=true`` opens them for local use. The CLI works on the database
directly either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from app.server.bounds import check_int, check_number
from app.server.problems import HTTPProblem, ORJSONResponse
from app.server.request_admission import identify, read_json_body, services
from app.server.unknown_fields import refuse_unknown_fields
from storage import request_scope

if TYPE_CHECKING:
    from app.server.services import Services

MAX_KB_BODY = 32 * 1024 * 1024
MAX_DOCUMENTS = 5000
MAX_MIN_USAGE = 2**31 - 1
MAX_IDLE_DAYS = 100 * 366
#: The members of each body; any other is a 400 ``unknown_field``. A document inside
#: ``documents`` is a record as a JSON file of records holds it: checked by ingestion,
#: its problems reported per document in ``rejected``.
INGEST_FIELDS = ("documents", "bucket")
PRUNE_FIELDS = ("min_usage", "older_than_days")


def _require_admin(request: Request) -> None:
    svc = services(request)
    ident = identify(request)
    if svc.settings.auth == "none":
        if not svc.settings.admin_open:
            raise HTTPProblem(
                403,
                "forbidden",
                "admin routes are closed without authentication: use the agentchat CLI, run with "
                "AGENT_AUTH=jwt and AGENT_ADMIN_USERS, or set AGENT_ADMIN_OPEN=true for local use",
            )
    elif ident.user_id not in svc.settings.admin_users:
        raise HTTPProblem(403, "forbidden", "this route is for administrators (AGENT_ADMIN_USERS)")


def _component(request: Request, name: str) -> Any:
    return configured_component(services(request), name)


def configured_component(svc: Services, name: str) -> Any:
    """The app's ``name`` component (a room of ``app.rooms``), else 503 ``unavailable``."""
    comp = svc.rooms.named(name)
    if comp is None:
        raise HTTPProblem(503, "unavailable", f"the {name} component is not configured in this app")
    return comp


async def ingest_documents(request: Request) -> Response:
    _require_admin(request)
    knowledge = _component(request, "knowledge")
    body = await read_json_body(request, MAX_KB_BODY)
    if isinstance(body, dict):
        refuse_unknown_fields(body, INGEST_FIELDS)
    if not isinstance(body, dict) or not isinstance(body.get("documents"), list):
        raise HTTPProblem(400, "invalid_request", 'send {"documents": [ {...}, ... ], "bucket"?: "name"}')
    docs = body["documents"]
    if not docs:
        raise HTTPProblem(400, "invalid_field", "documents must not be empty")
    if len(docs) > MAX_DOCUMENTS:
        raise HTTPProblem(400, "invalid_field", f"at most {MAX_DOCUMENTS} documents per request")
    bucket = body.get("bucket", "default")
    if not isinstance(bucket, str):
        raise HTTPProblem(400, "invalid_field", "bucket must be a string")
    # Before the ingest: one begun without an embedder stores text only, even if one
    # found late is adopted meanwhile (``KnowledgeBase.adopt_embedder``).
    has_embedder = knowledge.kb.embedder is not None
    try:
        # A bulk load's statements (and the index builds at its end) may run long: not cut
        # by the request's per-wait deadline (storage/request_scope.py).
        with request_scope.unbounded():
            report = await knowledge.kb.ingest_documents(docs, bucket=bucket)
    except ValueError as exc:  # unknown bucket, bad bucket name
        raise HTTPProblem(400, "invalid_field", str(exc)) from None
    payload = report.to_dict()
    payload["embedding"] = _embedding_state(report, has_embedder=has_embedder)
    status = 200 if (payload["added"] or payload["updated"] or payload["skipped"]) else 422
    if status == 200 and report.queued_for_embedding:
        status = 202  # stored and searchable by text; the vectors are work still pending
    return ORJSONResponse(payload, status_code=status)


def _embedding_state(report: Any, *, has_embedder: bool) -> dict[str, Any]:
    """How the stored documents can be searched now, and what is still to come."""
    if not has_embedder:
        return {"state": "no embedder", "documents": 0, "searchable_by": ["text"]}
    if report.queued_for_embedding:
        return {
            "state": "queued",
            "documents": report.queued_for_embedding,
            "searchable_by": ["text"],
            "detail": f"the embedder failed ({report.embedding_error}): stored and found by text search now, "
            "re-embedded in the background (GET /readyz: checks.knowledge.reembedding)",
        }
    return {"state": "done", "documents": 0, "searchable_by": ["text", "meaning"]}


async def prune_keywords(request: Request) -> Response:
    _require_admin(request)
    keywords = _component(request, "keywords")
    body = await read_json_body(request, 4096)
    if not isinstance(body, dict):
        raise HTTPProblem(400, "invalid_request", 'send {"min_usage": N, "older_than_days": D}')
    refuse_unknown_fields(body, PRUNE_FIELDS)
    min_usage = check_int(body.get("min_usage"), name="min_usage", lo=1, hi=MAX_MIN_USAGE)
    days = check_number(body.get("older_than_days"), name="older_than_days", lo=0, hi=MAX_IDLE_DAYS)
    with request_scope.unbounded():  # a bulk delete: may legitimately run long
        removed = await keywords.prune(min_usage=min_usage, older_than_days=days)
    return ORJSONResponse({"removed": removed})
