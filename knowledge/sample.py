"""The sample knowledge base shipped with the package (``knowledge/sample_kb/*.md``).

It is our own writing about this service, so a fresh ``make run`` with the offline
extractive provider can answer real questions ("which events does a run stream?").

The sample grows with the service, so an installation that still holds only an older
sample gets the shipped one on its next start; a bucket anyone else has put a document
into is never touched (issue 20).
"""

from __future__ import annotations

import asyncio
import os
from enum import StrEnum
from pathlib import Path, PurePosixPath

from knowledge.chunking import older_than_ours
from knowledge.filecheck import walk_files
from knowledge.filestamps import file_stamp
from knowledge.kb import DEFAULT_BUCKET, KnowledgeBase
from knowledge.loaders import SUPPORTED_SUFFIXES, load_file
from knowledge.types import IngestReport

SAMPLE_KB_DIR = Path(__file__).resolve().parent / "sample_kb"

#: Every id the sample has ever shipped (each file's ``id:``): a document of another
#: install's sample folder is the sample's only when its id is one of these - never a
#: file of someone's own in a folder that is also ``.../knowledge/sample_kb`` (a clone of
#: the project with notes added), which the start must never remove, even when it is
#: named like the sample's (``id: agentchat-deploy`` copied from the files beside it, a
#: file ``agentchat-notes.md``: the ids' prefix alone removed those). A file added to the
#: sample adds its id here (``tests/storage/test_kb_moved_tree.py`` checks it); a file
#: dropped keeps its id here, so installs that stored it have it removed.
SAMPLE_IDS = frozenset(
    f"agentchat-{name}"
    for name in (
        "approvals", "authentication", "capacity", "compatible-faces", "configuration", "conversations",
        "durable-runs", "http-api", "knowledge-base", "knowledge-cli", "limits-and-errors", "mcp-servers",
        "overview", "rag-flow", "running", "scaling", "sse-events", "tool-selection", "tools", "troubleshooting",
    )
)

#: More documents than this in the bucket: not the sample's bucket, whatever they are
#: (the sample has a few dozen files; this bounds the look before a start).
MAX_SAMPLE_DOCUMENTS = 200


class SampleLeft(StrEnum):
    """Why a start ingested nothing: the two reasons a person must tell apart in
    ``/readyz`` (one said "already had documents" for both: was the sample there, or
    were the documents someone else's and the sample never added?)."""

    #: The bucket holds the shipped sample, stored by an earlier start (or by another
    #: replica or worker on the same database, whose turn came first).
    CURRENT = "current"
    #: The bucket holds a document that is not the sample's: the sample is not added.
    OTHERS = "others"

    def status(self, bucket: str, sample_documents: int = 0) -> str:
        """The state as ``/readyz`` shows it (``sample_kb``), in words. ``OTHERS`` with
        ``sample_documents`` (the sample's, stored before the others came): the sample is
        there, only no longer updated at start - "not added" read as if it were missing."""
        if self is SampleLeft.CURRENT:
            return (
                "already there: ingested by an earlier start (or another replica or worker on this database), "
                "and the shipped sample has not changed since"
            )
        if sample_documents:
            return (
                f"kept as stored: the {bucket!r} bucket holds the sample's {sample_documents} "
                f"document{'' if sample_documents == 1 else 's'} beside documents that are not the sample's, "
                "so the start leaves the bucket alone and no longer updates the sample there "
                f"(`agentchat ingest {SAMPLE_KB_DIR} --bucket {bucket}` updates it)"
            )
        return (
            f"not added: the {bucket!r} bucket already holds documents that are not the sample's "
            "(the sample goes only into an empty bucket, or one holding only the sample)"
        )


def is_sample_source(source: str | None) -> bool:
    """A document read from a file of the sample folder: its ``source`` is the file's
    path as shown, ``sample_kb/<name>`` (the folder's parent is left out)."""
    if not source:
        return False
    parts = PurePosixPath(source).parts
    return len(parts) >= 2 and parts[-2] == SAMPLE_KB_DIR.name


def is_packaged_sample_path(origin: str | None) -> bool:
    """A file of the sample folder of an installed package, this one or another install's
    (``.../knowledge/sample_kb/<name>``: a virtualenv of an older release, a Python
    version's ``site-packages`` before an upgrade); not a copy someone made elsewhere."""
    if not origin:
        return False
    return Path(origin).parts[-3:-1] == SAMPLE_KB_DIR.parts[-2:]


async def _sample_bucket_ids(kb: KnowledgeBase, bucket: str) -> set[str] | None:
    """The ids of the bucket's documents when every one of them came from the sample
    folder (none for an empty bucket); ``None`` when any other document is there (the
    bucket belongs to someone)."""
    docs = await kb.list_documents(bucket=bucket, limit=MAX_SAMPLE_DOCUMENTS + 1)
    if len(docs) > MAX_SAMPLE_DOCUMENTS or not all(is_sample_source(d["source"]) for d in docs):
        return None
    return {str(d["doc_id"]) for d in docs}


async def _left_by_another_install(kb: KnowledgeBase, bucket: str, ids: set[str]) -> list[str]:
    """Those of ``ids`` (the bucket's sample documents) still read from another install's
    sample folder. An unchanged file re-ingested from today's folder is re-homed there
    (``knowledge.ingest``), so after an ingest these are the files the shipped sample no
    longer has: under the old path, no re-ingest of today's folder ever removed them.
    Only the sample's own documents (``SAMPLE_IDS``): the path alone also matched
    someone's notes in a folder of the same name, removed at every start."""
    here = {d.id for d in await kb.index.file_documents(bucket, str(SAMPLE_KB_DIR) + os.sep, prefix=True)}
    states = await kb.index.document_states(sorted((ids - here) & SAMPLE_IDS))
    return sorted(i for i, s in states.items() if s.bucket == bucket and is_packaged_sample_path(s.origin))


