"""A stored document as the routes, the CLI and the tools show it: its metadata, never its
text, and a private bucket's document only to the caller naming that bucket
(``knowledge.bucket_privacy.readable``).

Apart from the face (``knowledge.kb``, whose ``list_documents`` and ``get_document`` hand
over to these) because this is the one place deciding which of a stored row's fields
(``storage.kb_records``) a caller sees, and under which names (``embed_model`` is shown as
``embedding_model``): the rows are the storage's, these views are the API's, and a field
added to the one reaches the other only when it is named here.
"""

from __future__ import annotations

from typing import Any

from knowledge.bucket_privacy import readable
from knowledge.names import is_doc_id
from storage.interfaces import KBIndex


async def document_page(
    index: KBIndex, bucket: str | None, *, limit: int, after: str | None, private: str | None
) -> list[dict[str, Any]]:
    """Documents ordered by id, ``limit`` at a time after the id ``after`` (no text);
    private buckets' documents left out unless ``private`` names their bucket."""
    if bucket is not None and not readable(bucket, private):
        return []
    rows = await index.list_documents(bucket, limit=limit, after=after)
    return [
        {"doc_id": r.id, "bucket": r.bucket, "title": r.title, "source": r.source, "url": r.url,
         "chars": r.chars, "chunks": r.chunks, "updated_at": r.updated_at}
        for r in rows
        if readable(r.bucket, private)
    ]  # fmt: skip


async def document_metadata(index: KBIndex, doc_id: str, *, private: str | None) -> dict[str, Any] | None:
    """Everything known about a document except its text; ``None`` for an id that is not
    one, a document not stored, or another caller's private one."""
    if not isinstance(doc_id, str) or not is_doc_id(doc_id):
        return None
    d = await index.get_document(doc_id)
    if d is None or not readable(d.bucket, private):
        return None
    return {
        "doc_id": d.id,
        "bucket": d.bucket,
        "title": d.title,
        "source": d.source,
        "url": d.url,
        "metadata": d.metadata,
        "fields": d.fields,
        "content_hash": d.content_hash,
        "embedding_model": d.embed_model,
        "embedding_dim": d.embed_dim,
        "chars": d.chars,
        "chunks": d.chunks,
        "created_at": d.created_at,
        "updated_at": d.updated_at,
    }


__all__ = ["document_metadata", "document_page"]
