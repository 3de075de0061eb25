"""The ``extractive`` provider: answers from the knowledge base with no model at all.

It plays the mandatory flow deterministically through the same loop and the same tools
as a real model: the first turn calls ``knowledge_base_search`` with the user's
question; the next turn reads the chunks that came back, quotes the passage(s) that best
cover the question whole (``llm.extractive_answer``: neighbouring sentences, lists and
code blocks intact, no sentence twice), streams them as the answer with ``[source_id]``
citations, and calls ``generate_response`` with those sources. With nothing relevant it says it does
not know. A message that only greets or thanks ("hi", "thanks") is answered with what it
can do instead (``llm.extractive_greeting``), citing nothing. Everything it needs is in the
conversation it is sent, so it keeps no state.

Acting on workflows and table configurations needs a model. A request from those
contexts — told apart by the role the system prompt gives it, or else by the workflow and
table tools it is offered — is declined with a message naming what to configure. The
decline searches the knowledge base first only where the flow makes that search
mandatory (the system prompt says so, as it tells a model; by default only in the
``knowledge`` context, so not in ``workflow`` or ``tables``), or after the policy refused
the answer for want of one: elsewhere the search was a call the answer never used. The
search results are never used, so no unrelated knowledge-base text is passed off as an
answer.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import orjson

from llm.extractive_answer import Composed, Passage, compose, compose_answer
from llm.extractive_followup import FollowUp, earlier_questions, follow_up_of
from llm.extractive_greeting import greeting_reply
from llm.extractive_long import cut_note, read_part, search_text
from llm.extractive_next import next_read_args
from llm.extractive_page_read import PAGE_READ_TOOL, page_read_args, pages_to_read
from llm.extractive_results import (
    calls_since,
    chunks_read,
    distinct,
    nothing_searched,
    pages_found,
    passages_of,
    results_since,
    with_page_reads,
)
from llm.extractive_words import Words
from llm.provider import ProviderHealth
from llm.types import (
    ChatRequest,
    ContentDelta,
    Message,
    MessageComplete,
    MessageStart,
    StreamEvent,
    ToolResult,
    ToolUseInput,
    ToolUseStart,
    Usage,
)

SEARCH_TOOL = "knowledge_base_search"
ANSWER_TOOL = "generate_response"
#: The role headings ``prompts/texts/*_role.md`` open with (a line of their own: the
#: embedded UI context is one line of JSON and cannot fake one).
_ACTING_ROLE = re.compile(
    r"^## Your role: (?P<role>workflow automation|table configuration) assistant\s*$", re.MULTILINE
)
_ROLE_CONTEXT = {"workflow automation": "workflow", "table configuration": "tables"}
#: The mandatory flow's first step as ``prompts/texts/rag_flow_first.md`` states it to a
#: model, on a line of its own (the on-demand flow says nothing has to be searched first).
_SEARCH_FIRST = re.compile(
    r"^\*\*First: search the knowledge base\.\*\* Your first tool call for every message must be", re.MULTILINE
)
#: Without a recognisable role (a custom prompt), these offered tools mark the context.
_WORKFLOW_TOOLS = frozenset(
    {"list_workflow_rules", "discover", "start_draft", "add_draft_action", "preview_draft", "preview_workflow"}
)
_TABLE_TOOLS = frozenset(
    {
        "get_table_config",
        "discover_table_reference",
        "apply_column_change",
        "apply_filter_change",
        "preview_table_config",
    }
)
_WHAT = {"workflow": "workflows", "tables": "table configurations"}
#: Passages asked for: the answerer picks the best one or two, so it reads a few more.
SEARCH_TOP_K = 8


def acting_context(request: ChatRequest) -> str | None:
    """``"workflow"`` or ``"tables"`` when the request asks to act on those, else None."""
    role = _ACTING_ROLE.search(request.system_prompt)
    if role is not None:
        return _ROLE_CONTEXT[role.group("role")]
    offered = {t.name for t in request.tools}
    if offered & _WORKFLOW_TOOLS:
        return "workflow"
    if offered & _TABLE_TOOLS:
        return "tables"
    return None


def search_required(request: ChatRequest) -> bool:
    """Whether the system prompt makes a knowledge search the first step of every message
    (the mandatory flow), as a model would read it."""
    return _SEARCH_FIRST.search(request.system_prompt) is not None


def decline_message(context: str) -> str:
    """What the offline provider says to a workflow or table request: what to configure."""
    what = _WHAT.get(context, "workflows and table configurations")
    return (
        f"I can't work on {what} right now: this service is running without a language model "
        "(the offline extractive mode), which can only answer questions from the knowledge base. "
        f"To create or change {what}, configure a model and restart the service: "
        "GEMINI_API_KEY for Gemini; a local Ollama with OLLAMA_MODEL pulled (a model that supports "
        "tool calls, for example qwen3:4b: `ollama pull qwen3:4b`, then `make dev`); or OPENAI_BASE_URL "
        "and OPENAI_API_KEY for an OpenAI-compatible server. /readyz says which model was chosen and why. "
        "Questions about the documentation can still be asked in the knowledge context."
    )


def not_found_message(unmentioned: tuple[str, ...] = ()) -> str:
    """The answer when no passage answers: naming what the question asks about that the
    knowledge base does not mention (``llm.extractive_subject``), when that is why, since
    rephrasing cannot help there; else a hint to use the documentation's terms."""
    if unmentioned:
        quoted = " or ".join(unmentioned)
        return f"I could not find anything about {quoted} in the knowledge base, so I cannot answer that from it."
    return (
        "I could not find an answer to that in the knowledge base. Try rephrasing the "
        "question with the terms the documentation uses."
    )