async def _stored_sample_is_current(kb: KnowledgeBase, bucket: str) -> bool:
    """Whether every shipped file has documents in ``bucket`` carrying its current stamp
    (size, modification time, path as shown, chunking) and cut by today's chunking rules
    or newer ones (``older_than_ours``: an upgrade whose chunker cuts otherwise re-makes
    them, though no file changed; a newer release's cut, on a database shared with it
    during a rolling upgrade, is left as it is), and no stored document comes from a
    file no longer shipped. Vectors do not matter here: documents waiting for vectors
    are the background re-embedding's job, not a reason to ingest again at every start."""

    def walk() -> dict[str, str]:
        out: dict[str, str] = {}
        for e in walk_files(SAMPLE_KB_DIR, SUPPORTED_SUFFIXES):
            if e.skip is None and e.size is not None and e.mtime_ns is not None:
                out[str(e.path)] = file_stamp(e.size, e.mtime_ns, e.shown, kb.config)
        return out

    shipped = await asyncio.to_thread(walk)
    stored = await kb.index.file_documents(bucket, str(SAMPLE_KB_DIR) + os.sep, prefix=True)
    if any(older_than_ours(d.chunk_rules) for d in stored):  # cut by an older release's chunker
        return False
    stamps: dict[str, set[str | None]] = {}
    for d in stored:
        stamps.setdefault(d.origin, set()).add(d.file_stamp.split("\n")[0] if d.file_stamp else None)
    if set(stamps) != set(shipped):
        return False
    return all(stamps[origin] == {stamp} for origin, stamp in shipped.items())


def _shipped_ids(bucket: str) -> list[str]:
    """The ids of the shipped sample's documents in ``bucket``, as its files give them."""
    ids: list[str] = []
    for e in walk_files(SAMPLE_KB_DIR, SUPPORTED_SUFFIXES):
        if e.skip is None:
            ids.extend(item.doc.id or "" for item in load_file(e.path, e.shown, bucket=bucket)[0])
    return ids


async def _stored_sample_rules(kb: KnowledgeBase, bucket: str) -> dict[str, int | None]:
    """doc id → chunking rules of the sample's documents in ``bucket``: those read from
    today's sample folder, and the shipped files' documents still read from another
    install's (the install path moved since they were stored; in a bucket the start leaves
    alone, ``SampleLeft.OTHERS``, nothing re-homes them, and counted by today's folder
    alone they were none: "not added", with the sample right there)."""
    stored = await kb.index.file_documents(bucket, str(SAMPLE_KB_DIR) + os.sep, prefix=True)
    here = {d.id: d.chunk_rules for d in stored}
    elsewhere = [i for i in await asyncio.to_thread(_shipped_ids, bucket) if i not in here]
    for doc_id, s in (await kb.index.document_states(elsewhere)).items():
        if s.bucket == bucket and is_packaged_sample_path(s.origin):
            here[doc_id] = s.chunk_rules
    return here


async def sample_documents(kb: KnowledgeBase, bucket: str = DEFAULT_BUCKET) -> int:
    """How many of the shipped sample's documents ``bucket`` holds (whatever their rules)."""
    return len(await _stored_sample_rules(kb, bucket))


async def older_sample_documents(kb: KnowledgeBase, bucket: str = DEFAULT_BUCKET) -> int:
    """How many of the shipped sample's documents in ``bucket`` were cut by older chunking
    rules than today's (``older_than_ours``; a newer release's are not). Asked only when
    the bucket holds others' documents too (``SampleLeft.OTHERS``): the start never
    touches such a bucket, so those documents keep their older chunks until someone
    ingests the sample's folder into it, and ``/readyz``'s count of older documents never
    reached 0 while it told the operator only to ingest "their folder" again
    (``app.knowledge_component.older_chunking``)."""
    return sum(older_than_ours(rules) for rules in (await _stored_sample_rules(kb, bucket)).values())


async def ensure_sample_kb(kb: KnowledgeBase, *, bucket: str = DEFAULT_BUCKET) -> IngestReport | SampleLeft:
    """Ingest the sample KB into ``bucket`` when that bucket is empty, or when it holds
    only the sample's own documents and the shipped sample differs from them (a file
    added, changed or removed since they were stored, or chunking rules changed since).

    Returns the report, or why nothing was ingested (``SampleLeft``): the bucket holds a
    document that is not the sample's (it is never overwritten or mixed into a bucket
    someone has filled: ``OTHERS``), or the stored sample is the shipped one
    (``CURRENT``). The ingest is the
    ordinary idempotent one: unchanged files are skipped by their stamps, and documents
    of files no longer shipped are removed - those stored from another install's sample
    folder too (the install path moved: a new virtualenv, a Python upgrade), once the
    ingest has re-homed the files still shipped. Other buckets do not matter: a corpus
    ingested into its own bucket leaves the sample KB's answers alone
    (``knowledge_base_search`` covers ``AGENT_KB_DEFAULT_BUCKETS``, the sample's bucket).
    """
    held = await _sample_bucket_ids(kb, bucket)
    if held is None:
        return SampleLeft.OTHERS
    if held and not await _left_by_another_install(kb, bucket, held) and await _stored_sample_is_current(kb, bucket):
        return SampleLeft.CURRENT
    report = await kb.ingest_paths([SAMPLE_KB_DIR], bucket=bucket)
    if held and (gone := await _left_by_another_install(kb, bucket, held)):
        report.deleted += await kb.delete_documents(gone)
    return report
