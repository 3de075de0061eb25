"""Markdown reference-style links made inline when a file is read.

Why: documentation trees written with reference links (all of Node's API docs:
``see [`fs.ReadStream`][] and [the stream API][streams]`` with the targets listed at
the file's end as ``[streams]: stream.md``) reached readers as literal brackets — the
offline answer quoted ``[`child_process.spawn()`][]`` as it stands — and the list of
definitions became a chunk of bare paths. A reference whose label the file defines is
rewritten as the inline link (or image) it stands for, which the answerer and the
playground already render, and the definition lines leave the text. Labels match as
CommonMark matches them (case-folded, inner whitespace collapsed). Left as written:
a reference to no definition, footnotes (``[^1]``), code — fenced, indented, or a code
span (``hash.digest([encoding])`` stays a signature even when ``[encoding]`` is
defined) — and a link text may run over the lines of its paragraph.

Kept by hand rather than through a Markdown library: a parser (markdown-it-py) renders
to HTML and keeps no source positions for inline links, and the text must stay
Markdown for chunking and quoting; the rules needed are CommonMark's three reference
forms, its definition line and where code is, nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# Bumped when what the loader makes of a file changes, so a re-ingest reads such files
# again instead of skipping them by their stamp (knowledge.filestamps).
READ_RULES = 2

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r"^\s{0,3}(?:[-*+]|\d{1,9}[.)])\s")
_DEFINITION = re.compile(
    r"^ {0,3}\[(?!\^)(?P<label>(?:[^\[\]\\]|\\.){1,999})\]:[ \t]*"
    r"(?P<target><[^<>\n]*>|\S+)"
    r"(?:[ \t]+(?P<title>\"[^\"]*\"|'[^']*'|\([^()]*\)))?[ \t]*$"
)
# [text][label], [text][] and [text] (and the same after "!": an image). The text may
# hold code spans, escapes, inline links or images (a badge: [![alt](img)][ref]) and
# line breaks of its paragraph; a bracket right after "]" is a label, never a link.
_REFERENCE = re.compile(
    r"(?<![\\\]])(?P<bang>!?)\[(?!\^)"
    r"(?P<text>(?:`[^`]*`|\\.|!?\[[^\[\]]*\]\([^()\s]*\)|[^\[\]\\`])+)\]"
    r"(?:\[(?P<label>(?:[^\[\]\\]|\\.)*)\])?"
    r"(?![(\[])"
)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)


def _normal(label: str) -> str:
    return " ".join(label.split()).casefold()


def _blocks(lines: list[str]) -> Iterator[tuple[bool, list[int]]]:
    """The line numbers of each block, with whether it is prose: a fenced code block, an
    indented code block (not a list item's continuation) and blank lines are not."""
    fence: str | None = None
    in_list = False
    block: list[int] = []
    for i, line in enumerate(lines):
        opened = _FENCE.match(line)
        if fence is not None:
            yield False, [i]
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened or not line.strip():
            if block:
                yield True, block
                block = []
            if opened:
                fence = opened.group(1)
            yield False, [i]
            continue
        if not block:  # a block starts
            indent = len(line) - len(line.lstrip())
            indented = line.startswith(("    ", "\t"))
            if _LIST_ITEM.match(line):
                in_list = True
            elif not indented and indent < 2:
                in_list = False
            elif indented and not in_list:
                yield False, [i]  # indented code: one line at a time until a blank line
                continue
        block.append(i)
    if block:
        yield True, block


def _definitions(lines: list[str], prose: list[list[int]]) -> tuple[dict[str, str], set[int]]:
    """The file's link definitions (label → inline target) and the lines they take: lines
    of prose blocks made only of definitions from their first line on."""
    found: dict[str, str] = {}
    taken: set[int] = set()
    for block in prose:
        for i in block:
            m = _DEFINITION.match(lines[i])
            if m is None:
                break  # a definition cannot interrupt a paragraph
            target = m.group("target")
            if target.startswith("<"):
                target = target[1:-1]
            if not target or any(c in target for c in " ()"):
                target = f"<{target}>"
            title = m.group("title")
            # The first definition of a label wins (CommonMark).
            found.setdefault(_normal(m.group("label")), target + (f" {title}" if title else ""))
            taken.add(i)
    return found, taken


def _inline(paragraph: str, found: dict[str, str]) -> str:
    spans = [(m.start(), m.end()) for m in _CODE_SPAN.finditer(paragraph)] if "`" in paragraph else []

    def replace(m: re.Match[str]) -> str:
        start = m.start()
        if any(a < start < b for a, b in spans):
            return m.group(0)  # begins inside a code span: code, not a link
        label = m.group("label")
        target = found.get(_normal(label or m.group("text")))
        if target is None:
            return m.group(0)
        return f"{m.group('bang')}[{m.group('text')}]({target})"

    # Twice: a badge's image inside a link's text is resolved first, then the link.
    for _ in range(2):
        if "[" not in paragraph:
            break
        paragraph = _REFERENCE.sub(replace, paragraph)
        spans = [(m.start(), m.end()) for m in _CODE_SPAN.finditer(paragraph)] if "`" in paragraph else []
    return paragraph


def inline_reference_links(text: str) -> str:
    """``text`` with every resolvable reference link inline and its definitions gone."""
    if "]:" not in text:
        return text
    crlf = "\r\n" in text
    lines = (text.replace("\r\n", "\n") if crlf else text).split("\n")
    blocks = list(_blocks(lines))
    found, taken = _definitions(lines, [b for prose, b in blocks if prose])
    if not found:
        return text
    out: list[str] = []
    for prose, block in blocks:
        kept = [i for i in block if i not in taken]
        if not kept:
            continue
        if not prose:
            out.extend(lines[i] for i in kept)
            continue
        out.extend(_inline("\n".join(lines[i] for i in kept), found).split("\n"))
    while out and not out[-1].strip():
        out.pop()  # the blank lines a trailing list of definitions leaves
    joined = "\n".join(out) + ("\n" if text.endswith("\n") else "")
    return joined.replace("\n", "\r\n") if crlf else joined
