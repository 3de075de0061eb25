"""A conversation's attachments: files a user dropped into one conversation (issue 25
item 4), kept as documents of a bucket private to that conversation.

Why a bucket and not a table of their own: an attachment must be chunked, embedded and
searched exactly like an ingested document, so it goes through the same ingestion and
the same index. What makes it private is its bucket's name: ``att_`` and a hash of the
owner and the conversation (``attachment_bucket``). ``KnowledgeBase`` treats such a
bucket as absent from every public view (bucket listings, document listings, searches of
"every bucket", a ``kb_id`` naming it, ``get_document``) unless the caller names it as
the conversation's own (``search(private=...)``, the attachment routes, a run's tools in
that conversation: ``agenttools.rag.own_bucket``).

A file is read by the very loader the ingest CLI uses (``knowledge.loaders.load_file``:
binary refused, PDF through pypdf, HTML reduced to its text, Markdown front matter),
from a temporary copy in a worker thread; only PDF, HTML, Markdown and text are taken.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from knowledge.loaders import HTML_SUFFIXES, PDF_SUFFIXES, load_file
from knowledge.types import DocumentIn

#: Every private bucket's name starts so; an administrator cannot create one.
PRIVATE_PREFIX = "att_"
#: Suffix -> media type of the kinds an attachment may be.
MEDIA_TYPES: dict[str, str] = {
    **{s: "text/markdown" for s in (".md", ".markdown")},
    **{s: "text/plain" for s in (".txt", ".text", ".rst")},
    **{s: "text/html" for s in HTML_SUFFIXES},
    **{s: "application/pdf" for s in PDF_SUFFIXES},
}
#: A declared content type that names one of the kinds (for a file without a suffix).
_SUFFIX_OF_TYPE = {"text/markdown": ".md", "text/plain": ".txt", "text/html": ".html", "application/pdf": ".pdf"}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9 ._()\-]+")
MAX_FILENAME = 120


def attachment_bucket(user_id: str, conversation_id: str) -> str:
    """The private bucket of ``user_id``'s conversation: a name nobody can guess from
    another conversation, and that two users' equal conversation ids never share."""
    digest = hashlib.sha256(f"{user_id}\x00{conversation_id}".encode()).hexdigest()
    return PRIVATE_PREFIX + digest[:32]


def is_private_bucket(name: object) -> bool:
    return isinstance(name, str) and name.startswith(PRIVATE_PREFIX)


def new_attachment_id() -> str:
    return "att-" + secrets.token_hex(10)


def safe_filename(raw: str | None) -> str:
    """The file's own name, without any directory, reduced to harmless characters."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    name = _UNSAFE_NAME.sub("_", name).strip(" .")[:MAX_FILENAME]
    return name or "attachment"


class AttachmentRejected(ValueError):
    """A file that cannot be an attachment; ``status`` is the HTTP answer (415 or 400)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True, slots=True)
class ReadAttachment:
    document: DocumentIn
    filename: str
    media_type: str
    size: int


def kind_of(filename: str, declared_type: str | None) -> tuple[str, str]:
    """``(suffix, media type)`` of an upload: by its name's suffix, else by the declared
    content type; anything else is a 415."""
    suffix = Path(filename).suffix.lower()
    if suffix in MEDIA_TYPES:
        return suffix, MEDIA_TYPES[suffix]
    declared = (declared_type or "").split(";", 1)[0].strip().lower()
    if not suffix and declared in _SUFFIX_OF_TYPE:
        return _SUFFIX_OF_TYPE[declared], declared
    kinds = ", ".join(sorted(MEDIA_TYPES))
    raise AttachmentRejected(
        415, "unsupported_media_type", f"{filename!r} is not an attachment this service reads ({kinds})"
    )


def read_attachment(raw: bytes, filename: str, declared_type: str | None, *, bucket: str) -> ReadAttachment:
    """The upload as one document of ``bucket`` (blocking: run it in a thread). The
    same loader as ingestion reads it from a temporary copy named like the upload."""
    name = safe_filename(filename)
    suffix, media_type = kind_of(name, declared_type)
    if not name.lower().endswith(suffix):
        name = name + suffix
    with tempfile.TemporaryDirectory(prefix="agentchat-att-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(raw)
        loaded, rejected = load_file(path, source=name, bucket=bucket)
    if rejected or not loaded:
        why = rejected[0] if rejected else None
        reason = why.reason.replace(str(path), name) if why else "no text in the file"
        raise AttachmentRejected(415 if why is not None and why.kind == "binary" else 400, "unreadable_file", reason)
    doc = loaded[0].doc
    doc.id = new_attachment_id()
    doc.origin = None
    doc.metadata = {
        **doc.metadata,
        "attachment": True,
        "filename": name,
        "media_type": media_type,
        "size": len(raw),
        "uploaded_at": time.time(),  # orders a listing finer than the stored date does
    }
    return ReadAttachment(doc, name, media_type, len(raw))


__all__ = [
    "MEDIA_TYPES",
    "PRIVATE_PREFIX",
    "AttachmentRejected",
    "ReadAttachment",
    "attachment_bucket",
    "is_private_bucket",
    "kind_of",
    "new_attachment_id",
    "read_attachment",
    "safe_filename",
]
