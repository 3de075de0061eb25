"""Split a document into retrieval chunks along its own structure.

Why structure first: a chunk that starts at a heading and holds whole paragraphs reads
well as a cited snippet and embeds one topic. We pack paragraphs (and, for long ones,
sentences) up to ``target`` characters, start a new chunk at a heading once the current
one is reasonably full, and carry the last whole sentences (at most ``overlap``
characters) of a chunk into the next one *within* a section, so a fact that straddles a
boundary is still found whole. Each chunk remembers the heading path it sits under
("Routes › Chat").

A chunk is read by people and by the offline answerer as it is, so it never starts
mid-sentence (the carry is whole sentences or list items, or nothing) and a block split
for size keeps its own line breaks: a long list is cut between items, a long fenced code
block between lines with each part fenced again, a long table between rows with each
part under the header again, prose between sentences.

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
#: Where prose may be cut: the whitespace after a sentence's end.
_SENTENCE_RE = re.compile(r"(?<=[.!?…])\s+(?=\S)")
#: Where a list may be cut: the line break before an item marker.
_ITEM_RE = re.compile(r"\n(?=[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t])")
#: Where carried text may start: after a sentence's end (before what starts a sentence),
#: a blank line, or before a list item.
_CARRY_START_RE = re.compile(
    r"(?<=[.!?…])\s+(?=[A-Z0-9`\"'(\[*_])|\n\s*\n(?=\S)|\n(?=[ \t]*(?:[-*+]|\d{1,3}[.)])[ \t])"
)
_FENCE_LINE_RE = re.compile(r"^\s*(```|~~~)", re.MULTILINE)

#: What separates the pages of paged text: a line holding a form feed.
PAGE_BREAK = "\n\f\n"

#: The version of the rules this module cuts text by. Bump it with any change that makes
#: other chunks of the same text (boundaries, carried overlap, headings, pages): every
#: stored document records the version it was cut by (``kb_documents.chunk_rules``), and
#: one cut by an older one is re-made - the sample knowledge base at the next start, a user's
#: documents by the next ``agentchat ingest`` of their folder (or posting them again) -
#: while ``/readyz`` counts those still waiting (``older_chunking``). Without it an
#: upgrade kept the old chunks, unchanged files being skipped by their stamps and hashes.
#: ``tests/test_chunk_rules_fingerprint.py`` fails when the chunks of a fixed corpus change
#: while this number did not. Only *lower* rules are re-made (``older_than_ours``).
CHUNK_RULES = 1


def older_than_ours(rules: int | None) -> bool:
    """Whether a document recorded as cut by ``rules`` was cut by older rules than this
    release's, so an ingest or a start re-makes it and ``/readyz`` counts it (``None``:
    stored before the rules were recorded, migration 32 - older). A document cut by
    *newer* rules is left alone: during a rolling upgrade (or after a rollback) this
    release shares the database with a newer one, and re-cutting its documents down made
    the two re-make each other's at every start. The chunk rows' shape is the same, so
    this release searches them as they are."""
    return rules is None or rules < CHUNK_RULES


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
        if _FENCE_RE.match(line):  # a code block is a block of its own
            if not in_fence:
                flush()
            in_fence = not in_fence
            para.append(line)
            if not in_fence:
                flush()
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


def _split_at(text: str, boundary: re.Pattern[str]) -> list[tuple[str, str]]:
    """``text`` cut at ``boundary``: ``(segment, separator after it)`` pairs, so the
    segments and separators put back together give ``text`` exactly."""
    out: list[tuple[str, str]] = []
    last = 0
    for m in boundary.finditer(text):
        if m.start() > last:
            out.append((text[last : m.start()], m.group(0)))
            last = m.end()
    out.append((text[last:], ""))
    return out


def _wrap_words(text: str, target: int) -> list[tuple[str, str]]:
    """A "sentence" longer than a chunk, cut at spaces (and a longer word anywhere)."""
    out: list[tuple[str, str]] = []
    cur = ""
    for w in text.split(" "):
        while len(w) > target:  # a "word" longer than a chunk (base64, URLs): cut it
            if cur:
                out.append((cur, " "))
                cur = ""
            out.append((w[:target], ""))
            w = w[target:]
        if cur and len(cur) + 1 + len(w) > target:
            out.append((cur, " "))
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        out.append((cur, " "))
    return out


def _pack(segments: list[tuple[str, str]], target: int) -> list[str]:
    """Consecutive segments joined by their own separators, each result at most ``target``."""
    packed: list[str] = []
    cur, sep = "", ""
    for seg, after in segments:
        if cur and len(cur) + len(sep) + len(seg) <= target:
            cur = cur + sep + seg
        else:
            if cur.strip():
                packed.append(cur.strip())
            cur = seg
        sep = after
    if cur.strip():
        packed.append(cur.strip())
    return packed


def _fenced_pieces(block: str, target: int) -> list[str]:
    """A long fenced code block cut between lines, each part fenced again (same info
    string), so every chunk holds valid Markdown code."""
    lines = block.split("\n")
    opener = lines[0].strip()
    fence = _FENCE_RE.match(opener)
    closer = fence.group(1) if fence else "```"
    body = lines[1:-1] if len(lines) > 1 and _FENCE_RE.match(lines[-1]) else lines[1:]
    room = max(20, target - len(opener) - len(closer) - 2)
    segments: list[tuple[str, str]] = []
    for line in body:
        if len(line) <= room:
            segments.append((line, "\n"))
        else:
            segments.extend((line[i : i + room], "\n") for i in range(0, len(line), room))
    parts: list[str] = []
    cur: list[str] = []
    size = 0
    for line, _sep in segments:
        if cur and size + len(line) + 1 > room:
            parts.append("\n".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += len(line) + 1
    if cur:
        parts.append("\n".join(cur))
    return [f"{opener}\n{part}\n{closer}" for part in parts]


def _table_pieces(block: str, target: int) -> list[str]:
    """A long Markdown table cut between rows, each part under the table's header row
    (and its delimiter row), so every chunk holds a table a reader can read."""
    lines = block.split("\n")
    header = lines[:2] if len(lines) > 1 and set(lines[1].replace(" ", "")) <= set("|-:") else lines[:1]
    head = "\n".join(header)
    room = max(20, target - len(head) - 1)
    parts: list[list[str]] = [[]]
    size = 0
    for row in lines[len(header) :]:
        if parts[-1] and size + len(row) + 1 > room:
            parts.append([])
            size = 0
        parts[-1].append(row)
        size += len(row) + 1
    return [head + "\n" + "\n".join(rows) for rows in parts if rows]


def _pieces(block: str, target: int) -> list[str]:
    """A block as-is when it fits; else a fenced code block by lines, a list by items,
    prose by sentences (each keeping its line breaks), and only a sentence longer than
    a chunk by words."""
    if len(block) <= target:
        return [block]
    if _FENCE_RE.match(block):
        return _fenced_pieces(block, target)
    if block.lstrip().startswith("|"):
        return _table_pieces(block, target)
    segments: list[tuple[str, str]] = []
    for item, item_sep in _split_at(block, _ITEM_RE):
        if len(item) <= target:
            segments.append((item, item_sep))
            continue
        sentences = _split_at(item, _SENTENCE_RE)
        for i, (sentence, sep) in enumerate(sentences):
            last = i == len(sentences) - 1
            if len(sentence) <= target:
                segments.append((sentence, item_sep if last else sep))
            else:
                words = _wrap_words(sentence, target)
                words[-1] = (words[-1][0], item_sep if last else sep)
                segments.extend(words)
    return _pack(segments, target)


def _tail(text: str, overlap: int) -> str:
    """The whole sentences (or list items) at the end of ``text`` that fit in
    ``overlap`` characters, never starting inside a code block; "" when none does.

    Carrying a cut sentence would start the next chunk mid-sentence, which is what a
    reader (or the offline answerer) then quotes."""
    if overlap <= 0:
        return ""
    if len(text) <= overlap:
        return "" if _opens_fence(text) else text
    floor = len(text) - overlap
    for m in _CARRY_START_RE.finditer(text, max(0, floor - 3)):
        start = m.end()
        if start < floor:
            continue
        if len(_FENCE_LINE_RE.findall(text, 0, start)) % 2:
            continue  # inside a code block
        carry = text[start:]
        if "\n|" in "\n" + carry.lstrip():
            return ""  # table rows are not carried: a row without its header reads as noise
        if carry.strip() and not _opens_fence(carry):
            return carry.strip()
    return ""


def _opens_fence(text: str) -> bool:
    """True when ``text`` holds an unclosed fence line (it would swallow what follows)."""
    return len(_FENCE_LINE_RE.findall(text)) % 2 == 1


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
