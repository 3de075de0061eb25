"""Runs, their replayable event log and their checkpoints, on PostgreSQL.

A step of a run (its events, its checkpoint, the messages it adds to the conversation,
a status change) is one item of the ordered writer, so it commits as a whole or not at
all, after every step queued before it. ``create`` claims the conversation and reads
its unfinished runs with the conversation's row locked, so two replicas admitting runs
on one conversation see each other (the ``reject`` policy holds across replicas).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import psycopg

from storage.errors import ConversationBusy, IdempotencyKeyUsed, LeaseLost, TooManyRuns
from storage.postgres.database import Conn, PostgresDatabase, Statement
from storage.postgres.dialect import POSTGRES, PostgresTx
from storage.postgres.notify_payload import encode_payload
from storage.records import UNFINISHED, NewRun, RunEvent, RunWrite, StoredRun
from storage.stores.conversations import append_statements, claim_in

_NOW = "(extract(epoch from clock_timestamp())::double precision)"
_EVENT_SQL = "INSERT INTO run_events(run_id, seq, event, data) VALUES (%s, %s, %s, %s)"
_COLUMNS = (
    "r.id, r.conversation_id, r.user_id, r.context_type, r.status, r.created_at, r.input, r.checkpoint, "
    "r.checkpoint_seq, (SELECT COALESCE(MAX(seq), 0) FROM run_events e WHERE e.run_id = r.id), r.multitask, r.resumes, "
    "r.cancel_requested_at IS NOT NULL"
)


def _blob(value: object) -> bytes | None:
    """A ``bytea`` column as bytes (psycopg hands back ``bytes`` or ``memoryview``)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"expected a bytea value, got {type(value).__name__}")


def _stored(row: Sequence[object]) -> StoredRun:
    return StoredRun(
        id=str(row[0]),
        conversation_id=str(row[1]),
        user_id=str(row[2]),
        context_type=str(row[3]),
        status=str(row[4]),
        created_at=float(row[5] or 0.0),  # type: ignore[arg-type]
        input=_blob(row[6]),
        checkpoint=_blob(row[7]),
        checkpoint_seq=int(row[8] or 0),  # type: ignore[call-overload]
        last_seq=int(row[9] or 0),  # type: ignore[call-overload]
        multitask=str(row[10]),
        resumes=int(row[11] or 0),  # type: ignore[call-overload]
        cancel_requested=bool(row[12]),
    )


#: Channel of the notification every committed step with events sends (payload
#: ``run_id:last_seq`` and, when they fit, the events: ``notify_payload``): followers on
#: other replicas get the new events without reading the log.
NOTIFY_CHANNEL = "run_events"
_NOTIFY_SQL = f"SELECT pg_notify('{NOTIFY_CHANNEL}', %s)"
_HOLD_LEASE_SQL = "SELECT agentchat_hold_lease(%s, %s, %s)"
#: Channel of a cancel asked for on any replica (payload: the run id), sent in the
#: transaction that marks ``cancel_requested_at``: the replica executing the run cancels
#: it at once (``notify.RunEventsListener``); a replica that missed it finds the mark on
#: its next look (``cancel_requests``) or when it claims the run.
CANCEL_CHANNEL = "run_cancels"
_MARK_CANCEL_SQL = (
    f"UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, {_NOW}) "
    "WHERE id = ANY(%s) AND status = ANY(%s) RETURNING id"
)
#: ``pg_advisory_xact_lock(RUN_CAP_LOCK, hashtext(user_id))``: one admission per user at a
#: time counts the user's unfinished runs ("RUNS").
RUN_CAP_LOCK = 0x52554E53


def lease_lost(exc: BaseException) -> bool:
    """Whether a failed write was refused by ``agentchat_hold_lease``."""
    return isinstance(exc, psycopg.errors.RaiseException) and "run_lease_lost" in str(exc)


