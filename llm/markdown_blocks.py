"""A retrieved passage read as Markdown blocks, for the offline answerer.

The answerer quotes whole units, so it needs to know what the units are: prose is
quoted by the sentence (its hard line wraps reflowed), a list by the item (each item one
line, its marker kept), a fenced code block or a table verbatim, and headings only say
what the text under them is about. Splitting a passage into sentences with one regex —
what the answerer did before — flattened code blocks into a line and cut lists into
bullets without their introduction.

A passage may also be cut at either end: a chunk stored by an older chunker can start
mid-sentence (it carried the last characters of the previous chunk), a snippet starts
with ``…``, a result cut for size ends with `` …``. ``parse_passage`` drops those partial
sentences, so what is quoted never starts or ends mid-sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

BlockKind = Literal["prose", "list", "code", "table", "heading"]

_FENCE = re.compile(r"^\s*(```+|~~~+)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")
_ITEM = re.compile(r"^(?P<indent>\s*)(?P<marker>[-*+]|\d{1,3}[.)])\s+(?P<body>\S.*)$")
_TABLE = re.compile(r"^\s*\|")
#: A sentence ends at . ! ? (maybe closed by a quote, bracket or emphasis) before a
#: capital, digit, code span, quote, bracket or emphasis; not after "e.g." and the like.
_SENTENCE_END = re.compile(
    r"(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\betc\.)(?<!\bvs\.)(?<!\bcf\.)"
    r"(?<=[.!?])([\"')\]*_]*)\s+(?=[A-Z0-9`\"'(\[*_])"
)
#: A passage cut mid-sentence at its start: an ellipsis, or a lower-case word or
#: punctuation where a sentence would start.
_CUT_START = re.compile(r"^(?:…|\.\.\.|[a-z][a-z']*[\s,;:.)]|[,;:)\]])")


@dataclass(slots=True)
class Block:
    """One Markdown block: ``units`` are its sentences (prose), items (list) or nothing."""

    kind: BlockKind
    units: list[str] = field(default_factory=list)
    text: str = ""  # code and table: the block verbatim; heading: its title

    def markdown(self, only: list[int] | None = None) -> str:
        """The block as Markdown (a list's items one a line; ``only``: those units)."""
        if self.kind in ("code", "table"):
            return self.text
        if self.kind == "heading":
            return ""
        chosen = self.units if only is None else [self.units[i] for i in only]
        return ("\n" if self.kind == "list" else " ").join(chosen)


#: A code span (`` `agentchat ingest PATH... [--bucket B]` ``): quoted as written, so
#: its punctuation ends no sentence.
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def split_sentences(text: str) -> list[str]:
    """Sentences of one reflowed paragraph (or list item). A code span is one word: the
    "..." of `` `agentchat ingest PATH... [--bucket B]` `` is part of the command a
    sentence names, and cutting there left "`agentchat ingest PATH..." as a sentence of
    its own and the rest of the sentence (what the command reads) without its subject."""
    spans = [m.span() for m in _CODE_SPAN.finditer(text)]
    out: list[str] = []
    last = 0
    for m in _SENTENCE_END.finditer(text):
        if any(start < m.start() < end for start, end in spans):
            continue
        end = m.start() + len(m.group(1))
        piece = text[last:end].strip()
        if piece:
            out.append(piece)
        last = m.end()
    tail = text[last:].strip()
    if tail:
        out.append(tail)
    return out


def _reflow(lines: list[str]) -> str:
    return " ".join(" ".join(line.split()) for line in lines if line.strip())


#: A block quote's line markers (``> ``, nested ``> > ``), up to three spaces in; a
#: Python prompt (``>>> ``) is not one.
_QUOTE = re.compile(r"^(?:\s{0,3}>(?!>>)[ \t]?)+")
#: A GitHub alert's first line in a block quote (``[!TIP]``; ``\[!NOTE]`` as some
#: converters escape it).
_ALERT = re.compile(r"^\s*\\?\[!(note|tip|important|warning|caution)\]\s*$", re.IGNORECASE)


def _is_prose_line(line: str) -> bool:
    return not (_FENCE.match(line) or _HEADING.match(line) or _ITEM.match(line) or _TABLE.match(line))


def unquote_lines(lines: list[str]) -> list[str]:
    """``lines`` with block quotes read as their content, each quote a block of its own.

    Why: the answerer quotes sentences, and a quote's ``>`` markers read as words made
    "> [!TIP] > Set `CACHE_TTL_S` to …" of a GitHub tip. A quote's markers go, a blank
    line stands where a quote begins and ends (its paragraphs are not the text's around
    it), a code fence the quote leaves open is closed where it ends (as Markdown reads
    it), and an alert's marker line becomes its label: on the quote's first line when
    that is prose ("Tip: Set `CACHE_TTL_S` to …"), else a line of its own before it.
    A quote begins only where a paragraph may ("holds\n> 5 items" in a text file stays
    one sentence), and lines in a code fence outside a quote are left as they are (a
    shell's ``> `` prompt is not a quote)."""
    out: list[str] = []
    fence: str | None = None  # a fence open outside a quote
    inner: str | None = None  # a fence open inside the current quote
    quoted = False
    label = ""
    for line in lines:
        if fence is not None:
            out.append(line)
            if line.strip().startswith(fence):
                fence = None
            continue
        quote = _QUOTE.match(line)
        if quote is not None and not quoted and out and out[-1].strip() and not _HEADING.match(out[-1]):
            quote = None  # a ">" line inside a paragraph continues it
        if quote is None:
            if quoted:
                if inner is not None:
                    out.append(inner)
                out.append("")
                quoted, inner, label = False, None, ""
            opened = _FENCE.match(line)
            if opened:
                fence = opened.group(1)
            out.append(line)
            continue
        if not quoted:
            out.append("")
            quoted = True
        body = line[quote.end() :]
        if inner is None and (alert := _ALERT.match(body)):
            label = f"{alert.group(1).capitalize()}:"
            continue
        if label and body.strip():
            if inner is None and _is_prose_line(body):
                indent = len(body) - len(body.lstrip())
                body = f"{body[:indent]}{label} {body[indent:]}"
            else:
                out.extend([label, ""])
            label = ""
        if inner is not None:
            if body.strip().startswith(inner):
                inner = None
        elif opened := _FENCE.match(body):
            inner = opened.group(1)
        out.append(body)
    if quoted and inner is not None:
        out.append(inner)
    return out


def parse_blocks(text: str) -> list[Block]:
    """The Markdown blocks of ``text`` in order; an unclosed code fence is closed."""
    blocks: list[Block] = []
    prose: list[str] = []
    items: list[list[str]] = []  # current list: each item's lines (first line keeps its marker)
    table: list[str] = []

    def flush() -> None:
        if prose:
            body = _reflow(prose)
            if body:
                blocks.append(Block("prose", split_sentences(body)))
            prose.clear()
        if items:
            blocks.append(Block("list", [_item_line(lines) for lines in items]))
            items.clear()
        if table:
            blocks.append(Block("table", text="\n".join(table)))
            table.clear()

    lines = unquote_lines(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush()
            mark = fence.group(1)
            code = [line.strip()]
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(mark):
                code.append(lines[i].rstrip())
                i += 1
            code.append(mark)  # the closing fence, or one added to a fence cut short
            blocks.append(Block("code", text="\n".join(code)))
            i += 1
            continue
        heading = _HEADING.match(line)
        item = _ITEM.match(line)
        if heading:
            flush()
            blocks.append(Block("heading", text=heading.group(2).strip()))
        elif not line.strip():
            flush()
        elif _TABLE.match(line) and not items:
            if prose:
                flush()
            table.append(line.rstrip())
        elif item:
            if prose or table:
                flush()
            items.append([line.rstrip()])
        elif items:
            items[-1].append(line)  # a continuation line of the item
        else:
            if table:
                flush()
            prose.append(line)
        i += 1
    flush()
    return blocks


def _item_line(lines: list[str]) -> str:
    m = _ITEM.match(lines[0])
    assert m is not None
    body = _reflow([m.group("body"), *lines[1:]])
    return f"{m.group('indent')}{m.group('marker')} {body}"


def item_body(item: str) -> str:
    """A list item's text without its marker."""
    return split_item(item)[1]


def split_item(line: str) -> tuple[str, str]:
    """``(indent and marker, text)`` of a list item line; ``("", line)`` for other text."""
    m = _ITEM.match(line)
    return (line[: m.start("body")], m.group("body")) if m else ("", line)


def parse_passage(text: str, *, first_of_document: bool) -> list[Block]:
    """``parse_blocks`` without a sentence cut at either end of the passage.

    A passage that is not the start of its document and starts with a lower-case word
    (or an ellipsis, or punctuation) starts mid-sentence: its first sentence goes. A
    passage that ends with an ellipsis was cut: its last sentence goes.
    """
    stripped = text.strip()
    cut_end = stripped.endswith("…") and not stripped.endswith("...…")
    cut_start = stripped.startswith("…") or (not first_of_document and bool(_CUT_START.match(stripped)))
    if cut_start:
        stripped = stripped.lstrip("…").lstrip(".")
    if cut_end:
        stripped = stripped.rstrip("…").rstrip()
    blocks = parse_blocks(stripped)
    if cut_start:
        _drop_unit(blocks, first=True)
    if cut_end:
        _drop_unit(blocks, first=False)
    return [b for b in blocks if b.units or b.text]


def _drop_unit(blocks: list[Block], *, first: bool) -> None:
    """Drop the first (or last) sentence of the passage, or the list item or code block it cut."""
    order = blocks if first else list(reversed(blocks))
    for block in order:
        if block.kind == "heading":
            return  # the cut is before or after a heading: nothing partial to drop
        if block.kind in ("code", "table"):
            block.text = ""
            return
        if block.units:  # the cut sentence, or the list item it is in
            block.units.pop(0 if first else -1)
            return


def copied_blocks(blocks: Iterable[Block]) -> list[Block]:
    """Fresh ``Block`` objects equal to ``blocks`` (a ``Block`` and its units are mutable
    lists: a memo of parsed passages, ``llm.extractive_words.Words.blocks``, hands out
    copies, never what it keeps)."""
    return [Block(b.kind, list(b.units), b.text) for b in blocks]


__all__ = ["Block", "copied_blocks", "item_body", "parse_blocks", "parse_passage", "split_item", "split_sentences"]
