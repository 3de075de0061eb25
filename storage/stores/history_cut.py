"""Cutting a conversation's history back (a regenerated answer, an edited question), on
either engine.

Why: a chat client that regenerates an answer or edits an earlier question shows one
branch of the conversation; the model must see that branch, not every branch the server
was ever sent. The history the model is given is the conversation's ``messages`` in
``seq`` order, and each run's own messages (its question, its answer, its tool turns)
carry its id — the id a chat client knows an answer by (the AI SDK face's ``messageId``).
So a cut is named by a run: everything from that run's first message on goes
(``keep_run=False``: its answer is replaced), or everything after its last message
(``keep_run=True``: the question after it is replaced); no run at all: the whole history.

One transaction that locks the conversation's row first (PostgreSQL: ``FOR UPDATE``, so
an admission on another replica waits for it) and refuses (``ConversationBusy``) while
any run of the conversation has not ended: a live run's next step would append after
the cut, to a history it was not started with. The dropped turns' runs stay — their
event logs, tool calls, feedback, keywords and saved web answers are the record of what
was answered (listed by the runs routes) — only their messages leave the history.
"""

from __future__ import annotations

from storage.dialect import Dialect
from storage.errors import ConversationBusy, UnknownRun
from storage.history_records import HistoryCut
from storage.records import TERMINAL_STATUSES
from storage.sql import Plan

_NOT_ENDED_SQL = "NOT IN (" + ", ".join(f"'{s}'" for s in TERMINAL_STATUSES) + ")"
_OF_CONVERSATION = "user_id = ? AND conversation_id = ?"


def cut_plan(
    d: Dialect, user_id: str, conversation_id: str, run_id: str | None, *, keep_run: bool
) -> Plan[HistoryCut | None]:
    """The cut as a plan (``None``: the user has no such conversation; ``UnknownRun``:
    ``run_id`` is no run of it; ``ConversationBusy``: a run of it has not ended)."""
    key = (user_id, conversation_id)
    row = yield ("fetchone", "SELECT 1 FROM conversations WHERE user_id = ? AND id = ?" + d.for_update, key)
    if row is None:
        return None
    busy = yield ("fetchall", f"SELECT id FROM runs WHERE {_OF_CONVERSATION} AND status {_NOT_ENDED_SQL}", key)
    if busy:
        raise ConversationBusy(conversation_id)
    from_seq: int | None = 1
    if run_id is not None:
        run = yield ("fetchone", f"SELECT created_at FROM runs WHERE id = ? AND {_OF_CONVERSATION}", (run_id, *key))
        if run is None:
            raise UnknownRun(run_id)
        bounds = yield (
            "fetchone",
            f"SELECT MIN(seq), MAX(seq) FROM messages WHERE {_OF_CONVERSATION} AND run_id = ?",
            (*key, run_id),
        )
        if bounds is not None and bounds[0] is not None:
            from_seq = int(bounds[1]) + 1 if keep_run else int(bounds[0])
        else:  # a run that stored nothing: the cut starts at the first message of a run after it
            later = yield (
                "fetchone",
                "SELECT MIN(m.seq) FROM messages m JOIN runs r ON r.id = m.run_id "
                "WHERE m.user_id = ? AND m.conversation_id = ? AND r.id <> ? AND r.created_at >= ?",
                (*key, run_id, run[0]),
            )
            from_seq = None if later is None or later[0] is None else int(later[0])
    if from_seq is None:
        return HistoryCut(messages=0, from_seq=None)
    dropped = yield ("execute", f"DELETE FROM messages WHERE {_OF_CONVERSATION} AND seq >= ?", (*key, from_seq))
    yield ("execute", f"UPDATE conversations SET updated_at = {d.now} WHERE user_id = ? AND id = ?", key)
    return HistoryCut(messages=int(dropped), from_seq=from_seq)


__all__ = ["cut_plan"]
