"""Near-duplicate passages: the same text found twice is shown once.

Documentation trees often hold one page twice — ``guide.md`` beside the ``guide.html``
built from it, or the same paragraph pasted into two documents — and a search then
spends its ``top_k`` on copies: "what does npm ci do?" returned the same four lines from
the ``.md`` and the ``.html`` page, twice each. Two hits are copies when most of the
word triples of the shorter one also occur in the longer one (markup, line wrapping and
list markers do not count: the comparison is over folded word tokens). A hit from a
file with the same folder and stem as a better hit's (``a/guide.md`` / ``a/guide.html``)
needs less overlap, since it is the same page by name as well. The better-ranked copy
stays; the others are dropped and counted.

Records are not copies of each other however alike their text: two invoices whose
bodies read the same but whose typed fields (the bucket's schema: vendor, amount,
year…) differ are two answers to a filtered search. So two hits are copies only when
those fields agree. (Free-form front matter — a page's own title or description — does
not make a record: the same option section pasted into two command pages is a copy.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any, TypeVar

from knowledge.textnorm import tokens

#: Share of the shorter passage's word triples found in the other: a copy.
COPY_CONTAINMENT = 0.8
#: The same, for two files that are the same page by name (same folder and stem).
SAME_PAGE_CONTAINMENT = 0.5

T = TypeVar("T")



def record_facts(metadata: Mapping[str, Any] | None, fields: Mapping[str, str] | None) -> dict[str, Any]:
    """The values of the bucket's typed ``fields`` in a hit's metadata: what makes it a
    distinct record (none in a bucket without a schema)."""
    if not fields:
        return {}
    data = metadata or {}
    return {name: data.get(name) for name in fields}


def shingles(text: str, size: int = 3) -> frozenset[tuple[str, ...]]:
    """The passage's word ``size``-grams over folded tokens (the whole text when shorter)."""
    words = tokens(text)
    if len(words) < size:
        return frozenset([tuple(words)]) if words else frozenset()
    return frozenset(tuple(words[i : i + size]) for i in range(len(words) - size + 1))


def containment(a: frozenset[tuple[str, ...]], b: frozenset[tuple[str, ...]]) -> float:
    """``|a ∩ b| / min(|a|, |b|)``: 1.0 when one passage holds all of the other."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))


def page_key(source: str | None) -> str | None:
    """``folder/stem`` of a file path (``docs/guide.md`` → ``docs/guide``), else None."""
    if not source:
        return None
    path = PurePosixPath(source.replace("\\", "/"))
    if not path.suffix:
        return None
    return str(path.with_suffix(""))


def collapse_duplicates(
    ranked: Sequence[T],
    keep: int,
    *,
    text: Callable[[T], str],
    source: Callable[[T], str | None],
    document: Callable[[T], str],
    facts: Callable[[T], Mapping[str, Any]] = lambda _item: {},
) -> tuple[list[T], int]:
    """The first ``keep`` items of ``ranked`` (best first) that are not copies of a
    better one, and how many copies were dropped on the way. Chunks of one document are
    never each other's copies (its chunks share only their overlap), nor are records
    whose typed fields differ (``facts``, from ``record_facts``)."""
    kept: list[tuple[T, frozenset[tuple[str, ...]], str | None, str, dict[str, Any]]] = []
    dropped = 0
    for item in ranked:
        if len(kept) >= keep:
            break
        grams = shingles(text(item))
        key = page_key(source(item))
        doc = document(item)
        record = dict(facts(item))
        is_copy = False
        for _other, other_grams, other_key, other_doc, other_record in kept:
            if other_doc == doc or other_record != record:
                continue
            limit = SAME_PAGE_CONTAINMENT if key is not None and key == other_key else COPY_CONTAINMENT
            if containment(grams, other_grams) >= limit:
                is_copy = True
                break
        if is_copy:
            dropped += 1
        else:
            kept.append((item, grams, key, doc, record))
    return [k[0] for k in kept], dropped


__all__ = ["collapse_duplicates", "containment", "page_key", "record_facts", "shingles"]
