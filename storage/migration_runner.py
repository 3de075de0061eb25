"""The numbered migration steps' shape, their names, and the runner that applies them,
written once for both engines.

Why: a schema version must mean the same tables on both engines (``agentchat
migrate-db`` checks the numbers), so a step's number and name are said here once and
each engine only supplies its own SQL for that number (``storage/*/migrations.py``:
never edited once released). The runner's order is the same everywhere — make the
version table, then for each step, in its own transaction: skip it if recorded, else
run its statements and record it — while what a transaction, a lock or a tolerated
error is stays with the engine (``MigrationRunner``'s hooks). A database whose recorded
version is past this release's last step was migrated by a newer release and is refused
(``SchemaTooNew``) before anything is read or written: there are no down-migrations.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass

from storage.errors import SchemaTooNew

VERSION_TABLE = "schema_version"

#: Step 20 on both engines (portable SQL). Issue 25: runs ended by a bare status write
#: (a run found ended at recovery) had no ``finished_at``, so the retention pass never
#: compacted them. Their true end is not stored anywhere (events carry no time); the
#: run's start (else its admission) stands in. Earlier than the true end, it only lets
#: compaction come sooner, and compaction keeps replay's text (``storage.event_folding``).
RUN_ENDINGS_BACKFILL: tuple[str, ...] = (
    "UPDATE runs SET finished_at = COALESCE(started_at, created_at) WHERE finished_at IS NULL "
    "AND status NOT IN ('queued', 'running', 'interrupted', 'waiting_approval')",
)

#: Step 21 on both engines (portable SQL). Issue 24 item 4: a document read from a file
#: keeps that file's stamp (``size:mtime_ns`` and the chunking it was cut with, see
#: ``knowledge.ingest``), so a re-ingest skips an unchanged file without opening it.
#: Documents stored before have none: their first re-ingest reads them and stamps them.
KB_FILE_STAMPS: tuple[str, ...] = ("ALTER TABLE kb_documents ADD COLUMN file_stamp TEXT",)

#: Step 22 on both engines (portable SQL; PostgreSQL adds its lease check below it).
#: Issue 23: a per-claim fencing token. A run's owner alone cannot tell two copies of the
#: run inside one process apart (a lapsed lease taken back while the old copy still
#: writes), so every claim that changes hands counts ``lease_epoch`` up in the claiming
#: statement and every leased step names the epoch it was claimed under.
RUN_LEASE_EPOCHS: tuple[str, ...] = ("ALTER TABLE runs ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0",)

#: Step 28 on both engines (portable SQL). A running server keeps state derived from the
#: knowledge base in memory (SQLite: the vector matrix; both: text statistics and bucket
#: schemas), and a change made by another process (``agentchat ingest`` or ``docs rm``
#: while it runs, another worker, another replica) reached none of it. Every write of
#: the knowledge base counts ``generation`` up in its own transaction
#: (``storage.stores.kb_generation``), so one indexed read tells a process whether anything
#: changed that it did not write itself.
KB_GENERATION: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS kb_generation (id INTEGER PRIMARY KEY CHECK (id = 1), generation BIGINT NOT NULL)",
    "INSERT INTO kb_generation(id, generation) VALUES (1, 0)",
)

#: Step 32 on both engines (portable SQL). The version of the chunking rules
#: (``knowledge.chunking.CHUNK_RULES``) each document was cut by: its content hash and its
#: file's stamp say nothing of the chunker's code, so an upgrade whose chunker cut
#: differently kept every stored document's old chunks. Documents stored before have none
#: (``NULL``): the rules that cut them are unknown, so they count as older and are re-made
#: like any other (``knowledge.ingest``, ``knowledge.sample``).
KB_CHUNK_RULES: tuple[str, ...] = ("ALTER TABLE kb_documents ADD COLUMN chunk_rules INTEGER",)

#: Each step's name, as recorded in the version table (same text on both engines).
STEP_NAMES: Mapping[int, str] = {
    1: "conversations, runs, tool calls, drafts, keywords, external results, knowledge base",
    2: "durable runs: input, checkpoint, multitask policy; one version table",
    3: "run summary: tool_call_count, used_tools, keyword_count",
    4: "knowledge base: the page of each chunk of a paged document",
    5: "external answers: keyword terms, vectors of answers and keywords",
    6: "runs: the Idempotency-Key a client started each run with",
    7: "knowledge base: the absolute origin of ingested files, apart from their shown source",
    8: "shared limits: request counts per window, an index of each user's unfinished runs",
    9: "runs: the lease of the replica executing each run",
    10: "app secrets shared by every process: the stream-token signing key",
    11: "knowledge base: chunk vectors kept in the row, for the dense search in the database",
    12: "knowledge base: chunk tsvectors kept in the row, for full-text ranking",
    13: "tool-call log: indexes on conversation_id and status (seed 001)",
    14: "runs: a cancel requested on any replica",
    15: "owners: saved web answers, keywords and their associations are their user's",
    16: "conversations: ids are per user (conversations and messages keyed by user and id)",
    17: "conversations: title; runs: feedback and event-log compaction (issue 25)",
    18: "knowledge base: impact-ordered postings of every chunk's lexemes, for full-text top-k",
    19: "knowledge base: a bulk load posts its chunks set-wise (the per-statement trigger steps aside)",
    20: "runs: every ended run has its end time (runs ended by a bare status write had none)",
    21: "knowledge base: the stamp (size, modification time) of the file each document was read from",
    22: "runs: a lease epoch minted by each claim, checked by every leased step (fencing)",
    23: "knowledge base: each posting's term frequency and chunk length, for exact scores from the postings",
    24: "knowledge base: each typed field's index covers its bucket's other fields (SQLite)",
    25: "knowledge base: the chunks' (document, position) key carries the chunk id (PostgreSQL)",
    26: "knowledge base: each chunk carries its bucket, for one HNSW graph per bucket (PostgreSQL)",
    27: "knowledge base: the chunk ids issued, so none is given twice (SQLite)",
    28: "knowledge base: a generation every write counts up, so every process sees another's changes",
    29: "runs: events of runs not yet settled are appended to a live log (SQLite)",
    30: "runs: where a settled run's rows were in the live log, for a bounded delete (SQLite)",
    31: "runs: a fingerprint of the request an Idempotency-Key was first used for",
    32: "knowledge base: the version of the chunking rules each document was cut by",
}


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    #: A step that rebuilds a table others reference (SQLite cannot change a UNIQUE
    #: constraint in place) runs with foreign keys off, as SQLite's own procedure for
    #: other schema changes says: dropping the old table would otherwise cascade to its
    #: children. The keys are checked before the step commits.
    rebuilds: bool = False


def numbered(
    statements: Mapping[int, tuple[str, ...]], *, rebuilds: frozenset[int] = frozenset()
) -> tuple[Migration, ...]:
    """An engine's steps: its statements for each number, named from ``STEP_NAMES``."""
    if sorted(statements) != list(range(1, len(statements) + 1)):
        raise ValueError("migration steps must be numbered 1, 2, … without gaps")
    return tuple(Migration(v, STEP_NAMES[v], statements[v], v in rebuilds) for v in sorted(statements))


