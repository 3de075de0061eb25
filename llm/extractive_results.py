"""What the offline answerer (``llm.extractive``) reads from the tool results its
conversation carries: the passages of the knowledge searches (chunks and stored
external answers) with the page-scoped reads' chunks after them, each chunk once; the
pages the searches found; and, when the searches' buckets do not exist, the answer that
says nothing was searched. The provider decides what to call and when; this reads what
came back, so neither grows past one job.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import orjson

from llm.extractive_answer import Passage
from llm.extractive_page_read import found_pages
from llm.types import Message, ToolResult


def distinct(passages: list[Passage]) -> list[Passage]:
    """Each chunk once, where it first came (two searches of one turn find some alike)."""
    seen: set[str] = set()
    out: list[Passage] = []
    for p in passages:
        key = p.chunk_id or p.source_id
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def results_since(messages: list[Message], start: int) -> list[ToolResult]:
    """The tool results of the turns since the question at ``start``: this question's own."""
    return [r for m in messages[start:] for r in m.tool_results]


def calls_since(messages: list[Message], start: int) -> dict[str, dict[str, Any]]:
    """The arguments of the tool calls made since the question at ``start``, by call id:
    which of two ``search_text`` reads was the page's and which a next chunk's."""
    return {c.id: c.arguments for m in messages[start:] for c in m.tool_calls}


def passages_of(result: ToolResult) -> list[Passage]:
    """A knowledge search's passages: its chunks, then its stored external answers (an
    unreadable result gives none rather than failing the answer)."""
    try:
        body = orjson.loads(result.content)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(body, dict):
        return []
    out: list[Passage] = []
    for chunk in body.get("chunks") or []:
        if isinstance(chunk, dict) and chunk.get("source_id") and chunk.get("text"):
            out.append(
                Passage(
                    str(chunk["source_id"]),
                    str(chunk.get("title") or ""),
                    str(chunk["text"]),
                    float(chunk.get("score") or 0.0),
                    _summary(chunk.get("metadata")),
                    section=str(chunk.get("section") or ""),
                )
            )
    for ext in body.get("external_answers") or []:
        if isinstance(ext, dict) and ext.get("source_id") and ext.get("answer"):
            out.append(
                Passage(
                    str(ext["source_id"]), str(ext.get("question") or "stored external answer"), str(ext["answer"]), 0.5
                )
            )
    return out


def _body(result: ToolResult) -> dict[str, Any]:
    try:
        body = orjson.loads(result.content)
    except orjson.JSONDecodeError:
        return {}
    return body if isinstance(body, dict) else {}


#: Where a search's warning about a missing bucket says its scope came from
#: (``agenttools.rag.kb_search``: "no bucket 'x': not searched (named by …)").
_NAMED_BY = re.compile(r"^no buckets? .*\(named by (?P<by>[^()]*)\)\s*$")


def _named_by(searched: list[ToolResult]) -> set[str]:
    """Who named the missing buckets, as the searches' warnings say: the setting
    ``AGENT_KB_DEFAULT_BUCKETS``, the chat's ``context.buckets``, or not said."""
    out: set[str] = set()
    for result in searched:
        for warning in _body(result).get("warnings") or []:
            if isinstance(warning, str) and (found := _NAMED_BY.match(warning)) is not None:
                out.add(found.group("by"))
    return out


def nothing_searched(searched: list[ToolResult]) -> str:
    """The answer when the searches' buckets do not exist (``missing_buckets``), so
    nothing was searched: said, not "could not find". What to check follows who named
    them: ``AGENT_KB_DEFAULT_BUCKETS`` (a typo in the setting) or the request's
    ``context.buckets``; when the result does not say, only the buckets there are."""
    missing = list(dict.fromkeys(str(b) for r in searched for b in _body(r).get("missing_buckets") or []))
    if not missing:
        return ""
    names = ", ".join(repr(b) for b in missing)
    text = f"I could not search the knowledge base: the bucket(s) {names} do not exist. "
    named_by = _named_by(searched)
    if any("context.buckets" in by for by in named_by):
        text += "This chat's context.buckets named them: name buckets that exist. "
    if any("AGENT_KB_DEFAULT_BUCKETS" in by for by in named_by):
        text += "The administrator can check AGENT_KB_DEFAULT_BUCKETS and the buckets there are"
        return text + " (agentchat buckets)."
    return text + "The administrator can list the buckets there are (agentchat buckets)."


def pages_found(searched: list[ToolResult]) -> list[Any]:
    """The pages the knowledge-base searches found, best first."""
    chunks = [c for r in searched for c in _body(r).get("chunks") or [] if isinstance(c, dict)]
    return found_pages(chunks)


def with_page_reads(passages: list[Passage], reads: list[ToolResult]) -> list[Passage]:
    """The first search's passages, then the chunks the page-scoped reads found that it
    had not. Those are cited by their document (what ``search_text`` registers) and rank
    below the page's passages the first search returned (a read of one page scores its
    chunks against each other, not against the corpus)."""
    seen = {p.chunk_id or p.source_id for p in passages}
    floor: dict[str, float] = {}
    for p in passages:
        doc = p.source_id.split("#", 1)[0]
        floor[doc] = min(floor.get(doc, p.score), p.score)
    out = list(passages)
    for hit in chunks_read(reads):
        if hit.chunk_id in seen:
            continue
        seen.add(hit.chunk_id)
        out.append(dataclasses.replace(hit, score=floor.get(hit.source_id, 0.0)))
    return out


def chunks_read(reads: list[ToolResult]) -> list[Passage]:
    """The chunks ``search_text`` reads found, each cited by its document (what
    ``search_text`` registers) and saying its place in ``chunk_id``; scored 0."""
    out: list[Passage] = []
    for result in reads:
        if result.is_error:
            continue
        for hit in _body(result).get("results") or []:
            if not isinstance(hit, dict) or not hit.get("doc_id") or not hit.get("snippet"):
                continue
            chunk = str(hit.get("chunk_id") or "")
            if not chunk:
                continue
            out.append(
                Passage(
                    str(hit["doc_id"]),
                    str(hit.get("title") or ""),
                    str(hit["snippet"]),
                    0.0,
                    _summary(hit.get("metadata")),
                    chunk,
                    str(hit.get("section") or ""),
                )
            )
    return out


def _summary(metadata: Any) -> str:
    """A Markdown page's one-line summary: its front matter's ``description``, which the
    loader keeps in the document's metadata (a record's ``description`` field is data,
    not a summary of a page)."""
    if not isinstance(metadata, dict) or metadata.get("format") != "markdown":
        return ""
    summary = metadata.get("description")
    return summary if isinstance(summary, str) else ""


__all__ = [
    "calls_since",
    "chunks_read",
    "distinct",
    "nothing_searched",
    "pages_found",
    "passages_of",
    "results_since",
    "with_page_reads",
]
