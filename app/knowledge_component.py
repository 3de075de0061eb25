"""The knowledge base as the app sees it: its /readyz state and the sample's ingest.

Replicas and workers on one PostgreSQL database ingest the shipped sample in turns (a
session advisory lock), a failed attempt is tried again with a growing pause, and
``/readyz`` says at each moment which of these holds. ``app.rooms`` builds it beside
the other rooms.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.ops.leader import LeaderLock

if TYPE_CHECKING:
    from storage.interfaces import StorageBundle

log = logging.getLogger("agentchat.rooms")

#: The first pause after a failed sample ingest, and the longest (``KnowledgeComponent``).
SAMPLE_RETRY_FIRST_S = 2.0
SAMPLE_RETRY_MAX_S = 60.0
#: ``sample_kb`` while another process on the database ingests the sample (a 503).
SAMPLE_WAITING = "ingesting: waiting while another replica or worker ingests it"
#: The session advisory lock the sample's ingest takes on PostgreSQL ("AGSAMPLE").
SAMPLE_LOCK = int.from_bytes(b"AGSAMPLE", "big")
#: How long a process waits for its turn before it ingests without one (``_wait_for_turn``).
SAMPLE_TURN_WAIT_MAX_S = 300.0


def sample_turns(storage: StorageBundle) -> LeaderLock | None:
    """The lock the processes on one PostgreSQL database take in turn around the sample's
    ingest: a session advisory lock on a connection of its own (``storage.postgres.
    leader_lock``: released when that session ends, the process's death included).
    ``None`` on SQLite, where the one writer orders the writes."""
    if storage.engine != "postgres":
        return None
    from storage.postgres.leader_lock import AdvisoryLeaderLock

    db: Any = storage.db  # PostgresDatabase: its URL
    return AdvisoryLeaderLock(db.url, key=SAMPLE_LOCK, application_name="agentchat-sample-kb")


@dataclass(slots=True)
class KnowledgeComponent:
    """The KB as the app sees it, with the sample-KB ingestion status for /readyz."""

    kb: Any
    sample: str = "not requested"
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    #: Taken around each attempt of the sample's ingest by the processes sharing a
    #: PostgreSQL database (``sample_turns``); ``None``: this process's writes need none.
    turns: LeaderLock | None = None
    #: The pause after a failed attempt, doubled at each failure up to ``retry_max_s``.
    retry_first_s: float = SAMPLE_RETRY_FIRST_S
    retry_max_s: float = SAMPLE_RETRY_MAX_S
    #: How often a process waiting for its turn asks again.
    turn_poll_s: float = 0.25
    #: The longest wait for the turn: a holder that hangs alive (stopped, its loop stuck)
    #: keeps its session and the lock, and must not keep every other replica unready.
    turn_wait_max_s: float = SAMPLE_TURN_WAIT_MAX_S
    #: Waits out the pause before the next attempt (a test watches the state meanwhile).
    pause: Callable[[float], Awaitable[None]] = asyncio.sleep
    #: ``AGENT_KB_DEFAULT_BUCKETS``: what a search covers when nobody names buckets.
    default_buckets: tuple[str, ...] = ()
    #: The sample's bucket holds others' documents too (``SampleLeft.OTHERS``): the start
    #: leaves the sample's documents there as they are, older chunks included.
    sample_beside_others: bool = False

    async def readiness(self) -> dict[str, Any]:
        """Not ready while the sample knowledge base loads or after its load failed
        (the README's first question would be answered "I could not find an answer"),
        nor while documents wait for vectors and the embedder fails: a search by meaning
        cannot see them until the re-embedding in the background (``knowledge.backfill``)
        has given them theirs — then it is ready again by itself. Documents waiting while
        the re-embedding makes progress (a corpus moving to another embedding model can
        take hours) are shown here and in a metric but keep the replica in service: text
        search finds them meanwhile, and every semantic search says what it cannot see.

        The counts never decide ``ok`` and are never counted in the probe
        (``knowledge.kb_counts_memo``: ~1 s at 1M chunks, Kubernetes' default timeout): those
        kept are shown at once and ``counted`` says how current they are (``current``,
        their ``generation`` and ``age_s``, ``counting`` while the one background count
        runs, its ``error``). What decides is read at every probe: the sample's state, the
        re-embedding's failures and the documents it has to embed - from counts of the
        stored generation when they are current, else from the re-embedding's own tally
        (counted at its passes, moved by this process's ingests and embeddings).

        The sample's state is taken before the counts are read: taken after, an ingest
        ending during the reads paired "ingested 106 chunks" (ready) with counts of none
        (1 of 20 fresh starts in a CI run). Taken first, "ingested" beside ``current``
        counts means they were read after its commit.

        The re-embedding's tally is read as it was before the generation was: counts
        current at that generation replace it only if nothing moved it since (a pass that
        stored vectors and ended during this probe's awaits left 0 there, and counts read
        before its commit said 1: "ready" beside a document waiting, and the tally kept
        saying 1 until the next count)."""
        sample = self.sample
        backfill = self.kb.backfill
        moves = backfill.tally_moves  # before the generation is read: see below
        stats = await self.kb.status.stats(wait=False)
        semantic = await self.kb.status.semantic(wait=False)
        loading = sample.startswith("ingesting")
        failed = sample.startswith("failed")
        has_embedder = semantic["embedder"] is not None
        counted = stats["counted"]
        without = stats.get("documents_without_current_vectors")
        if not has_embedder:
            pending = backfill.pending = 0
        elif counted["current"] and without is not None and backfill.tally_moves == moves:
            pending = backfill.pending = int(without)  # exact now: nothing written since the count
        else:  # older counts, or the tally moved since they were found current: the tally is fresher
            pending = int(backfill.pending if backfill.pending is not None else without or 0)
        stalled = bool(pending) and backfill.failures > 0  # the last pass failed: no progress
        # The shared corpus only: /readyz answers anyone, and a count that moved with a
        # conversation's attachments would tell them when someone attached a file and
        # how long it was. (Documents waiting for vectors include them: the re-embedding's work.)
        private = stats.get("private") or {}
        out: dict[str, Any] = {
            "ok": not (loading or failed or stalled),
            "documents": _less(stats.get("documents"), private.get("documents")),
            "chunks": _less(stats.get("chunks"), private.get("chunks")),
            "vectors": _less(stats.get("vectors"), private.get("vectors")),
            "documents_without_current_vectors": stats.get("documents_without_current_vectors"),
            "pending_vectors": pending,
            "counted": counted,
            "sample_kb": sample,
            "semantic_search": semantic,
            "reembedding": backfill.status(),
        }
        if stats.get("documents_older_chunking") is None:  # not counted yet: nothing to say of them
            out["older_chunking"], out["newer_chunking"] = {"documents": None}, {"documents": None}
        else:
            older = int(stats["documents_older_chunking"])
            of_sample = await self.older_sample_documents() if older and self.sample_beside_others else 0
            out["older_chunking"] = older_chunking(older, sample, of_sample)
            out["newer_chunking"] = newer_chunking(int(stats.get("documents_newer_chunking") or 0))
        if self.default_buckets and "*" not in self.default_buckets:
            out["default_buckets"] = await self.default_bucket_check()
        if loading:
            out["detail"] = "the sample knowledge base is being ingested"
        elif failed:
            out["detail"] = f"the sample knowledge base could not be ingested ({sample})"
        elif pending:
            why = backfill.last_error if backfill.state == "waiting to retry" else None
            out["detail"] = (
                f"{pending} document(s) wait for vectors of {semantic['embedder']}: found by text search now, "
                "re-embedded in the background" + (f" (the embedder failed: {why})" if why else "")
            )
        return out

    async def older_sample_documents(self) -> int:
        """The sample's documents cut by older chunking rules in its bucket, left there
        by the start beside others' documents (``knowledge.sample.older_sample_documents``)."""
        from knowledge.kb import DEFAULT_BUCKET
        from knowledge.sample import older_sample_documents

        return await older_sample_documents(self.kb, DEFAULT_BUCKET)

    async def default_bucket_check(self) -> dict[str, Any]:
        """``/readyz``'s ``default_buckets``: the configured ones and those that are no
        bucket (now: the names reread when one is missing). A missing one keeps the
        replica in service — buckets may be created after the start — but is shown
        here, in ``agentchat_kb_default_buckets_missing`` and in every search it
        leaves empty (the tool result's ``missing_buckets``)."""
        missing = await self.kb.missing_buckets(self.default_buckets)
        out: dict[str, Any] = {"ok": not missing, "configured": list(self.default_buckets), "missing": missing}
        if missing:
            out["detail"] = _missing_detail(missing, self.kb.bucket_names())
        return out

    def missing_default_buckets(self) -> int:
        """How many default buckets are no bucket as last read (``/metrics``: no read)."""
        if not self.default_buckets or "*" in self.default_buckets:
            return 0
        return len(self.kb.absent_buckets(self.default_buckets))

    async def warn_missing_default_buckets(self) -> None:
        """At start, once the sample's ingest (which makes ``default``) has ended: one
        WARNING naming each default bucket that is no bucket and the buckets there are.
        Without it a typo in ``AGENT_KB_DEFAULT_BUCKETS`` served every knowledge
        question "I could not find an answer" with ``/readyz`` 200 and not a word."""
        if not self.default_buckets or "*" in self.default_buckets:
            return
        if self.tasks:  # the sample's ingest: however it ends, the check comes after
            await asyncio.wait(self.tasks)
        try:
            missing = await self.kb.missing_buckets(self.default_buckets)
        except Exception as exc:  # the database away: /readyz's entry says it once it is back
            log.warning(
                "could not check the default buckets (AGENT_KB_DEFAULT_BUCKETS) at start",
                extra={"error": f"{type(exc).__name__}: {exc}"[:300]},
            )
            return
        if missing:
            known = self.kb.bucket_names()
            log.warning(
                _missing_detail(missing, known),
                extra={"setting": "AGENT_KB_DEFAULT_BUCKETS", "missing": missing, "known_buckets": known},
            )

    async def ingest_sample(self) -> None:
        """Ingest the sample until it is in: a failed attempt (the database briefly
        unreachable, an embedder that did not answer) is tried again after a pause that
        doubles up to ``retry_max_s``, and ``/readyz`` says meanwhile that it failed, at
        which attempt, when the next one comes and why (``failed (attempt N, …): …``, a
        503). Without the retry, one failure kept a replica out of every readiness probe
        until it was restarted, while it served chats."""
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._ingest_sample_once()
                return
            except Exception as exc:  # the service still works; search just finds nothing yet
                pause = min(self.retry_first_s * 2 ** (attempt - 1), self.retry_max_s)
                self.sample = f"failed (attempt {attempt}, trying again in {pause:g} s): {type(exc).__name__}: {exc}"[
                    :400
                ]
                if attempt == 1:
                    log.exception("sample knowledge base ingestion failed", extra={"retry_in_s": pause})
                else:
                    log.warning(
                        "sample knowledge base ingestion failed again",
                        extra={"attempt": attempt, "retry_in_s": pause, "error": f"{type(exc).__name__}: {exc}"[:300]},
                    )
            await self.pause(pause)

    async def _ingest_sample_once(self) -> None:
        """One attempt, in turn with the other processes on the database: replicas (or
        workers) starting together on one fresh PostgreSQL database all found the bucket
        empty and wrote the same documents side by side, and all but one failed on
        ``kb_chunks_doc_position``. Under ``turns`` (a session advisory lock) the others
        wait, then find the sample there (``already there``). SQLite needs no turns:
        its one writer makes each document's replacement one transaction after another."""
        from knowledge.kb import DEFAULT_BUCKET
        from knowledge.sample import SampleLeft, ensure_sample_kb, sample_documents

        self.sample = "ingesting"
        turns = self.turns
        try:
            if turns is not None:
                await self._wait_for_turn(turns)
                self.sample = "ingesting"
            report = await ensure_sample_kb(self.kb, bucket=DEFAULT_BUCKET)
        finally:
            if turns is not None:
                await turns.release()
        self.sample_beside_others = report is SampleLeft.OTHERS
        if isinstance(report, SampleLeft):  # nothing ingested: say which of the reasons
            beside = await sample_documents(self.kb, DEFAULT_BUCKET) if self.sample_beside_others else 0
            self.sample = report.status(DEFAULT_BUCKET, beside)
        elif report.skipped or report.deleted or report.rechunked:  # an older sample brought up to the shipped one
            rechunked = f", {report.rechunked} re-chunked by today's chunking rules" if report.rechunked else ""
            self.sample = (
                f"ingested {report.chunks} chunks (sample updated: {report.added} added, {report.updated} updated"
                f"{rechunked}, {report.deleted} removed, {report.skipped} unchanged)"
            )
        else:
            self.sample = f"ingested {report.chunks} chunks"
        log.info("sample knowledge base", extra={"status": self.sample})

    async def _wait_for_turn(self, turns: LeaderLock) -> None:
        """Until this process holds ``turns``; a lock that cannot even be asked for (the
        database unreachable) is this attempt's failure, retried like any other.

        At most ``turn_wait_max_s``: a holder that hangs while alive (SIGSTOP, a stuck
        event loop) keeps its session, so its lock never ends by itself. Past that this
        process ingests without the turn and says so; if the two writes then clash, the
        clash is a failed attempt, retried (and waiting for the turn again) like any other."""
        deadline = time.monotonic() + self.turn_wait_max_s
        while not await turns.try_acquire():
            if turns.last_error is not None:
                raise RuntimeError(f"cannot take the sample ingest's turn: {turns.last_error}")
            if time.monotonic() >= deadline:
                log.warning(
                    "sample knowledge base: another process has held the ingest's turn too long; ingesting without it",
                    extra={"waited_s": self.turn_wait_max_s},
                )
                return
            self.sample = SAMPLE_WAITING
            await asyncio.sleep(self.turn_poll_s)


def older_chunking(documents: int, sample: str, of_sample: int = 0) -> dict[str, Any]:
    """``/readyz``'s word on shared documents whose chunks were cut by older chunking rules
    than today's (``knowledge.chunking.CHUNK_RULES``; an upgrade's chunker cut otherwise):
    how many, and how to re-make them. They keep the replica in service - every search
    finds them, only their passages are cut as the older release cut them - but an
    operator must learn that the answers read from them are not those of today's rules.
    The sample's own documents are re-made by the start itself; while that runs
    (``sample``: ``ingesting``) they are counted too, and the detail says so. Not in a
    bucket that holds others' documents too (the start never touches one): ``of_sample``
    of them are the sample's there, and the detail names the folder to ingest - "their
    folder" is inside the installed package, and the count never reached 0 otherwise."""
    out: dict[str, Any] = {"documents": documents}
    if documents:
        out["detail"] = (
            f"{documents} document(s) were cut into chunks by older chunking rules: run `agentchat ingest` "
            "on their folder again (into the same bucket) or post them again to re-chunk them"
            + ("; the sample knowledge base is being re-made now" if sample.startswith("ingesting") else "")
        )
    if documents and of_sample:
        from knowledge.kb import DEFAULT_BUCKET
        from knowledge.sample import SAMPLE_KB_DIR

        out["sample_documents"] = of_sample
        out["detail"] += (
            f"; {of_sample} of them are the shipped sample's, in the {DEFAULT_BUCKET!r} bucket beside other "
            f"documents, which the start leaves alone: `agentchat ingest {SAMPLE_KB_DIR} --bucket {DEFAULT_BUCKET}` "
            "re-chunks them"
        )
    return out


def newer_chunking(documents: int) -> dict[str, Any]:
    """``/readyz``'s word on shared documents cut by newer chunking rules than this
    release's: a newer release shares the database (a rolling upgrade under way) or was
    rolled back from. This release searches them as they are and leaves them alone, so
    the operator must hear that nothing is to be done - before, they were counted as
    older and the detail said to ingest them again, which this release would only have
    cut back down."""
    out: dict[str, Any] = {"documents": documents}
    if documents:
        out["detail"] = (
            f"{documents} document(s) were cut into chunks by newer chunking rules than this release's (a rolling "
            "upgrade in progress, or a rollback): searched as they are and left alone - not an error, nothing to "
            "ingest again"
        )
    return out


def _missing_detail(missing: list[str], known: list[str]) -> str:
    """Said whether the operator set ``AGENT_KB_DEFAULT_BUCKETS`` or left its ``default``
    (a fresh database without the sample: nothing to search yet either), with the two ways
    out: the command that fills the bucket, or a setting that names buckets there are."""
    names = ", ".join(repr(b) for b in missing)
    there = ", ".join(known) or "(none)"
    return (
        f"no bucket {names}, which knowledge searches without a named bucket cover (AGENT_KB_DEFAULT_BUCKETS): "
        f"they find nothing there until it is created (`agentchat ingest PATH --bucket NAME` fills it) or the "
        f"setting names buckets there are (buckets there are: {there})"
    )


def _less(total: Any, private: Any) -> Any:
    """``total`` without ``private`` (never below 0: the in-memory vectors and the stored
    counts are read a moment apart); ``total`` as it is when it is no number."""
    if not isinstance(total, int) or not isinstance(private, int):
        return total
    return max(0, total - private)
