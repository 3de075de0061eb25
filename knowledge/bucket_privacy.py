"""Which buckets a caller of ``KnowledgeBase`` may name, list, search and count.

A conversation's attachments live in a private bucket (``knowledge.attachments``): out of
every public view unless the caller names it as its own. The rules that keep it so are
one job — turn a request's bucket, bucket list and own private buckets into the scope the
search and the counts run on, refusing a private bucket named by anyone else as unknown
— and they stand apart from ``KnowledgeBase`` (which only calls them) so the whole of
that guard can be read in one place.

What comes back is screened here too: a search's hits and missing buckets
(``screen_response``), the documents listed or read (``readable``).

Every "unknown bucket" a caller can see is decided here (``_unknown``): a name that is
not a bucket and another person's private bucket get the same words, listing the shared
buckets only, so neither the list nor the answer tells that a private bucket exists.
A bucket named on its own (a chat's ``context.buckets``, a tool's ``bucket``/``kb_id``,
a count) is checked here before anything reads its schema.

"The caller's own" private buckets (``private``) are never decided here from a name: the
caller hands them over, derived from who asks and where (a run's tools: its user's and
conversation's attachment bucket, ``agenttools.rag.own_bucket``; the attachment routes:
the route's). A private name outside them is refused before anything is read, existing
or not, so neither the words nor the path taken tells whether it exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NoReturn

from knowledge.attachments import is_private_bucket
from knowledge.buckets import Buckets, UnknownBucketError
from knowledge.types import BucketInfo, SearchResponse

#: Not a bucket name: a scope of nothing (``Searcher`` answers it with no hits).
NO_BUCKET = "-"


async def shared_buckets(buckets: Buckets) -> list[BucketInfo]:
    """The shared buckets: a conversation's private one is nobody else's business, the
    administrator's included."""
    return [b for b in await buckets.infos() if not is_private_bucket(b.name)]


async def search_scope(
    buckets: Buckets, bucket: str | None, chosen: Sequence[str] | None, private: tuple[str, ...]
) -> tuple[str | None, Sequence[str] | None]:
    """``(bucket, buckets)`` with other people's private buckets taken out. "Every
    bucket" stays every bucket: the search's own statements leave the private ones
    out (``knowledge.scope_counts.search_scope``), so one another replica made since any list was
    read is out too. With the caller's own private buckets it becomes the list of
    the shared ones (reread) and those."""
    if bucket is not None:
        await _check_named(buckets, bucket, private)
        return bucket, chosen
    if chosen is None or "*" in chosen:
        # The schemas (the hits' facts, ``collapse_duplicates``) are fresh: another
        # process's change made ``search``'s check read them again.
        if not private:
            return None, chosen
        shared = [b for b in buckets.names() if not is_private_bucket(b)]
        return None, [*shared, *private] or [NO_BUCKET]
    kept = [b for b in chosen if not is_private_bucket(b)]
    return None, [*kept, *private] or [NO_BUCKET]


async def named_schema(buckets: Buckets, bucket: str, private: tuple[str, ...] = ()) -> dict[str, str]:
    """The typed fields of a bucket a caller named (``KnowledgeBase.bucket_schema``):
    a shared bucket, or one of ``private`` (the caller's own); anything else is
    ``UnknownBucketError`` in ``_unknown``'s words."""
    if is_private_bucket(bucket) and bucket not in private:
        await _unknown(buckets, bucket)
    try:
        return await buckets.schema(bucket)
    except UnknownBucketError:
        await _unknown(buckets, bucket)