@dataclass(frozen=True, slots=True)
class Reply:
    """What the provider says for a question: the text it streams and the arguments of its
    ``generate_response`` call (``used_kb``: the text quotes the knowledge base)."""

    answer: str
    sources: list[str]
    confidence: float
    used_kb: bool


def reply_of(composed: Composed, unsearched: str = "") -> Reply:
    """What the provider says of a composed answer: the answer, or with none, why -
    ``unsearched`` when the searches' buckets did not exist (``nothing_searched``), else
    what the question names that no passage mentions (``not_found_message``). One
    function, so that ``bench/offline_answers.py --replay`` says what the live provider
    says, declines included (it composed the answer and dropped the decline: round35's
    ten declines replayed as no answer at all, 31/42 where the service gave 40/42)."""
    if composed.answer:
        return Reply(composed.answer, composed.sources, composed.confidence, used_kb=True)
    return Reply(
        unsearched or not_found_message(composed.unmentioned), composed.sources, composed.confidence, used_kb=False
    )


def _question(messages: list[Message]) -> tuple[str, int]:
    """The latest user question and its index: the last user text that is neither tool
    results nor one of the agent's own reminders (marked ``reminder``). A question may
    follow an assistant turn (history imported as text, a run cancelled mid-answer)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and m.content and not m.tool_results and not m.reminder:
            return m.content, i
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user" and messages[i].content:
            return messages[i].content, i
    return "", 0


def _searches(question: str, follow: FollowUp | None) -> list[tuple[str, dict[str, Any]]]:
    """The first turn's knowledge search: the question; for a follow-up, the question
    with its topic's words (``FollowUp.search_query``) and the question alone, in
    parallel, so that what the follow-up itself asks keeps its own search."""
    own = (SEARCH_TOOL, {"query": search_text(question), "top_k": SEARCH_TOP_K})
    if follow is None:
        return [own]
    return [(SEARCH_TOOL, {"query": follow.search_query(), "top_k": SEARCH_TOP_K}), own]


class ExtractiveProvider:
    name = "extractive"
    model = "extractive-v1"

    def __init__(self, *, sample_kb: bool = False) -> None:
        """``sample_kb``: whether the sample knowledge base is ingested
        (``AGENT_INGEST_SAMPLE_KB``), which the greeting's suggested question needs
        (``llm.extractive_greeting``); the app factory knows, the messages do not."""
        self._sample_kb = sample_kb
        self._ids = itertools.count(1)
        #: The answerer's memoised word work, shared by this provider's answers
        #: (``llm.extractive_words.Words``: bounded, built with the provider).
        self._words = Words()

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        offered = {t.name for t in request.tools}
        message, start = _question(request.messages)
        # A long message is read by its last words only (``llm.extractive_long``): the
        # answerer's CPU grows with the words it reads, and it holds the GIL meanwhile.
        part = read_part(message)
        question = part.text
        results = results_since(request.messages, start)
        attempted = [r for r in results if r.name == SEARCH_TOOL]
        searched = [r for r in attempted if not r.is_error]
        answered = [r for r in results if r.name == ANSWER_TOOL]
        acting = acting_context(request)
        if acting is not None:
            text = decline_message(acting)
            for ev in self._say(text, offered, attempted, answered, question, search_required(request)):
                yield ev
            return
        greeted = greeting_reply(message, sample_kb=self._sample_kb)
        if greeted is not None:  # "hi", "thanks": nothing asked, nothing to look up or cite
            for ev in self._say(greeted, offered, attempted, answered, question, search_required(request)):
                yield ev
            return
        if not attempted and SEARCH_TOOL not in offered:
            text = (
                "I am running without a language model, so I can only answer questions from the "
                "knowledge base, and its tools are not available in this context."
            )
            yield ContentDelta(text)
            yield MessageComplete(stop_for_tool_use=False, usage=Usage(), stop_reason="stop")
            return
        follow = follow_up_of(question, [read_part(q).text for q in earlier_questions(request.messages, start)])
        if not attempted:  # a failed search is not repeated: answer with what there is
            for ev in self._calls(_searches(question, follow)):
                yield ev
            return
        if answered and not answered[-1].is_error:
            yield MessageComplete(stop_for_tool_use=False, usage=Usage(), stop_reason="stop")
            return
        asked = follow.search_query() if follow is not None else search_text(question)
        found = pages_found(searched)
        planned = [page_read_args(page, query) for page, query in pages_to_read(asked, found)]
        first = distinct([p for r in searched for p in passages_of(r)])
        reads = [r for r in results if r.name == PAGE_READ_TOOL]
        composed: Composed | None = None
        if not reads and not answered and PAGE_READ_TOOL in offered:
            # The found page(s) read more deeply (llm.extractive_page_read) and, in the same
            # turn, the next chunk of a passage the first search's answer would quote that
            # ends introducing what that chunk holds (llm.extractive_next): after this
            # round of corpus searches the review closes the search tools.
            composed = await asyncio.to_thread(compose, question, first, self._words, follow)
            buckets = {page.doc_id: page.bucket for page in found}
            nexts = [next_read_args(w, buckets[w.doc_id]) for w in composed.wants if w.doc_id in buckets]
            calls = planned + [args for args in nexts if args not in planned]
            if calls:
                for ev in self._calls([(PAGE_READ_TOOL, args) for args in calls]):
                    yield ev
                return
        # Which reads were the page's and which a next chunk's: by the arguments they were
        # called with (a read whose call is not in the conversation is taken as the page's).
        asked_with = calls_since(request.messages, start)
        next_ids = {
            r.tool_call_id
            for r in reads
            if (called := asked_with.get(r.tool_call_id)) is not None and called not in planned
        }
        read_again = [r for r in reads if r.tool_call_id not in next_ids]
        read_next = [r for r in reads if r.tool_call_id in next_ids]
        passages = with_page_reads(first, read_again)
        if composed is None or reads:
            # ~10 ms of pure-Python scoring per answer (16-18 ms before the memos of 2026-11-29;
            # bench/offline_answers.py --replay): on a worker thread, so the event
            # loop (every other live stream) gets the GIL back every switch interval instead
            # of waiting out the whole answer. The memo's lru_caches are thread-safe.
            chunks = chunks_read(read_next)
            composed = await asyncio.to_thread(compose, question, passages, self._words, follow, chunks)
        if answered:  # the last answer was rejected: answer again without citations
            composed = Composed()
        said = reply_of(composed, nothing_searched(searched) if not passages else "")
        if part.cut:  # never a silent cut: the answer says what it read
            said = replace(said, answer=f"{cut_note(part)}\n\n{said.answer}")
        for piece in _pieces(said.answer):
            yield ContentDelta(piece)
        if ANSWER_TOOL not in offered or len(answered) >= 2:  # say it as text; never loop on it
            yield MessageComplete(stop_for_tool_use=False, usage=Usage(), stop_reason="stop")
            return
        args: dict[str, Any] = {
            "answer": said.answer,
            "sources": said.sources,
            "confidence_score": said.confidence,
            "used_internal_kb": said.used_kb,
            "used_external_kb": False,
        }
        for ev in self._call(ANSWER_TOOL, args):
            yield ev

    def _say(
        self,
        text: str,
        offered: set[str],
        attempted: list[ToolResult],
        answered: list[ToolResult],
        question: str,
        search_first: bool,
    ) -> list[StreamEvent]:
        """Say ``text``, which quotes nothing (an acting request's decline, the reply to a
        greeting), through ``generate_response`` (when offered, citing no source), else as
        plain text. A knowledge search comes first only when the flow
        demands one: the prompt makes it the first step (``search_first``), or the policy
        refused the answer before any search (a custom prompt that does not say so). The
        search is made at most once and the answer tried at most twice (the second only
        after that search), so whatever the policy offers when, this cannot loop."""
        if answered and not answered[-1].is_error:
            return [MessageComplete(stop_for_tool_use=False, usage=Usage(), stop_reason="stop")]
        if SEARCH_TOOL in offered and not attempted and (search_first or answered):  # answered: refused
            return self._call(SEARCH_TOOL, {"query": search_text(question or "help"), "top_k": 3})
        args = {
            "answer": text,
            "sources": [],
            "confidence_score": 0.0,  # it answers nothing from the knowledge base: no confidence to claim
            "used_internal_kb": False,
            "used_external_kb": False,
        }
        if answered:  # the text was streamed with the refused answer: only the answer again, once
            if ANSWER_TOOL in offered and len(answered) == 1 and attempted:
                return self._call(ANSWER_TOOL, args)
            return [MessageComplete(stop_for_tool_use=False, usage=Usage(), stop_reason="stop")]
        out: list[StreamEvent] = [ContentDelta(piece) for piece in _pieces(text)]
        if ANSWER_TOOL in offered:
            return out + self._call(ANSWER_TOOL, args)
        return [*out, MessageComplete(stop_for_tool_use=False, usage=Usage(), stop_reason="stop")]

    def _call(self, name: str, args: dict[str, Any]) -> list[StreamEvent]:
        return self._calls([(name, args)])

    def _calls(self, calls: list[tuple[str, dict[str, Any]]]) -> list[StreamEvent]:
        """One turn calling each tool of ``calls`` (in parallel, as a model may)."""
        out: list[StreamEvent] = []
        for index, (name, args) in enumerate(calls):
            call_id = f"call_x{next(self._ids)}"
            out += [ToolUseStart(call_id, name, index), ToolUseInput(call_id, orjson.dumps(args).decode())]
        out.append(MessageComplete(stop_for_tool_use=True, usage=Usage(), stop_reason="tool_use"))
        return out

    async def health(self) -> ProviderHealth:
        return ProviderHealth(True, "offline extractive answers from the knowledge base (no model)")

    async def aclose(self) -> None:
        return None


def _pieces(text: str, size: int = 48) -> list[str]:
    """Split the answer at word boundaries so it streams like tokens."""
    out: list[str] = []
    current = ""
    for word in text.split(" "):
        candidate = f"{current} {word}" if current else word
        if len(candidate) > size and current:
            out.append(current + " ")
            current = word
        else:
            current = candidate
    if current:
        out.append(current)
    return out


__all__ = [
    "ExtractiveProvider",
    "Passage",
    "Reply",
    "acting_context",
    "compose",
    "compose_answer",
    "decline_message",
    "not_found_message",
    "reply_of",
    "search_required",
]
