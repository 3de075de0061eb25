"""The second real-text set of ``bench/corpus_quality.py``: the Node.js API documentation.

Source: the Markdown pages the Debian/NodeSource ``nodejs`` package installs under
``/usr/share/doc/nodejs/api`` (``AGENT_BENCH_NODE_DOCS`` overrides the folder). Nobody
here wrote them, and they differ from the stdlib set in the ways that matter for
fusion: long reference pages full of code, many near-identical sections (the callback,
promise and synchronous variants of one ``fs`` call), API names written as
``fs.readFile()`` that BM25 and embedders tokenise differently.

Each page is cut into documents at its level-2 and level-3 headings (one API entry or
topic each), with the page's opening as ``node:<page>``. A document keeps its section's prose without the fenced
code examples (every example is there twice, as CommonJS and as an ES module) and cut
after ``MAX_DOC_CHARS`` on a word boundary: a section's description is what answers a
question, and the cut keeps the set to ~3k short chunks, which the local MiniLM embeds
in minutes on this 2-core machine (the whole pages are ~6k chunks and took most of an
hour when the machine was busy). A section's id is the page and
its heading made id-safe (``node:fs:fs.readFile-path-options-callback``, see ``slug``),
its title the page title and the heading path; the YAML change-history comments and the link reference
definitions at the end of a page are dropped (metadata, not prose). The labelled
questions (``bench/data/node_queries.json``) name the documents that answer them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path("/usr/share/doc/nodejs/api")
#: Pages that are indexes or generated aggregates of the others.
SKIP_PAGES = frozenset({"all", "index", "synopsis", "documentation"})
MIN_DOC_CHARS = 60
MAX_DOC_CHARS = 600

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_LINK_DEF = re.compile(r"^\[[^\]]+\]:\s+\S+.*$", re.M)
_HEADING = re.compile(r"^(#{1,3}) (.+?)\s*$", re.M)
_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.M | re.S)


def docs_dir() -> Path:
    return Path(os.environ.get("AGENT_BENCH_NODE_DOCS", str(DEFAULT_DIR)))


def slug(heading: str) -> str:
    """A heading as the id part the knowledge base accepts (letters, digits, ``._:-``)."""
    return re.sub(r"[^A-Za-z0-9._:]+", "-", heading).strip("-")[:96] or "section"


def lead(text: str, limit: int = MAX_DOC_CHARS) -> str:
    """A section's prose: code blocks out, blank runs squeezed, cut on a word boundary."""
    prose = re.sub(r"\n{3,}", "\n\n", _FENCE.sub("", text)).strip()
    if len(prose) <= limit:
        return prose
    cut = prose.rfind(" ", 0, limit)
    return prose[: cut if cut > limit // 2 else limit].rstrip()


def _clean_heading(text: str) -> str:
    return text.replace("`", "").strip()


def page_documents(page: str, markdown: str) -> list[dict[str, Any]]:
    """One page cut at its ``##``/``###`` headings outside code blocks."""
    body = _LINK_DEF.sub("", _COMMENT.sub("", markdown))
    # Headings inside fenced code are code (a ``# comment`` in a shell example).
    fences = [m.span() for m in re.finditer(r"^```.*?^```", body, re.M | re.S)]

    def in_code(pos: int) -> bool:
        return any(a <= pos < b for a, b in fences)

    heads = [m for m in _HEADING.finditer(body) if not in_code(m.start())]
    title = next((_clean_heading(m.group(2)) for m in heads if m.group(1) == "#"), page)
    cuts = [m for m in heads if m.group(1) != "#"]
    out: list[dict[str, Any]] = []
    opening_end = cuts[0].start() if cuts else len(body)
    opening = _HEADING.sub("", body[:opening_end]).strip()
    out.append({"id": f"node:{page}", "title": title, "text": opening})
    h2 = ""
    for i, m in enumerate(cuts):
        name = _clean_heading(m.group(2))
        if m.group(1) == "##":
            h2 = name
        end = cuts[i + 1].start() if i + 1 < len(cuts) else len(body)
        text = body[m.end() : end].strip()
        section = name if m.group(1) == "##" or not h2 else f"{h2} > {name}"
        out.append({"id": f"node:{page}:{slug(name)}", "title": f"{title}: {section}", "text": text})
    seen: dict[str, int] = {}
    unique = []
    for d in out:
        d["text"] = lead(d["text"])
        if len(d["text"]) < MIN_DOC_CHARS:
            continue
        base = d["id"]
        seen[base] = seen.get(base, 0) + 1
        if seen[base] > 1:  # a heading repeated on one page ("Event: 'close'" of two classes)
            d = {**d, "id": f"{base}-{seen[base]}"}
        unique.append({**d, "metadata": {"kind": "node", "page": page}})
    return unique


def node_documents(folder: Path | None = None) -> list[dict[str, Any]]:
    """Every page of the folder as documents; empty when the docs are not installed."""
    folder = folder or docs_dir()
    if not folder.is_dir():
        return []
    docs: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.md")):
        if path.stem in SKIP_PAGES:
            continue
        docs += page_documents(path.stem, path.read_text(encoding="utf-8", errors="replace"))
    return docs
