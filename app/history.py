"""Conversation titles (issue 25): set once, from the conversation's first question.

Why after the run and in a task of its own: a title is a nicety, so it must never delay
or fail an answer. When a model is configured (by default a real LLM: Gemini, Ollama,
OpenAI-compatible; see ``title_model_wanted``) it is asked for a short title in one
small, bounded call (non-streamed where the provider can: ``llm.provider.Completer``,
one JSON body instead of a stream of lines, issue 23); when that call fails, times out
or says nothing usable, the question's first words are used instead and the fallback
is counted (``agentchat_conversation_titles_total{source=
"words_after_model_failed"}``). Without a model the first words are the title. A title
the user set (``PATCH``) or an earlier run set is never overwritten
(``set_title_if_unset``).

A title the client sends with the chat (``title``, issue 23) is the user's own name for
the thread: the run's admission stores it in its own transaction when the conversation
has no title yet (``RunStore.create``; counted as ``source="client"``), and this titler
then asks no model — chat products usually know the title already, and the call cost as
much CPU as a short answer. Sent on a later run of a titled conversation, it is not
taken: the same never-overwrite rule (a client that sends its thread's name with every
message must not undo a rename made elsewhere, and a message is never refused for a
cosmetic field).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from app.ops.close_budget import TITLES_STOP_S
from app.ops.history_metrics import HistoryMetrics
from app.ops.stopping import cancel_and_wait
from llm.provider import Completion, Provider
from llm.types import ChatRequest, ContentDelta, Message, StreamError
from storage.errors import StorageUnavailable
from storage.interfaces import HistoryStore

log = logging.getLogger("agentchat.history")

#: A title's length at most (characters); the words fallback stops at a word boundary.
TITLE_CHARS = 60
#: The model's title call: at most this long, this many tokens.
TITLE_TIMEOUT_S = 15.0
TITLE_MAX_TOKENS = 32
#: The model's reply is read up to this many characters, or to the end of its first
#: non-empty line, whichever comes first: a title is that line cut to ``TITLE_CHARS``,
#: so the rest of a model that ignores ``max_tokens`` (or rambles on) is never read —
#: each run's title call would otherwise cost as much as its answer (issue 23).
TITLE_READ_CHARS = 2 * TITLE_CHARS
TITLE_PROMPT = (
    "You write titles for chat conversations. Reply with a title of at most six words for a "
    "conversation that starts with the user's message below. Reply with the title only: no quotes, "
    "no punctuation at the end, same language as the message."
)
_SPACE = re.compile(r"\s+")
#: Quotation marks a model may wrap its title in.
QUOTES = "\"'\u201c\u201d\u2018\u2019\u00ab\u00bb"


#: Providers that are a real language model: ``AGENT_CONVERSATION_TITLES=auto`` asks them.
#: Not the offline ``extractive`` answerer (it quotes documents, it cannot summarise a
#: question) and not a scripted or test provider (its turns are counted by its script).
REAL_MODELS = frozenset({"ollama", "gemini", "openai"})


def title_model_wanted(setting: str, provider_name: str) -> bool:
    """Whether the model writes titles: ``model`` asks any provider but the offline
    answerer, ``auto`` only a real LLM, ``words`` and ``off`` none."""
    if setting == "model":
        return provider_name != "extractive"
    return setting == "auto" and provider_name in REAL_MODELS


def words_title(question: str, limit: int = TITLE_CHARS) -> str:
    """The question's first words, at most ``limit`` characters, cut on a word boundary
    (an ellipsis says it was cut); a single over-long word is cut where it must be."""
    text = _SPACE.sub(" ", question).strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut and text[limit - 1] != " ":
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(" ,;:.-") + "…"


def clean_model_title(raw: str, limit: int = TITLE_CHARS) -> str:
    """The model's reply as a title: its first non-empty line, without quotes, markup
    or a final period, at most ``limit`` characters."""
    line = next((ln for ln in raw.splitlines() if ln.strip()), "")
    line = line.strip().strip("*#_`").strip()
    line = re.sub(r"^(title|titre)\s*:\s*", "", line, flags=re.IGNORECASE)
    for _ in range(2):  # "Title." in quotes, or a quoted title with its period outside
        line = line.strip().strip(QUOTES).strip().rstrip(".").strip()
    return words_title(line, limit) if line else ""


@dataclass(slots=True)
class Titler:
    history: HistoryStore
    metrics: HistoryMetrics
    #: The model asked for titles; ``None``: the question's first words are the title.
    provider: Provider | None = None
    timeout_s: float = TITLE_TIMEOUT_S
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def after_run(self, user_id: str, conversation_id: str, question: str | None, *, new: bool = False) -> None:
        """Title the conversation in the background if it has no title yet. ``new``: the
        run created the conversation, so it is known to need one and the read that would
        ask is skipped (``set_title_if_unset`` still keeps a title set meanwhile)."""
        if not question or not question.strip():
            return
        task = asyncio.create_task(self._title(user_id, conversation_id, question, new), name="conversation-title")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _title(self, user_id: str, conversation_id: str, question: str, new: bool = False) -> None:
        try:
            if not new:
                current = await self.history.conversation(user_id, conversation_id)
                if current is None or current.title is not None:
                    return
            title, source = "", "words"
            if self.provider is not None:
                title = await self._ask_model(question)
                source = "model" if title else "words_after_model_failed"
            if not title:
                title = words_title(question)
            if await self.history.set_title_if_unset(user_id, conversation_id, title):
                self.metrics.titles.labels(source=source).inc()
        except asyncio.CancelledError:
            raise
        except StorageUnavailable as exc:  # an outage: every run ending then says so, so one line, no traceback
            log.warning(
                "could not title a conversation: the database is unavailable",
                extra={"conversation_id": conversation_id, "error": str(exc)},
            )
        except Exception:  # a title never fails anything: logged, and the list shows none
            log.warning("could not title a conversation", exc_info=True, extra={"conversation_id": conversation_id})

    async def _ask_model(self, question: str) -> str:
        assert self.provider is not None
        request = ChatRequest(
            system_prompt=TITLE_PROMPT,
            messages=[Message("user", question[:2000])],
            max_tokens=TITLE_MAX_TOKENS,
            temperature=0.2,
        )
        complete = getattr(self.provider, "complete", None)
        if complete is not None:
            return await self._complete(complete, request)
        parts: list[str] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                stream = self.provider.stream_chat(request)
                try:
                    async for event in stream:
                        if isinstance(event, ContentDelta):
                            parts.append(event.text)
                            if _title_read(parts):
                                break
                        elif isinstance(event, StreamError):
                            log.info(
                                "title model call failed; using the question's words",
                                extra={"error": event.message[:200]},
                            )
                            return ""
                finally:
                    with contextlib.suppress(Exception):
                        await stream.aclose()  # type: ignore[attr-defined]
        except TimeoutError:
            log.info("title model call timed out; using the question's words", extra={"timeout_s": self.timeout_s})
            return ""
        return clean_model_title("".join(parts))

    async def _complete(self, complete: Callable[[ChatRequest], Awaitable[Completion]], request: ChatRequest) -> str:
        """The title in one non-streamed call (``llm.provider.Completer``): one JSON body
        instead of a stream of lines each parsed and scheduled on its own (issue 23)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                done = await complete(request)
        except TimeoutError:
            log.info("title model call timed out; using the question's words", extra={"timeout_s": self.timeout_s})
            return ""
        if done.error is not None:
            log.info("title model call failed; using the question's words", extra={"error": done.error.message[:200]})
            return ""
        return clean_model_title(done.text[:TITLE_READ_CHARS])

    async def aclose(self) -> None:
        """Cancel the titles still being written; one that does not end within
        ``TITLES_STOP_S`` is named in the log and left (the close must not hang on it)."""
        await cancel_and_wait(list(self._tasks), TITLES_STOP_S)


def _title_read(parts: list[str]) -> bool:
    """Whether the reply so far holds all ``clean_model_title`` can use: a complete
    non-empty first line, or ``TITLE_READ_CHARS`` characters."""
    text = "".join(parts)
    if len(text) >= TITLE_READ_CHARS:
        return True
    line, newline, _ = text.lstrip().partition("\n")
    return bool(newline and line.strip())


def with_titles(agent: Callable[..., Awaitable[None]], titler: Titler) -> Callable[..., Awaitable[None]]:
    """The run manager's agent function, titling the run's conversation once it ends
    (the run's question is the one it was admitted with; a run carried on after a
    restart has none here and titles nothing). A run whose client sent a title asks
    nothing: its admission stored that title."""

    async def run_then_title(run: Any, *args: Any, **kwargs: Any) -> None:
        try:
            await agent(run, *args, **kwargs)
        finally:
            if getattr(run, "client_titled", False) is not True:
                question = getattr(run, "question", None)
                titler.after_run(
                    run.user_id,
                    run.conversation_id,
                    question if isinstance(question, str) else None,
                    new=getattr(run, "new_conversation", False) is True,
                )

    return run_then_title


__all__ = ["Titler", "clean_model_title", "with_titles", "words_title"]
