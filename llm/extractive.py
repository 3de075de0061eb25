"""The ``extractive`` provider: answers from the knowledge base with no model at all.

It plays the mandatory flow deterministically through the same loop and the same tools
as a real model: the first turn calls ``knowledge_base_search`` with the user's
question; the next turn reads the chunks that came back, picks the sentences that best
overlap the question, streams them as the answer with ``[source_id]`` citations, and
calls ``generate_response`` with those sources. With nothing relevant it says it does
not know. Everything it needs is in the conversation it is sent, so it keeps no state.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

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
_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])|\n{2,}|\n(?=[-*#|] )")
_STOP = frozenset(
    "a an and are as at be by can could do does for from how i if in into is it its me my of on or our "
    "should so than that the their them then there these this those to was we what when where which who "
    "why will with would you your about after before does did get got has have having here just more most "
    "not only other over same some such too under up very via use used using".split()
)
MIN_RELEVANCE = 0.08
MAX_SENTENCES = 4
MAX_ANSWER_CHARS = 1200


def _terms(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [w for w in _WORD.findall(folded) if w not in _STOP and len(w) > 1]


def _stem(word: str) -> str:
    for suffix in ("ations", "ation", "ings", "ing", "ies", "ied", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


@dataclass(frozen=True, slots=True)
class Passage:
    source_id: str
    title: str
    text: str
    score: float


def _question(messages: list[Message]) -> tuple[str, int]:
    """The latest user question and its index (enforcement reminders carry tool results
    or follow an assistant turn of this run; the question is the last plain user text
    that starts an exchange)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user" and m.content and not m.tool_results and (i == 0 or messages[i - 1].role != "assistant"):
            return m.content, i
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user" and messages[i].content:
            return messages[i].content, i
    return "", 0


def _results_since(messages: list[Message], start: int) -> list[ToolResult]:
    return [r for m in messages[start:] for r in m.tool_results]


def _passages(result: ToolResult) -> list[Passage]:
    try:
        body = orjson.loads(result.content)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(body, dict):
        return []
    out: list[Passage] = []
    for chunk in body.get("chunks") or []:
        if isinstance(chunk, dict) and chunk.get("source_id") and chunk.get("text"):
            out.append(Passage(str(chunk["source_id"]), str(chunk.get("title") or ""), str(chunk["text"]),
                               float(chunk.get("score") or 0.0)))
    for ext in body.get("external_answers") or []:
        if isinstance(ext, dict) and ext.get("source_id") and ext.get("answer"):
            out.append(Passage(str(ext["source_id"]), str(ext.get("question") or "stored external answer"),
                               str(ext["answer"]), 0.5))
    return out


def compose_answer(question: str, passages: list[Passage]) -> tuple[str, list[str], float]:
    """Pick the sentences that best cover the question; return (answer, sources, confidence)."""
    q = {_stem(t) for t in _terms(question)}
    if not q or not passages:
        return "", [], 0.0
    scored: list[tuple[float, int, str, str]] = []
    for p_rank, passage in enumerate(passages):
        title_terms = {_stem(t) for t in _terms(passage.title)}
        for s_rank, sentence in enumerate(_SENTENCE.split(passage.text)):
            sentence = " ".join(sentence.split()).lstrip("#-*| ").strip()
            if len(sentence) < 25:
                continue
            terms = {_stem(t) for t in _terms(sentence)}
            if not terms:
                continue
            overlap = len(q & terms) / len(q)
            title_bonus = 0.15 * len(q & title_terms) / len(q)
            score = overlap + title_bonus + 0.1 * passage.score - 0.01 * s_rank - 0.02 * p_rank
            scored.append((score, p_rank * 1000 + s_rank, passage.source_id, sentence))
    scored.sort(key=lambda s: (-s[0], s[1]))
    picked = [s for s in scored if s[0] >= MIN_RELEVANCE][:MAX_SENTENCES]
    if not picked:
        return "", [], 0.0
    picked.sort(key=lambda s: s[1])  # keep the documents' own order for readability
    parts: list[str] = []
    sources: list[str] = []
    length = 0
    for _score, _order, source_id, sentence in picked:
        if length + len(sentence) > MAX_ANSWER_CHARS and parts:
            break
        parts.append(f"{sentence} [{source_id}]")
        length += len(sentence)
        if source_id not in sources:
            sources.append(source_id)
    confidence = round(min(0.9, max(s[0] for s in picked)), 2)
    return " ".join(parts), sources, confidence


class ExtractiveProvider:
    name = "extractive"
    model = "extractive-v1"

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        offered = {t.name for t in request.tools}
        question, start = _question(request.messages)
        results = _results_since(request.messages, start)
        searched = [r for r in results if r.name == SEARCH_TOOL and not r.is_error]
        answered = [r for r in results if r.name == ANSWER_TOOL]
        if SEARCH_TOOL not in offered or ANSWER_TOOL not in offered:
            text = (
                "I am running without a language model, so I can only answer questions from the "
                "knowledge base, and its tools are not available in this context."
            )
            yield ContentDelta(text)
            yield MessageComplete(stop_for_tool_use=False, usage=Usage(), stop_reason="stop")
            return
        if not searched:
            for ev in self._call(SEARCH_TOOL, {"query": question[:500], "top_k": 5}):
                yield ev
            return
        if answered and not answered[-1].is_error:
            yield MessageComplete(stop_for_tool_use=False, usage=Usage(), stop_reason="stop")
            return
        passages = [p for r in searched for p in _passages(r)]
        answer, sources, confidence = compose_answer(question, passages)
        if answered:  # the last answer was rejected: answer again without citations
            answer, sources, confidence = "", [], 0.0
        if not answer:
            answer = (
                "I could not find an answer to that in the knowledge base. Try rephrasing the "
                "question with the terms the documentation uses."
            )
            used_kb = False
        else:
            used_kb = True
        for piece in _pieces(answer):
            yield ContentDelta(piece)
        args: dict[str, Any] = {
            "answer": answer,
            "sources": sources,
            "confidence_score": confidence,
            "used_internal_kb": used_kb,
            "used_external_kb": False,
        }
        for ev in self._call(ANSWER_TOOL, args):
            yield ev

    def _call(self, name: str, args: dict[str, Any]) -> list[StreamEvent]:
        call_id = f"call_x{next(self._ids)}"
        return [
            ToolUseStart(call_id, name, 0),
            ToolUseInput(call_id, orjson.dumps(args).decode()),
            MessageComplete(stop_for_tool_use=True, usage=Usage(), stop_reason="tool_use"),
        ]

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
