"""``ConversationAttachments``: add, list and remove the files of one user's
conversation, each a document of the conversation's private bucket
(``knowledge.attachments``). The caller (the HTTP routes) has already checked that the
conversation is the user's; here the bucket name alone keeps conversations apart.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from knowledge.attachments import AttachmentRejected, attachment_bucket, read_attachment
from knowledge.kb import KnowledgeBase

#: How many attachments one conversation may hold (a listing is one page).
MAX_ATTACHMENTS = 100


class ConversationAttachments:
    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb

    async def add(
        self, user_id: str, conversation_id: str, raw: bytes, filename: str, declared_type: str | None
    ) -> dict[str, Any]:
        """Read, chunk, embed and store the file; its listing entry. Raises
        ``AttachmentRejected`` (415 unsupported or binary, 400 unreadable, 409 full)."""
        bucket = attachment_bucket(user_id, conversation_id)
        if len(await self.kb.list_documents(bucket=bucket, limit=MAX_ATTACHMENTS, private=bucket)) >= MAX_ATTACHMENTS:
            raise AttachmentRejected(
                409, "too_many_attachments", f"a conversation holds at most {MAX_ATTACHMENTS} attachments"
            )
        read = await asyncio.to_thread(read_attachment, raw, filename, declared_type, bucket=bucket)
        # Its digest: a file sent again (the AI SDK face, which receives every file with
        # its message) is found instead of stored twice (``find``).
        read.document.metadata["sha256"] = hashlib.sha256(raw).hexdigest()
        report = await self.kb.ingest_documents([read.document], bucket=bucket, private=True)
        if report.rejected:
            raise AttachmentRejected(400, "unreadable_file", report.rejected[0].reason)
        stored = await self.get(user_id, conversation_id, str(read.document.id))
        if stored is None:  # removed in between (the conversation deleted meanwhile)
            raise AttachmentRejected(409, "conversation_gone", "the conversation was deleted meanwhile")
        return stored

    async def find(self, user_id: str, conversation_id: str, sha256: str) -> dict[str, Any] | None:
        """The conversation's attachment of exactly these bytes (by their digest), if any."""
        bucket = attachment_bucket(user_id, conversation_id)
        rows = await self.kb.list_documents(bucket=bucket, limit=MAX_ATTACHMENTS, private=bucket)
        for row in rows:
            doc = await self.kb.get_document(str(row["doc_id"]), private=bucket)
            if doc is not None and doc["bucket"] == bucket and (doc.get("metadata") or {}).get("sha256") == sha256:
                return _entry(doc)
        return None

    async def get(self, user_id: str, conversation_id: str, attachment_id: str) -> dict[str, Any] | None:
        bucket = attachment_bucket(user_id, conversation_id)
        doc = await self.kb.get_document(attachment_id, private=bucket)
        if doc is None or doc["bucket"] != bucket:
            return None
        return _entry(doc)

    async def list(self, user_id: str, conversation_id: str) -> list[dict[str, Any]]:
        """Oldest first (by the upload's own time: the stored date is too coarse)."""
        bucket = attachment_bucket(user_id, conversation_id)
        rows = await self.kb.list_documents(bucket=bucket, limit=MAX_ATTACHMENTS, private=bucket)
        docs = [await self.kb.get_document(str(r["doc_id"]), private=bucket) for r in rows]
        found = [d for d in docs if d is not None and d["bucket"] == bucket]
        found.sort(key=lambda d: (float((d.get("metadata") or {}).get("uploaded_at") or 0.0), d["doc_id"]))
        return [_entry(d) for d in found]

    async def delete(self, user_id: str, conversation_id: str, attachment_id: str) -> bool:
        if await self.get(user_id, conversation_id, attachment_id) is None:
            return False
        return await self.kb.delete_documents([attachment_id]) > 0

    async def delete_all(self, user_id: str, conversation_id: str) -> int:
        """Every attachment of the conversation (when it is deleted): how many went."""
        return await self.kb.delete_bucket(attachment_bucket(user_id, conversation_id), private=True) or 0


def _entry(doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc.get("metadata") or {}
    return {
        "id": doc["doc_id"],
        "filename": meta.get("filename") or doc.get("source") or doc["doc_id"],
        "size": meta.get("size"),
        "media_type": meta.get("media_type"),
        "title": doc.get("title"),
        "chunks": doc.get("chunks"),
        "created_at": doc.get("created_at"),
    }


__all__ = ["MAX_ATTACHMENTS", "ConversationAttachments"]
