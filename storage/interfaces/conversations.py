"""The stores of a user's conversations: their messages (``ConversationStore``) and their
history — listed, titled, renamed, deleted, with their runs and feedback (``HistoryStore``).

Why apart: everything here is keyed by its user; these are the protocols a route's
two-user tests exercise most.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from llm.types import Message
from storage.history_records import ConversationSummary, DeletedConversation, HistoryCut, RunView
from storage.records import (
    StoredMessage,
)


class ConversationStore(Protocol):
    """A conversation is its user's: it is keyed by ``(user_id, conversation_id)``, so
    two users naming the same id have two conversations and never see or block each
    other. Messages get their ``seq`` inside the write transaction, so concurrent
    appends never collide or get lost."""

    async def exists(self, conversation_id: str, user_id: str) -> bool: ...

    async def claim(self, conversation_id: str, user_id: str) -> None:
        """Create the user's conversation if it does not exist yet (idempotent)."""
        ...

    async def load(self, conversation_id: str, user_id: str, *, limit: int = 400) -> list[Message]: ...

    async def messages(self, conversation_id: str, user_id: str) -> list[StoredMessage]: ...

    async def append(
        self, conversation_id: str, user_id: str, messages: Sequence[Message], *, deadline: float | None = None
    ) -> None: ...


class HistoryStore(Protocol):
    """A user's history (issue 25): conversations listed newest first, titled, renamed and
    deleted; runs looked up and listed; feedback on a run. Every read and write takes
    the user: another user's id reads like one that does not exist."""

    async def list_conversations(
        self, user_id: str, *, limit: int, before: tuple[float, str] | None = None
    ) -> list[ConversationSummary]: ...

    async def conversation(self, user_id: str, conversation_id: str) -> ConversationSummary | None: ...

    async def rename(self, user_id: str, conversation_id: str, title: str) -> bool: ...

    async def set_title_if_unset(self, user_id: str, conversation_id: str, title: str) -> bool: ...

    async def unfinished_runs(self, user_id: str, conversation_id: str) -> list[str]: ...

    async def delete_conversation(self, user_id: str, conversation_id: str) -> DeletedConversation | None:
        """Everything of the conversation gone (keywords and saved web answers unlinked);
        ``ConversationBusy`` while a run of it is unfinished; ``None``: no such conversation."""
        ...

    async def cut_history(
        self, user_id: str, conversation_id: str, run_id: str | None, *, keep_run: bool, deadline: float | None = None
    ) -> HistoryCut | None:
        """The conversation's messages from run ``run_id``'s first on gone (``keep_run``:
        from just after its last; ``run_id`` ``None``: all); its runs stay. ``None``: no
        such conversation; ``UnknownRun``: no such run of it; ``ConversationBusy``: a run
        of it has not ended."""
        ...

    async def run(self, user_id: str, run_id: str) -> RunView | None: ...

    async def list_runs(
        self, user_id: str, *, conversation_id: str | None, limit: int, before: tuple[float, str] | None = None
    ) -> list[RunView]: ...

    async def set_feedback(self, user_id: str, run_id: str, score: int, comment: str | None) -> bool: ...

    async def idle_conversations(self, idle_before: float, limit: int) -> list[tuple[str, str]]: ...