async def count_bucket(buckets: Buckets, bucket: str | None, private: tuple[str, ...] = ()) -> str | None:
    """The bucket a count covers: the one named (a private one only if it is one of
    ``private``, the caller's own — anyone else's is unknown, as for a search), else
    ``None`` — every shared bucket, which the count's own statement keeps to
    (``ScopeCounts.count_documents``). No bucket list is read: a private bucket
    someone made since would be missing from it and counted. So no count tells anyone
    but its owner how many documents a conversation's attachments hold (the owner's
    corpus tool counts them when it names its own bucket: the "nothing matched"
    clarification of a filtered search there)."""
    if bucket is not None:
        await _check_named(buckets, bucket, private)
    return bucket


async def _check_named(buckets: Buckets, bucket: str, private: tuple[str, ...]) -> None:
    """A bucket named on its own exists and is the caller's to search: else unknown
    (checked before the search or count reads its schema, whose own miss would not
    know which buckets the caller may hear of)."""
    if (is_private_bucket(bucket) and bucket not in private) or not await buckets.exists(bucket):
        await _unknown(buckets, bucket)


def screen_response(
    response: SearchResponse, bucket: str | None, buckets: Sequence[str] | None
) -> SearchResponse:
    """What a search over ``search_scope``'s ``(bucket, buckets)`` may show its caller.
    Over every shared bucket, no hit of a private one: each side's own statement left
    them out (``KBScope.hidden_prefix``); kept as a second guard, so that no engine's
    slip ever hands another user's attachment to this caller. Among the missing buckets,
    neither the caller's own private bucket before its first attachment (no news) nor
    ``NO_BUCKET``; a shared name that is no bucket is (``SearchResponse.missing_buckets``)."""
    if bucket is None and (buckets is None or "*" in buckets):
        kept = [h for h in response.hits if not is_private_bucket(h.bucket)]
        if len(kept) != len(response.hits):
            response = replace(response, hits=kept)
    if response.missing_buckets:
        response.missing_buckets = [
            b for b in response.missing_buckets if b != NO_BUCKET and not is_private_bucket(b)
        ]
    return response


def readable(bucket: str, private: str | None) -> bool:
    """A document of ``bucket`` is the caller's to list or read (``KnowledgeBase.list_documents``,
    ``get_document``): a shared bucket's, or one of ``private``, the caller's own bucket."""
    return not is_private_bucket(bucket) or bucket == private


def shared_names(buckets: Buckets) -> list[str]:
    """The shared buckets' names as last read, sorted (nothing counted)."""
    return sorted(b for b in buckets.names() if not is_private_bucket(b))


def absent(buckets: Buckets, names: Sequence[str]) -> list[str]:
    """Those of ``names`` that are no shared bucket as last read (``*``, every bucket,
    never is; nor ``NO_BUCKET``, the scope of nothing): a private name is absent to
    whoever asks, existing or not."""
    return [
        n
        for n in dict.fromkeys(names)
        if n not in ("*", NO_BUCKET) and (is_private_bucket(n) or buckets.cached(n) is None)
    ]


async def _unknown(buckets: Buckets, bucket: str) -> NoReturn:
    """A name that is not a bucket and another person's private bucket are refused in
    the same words: named with the shared buckets there are (the names reread, no
    documents counted), a private bucket never listed nor confirmed to exist. The
    caller's own private buckets are not listed either: the list is the same whoever asks
    (a run's tools take their own conversation's bucket by name, as a hit gave it; a
    chat's context never takes one)."""
    await buckets.load()
    known = ", ".join(shared_names(buckets)) or "(none)"
    raise UnknownBucketError(f"unknown bucket {bucket[:60]!r}; available buckets: {known}")


def refuse_private(bucket: str) -> None:
    """An administrator's bucket may not take a private bucket's name (``ValueError``)."""
    if is_private_bucket(bucket):
        raise ValueError(
            f"bucket names starting with 'att_' are reserved for conversations' attachments: {bucket[:60]!r}"
        )


__all__ = [
    "NO_BUCKET",
    "absent",
    "count_bucket",
    "named_schema",
    "readable",
    "refuse_private",
    "screen_response",
    "search_scope",
    "shared_buckets",
    "shared_names",
]
