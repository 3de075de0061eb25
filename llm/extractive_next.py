"""The chunk after a quoted passage, when the passage ends introducing what follows.

The rule: when the chosen passage's last sentence introduces what follows (it ends with
":") and the list, code block or table it introduces opens the next chunk of the same
document (its position + 1, in the same section), the answer reads that chunk and
quotes the introduction with what it introduces, whole; when that chunk cannot be read,
the introduction is left out as before, so no answer ends on a dangling "…:".

Why: a chunk often ends on its introduction and the next one holds the code. Node's
readline page ends a chunk with "A common use case for `readline` is to consume an input
file one line at a time. The easiest way to do so is leveraging the
[`fs.ReadStream`](…) API as well as a `for await...of` loop:" and the next chunk is the
code block; "how do I read a file line by line with readline?" was answered with the
first sentence alone — a how-to without the how.

How the chunk is read: when it is not among the passages already, through the
answerer's page-scoped read (``search_text`` scoped to the document, as
``llm.extractive_page_read`` reads a page again), with the words of the section's
heading and of the introduction: the next chunk of a section sits under the same heading
(which the search indexes for every chunk), and the chunk ending with the introduction
says its words, so the scoped search never comes back empty (which would end the run
asking the user to rephrase). It is asked for the passages the first search's answer
would quote, in the same turn as the page reads: after a round of corpus searches the
review closes the search tools (``agenttools.rag.review``), so there is no later turn to
ask in. Only the chunk at position + 1 is used, whatever else the read returns, and only
what it opens with (after the sentences it repeats from the end of the chunk before,
which the chunker carries over), never scored as a passage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llm.extractive_page_read import PAGE_CONTEXT_CHARS, PAGE_TOP_K
from llm.extractive_quote import WHOLE_BLOCK_CHARS, WHOLE_PARAGRAPH_CHARS
from llm.extractive_read import Passage, Read, Unit, introduces, sentence_key
from llm.markdown_blocks import Block, item_body, parse_passage

#: What an introduction may bring from the next chunk: a block a reader is promised.
_INTRODUCED = ("list", "code", "table")
#: A Markdown link's target: its words name another page, not what to look for.
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
#: The longest query a neighbour read sends (``search_text`` takes 500 characters).
MAX_QUERY_CHARS = 400


@dataclass(frozen=True, slots=True)
class NextChunk:
    """A chunk the answer wants: the one after ``after`` (``doc_id#position``) in its
    document, and the words that find it there."""

    doc_id: str
    position: int
    query: str


def chunk_position(passage: Passage) -> int | None:
    """The chunk's position in its document (``doc#3``; a page-scoped read's passage says
    it in its ``chunk_id``), or None when it is not known."""
    where = passage.chunk_id or passage.source_id
    tail = where.rsplit("#", 1)[-1] if "#" in where else ""
    return int(tail) if tail.isdigit() else None


def _document(passage: Passage) -> str:
    return passage.source_id.split("#", 1)[0]


def _ends_introducing(read: Read) -> bool:
    """The passage's last block is a paragraph or list whose last sentence or item
    introduces what follows, and the passage ends there."""
    if not read.blocks:
        return False
    last = read.blocks[-1]
    if last.kind == "prose" and last.units:
        return introduces(last.units[-1])
    return last.kind == "list" and bool(last.units) and introduces(item_body(last.units[-1]))


def _innermost(section: str) -> str:
    return section.rsplit(" \u203a ", 1)[-1].strip().removeprefix("\u2026 ").strip()


def opens_with(read: Read, following: Passage) -> Block | None:
    """What ``following`` (the next chunk of ``read``'s document) goes on with after
    ``read``'s introduction: its first block past the sentences carried over from
    ``read``, when that is a list, code block or table short enough to quote whole and the
    chunk continues the same section; else None."""
    heading = read.headings[-1].strip() if read.headings else ""
    section = _innermost(following.section)
    if heading and section and section.strip("`*_ ") != heading.strip("`*_ "):
        return None  # another section: not what the introduction introduces
    carried = {sentence_key(u) for u in read.blocks[-1].units}
    for block in parse_passage(following.text, first_of_document=False):
        if block.kind == "prose" and block.units and all(sentence_key(u) in carried for u in block.units):
            continue  # the end of ``read`` again, as the chunker carries it over
        if block.kind in _INTRODUCED and len(block.markdown()) <= WHOLE_BLOCK_CHARS:
            return block
        return None
    return None


def attach_next(reads: list[Read], chunks: list[Passage]) -> None:
    """Give each passage ending with an introduction what its document's next chunk opens
    with (``Read.after``), when that chunk is among ``chunks``."""
    by_place = {(_document(p), pos): p for p in chunks if (pos := chunk_position(p)) is not None}
    for read in reads:
        position = chunk_position(read.passage)
        if read.after is not None or position is None or not _ends_introducing(read):
            continue
        following = by_place.get((_document(read.passage), position + 1))
        if following is not None:
            read.after = opens_with(read, following)


def wants_next(read: Read, unit: Unit) -> NextChunk | None:
    """The next chunk a quote of ``unit`` needs: the unit's paragraph is the passage's
    last, is quoted to its end (``llm.extractive_quote.window``: whole when short, else the
    lead and the sentence after it) and ends introducing what the passage does not hold."""
    position = chunk_position(read.passage)
    last = len(read.blocks) - 1
    if read.after is not None or position is None or unit.block != last or not _ends_introducing(read):
        return None
    block = read.blocks[last]
    if block.kind != "prose":
        return None
    to_end = len(" ".join(block.units)) <= WHOLE_PARAGRAPH_CHARS or unit.index >= len(block.units) - 2
    if not to_end:
        return None
    words = f"{read.headings[last]} {block.units[-1]}" if read.headings[last] else block.units[-1]
    query = " ".join(_LINK_TARGET.sub("]", words).replace("`", " ").split())[:MAX_QUERY_CHARS]
    return NextChunk(_document(read.passage), position + 1, query)


def next_read_args(wanted: NextChunk, bucket: str) -> dict[str, Any]:
    """The ``search_text`` arguments reading the chunk ``wanted`` names."""
    return {
        "bucket": bucket,
        "query": wanted.query,
        "doc_id": wanted.doc_id,
        "top_k": PAGE_TOP_K,
        "context_chars": PAGE_CONTEXT_CHARS,
    }


__all__ = [
    "MAX_QUERY_CHARS",
    "NextChunk",
    "attach_next",
    "chunk_position",
    "next_read_args",
    "opens_with",
    "wants_next",
]
