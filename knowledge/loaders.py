"""Turn files into documents: Markdown, text, HTML, JSON/JSONL records, PDF (with pypdf).

Everything here is synchronous and pure (path in, documents out) so the knowledge base
can run it in a worker thread. A file that cannot be read becomes a ``Rejection`` (with
the line number for JSONL records), never an exception that stops a whole ingestion.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from knowledge.chunking import PAGE_BREAK
from knowledge.filecheck import decode_text
from knowledge.html_text import extract_html
from knowledge.md_links import inline_reference_links
from knowledge.names import is_doc_id, short_hash, slugify
from knowledge.types import DEFAULT_BUCKET, DocumentIn, Rejection

TEXT_SUFFIXES = {".md", ".markdown", ".txt", ".text", ".rst"}
HTML_SUFFIXES = {".html", ".htm"}
RECORD_SUFFIXES = {".json", ".jsonl", ".ndjson"}
PDF_SUFFIXES = {".pdf"}
SUPPORTED_SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | RECORD_SUFFIXES | PDF_SUFFIXES

#: A record is a document when it has one of these (``DocumentIn.from_mapping``).
_TEXT_KEYS = ("text", "content", "body")
#: The skip reason of a JSON file none of whose records has a text field: data that
#: happens to sit in a documentation folder (``package.json``, a site's ``nav.json``),
#: not a file of documents with mistakes in it. Counted as skipped, never a failure.
SKIP_NOT_RECORDS = "JSON without document records (no text, content or body field)"

_RECORD_KEYS = {"id", "doc_id", "title", "name", "subject", "text", "content", "body", "url", "source", "metadata"}
_FRONT_MATTER_RE = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)
_MD_TITLE_RE = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
MAX_FILE_BYTES = 50 * 1024 * 1024


@dataclass(slots=True)
class LoadedDocument:
    doc: DocumentIn
    line: int | None = None
    #: The stamp of the file it came from, stored with it (``knowledge.ingest``).
    stamp: str | None = None


def pdf_supported() -> bool:
    return importlib.util.find_spec("pypdf") is not None


def iter_files(path: Path) -> Iterator[Path]:
    """Supported files under ``path`` (itself if a file), sorted, hidden entries skipped."""
    if path.is_file():
        yield path
        return
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith(".") and Path(name).suffix.lower() in SUPPORTED_SUFFIXES:
                yield Path(root) / name


def file_doc_id(path: Path, explicit: Any = None, bucket: str = DEFAULT_BUCKET) -> str:
    """The id of the document read from ``path`` into ``bucket``: the file's own
    (``id:`` front matter) when it gives one, else its name and a hash of its path and
    bucket, so the same file ingested into two buckets is two documents. The default
    bucket hashes the path alone, as before buckets were part of the id."""
    if is_doc_id(explicit):
        return str(explicit)
    return f"{slugify(path.stem)}-{_bucket_hash(bucket, str(path))}"


def _bucket_hash(bucket: str, key: str, size: int = 8) -> str:
    return short_hash(key, size=size) if bucket == DEFAULT_BUCKET else short_hash(bucket, key, size=size)


def _title_from_stem(path: Path) -> str:
    return re.sub(r"[_\-]+", " ", path.stem).strip().capitalize() or path.name


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    m = _FRONT_MATTER_RE.match(text)
    if not m:
        return {}, text
    meta: dict[str, str] = {}
    for line in m.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            meta[key.strip()] = value.strip().strip("'\"")
    return meta, text[m.end() :]


def load_file(
    path: Path, source: str | None = None, *, bucket: str = DEFAULT_BUCKET
) -> tuple[list[LoadedDocument], list[Rejection]]:
    """Parse one file. ``path`` should be absolute: it is the documents' ``origin`` and
    names the file in rejections; ``source`` is what readers see (a path relative to
    the ingested folder; the file name by default), never the server's path. ``bucket``
    is part of the ids the file's documents get (``file_doc_id``)."""
    suffix = path.suffix.lower()
    src = str(path)
    shown = source or path.name
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return [], [Rejection(src, f"file larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB", kind="too large")]
        if suffix in PDF_SUFFIXES:
            return _load_pdf(path, shown, bucket)
        raw = path.read_bytes()
    except OSError as exc:
        return [], [Rejection(src, f"cannot read file: {exc.strerror or exc}", kind="unreadable")]
    decoded = decode_text(raw, html=suffix in HTML_SUFFIXES)
    if decoded.text is None:
        return [], [Rejection(src, decoded.reason, kind=decoded.kind)]
    text = decoded.text
    if suffix in RECORD_SUFFIXES:
        return _load_records(path, text, shown, bucket)
    if suffix in HTML_SUFFIXES:
        title, body, _ = extract_html(text)
        meta: dict[str, Any] = {"format": "html"}
        explicit = None
    elif suffix in TEXT_SUFFIXES:
        meta, body = _front_matter(text) if suffix in (".md", ".markdown") else ({}, text)
        if suffix in (".md", ".markdown"):
            body = inline_reference_links(body)
        explicit = meta.pop("id", None)
        title = meta.pop("title", "")
        if not title and suffix in (".md", ".markdown"):
            m = _MD_TITLE_RE.search(body)
            title = m.group(1).strip() if m else ""
        meta = {**meta, "format": "markdown" if suffix in (".md", ".markdown") else "text"}
    else:
        return [], [Rejection(src, f"unsupported file type {suffix or '(none)'}", kind="unsupported type")]
    if not body.strip():
        return [], [Rejection(src, "empty document", kind="empty")]
    url = meta.pop("url", None) if isinstance(meta.get("url"), str) else None
    doc = DocumentIn(
        text=body,
        title=title or _title_from_stem(path),
        id=file_doc_id(path, explicit, bucket),
        source=shown,
        url=url,
        metadata=meta,
        origin=src,
    )
    return [LoadedDocument(doc)], []