class MigrationRunner:
    """Applies pending steps in order; an engine's subclass says how (on one connection)."""

    #: The version table's timestamp column type.
    time_type = "REAL"
    #: The engine's parameter placeholder.
    mark = "?"

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        raise NotImplementedError

    def step(self, step: Migration) -> contextlib.AbstractAsyncContextManager[None]:
        """One step's transaction (committed when the block ends without an error)."""
        raise NotImplementedError

    async def applied(self, step: Migration) -> bool:
        """Whether ``step`` is recorded (asked inside its transaction)."""
        raise NotImplementedError

    async def newest(self) -> int:
        """The highest version recorded (0 for a new database), asked inside each step's
        transaction."""
        raise NotImplementedError

    async def apply(self, statement: str) -> None:
        await self.execute(statement)

    async def code(self, step: Migration) -> None:
        """A step's work that fixed SQL cannot say (the engine's own, after the step's
        statements): e.g. a statement for each bucket's side table, whose names only
        the database knows. Nothing by default."""

    async def check(self, step: Migration) -> None:
        """After a step's statements, before it is recorded: refuse a broken result."""

    async def run(self, migrations: tuple[Migration, ...]) -> int:
        """Apply every pending step; the schema version afterwards."""
        await self.execute(
            f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
            f"version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at {self.time_type} NOT NULL)"
        )
        known = max((step.version for step in migrations), default=0)
        version = 0
        for step in migrations:
            async with self.step(step):
                # Read inside the step's transaction, under the lock its writes take: on
                # SQLite a version read before it could predate a newer release that was
                # migrating the file at that instant and commits while this one waits for
                # the lock; every step checks, since that release may commit between two.
                found = await self.newest()
                if found > known:  # a newer release migrated this database: never run on it
                    raise SchemaTooNew(found, known)
                if not await self.applied(step):
                    for statement in step.statements:
                        await self.apply(statement)
                    await self.code(step)
                    await self.check(step)
                    m = self.mark
                    await self.execute(
                        f"INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES ({m}, {m}, {m})",
                        (step.version, step.name, time.time()),
                    )
            version = step.version
        return version


__all__ = [
    "KB_CHUNK_RULES",
    "KB_FILE_STAMPS",
    "KB_GENERATION",
    "RUN_LEASE_EPOCHS",
    "STEP_NAMES",
    "VERSION_TABLE",
    "Migration",
    "MigrationRunner",
    "numbered",
]
