"""A user's history, on either engine: their conversations listed, renamed, titled and
deleted; their runs looked up and listed; feedback on a run (issue 25).

Everything here is keyed by the user first: conversation ids are a namespace per user
(migration 16), and a run is only ever read with its owner in the ``WHERE`` clause, so
another user's id reads exactly like an id that does not exist.

Deleting a conversation is one transaction that refuses (``ConversationBusy``) while
any of its runs is unfinished — the caller cancels them first (on any replica) and
waits for their endings, so no late step of a live run can write into a conversation
that is gone. Saved web answers and keywords the conversation produced stay (they are
the owner's knowledge) but lose the link; everything else of it goes.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from storage.dialect import Dialect
from storage.errors import ConversationBusy
from storage.history_records import ConversationSummary, DeletedConversation, Feedback, HistoryCut, RunView
from storage.records import TERMINAL_STATUSES
from storage.sql import Plan, Row, SqlEngine, Tx
from storage.stores.event_log import event_log
from storage.stores.history_cut import cut_plan

#: Any status but an ending: queued, running, interrupted, waiting for an approval, …
_NOT_ENDED_SQL = "NOT IN (" + ", ".join(f"'{s}'" for s in TERMINAL_STATUSES) + ")"
_DRAFT_ID = re.compile(r'"draft_id"\s*:\s*"([0-9A-Za-z-]{1,64})"')
#: A conversation's own rows beyond its runs, deleted with it. Attachments (issue 25
#: item 4) add their ``DELETE`` here: ``(portable SQL, takes (user_id, conversation_id))``.
CONVERSATION_PARTS: tuple[str, ...] = ()


def run_columns(dialect: Dialect) -> str:
    """The ``runs r`` columns a ``RunView`` is read from; its ending and last error are
    read wherever the engine keeps the run's events (``storage.stores.event_log``)."""
    log = event_log(dialect)
    return (
        "r.id, r.conversation_id, r.user_id, r.context_type, r.status, r.created_at, r.started_at, r.finished_at, "
        f"r.tool_call_count, r.resumes, {log.first_event('message_complete')}, {log.last_event('error')}, "
        "r.feedback_score, r.feedback_comment, r.feedback_at, r.events_compacted_at"
    )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _json(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    data = orjson.loads(value)
    return data if isinstance(data, dict) else None


def run_view(row: Row) -> RunView:
    feedback = None
    if row[12] is not None:
        feedback = Feedback(int(row[12]), None if row[13] is None else str(row[13]), float(row[14] or 0.0))
    return RunView(
        id=str(row[0]),
        conversation_id=str(row[1]),
        user_id=str(row[2]),
        context_type=str(row[3]),
        status=str(row[4]),
        created_at=float(row[5] or 0.0),
        started_at=_opt_float(row[6]),
        finished_at=_opt_float(row[7]),
        tool_call_count=None if row[8] is None else int(row[8]),
        resumes=int(row[9] or 0),
        complete=_json(row[10]),
        error=_json(row[11]),
        feedback=feedback,
        events_compacted_at=_opt_float(row[15]),
    )


class SqlHistoryStore:
    def __init__(self, sql: SqlEngine) -> None:
        self.sql = sql
        # Rows in the order they were inserted (the tie-break of equal creation times).
        self._order = "rowid" if sql.dialect.name == "sqlite" else "seq"
        self._run_columns = run_columns(sql.dialect)

    # --- conversations ------------------------------------------------------------------

    async def list_conversations(
        self, user_id: str, *, limit: int, before: tuple[float, str] | None = None
    ) -> list[ConversationSummary]:
        """The user's conversations, newest ``updated_at`` first (the id breaks ties),
        strictly after the cursor ``before`` (the last row of the previous page)."""
        where, params = "c.user_id = ?", list[object]([user_id])
        if before is not None:
            where += " AND (c.updated_at < ? OR (c.updated_at = ? AND c.id < ?))"
            params += [before[0], before[0], before[1]]
        rows = await self.sql.fetchall(
            "SELECT c.id, c.title, c.created_at, c.updated_at, "
            "(SELECT r.status FROM runs r WHERE r.user_id = c.user_id AND r.conversation_id = c.id "
            f"ORDER BY r.created_at DESC, r.{self._order} DESC LIMIT 1) "
            f"FROM conversations c WHERE {where} ORDER BY c.updated_at DESC, c.id DESC LIMIT ?",
            (*params, limit),
        )
        return [
            ConversationSummary(
                str(r[0]),
                None if r[1] is None else str(r[1]),
                float(r[2]),
                float(r[3]),
                None if r[4] is None else str(r[4]),
            )
            for r in rows
        ]

    async def conversation(self, user_id: str, conversation_id: str) -> ConversationSummary | None:
        rows = await self.sql.fetchall(
            "SELECT c.id, c.title, c.created_at, c.updated_at, "
            "(SELECT r.status FROM runs r WHERE r.user_id = c.user_id AND r.conversation_id = c.id "
            f"ORDER BY r.created_at DESC, r.{self._order} DESC LIMIT 1) "
            "FROM conversations c WHERE c.user_id = ? AND c.id = ?",
            (user_id, conversation_id),
        )
        if not rows:
            return None
        r = rows[0]
        return ConversationSummary(
            str(r[0]),
            None if r[1] is None else str(r[1]),
            float(r[2]),
            float(r[3]),
            None if r[4] is None else str(r[4]),
        )

    async def rename(self, user_id: str, conversation_id: str, title: str) -> bool:
        """Set the title; ``False`` when the user has no such conversation."""

        async def tx(t: Tx) -> bool:
            changed = await t.execute(
                "UPDATE conversations SET title = ? WHERE user_id = ? AND id = ?",
                (t.dialect.text(title), user_id, conversation_id),
            )
            return bool(changed)

        return await self.sql.transact(tx)

    async def set_title_if_unset(self, user_id: str, conversation_id: str, title: str) -> bool:
        """The automatic title: never overwrites one (the user's rename, or an earlier run's).

        A plan, not a callback transaction: every new conversation is titled once after
        its first run, so at a steady load of new conversations this is one write per
        run; on SQLite a plan joins the group-committed transaction of the admissions and
        titles waiting with it, in one hop to the writer's thread (the callback form was
        a transaction of its own with a hop per statement — issue 23)."""
        return await self.sql.transact_plan(lambda d: self._set_title(d, user_id, conversation_id, title))

    @staticmethod
    def _set_title(d: Dialect, user_id: str, conversation_id: str, title: str) -> Plan[bool]:
        changed = yield (
            "execute",
            "UPDATE conversations SET title = ? WHERE user_id = ? AND id = ? AND title IS NULL",
            (d.text(title), user_id, conversation_id),
        )
        return bool(changed)

    async def unfinished_runs(self, user_id: str, conversation_id: str) -> list[str]:
        rows = await self.sql.fetchall(
            f"SELECT id FROM runs WHERE user_id = ? AND conversation_id = ? AND status {_NOT_ENDED_SQL}",
            (user_id, conversation_id),
        )
        return [str(r[0]) for r in rows]

    async def delete_conversation(self, user_id: str, conversation_id: str) -> DeletedConversation | None:
        """Remove the conversation and everything of it (``None``: the user has no such
        conversation). Raises ``ConversationBusy`` while a run of it is unfinished."""
        return await self.sql.transact_plan(lambda d: self._delete(d, user_id, conversation_id))

    def _delete(self, d: Dialect, user_id: str, conversation_id: str) -> Plan[DeletedConversation | None]:
        key = (user_id, conversation_id)
        row = yield ("fetchone", "SELECT 1 FROM conversations WHERE user_id = ? AND id = ?" + d.for_update, key)
        if row is None:
            return None
        busy = yield (
            "fetchall",
            f"SELECT id FROM runs WHERE user_id = ? AND conversation_id = ? AND status {_NOT_ENDED_SQL}",
            key,
        )
        if busy:
            raise ConversationBusy(conversation_id)
        # Drafts belong to their user, not to a conversation: the ones this conversation
        # started are named by its successful ``start_draft`` calls.
        started = yield (
            "fetchall",
            "SELECT result FROM tool_calls WHERE user_id = ? AND conversation_id = ? "
            "AND tool_name = 'start_draft' AND status = 'success'",
            key,
        )
        draft_ids = sorted({m for (result,) in started if result for m in _DRAFT_ID.findall(str(result))})
        drafts = 0
        if draft_ids:
            drafts = yield (
                "execute",
                f"DELETE FROM workflow_drafts WHERE owner = ? AND id IN ({d.marks(len(draft_ids))})",
                (user_id, *draft_ids),
            )
        # Its runs' events: ``run_events``, and on SQLite their rows in the live log —
        # counted where not yet settled, then every copy of them swept.
        events = 0
        for kind, statement in event_log(d).delete_conversation():
            if kind == "count":
                row = yield ("fetchone", statement, key)
                events += int(row[0]) if row is not None else 0
            elif kind == "delete":
                events += yield ("execute", statement, key)
            else:
                yield ("execute", statement, key)
        tool_calls = yield ("execute", "DELETE FROM tool_calls WHERE user_id = ? AND conversation_id = ?", key)
        # Keywords and saved web answers stay the owner's knowledge, without the link. An
        # association equal to one already unlinked would break its unique index: it goes.
        yield (
            "execute",
            "DELETE FROM keyword_associations WHERE owner = ? AND conversation_id = ? AND EXISTS ("
            "SELECT 1 FROM keyword_associations b WHERE b.conversation_id IS NULL "
            f"AND b.keyword_id {d.same_as} keyword_associations.keyword_id "
            f"AND b.query_id {d.same_as} keyword_associations.query_id "
            f"AND b.external_result_id {d.same_as} keyword_associations.external_result_id)",
            key,
        )
        unlinked = yield (
            "execute",
            "UPDATE keyword_associations SET conversation_id = NULL WHERE owner = ? AND conversation_id = ?",
            key,
        )
        unlinked += yield (
            "execute",
            "UPDATE external_results SET conversation_id = NULL WHERE owner = ? AND conversation_id = ?",
            key,
        )
        for statement in CONVERSATION_PARTS:
            yield ("execute", statement, key)
        messages = yield ("execute", "DELETE FROM messages WHERE user_id = ? AND conversation_id = ?", key)
        runs = yield ("execute", "DELETE FROM runs WHERE user_id = ? AND conversation_id = ?", key)
        yield ("execute", "DELETE FROM conversations WHERE user_id = ? AND id = ?", key)
        return DeletedConversation(
            runs=int(runs),
            messages=int(messages),
            events=int(events),
            tool_calls=int(tool_calls),
            drafts=int(drafts),
            unlinked=int(unlinked),
        )

    async def cut_history(
        self, user_id: str, conversation_id: str, run_id: str | None, *, keep_run: bool, deadline: float | None = None
    ) -> HistoryCut | None:
        """Cut the conversation's messages back to before run ``run_id``'s turn (or to
        just after it: ``keep_run``; ``None``: all of them) — ``storage.stores.history_cut``.
        ``deadline``: a request not yet acknowledged waits no longer (``SqlEngine.transact``)."""
        return await self.sql.transact_plan(
            lambda d: cut_plan(d, user_id, conversation_id, run_id, keep_run=keep_run), deadline=deadline
        )

    # --- runs -----------------------------------------------------------------------------

    async def run(self, user_id: str, run_id: str) -> RunView | None:
        """The user's run (``None`` for an id that is not theirs, or none at all)."""
        row = await self.sql.fetchone(
            f"SELECT {self._run_columns} FROM runs r WHERE r.id = ? AND r.user_id = ?", (run_id, user_id)
        )
        return run_view(row) if row is not None else None

    async def list_runs(
        self, user_id: str, *, conversation_id: str | None, limit: int, before: tuple[float, str] | None = None
    ) -> list[RunView]:
        """The user's runs (of one conversation, when named), newest first, after ``before``."""
        where, params = "r.user_id = ?", list[object]([user_id])
        if conversation_id is not None:
            where += " AND r.conversation_id = ?"
            params.append(conversation_id)
        if before is not None:
            where += " AND (r.created_at < ? OR (r.created_at = ? AND r.id < ?))"
            params += [before[0], before[0], before[1]]
        rows = await self.sql.fetchall(
            f"SELECT {self._run_columns} FROM runs r WHERE {where} ORDER BY r.created_at DESC, r.id DESC LIMIT ?",
            (*params, limit),
        )
        return [run_view(r) for r in rows]

    async def set_feedback(self, user_id: str, run_id: str, score: int, comment: str | None) -> bool:
        """Store (or replace) the user's feedback on their run; ``False``: no such run of theirs."""

        async def tx(t: Tx) -> bool:
            changed = await t.execute(
                f"UPDATE runs SET feedback_score = ?, feedback_comment = ?, feedback_at = {t.dialect.now} "
                "WHERE id = ? AND user_id = ?",
                (score, t.dialect.text(comment), run_id, user_id),
            )
            return bool(changed)

        return await self.sql.transact(tx)

    async def idle_conversations(self, idle_before: float, limit: int) -> list[tuple[str, str]]:
        """(user_id, id) of conversations untouched since ``idle_before`` with no
        unfinished run: what ``AGENT_CONVERSATION_RETENTION_DAYS`` deletes."""
        rows = await self.sql.fetchall(
            "SELECT c.user_id, c.id FROM conversations c WHERE c.updated_at < ? AND NOT EXISTS ("
            "SELECT 1 FROM runs r WHERE r.user_id = c.user_id AND r.conversation_id = c.id "
            f"AND r.status {_NOT_ENDED_SQL}) ORDER BY c.updated_at LIMIT ?",
            (idle_before, limit),
        )
        return [(str(r[0]), str(r[1])) for r in rows]


__all__ = ["CONVERSATION_PARTS", "SqlHistoryStore", "run_columns", "run_view"]