def _as_lease_lost(step: RunWrite, exc: BaseException) -> BaseException:
    """``LeaseLost`` (caused by ``exc``) when a leased step was refused because another
    process holds the run now; any other failure as it is. One mapping for the queued
    writes and the direct commits (the rescue of a failed run's ending)."""
    if step.lease_owner is None or not lease_lost(exc):
        return exc
    lost = LeaseLost(f"run {step.run_id} is held by another process now")
    lost.__cause__ = exc
    return lost


def step_statements(step: RunWrite) -> list[Statement]:
    out: list[Statement] = []
    if step.lease_owner is not None:  # first: a run taken over stores nothing more
        out.append((_HOLD_LEASE_SQL, (step.run_id, step.lease_owner, float(step.lease_s))))
    out += [(_EVENT_SQL, (step.run_id, e.seq, e.event, e.data)) for e in step.events]
    if step.messages:
        appends = append_statements(POSTGRES, step.conversation_id, step.messages, step.run_id)
        out += [(POSTGRES.render(sql), params) for sql, params in appends]
    if step.checkpoint is not None:
        out.append(
            (
                "UPDATE runs SET checkpoint = %s, checkpoint_seq = %s WHERE id = %s",
                (step.checkpoint, step.checkpoint_seq or 0, step.run_id),
            )
        )
    summary = getattr(step, "summary", None)
    if summary is not None:
        out.append(
            (
                "UPDATE runs SET tool_call_count = %s, used_tools = %s, keyword_count = %s WHERE id = %s",
                (summary.tool_call_count, ",".join(summary.used_tools), summary.keyword_count, step.run_id),
            )
        )
    if step.finished:
        out.append(
            (
                f"UPDATE runs SET status = %s, finished_at = {_NOW}, input = NULL, checkpoint = NULL WHERE id = %s",
                (step.status or "completed", step.run_id),
            )
        )
    elif step.status is not None:
        out.append(
            (
                f"UPDATE runs SET status = %s, started_at = COALESCE(started_at, {_NOW}) WHERE id = %s",
                (step.status, step.run_id),
            )
        )
    if step.events:  # delivered at commit, in commit order, only if it commits
        out.append((_NOTIFY_SQL, (encode_payload(step.run_id, step.events),)))
    return out


async def _run_with_key(conn: Conn, user_id: str, key: str) -> str | None:
    cur = await conn.execute("SELECT id FROM runs WHERE user_id = %s AND idempotency_key = %s", (user_id, key))
    row = await cur.fetchone()
    return str(row[0]) if row else None


async def _check_cap(conn: Conn, run: NewRun) -> None:
    """Refuse the run when its user already has the cap's number of unfinished runs. The
    per-user advisory lock (held to commit) makes count-then-insert atomic across
    replicas: the next admission of the user counts after this one committed."""
    cap = run.max_unfinished_per_user
    assert cap is not None
    await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (RUN_CAP_LOCK, run.user_id))
    cur = await conn.execute(
        "SELECT id FROM runs WHERE user_id = %s AND status = ANY(%s) LIMIT %s",
        (run.user_id, list(UNFINISHED), cap + len(run.ending_unwritten)),
    )
    ending = set(run.ending_unwritten)
    if sum(1 for r in await cur.fetchall() if str(r[0]) not in ending) >= cap:
        raise TooManyRuns(run.user_id)


async def _mark_cancelled(conn: Conn, run_ids: Sequence[str]) -> None:
    """Mark the unfinished ones of ``run_ids`` cancelled-on-request and tell every replica
    at commit (``CANCEL_CHANNEL``)."""
    cur = await conn.execute(_MARK_CANCEL_SQL, (list(run_ids), list(UNFINISHED)))
    for row in await cur.fetchall():
        await conn.execute(f"SELECT pg_notify('{CANCEL_CHANNEL}', %s)", (str(row[0]),))


class PostgresRunStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def create(self, run: NewRun) -> list[str]:
        async def tx(conn: Conn) -> list[str]:
            if run.idempotency_key is not None:
                taken = await _run_with_key(conn, run.user_id, run.idempotency_key)
                if taken is not None:
                    raise IdempotencyKeyUsed(taken)
            await claim_in(PostgresTx(conn), run.conversation_id, run.user_id)  # locks the conversation's row
            cur = await conn.execute(
                "SELECT id FROM runs WHERE conversation_id = %s AND status = ANY(%s) ORDER BY seq",
                (run.conversation_id, list(UNFINISHED)),
            )
            others = [str(r[0]) for r in await cur.fetchall()]
            if others and run.multitask == "reject":
                raise ConversationBusy(run.conversation_id)
            if run.max_unfinished_per_user is not None:
                await _check_cap(conn, run)
            if others and run.multitask == "interrupt":  # their owners end them
                await _mark_cancelled(conn, others)
            # Two replicas admitting one key at once: the unique index lets one insert win;
            # the other inserts nothing, waits for the winner's commit and names its run.
            cur = await conn.execute(
                "INSERT INTO runs(id, conversation_id, user_id, context_type, status, input, multitask, "
                "idempotency_key, lease_owner, lease_until) "
                f"VALUES (%s, %s, %s, %s, 'queued', %s, %s, %s, %s, CASE WHEN %s THEN {_NOW} + %s END) "
                "ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id",
                (
                    run.id,
                    run.conversation_id,
                    run.user_id,
                    run.context_type,
                    run.input,
                    run.multitask,
                    run.idempotency_key,
                    run.lease_owner,
                    run.lease_owner is not None,
                    float(run.lease_s),
                ),
            )
            if await cur.fetchone() is None:
                assert run.idempotency_key is not None
                raise IdempotencyKeyUsed(await _run_with_key(conn, run.user_id, run.idempotency_key) or "")
            return others

        return await self.db.transact(tx)

    async def request_cancel(self, run_id: str) -> StoredRun | None:
        """Mark the run's cancel if it has not ended and notify its owner at commit; the
        run as stored afterwards."""

        async def tx(conn: Conn) -> None:
            await _mark_cancelled(conn, [run_id])

        await self.db.transact(tx)
        return await self.get(run_id)

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        """Which of ``run_ids`` (unfinished) have a cancel request."""
        if not run_ids:
            return set()
        rows = await self.db.fetchall(
            "SELECT id FROM runs WHERE id = ANY(%s) AND cancel_requested_at IS NOT NULL AND status = ANY(%s)",
            (list(run_ids), list(UNFINISHED)),
        )
        return {str(r[0]) for r in rows}

    async def get(self, run_id: str) -> StoredRun | None:
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM runs r WHERE r.id = %s", (run_id,))
        return _stored(row) if row else None

    async def find_by_idempotency_key(self, user_id: str, key: str) -> StoredRun | None:
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM runs r WHERE r.user_id = %s AND r.idempotency_key = %s", (user_id, key)
        )
        return _stored(row) if row else None

    async def events_after(self, run_id: str, after: int, limit: int = 10_000) -> list[RunEvent]:
        rows = await self.db.fetchall(
            "SELECT seq, event, data FROM run_events WHERE run_id = %s AND seq > %s ORDER BY seq LIMIT %s",
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
        fail = on_fail
        if on_fail is not None and step.lease_owner is not None:

            def fail(exc: BaseException) -> None:
                on_fail(_as_lease_lost(step, exc))

        self.db.enqueue(step_statements(step), on_commit=on_commit, on_fail=fail)

    async def commit(self, step: RunWrite, *, on_commit: Callable[[], None] | None = None) -> None:
        try:
            await self.db.commit(step_statements(step), on_commit=on_commit)
        except Exception as exc:
            mapped = _as_lease_lost(step, exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def unfinished(self) -> list[StoredRun]:
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM runs r WHERE r.status = ANY(%s) ORDER BY r.seq", (list(UNFINISHED),)
        )
        return [_stored(r) for r in rows]

    async def set_status(self, run_ids: Sequence[str], status: str) -> None:
        if run_ids:
            # An ending forgets the caller's credentials (``input``), as a stored ending does.
            sql = (
                "UPDATE runs SET status = %s WHERE id = ANY(%s)"
                if status in UNFINISHED
                else "UPDATE runs SET status = %s, input = NULL, checkpoint = NULL WHERE id = ANY(%s)"
            )
            await self.db.execute([(sql, (status, list(run_ids)))])

    async def count_resume(self, run_id: str) -> None:
        await self.db.execute([("UPDATE runs SET resumes = resumes + 1 WHERE id = %s", (run_id,))])

    # --- leases: which replica executes which run -------------------------------------------

    async def claim(
        self, owner: str, lease_s: float, *, expired_only: bool = True, limit: int = 100
    ) -> list[StoredRun]:
        """Take unfinished runs whose lease expired (or that never had one) — all of them
        when not ``expired_only`` — for ``owner``, atomically: of replicas claiming at
        once, each run goes to exactly one. Oldest first."""
        expired = f"AND (lease_until IS NULL OR lease_until < {_NOW})" if expired_only else ""
        # The sub-select locks the rows and keeps each one's old lease end (returned: the
        # take-over latency starts when the dead replica's lease expired).
        sql = (
            f"UPDATE runs SET lease_owner = %s, lease_until = {_NOW} + %s FROM ("
            f"SELECT id, lease_until FROM runs WHERE status = ANY(%s) {expired} ORDER BY seq LIMIT %s "
            "FOR UPDATE SKIP LOCKED) AS old WHERE runs.id = old.id RETURNING runs.id, old.lease_until"
        )

        async def tx(conn: Conn) -> dict[str, float | None]:
            cur = await conn.execute(sql, (owner, float(lease_s), list(UNFINISHED), limit))
            return {str(r[0]): r[1] for r in await cur.fetchall()}

        claimed = await self.db.transact(tx)
        if not claimed:
            return []
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM runs r WHERE r.id = ANY(%s) ORDER BY r.seq", (list(claimed),)
        )
        return [replace(stored, lease_expired_at=claimed.get(stored.id)) for stored in map(_stored, rows)]

    async def renew(self, owner: str, run_ids: Sequence[str], lease_s: float) -> set[str]:
        """Extend ``owner``'s leases; returns the runs it still holds (the others were
        taken over, or ended).

        Never waits for a row lock: a run whose row is locked right now is in the middle of
        a step of this process's writer (``agentchat_hold_lease`` renews it in that very
        transaction) or of a claim (which only takes expired leases). Waiting instead
        deadlocked with the writer — a multi-row update and a batch of steps lock the same
        rows in different orders — and PostgreSQL broke each one after its 1 s
        ``deadlock_timeout``: that second reached followers as token delay. A skipped run
        counts as held when its committed owner is ``owner``; a step that finds it lost
        still fails with ``LeaseLost``."""
        if not run_ids:
            return set()
        ids = list(run_ids)

        async def tx(conn: Conn) -> set[str]:
            cur = await conn.execute(
                "WITH renewed AS ("
                f"UPDATE runs SET lease_until = {_NOW} + %s WHERE id IN ("
                "SELECT id FROM runs WHERE id = ANY(%s) AND lease_owner = %s FOR UPDATE SKIP LOCKED)) "
                "SELECT id FROM runs WHERE id = ANY(%s) AND lease_owner = %s",
                (float(lease_s), ids, owner, ids, owner),
            )
            return {str(r[0]) for r in await cur.fetchall()}

        return await self.db.transact(tx)

    async def release_leases(self, owner: str, run_ids: Sequence[str]) -> None:
        """Give runs up at once (shutdown): the next replica that looks takes them."""
        if run_ids:
            await self.db.execute(
                [("UPDATE runs SET lease_until = NULL WHERE id = ANY(%s) AND lease_owner = %s", (list(run_ids), owner))]
            )
