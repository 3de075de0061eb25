"""A run as a row and a step as statements, in portable SQL: the ``runs`` columns a
``StoredRun`` is read from (``columns``, ``stored_run``), the status lists as SQL, and
the statements one step of a run writes (``step_statements``: its events, messages,
checkpoint, summary and status).

Why apart: both engines' run stores (``storage.stores.runs`` and PostgreSQL's subclass)
build on these, and what a step writes is read apart from how a run is admitted or
leased.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage.dialect import Dialect, Statement
from storage.records import NOT_ENDED, UNFINISHED, RunWrite, StoredRun
from storage.stores.approval_waits import park_statement
from storage.stores.conversations import append_statements
from storage.stores.event_log import CLUSTERED, LIVE_LOG, event_log

UNFINISHED_SQL = "(" + ", ".join(f"'{s}'" for s in UNFINISHED) + ")"
NOT_ENDED_SQL = "(" + ", ".join(f"'{s}'" for s in NOT_ENDED) + ")"


def columns(dialect: Dialect) -> str:
    """The ``runs r`` columns a ``StoredRun`` is read from; its ``last_seq`` is the
    largest seq wherever the engine keeps the run's events (``storage.stores.event_log``)."""
    return (
        "r.id, r.conversation_id, r.user_id, r.context_type, r.status, r.created_at, r.input, r.checkpoint, "
        f"r.checkpoint_seq, {event_log(dialect).last_seq('r')}, r.multitask, r.resumes, "
        "r.cancel_requested_at IS NOT NULL, r.request_fingerprint"
    )


def _blob(value: Any) -> Any:
    """A blob column as bytes (psycopg hands back ``bytes`` or ``memoryview``)."""
    return bytes(value) if isinstance(value, bytearray | memoryview) else value


def stored_run(row: Sequence[Any]) -> StoredRun:
    return StoredRun(
        id=str(row[0]),
        conversation_id=str(row[1]),
        user_id=str(row[2]),
        context_type=str(row[3]),
        status=str(row[4]),
        created_at=float(row[5] or 0.0),
        input=_blob(row[6]),
        checkpoint=_blob(row[7]),
        checkpoint_seq=int(row[8] or 0),
        last_seq=int(row[9] or 0),
        multitask=str(row[10]),
        resumes=int(row[11] or 0),
        cancel_requested=bool(row[12]),
        request_fingerprint=None if row[13] is None else str(row[13]),
    )


def step_statements(dialect: Dialect, step: RunWrite) -> list[Statement]:
    """A step's statements in portable SQL (the engine's own come around them)."""
    now = dialect.now
    insert = LIVE_LOG.insert if dialect.live_log else CLUSTERED.insert
    out: list[Statement] = [(insert, (step.run_id, e.seq, e.event, e.data)) for e in step.events]
    if step.messages:
        out += append_statements(dialect, step.conversation_id, step.user_id, step.messages, step.run_id)
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
                f"UPDATE runs SET status = ?, finished_at = {now}, input = NULL, checkpoint = NULL WHERE id = ?",
                (step.status or "completed", step.run_id),
            )
        )
    elif step.status is not None:
        out.append(
            (
                f"UPDATE runs SET status = ?, started_at = COALESCE(started_at, {now}) WHERE id = ?",
                (step.status, step.run_id),
            )
        )
        if step.wait_s is not None:  # parked: held by nobody, its deadline in lease_until
            out.append(park_statement(dialect, step.run_id, step.wait_s))
    return out


__all__ = ["NOT_ENDED_SQL", "UNFINISHED_SQL", "columns", "step_statements", "stored_run"]
