"""Markdown reference-style links made inline when a file is read.

Why: documentation trees written with reference links (all of Node's API docs:
``see [`fs.ReadStream`][] and [the stream API][streams]`` with the targets listed at
the file's end as ``[streams]: stream.md``) reached readers as literal brackets — the
offline answer quoted ``[`child_process.spawn()`][]`` as it stands — and the list of
definitions became a chunk of bare paths. A reference whose label the file defines is
rewritten as the inline link it stands for (``[text](target)``), which the answerer and
the playground already render, and the definition lines leave the text. Labels match
as CommonMark matches them (case-folded, inner whitespace collapsed); a reference to
no definition, and anything inside a fenced code block, is left as written.

Kept by hand rather than through a Markdown library: a parser (markdown-it-py) renders
to HTML and keeps no source positions for inline links, and the text must stay
Markdown for chunking and quoting; the rules needed are CommonMark's three reference
forms and its definition line, nothing more.
"""

from __future__ import annotations

import re

# Bumped when what the loader makes of a file changes, so a re-ingest reads such files
# again instead of skipping them by their stamp (knowledge.filestamps).
READ_RULES = 2

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_DEFINITION = re.compile(
    r"^ {0,3}\[(?P<label>(?:[^\[\]\\]|\\.){1,999})\]:[ \t]*"
    r"(?P<target><[^<>\n]*>|\S+)"
    r"(?:[ \t]+(?P<title>\"[^\"]*\"|'[^']*'|\([^()]*\)))?[ \t]*$"
)
# [text][label], [text][] and [text]: text may hold code spans and escaped brackets.
_REFERENCE = re.compile(
    r"(?<![\\!])\[(?P<text>(?:`[^`\n]*`|\\.|[^\[\]\\`])+)\]"
    r"(?:\[(?P<label>(?:[^\[\]\\]|\\.)*)\])?"
    r"(?![(\[])"
)


def _normal(label: str) -> str:
    return " ".join(label.split()).casefold()


def _definitions(lines: list[str]) -> tuple[dict[str, str], set[int]]:
    """The file's link definitions (label → inline target) and the lines they take."""
    found: dict[str, str] = {}
    taken: set[int] = set()
    fence: str | None = None
    for i, line in enumerate(lines):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        m = _DEFINITION.match(line)
        if m is None:
            continue
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


def inline_reference_links(text: str) -> str:
    """``text`` with every resolvable reference link inline and its definitions gone."""
    if "]:" not in text:
        return text
    lines = text.split("\n")
    found, taken = _definitions(lines)
    if not found:
        return text

    def inline(m: re.Match[str]) -> str:
        label = m.group("label")
        target = found.get(_normal(label or m.group("text")))
        if target is None:
            return m.group(0)
        return f"[{m.group('text')}]({target})"

    out: list[str] = []
    fence: str | None = None
    for i, line in enumerate(lines):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            out.append(line)
            continue
        if opened:
            fence = opened.group(1)
            out.append(line)
            continue
        if i in taken:
            continue
        out.append(_REFERENCE.sub(inline, line) if "[" in line else line)
    while out and not out[-1].strip():
        out.pop()  # the blank lines a trailing list of definitions leaves
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")