def _load_pdf(path: Path, shown: str, bucket: str) -> tuple[list[LoadedDocument], list[Rejection]]:
    src = str(path)
    if not pdf_supported():
        why = "PDF support needs the optional 'pypdf' package (pip install agentchat[pdf])"
        return [], [Rejection(src, why, kind="PDF")]
    import pypdf  # optional dependency, imported only when present

    try:
        reader = pypdf.PdfReader(str(path))
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
        info = reader.metadata
        title = str(info.title) if info is not None and info.title else ""
    except Exception as exc:  # pypdf raises many types on malformed files
        return [], [Rejection(src, f"unreadable PDF: {exc}", kind="PDF")]
    if not any(pages):
        return [], [Rejection(src, "PDF has no extractable text", kind="PDF")]
    # Pages stay apart (a form-feed line between them, empty pages kept) so every chunk
    # knows which page it is on and a citation can name it.
    body = PAGE_BREAK.join(p.replace("\f", "\n") for p in pages)
    doc = DocumentIn(
        text=body,
        title=title or _title_from_stem(path),
        id=file_doc_id(path, None, bucket),
        source=shown,
        origin=src,
        metadata={"format": "pdf", "pages": len(pages)},
        paged=True,
    )
    return [LoadedDocument(doc)], []


def record_to_document(record: Any, *, source: str | None, fallback_id: str | None) -> DocumentIn:
    """A JSON record as a document; top-level keys beyond the known ones become metadata."""
    if not isinstance(record, Mapping):
        raise ValueError("record is not a JSON object")
    doc = DocumentIn.from_mapping(record)
    if not doc.title:
        for key in ("name", "subject"):
            if isinstance(record.get(key), str):
                doc.title = record[key]
                break
    extra = {k: v for k, v in record.items() if k not in _RECORD_KEYS}
    doc.metadata = {**extra, **doc.metadata}
    if doc.id is None:
        doc.id = fallback_id
    elif not is_doc_id(doc.id):
        raise ValueError(f"invalid id {doc.id[:40]!r}: use letters, digits and . _ : - (max 128)")
    if source is not None:
        doc.source = source
    return doc


def _load_records(path: Path, text: str, shown: str, bucket: str) -> tuple[list[LoadedDocument], list[Rejection]]:
    src = str(path)
    base = f"{slugify(path.stem, limit=32)}-{_bucket_hash(bucket, src, size=6)}"
    docs: list[LoadedDocument] = []
    rejected: list[Rejection] = []
    if path.suffix.lower() == ".json":
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return [], [Rejection(src, f"invalid JSON: {exc}", kind="invalid JSON")]
        if isinstance(data, Mapping) and isinstance(data.get("documents") or data.get("records"), list):
            data = data.get("documents") or data.get("records")
        records = data if isinstance(data, list) else [data]
        if not any(_has_text_key(r) for r in records):
            return [], [Rejection(src, SKIP_NOT_RECORDS, kind=SKIP_NOT_RECORDS)]
        for i, record in enumerate(records, start=1):
            try:
                docs.append(LoadedDocument(_from_file(record, shown, src, f"{base}-{i}"), i))
            except ValueError as exc:
                rejected.append(Rejection(src, f"record {i}: {exc}", i, kind="invalid record"))
        return docs, rejected
    parsed = 0
    with_text = False
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            rejected.append(Rejection(src, f"invalid JSON: {exc}", lineno, kind="invalid JSON"))
            continue
        parsed += 1
        with_text = with_text or _has_text_key(record)
        try:
            docs.append(LoadedDocument(_from_file(record, shown, src, f"{base}-{lineno}"), lineno))
        except ValueError as exc:
            rejected.append(Rejection(src, str(exc), lineno, kind="invalid record"))
    if parsed and not with_text and len(rejected) == parsed:  # every line parsed; none is a document
        return [], [Rejection(src, SKIP_NOT_RECORDS, kind=SKIP_NOT_RECORDS)]
    return docs, rejected


def _has_text_key(record: Any) -> bool:
    return isinstance(record, Mapping) and any(k in record for k in _TEXT_KEYS)


def _from_file(record: Any, shown: str, origin: str, fallback_id: str) -> DocumentIn:
    doc = record_to_document(record, source=shown, fallback_id=fallback_id)
    doc.origin = origin
    return doc
