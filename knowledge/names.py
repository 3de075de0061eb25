"""Identifier rules: which bucket, field and document names are allowed.

Bucket and field names end up inside SQL as table and column names (``meta_<bucket>``,
``"<field>"``), which cannot be bound as parameters. They are therefore checked against
one strict pattern *before* they get anywhere near a statement; nothing else is ever
interpolated.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

IDENT_RE = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
DOC_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")

#: Field names the document table provides for every bucket; a schema may not reuse them.
RESERVED_FIELDS: frozenset[str] = frozenset(
    {"doc_id", "id", "bucket", "title", "source", "url", "created_at", "updated_at", "rowid", "and", "or", "not"}
)


def is_identifier(name: object) -> bool:
    return isinstance(name, str) and IDENT_RE.fullmatch(name) is not None


def check_bucket_name(name: object) -> str:
    if not is_identifier(name):
        raise ValueError(
            f"invalid bucket name {str(name)[:60]!r}: use lowercase letters, digits and '_', "
            "starting with a letter, at most 41 characters"
        )
    assert isinstance(name, str)
    return name


def check_field_name(name: object) -> str:
    if not is_identifier(name):
        raise ValueError(
            f"invalid field name {str(name)[:60]!r}: use lowercase letters, digits and '_', "
            "starting with a letter, at most 41 characters"
        )
    assert isinstance(name, str)
    if name in RESERVED_FIELDS:
        raise ValueError(f"field name {name!r} is reserved (built-in document field)")
    return name


def is_doc_id(value: object) -> bool:
    return isinstance(value, str) and DOC_ID_RE.fullmatch(value) is not None


def slugify(text: str, *, limit: int = 48) -> str:
    """ASCII slug for readable document ids (``"Über API.md"`` → ``"uber-api-md"``)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    return (slug[:limit].rstrip("-")) or "doc"


def short_hash(*parts: str, size: int = 8) -> str:
    h = hashlib.sha1()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:size]
