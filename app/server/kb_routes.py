"""Knowledge-base documents and buckets over HTTP: list and delete.

``GET /v1/kb/documents?bucket=&limit=&after=`` lists documents by id (no text), a page
at a time: ``{"documents": [...], "next_after": id | null}`` — pass ``next_after`` back
as ``after`` for the next page. ``DELETE /v1/kb/documents/{doc_id}`` removes one
(chunks, vectors, typed fields). ``GET /v1/kb/buckets`` lists buckets with their typed
fields and counts; ``DELETE /v1/kb/buckets/{name}`` removes a bucket with every document
in it. All are administrative, guarded like ``POST /v1/kb/documents``
(``app/server/admin_routes.py``). A document's ``source`` is a path relative to the folder it
was ingested from, or the poster's own; never a path on the server.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from app.server.admin_routes import _component, _require_admin
from app.server.bounds import parse_int
from app.server.problems import HTTPProblem, ORJSONResponse
from knowledge.names import is_doc_id, is_identifier
from storage import request_scope

MAX_LIST_LIMIT = 1000
DEFAULT_LIST_LIMIT = 100


def _bucket_param(raw: str | None, *, name: str = "bucket") -> str | None:
    if raw is None or raw == "":
        return None
    if not is_identifier(raw):
        raise HTTPProblem(
            400, "invalid_field", f"{name} must be a bucket name (lowercase letters, digits and '_', from a letter)"
        )
    return raw


async def list_documents(request: Request) -> Response:
    _require_admin(request)
    kb = _component(request, "knowledge").kb
    q = request.query_params
    bucket = _bucket_param(q.get("bucket"))
    limit = parse_int(q.get("limit"), name="limit", lo=1, hi=MAX_LIST_LIMIT, default=DEFAULT_LIST_LIMIT)
    after = q.get("after") or None
    if after is not None and not is_doc_id(after):
        raise HTTPProblem(400, "invalid_field", "after must be a document id (from next_after)")
    if bucket is not None and bucket not in {b.name for b in await kb.list_buckets()}:
        raise HTTPProblem(404, "not_found", f"no bucket {bucket!r}")
    docs = await kb.list_documents(bucket=bucket, limit=limit, after=after)
    next_after = docs[-1]["doc_id"] if len(docs) == limit else None
    return ORJSONResponse({"documents": docs, "next_after": next_after})


async def delete_document(request: Request) -> Response:
    _require_admin(request)
    kb = _component(request, "knowledge").kb
    doc_id = request.path_params["doc_id"]
    if not is_doc_id(doc_id) or not await kb.delete_documents([doc_id]):
        raise HTTPProblem(404, "not_found", "no such document")
    return ORJSONResponse({"deleted": doc_id})


async def list_buckets(request: Request) -> Response:
    _require_admin(request)
    kb = _component(request, "knowledge").kb
    return ORJSONResponse({"buckets": [b.to_dict() for b in await kb.list_buckets()]})


async def delete_bucket(request: Request) -> Response:
    _require_admin(request)
    kb = _component(request, "knowledge").kb
    name = request.path_params["name"]
    with request_scope.unbounded():  # a bucket's rows, postings and graph: may run long
        gone = await kb.delete_bucket(name) if is_identifier(name) else None
    if gone is None:
        raise HTTPProblem(404, "not_found", f"no bucket {name[:60]!r}")
    return ORJSONResponse({"bucket": name, "deleted_documents": gone})


__all__ = ["delete_bucket", "delete_document", "list_buckets", "list_documents"]
