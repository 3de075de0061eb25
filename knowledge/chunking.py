"""Split a document into retrieval chunks along its own structure.

Why structure first: a chunk that starts at a heading and holds whole paragraphs reads
well as a cited snippet and embeds one topic. We pack paragraphs (and, for long ones,
sentences) up to ``target`` characters, start a new chunk at a heading once the current
one is reasonably full, and carry the last ``overlap`` characters of a chunk into the
next one *within* a section, so a fact that straddles a boundary is still found whole.
Each chunk remembers the heading path it sits under ("Routes › Chat").

Paged text (a PDF) separates its pages with a line holding a form feed (``\f``,
``PAGE_BREAK``); with ``paged=True`` each chunk also remembers the pages its own text
comes from (``page`` .. ``page_end``, 1-based; the overlap carried in from the previous
chunk does not count), so a citation can say "page 5".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADING_RE = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_SENTENCE_RE = re.compile(r"(?<=[.!?…])\s+")

#: What separates the pages of paged text: a line holding a form feed.
PAGE_BREAK = "\n\f\n"


@dataclass(frozen=True, slots=True)
class Chunk:
    position: int
    heading: str
    text: str
    #: First and last page the chunk's text is on (1-based), for paged text only.
    page: int | None = None
    page_end: int | None = None


@dataclass(frozen=True, slots=True)
class _Block:
    text: str
    heading: str  # heading path in effect for this block
    is_heading: bool
    page: int | None = None


def _blocks(text: str, paged: bool = False) -> list[_Block]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[_Block] = []
    path: list[tuple[int, str]] = []
    para: list[str] = []
    in_fence = False
    page = 1 if paged else None

    def heading_path() -> str:
        return " › ".join(h for _, h in path)

    def flush() -> None:
        if para:
            body = "\n".join(para).strip()
            if body:
                blocks.append(_Block(body, heading_path(), False, page))
            para.clear()

    for line in lines:
        if page is not None and "\f" in line and not line.strip():
            flush()  # a paragraph never spans a page break: each block has one page
            page += line.count("\f")
            continue
        if _FENCE_RE.match(line):
            in_fence = not in_fence
            para.append(line)
            continue
        if in_fence:
            para.append(line)
            continue
        m = _HEADING_RE.match(line)
        if m:
            flush()
            level, title = len(m.group(1)), m.group(2).strip()
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
            blocks.append(_Block(line.strip(), heading_path(), True, page))
        elif not line.strip():
            flush()
        else:
            para.append(line.rstrip())
    flush()
    return blocks


def _pieces(block: str, target: int) -> list[str]:
    """A paragraph as-is when it fits, else its sentences, else hard word-wrapped parts."""
    if len(block) <= target:
        return [block]
    out: list[str] = []
    for sentence in _SENTENCE_RE.split(block):
        if len(sentence) <= target:
            out.append(sentence)
            continue
        words = sentence.split(" ")
        cur = ""
        for w in words:
            while len(w) > target:  # a "word" longer than a chunk (base64, URLs): cut it
                if cur:
                    out.append(cur)
                    cur = ""
                out.append(w[:target])
                w = w[target:]
            if cur and len(cur) + 1 + len(w) > target:
                out.append(cur)
                cur = w
            else:
                cur = f"{cur} {w}" if cur else w
        if cur:
            out.append(cur)
    # Re-pack short sentences so a long paragraph does not become one chunk per sentence.
    packed: list[str] = []
    for s in out:
        if packed and len(packed[-1]) + 1 + len(s) <= target:
            packed[-1] = f"{packed[-1]} {s}"
        else:
            packed.append(s)
    return packed


def _tail(text: str, overlap: int) -> str:
    if overlap <= 0 or len(text) <= overlap:
        return "" if overlap <= 0 else text
    tail = text[-overlap:]
    cut = tail.find(" ")
    return tail[cut + 1 :] if 0 <= cut < len(tail) // 2 else tail


def chunk_text(text: str, *, target: int = 800, overlap: int = 120, paged: bool = False) -> list[Chunk]:
    """Chunks of roughly ``target`` characters (never more than ``target + overlap``).

    ``paged``: ``text`` is pages separated by ``PAGE_BREAK``; chunks carry page numbers.
    """
    if target < 50:
        raise ValueError("target must be at least 50 characters")
    overlap = max(0, min(overlap, target // 2))
    chunks: list[Chunk] = []
    parts: list[str] = []
    pages: list[int] = []
    size = 0
    heading = ""

    def emit() -> None:
        nonlocal parts, size, pages
        body = "\n\n".join(parts).strip()
        if body:
            first, last = (min(pages), max(pages)) if pages else (None, None)
            chunks.append(Chunk(len(chunks), heading, body, first, last))
        parts, size, pages = [], 0, []

    for block in _blocks(text, paged):
        if block.is_heading:
            if size >= target // 2:
                emit()
            if not parts:
                heading = block.heading
            parts.append(block.text)
            size += len(block.text) + 2
            if block.page is not None:
                pages.append(block.page)
            continue
        for piece in _pieces(block.text, target):
            if parts and size + len(piece) > target:
                previous = "\n\n".join(parts)
                emit()
                heading = block.heading
                carry = _tail(previous, overlap)
                if carry:
                    parts, size = [carry], len(carry) + 2
            if not parts:
                heading = block.heading
            parts.append(piece)
            size += len(piece) + 2
            if block.page is not None:
                pages.append(block.page)
    emit()
    return chunks
