"""Runs, their replayable event log and their checkpoints, on SQLite.

A step of a run (its events, its checkpoint, the messages it adds to the conversation,
a status change) is one queue item, so it commits as a whole or not at all: the log
never holds an event whose step state was lost, nor a checkpoint ahead of its events.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace

from storage.errors import ConversationBusy, ConversationOwnedByAnother, IdempotencyKeyUsed, TooManyRuns
from storage.records import UNFINISHED, NewRun, RunEvent, RunWrite, StoredRun
from storage.sqlite.database import SqliteDatabase, Statement
from storage.sqlite.dialect import SQLITE
from storage.stores.conversations import CLAIM_SQL, OWNER_SQL, append_statements

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_UNFINISHED_SQL = "(" + ", ".join(f"'{s}'" for s in UNFINISHED) + ")"
_EVENT_SQL = "INSERT INTO run_events(run_id, seq, event, data) VALUES (?, ?, ?, ?)"
_COLUMNS = (
    "r.id, r.conversation_id, r.user_id, r.context_type, r.status, r.created_at, r.input, r.checkpoint, "
    "r.checkpoint_seq, (SELECT COALESCE(MAX(seq), 0) FROM run_events e WHERE e.run_id = r.id), r.multitask, r.resumes, "
    "r.cancel_requested_at IS NOT NULL"
)


def _stored(row: Sequence[object]) -> StoredRun:
    return StoredRun(
        id=str(row[0]),
        conversation_id=str(row[1]),
        user_id=str(row[2]),
        context_type=str(row[3]),
        status=str(row[4]),
        created_at=float(row[5] or 0.0),  # type: ignore[arg-type]
        input=row[6],  # type: ignore[arg-type]
        checkpoint=row[7],  # type: ignore[arg-type]
        checkpoint_seq=int(row[8] or 0),  # type: ignore[call-overload]
        last_seq=int(row[9] or 0),  # type: ignore[call-overload]
        multitask=str(row[10]),
        resumes=int(row[11] or 0),  # type: ignore[call-overload]
        cancel_requested=bool(row[12]),
    )



def claim_sync(conn: sqlite3.Connection, conversation_id: str, user_id: str) -> None:
    """``storage.stores.conversations.claim_in`` for a plain connection (a transaction
    run on the writer's own thread, in one hop)."""
    conn.execute(CLAIM_SQL, (conversation_id, user_id))
    row = conn.execute(OWNER_SQL, (conversation_id,)).fetchone()
    if row is None or row[0] != user_id:
        raise ConversationOwnedByAnother(conversation_id)


def step_statements(step: RunWrite) -> list[Statement]:
    out: list[Statement] = [(_EVENT_SQL, (step.run_id, e.seq, e.event, e.data)) for e in step.events]
    if step.messages:
        out += append_statements(SQLITE, step.conversation_id, step.messages, step.run_id)
    if step.checkpoint is not None:
        out.append(
            (
                "UPDATE runs SET checkpoint = ?, checkpoint_seq = ? WHERE id = ?",
                (step.checkpoint, step.checkpoint_seq or 0, step.run_id),
            )
        )
    if step.summary is not None:
        s = step.summary
        out.append(
            (
                "UPDATE runs SET tool_call_count = ?, used_tools = ?, keyword_count = ? WHERE id = ?",
                (s.tool_call_count, ",".join(s.used_tools), s.keyword_count, step.run_id),
            )
        )
    if step.finished:
        out.append(
            (
                f"UPDATE runs SET status = ?, finished_at = {_NOW}, input = NULL, checkpoint = NULL WHERE id = ?",
                (step.status or "completed", step.run_id),
            )
        )
    elif step.status is not None:
        out.append(
            (
                f"UPDATE runs SET status = ?, started_at = COALESCE(started_at, {_NOW}) WHERE id = ?",
                (step.status, step.run_id),
            )
        )
    return out


def _check_cap(conn: sqlite3.Connection, run: NewRun) -> None:
    """Refuse the run when its user already has the cap's number of unfinished runs —
    counted inside the admitting ``BEGIN IMMEDIATE`` transaction, which every process on
    the file takes one at a time, so two admissions never both see the last slot free."""
    cap = run.max_unfinished_per_user
    assert cap is not None
    rows = conn.execute(
        f"SELECT id FROM runs WHERE user_id = ? AND status IN {_UNFINISHED_SQL} LIMIT ?",
        (run.user_id, cap + len(run.ending_unwritten)),
    ).fetchall()
    ending = set(run.ending_unwritten)
    if sum(1 for r in rows if str(r[0]) not in ending) >= cap:
        raise TooManyRuns(run.user_id)


class SqliteRunStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def create(self, run: NewRun) -> list[str]:
        def tx(conn: sqlite3.Connection) -> list[str]:
            if run.idempotency_key is not None:  # one writer: this check and the insert are atomic
                row = conn.execute(
                    "SELECT id FROM runs WHERE user_id = ? AND idempotency_key = ?", (run.user_id, run.idempotency_key)
                ).fetchone()
                if row is not None:
                    raise IdempotencyKeyUsed(str(row[0]))
            claim_sync(conn, run.conversation_id, run.user_id)
            others = [
                str(r[0])
                for r in conn.execute(
                    f"SELECT id FROM runs WHERE conversation_id = ? AND status IN {_UNFINISHED_SQL} ORDER BY rowid",
                    (run.conversation_id,),
                )
            ]
            if others and run.multitask == "reject":
                raise ConversationBusy(run.conversation_id)
            if run.max_unfinished_per_user is not None:
                _check_cap(conn, run)
            if others and run.multitask == "interrupt":  # their owners end them (``cancel_requests``)
                conn.executemany(
                    f"UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, {_NOW}) WHERE id = ?",
                    [(rid,) for rid in others],
                )
            conn.execute(
                "INSERT INTO runs(id, conversation_id, user_id, context_type, status, input, multitask, "
                f"idempotency_key, lease_owner, lease_until) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, "
                f"CASE WHEN ? THEN {_NOW} + ? END)",
                (run.id, run.conversation_id, run.user_id, run.context_type, run.input, run.multitask,
                 run.idempotency_key, run.lease_owner, run.lease_owner is not None, float(run.lease_s)),
            )
            return others

        return await self.db.transact_sync(tx)

    async def request_cancel(self, run_id: str) -> StoredRun | None:
        """Mark the run's cancel if it has not ended; the run as stored afterwards. Its
        owner finds the mark on its next look (``cancel_requests``, every fraction of a
        second: SQLite has no notifications)."""
        await self.db.execute([(
            f"UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, {_NOW}) "
            f"WHERE id = ? AND status IN {_UNFINISHED_SQL}",
            (run_id,),
        )])
        return await self.get(run_id)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        """Which of ``run_ids`` (unfinished) have a cancel request."""
        if not run_ids:
            return set()
        marks = ", ".join("?" * len(run_ids))
        rows = await self.db.fetchall(
            f"SELECT id FROM runs WHERE id IN ({marks}) AND cancel_requested_at IS NOT NULL "
            f"AND status IN {_UNFINISHED_SQL}",
            tuple(run_ids),
        )
        return {str(r[0]) for r in rows}

    async def get(self, run_id: str) -> StoredRun | None:
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM runs r WHERE r.id = ?", (run_id,))
        return _stored(row) if row else None

    async def find_by_idempotency_key(self, user_id: str, key: str) -> StoredRun | None:
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM runs r WHERE r.user_id = ? AND r.idempotency_key = ?", (user_id, key)
        )
        return _stored(row) if row else None

    async def events_after(self, run_id: str, after: int, limit: int = 10_000) -> list[RunEvent]:
        rows = await self.db.fetchall(
            "SELECT seq, event, data FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, after, limit),
        )
        return [RunEvent(int(s), str(e), str(d)) for s, e, d in rows]

    def write(
        self,
        step: RunWrite,
        *,
        on_commit: Callable[[], None] | None = None,
        on_fail: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.db.enqueue(step_statements(step), on_commit=on_commit, on_fail=on_fail)

    async def commit(self, step: RunWrite, *, on_commit: Callable[[], None] | None = None) -> None:
        await self.db.commit(step_statements(step), on_commit=on_commit)

    async def unfinished(self) -> list[StoredRun]:
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM runs r WHERE r.status IN {_UNFINISHED_SQL} ORDER BY r.rowid"
        )
        return [_stored(r) for r in rows]

    async def set_status(self, run_ids: Sequence[str], status: str) -> None:
        if run_ids:
            # An ending forgets the caller's credentials (``input``), as a stored ending does.
            sql = (
                "UPDATE runs SET status = ? WHERE id = ?"
                if status in UNFINISHED
                else "UPDATE runs SET status = ?, input = NULL, checkpoint = NULL WHERE id = ?"
            )
            await self.db.execute([(sql, (status, rid)) for rid in run_ids])

    async def count_resume(self, run_id: str) -> None:
        await self.db.execute([("UPDATE runs SET resumes = resumes + 1 WHERE id = ?", (run_id,))])

    # --- leases (one process by default: the same rules, with one claimant) -------------------

    async def claim(
        self, owner: str, lease_s: float, *, expired_only: bool = True, limit: int = 100
    ) -> list[StoredRun]:
        """Take unfinished runs whose lease expired (or that never had one) — all of them
        when not ``expired_only`` — for ``owner`` (one writer: atomic). Oldest first."""
        expired = f"AND (lease_until IS NULL OR lease_until < {_NOW})" if expired_only else ""

        def tx(conn: sqlite3.Connection) -> dict[str, float | None]:
            expired_at = {
                str(r[0]): r[1]
                for r in conn.execute(
                    f"SELECT id, lease_until FROM runs WHERE status IN {_UNFINISHED_SQL} {expired} "
                    "ORDER BY rowid LIMIT ?",
                    (limit,),
                )
            }
            conn.executemany(
                f"UPDATE runs SET lease_owner = ?, lease_until = {_NOW} + ? WHERE id = ?",
                [(owner, float(lease_s), rid) for rid in expired_at],
            )
            return expired_at

        claimed = await self.db.transact_sync(tx)
        out = []
        for rid, until in claimed.items():  # insertion order: oldest first
            stored = await self.get(rid)
            if stored is not None:
                out.append(replace(stored, lease_expired_at=until))
        return out

    async def renew(self, owner: str, run_ids: Sequence[str], lease_s: float) -> set[str]:
        """Extend ``owner``'s leases; returns the runs it still holds."""
        if not run_ids:
            return set()

        def tx(conn: sqlite3.Connection) -> set[str]:
            held: set[str] = set()
            for rid in run_ids:
                cur = conn.execute(
                    f"UPDATE runs SET lease_until = {_NOW} + ? WHERE id = ? AND lease_owner = ?",
                    (float(lease_s), rid, owner),
                )
                if cur.rowcount:
                    held.add(rid)
            return held

        return await self.db.transact_sync(tx)

    async def release_leases(self, owner: str, run_ids: Sequence[str]) -> None:
        """Give runs up at once (shutdown): the next process takes them without waiting."""
        if run_ids:
            sql = "UPDATE runs SET lease_until = NULL WHERE id = ? AND lease_owner = ?"
            await self.db.execute([(sql, (rid, owner)) for rid in run_ids])
