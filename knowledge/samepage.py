"""One page in two formats is one document: an ``x.html`` rendered from an ``x.md`` is skipped.

Documentation trees often ship the Markdown source beside the HTML built from it
(npm's ``docs/content/**.md`` and ``docs/output/**.html``). Indexed twice, every
answer cites the same passage twice and the copies crowd other pages out of the top
results. At ingest, an HTML file whose name (without suffix) matches a Markdown file
of the same ingestion and whose text is that file's text is skipped and counted; the
Markdown is kept, being the source (headings and front matter intact).

"The same text" is measured on word pairs (bigrams), which survives markup and a
rendered page's extra navigation yet tells apart pages that merely share vocabulary:
most of the smaller side's pairs must occur in the larger, and neither side may be
less than half the other. Same-named pages that differ are both kept.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from knowledge.loaders import HTML_SUFFIXES, load_file

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
#: The skip reason counted in the ingest report.
SKIP_SAME_PAGE = "same page as a Markdown file (the .md is kept)"
#: Share of the smaller text's word pairs found in the other one.
MIN_CONTAINMENT = 0.75
#: Smallest size ratio of the two texts (in word pairs).
MIN_SIZE_RATIO = 0.5

_WORD_RE = re.compile(r"[^\W_]+")
_MD_LINK_TARGET_RE = re.compile(r"\]\([^)\s]*\)")


@dataclass(frozen=True, slots=True)
class SamePage:
    """``html`` carries the text of ``markdown``; ``shown`` names the Markdown for the report."""

    html: Path
    markdown: Path
    shown: str


def _pairs(text: str) -> Counter[tuple[str, str]]:
    words = _WORD_RE.findall(_MD_LINK_TARGET_RE.sub("]", text).casefold())
    return Counter(itertools.pairwise(words))


def same_text(a: str, b: str) -> bool:
    pa, pb = _pairs(a), _pairs(b)
    na, nb = sum(pa.values()), sum(pb.values())
    if not na or not nb:
        return a.strip() == b.strip()
    small, large = min(na, nb), max(na, nb)
    if small / large < MIN_SIZE_RATIO:
        return False
    return sum((pa & pb).values()) / small >= MIN_CONTAINMENT


def _text(path: Path) -> str | None:
    loaded, _ = load_file(path)
    return loaded[0].doc.text if len(loaded) == 1 else None


def find_same_pages(files: list[tuple[Path, str]]) -> list[SamePage]:
    """The HTML files of ``files`` (``(path, shown)`` pairs) that repeat a Markdown file
    of the same list. Synchronous file reads: run it in a worker thread."""
    markdown: dict[str, list[tuple[Path, str]]] = {}
    for path, shown in files:
        if path.suffix.lower() in MARKDOWN_SUFFIXES:
            markdown.setdefault(path.stem.casefold(), []).append((path, shown))
    if not markdown:
        return []
    texts: dict[Path, str | None] = {}

    def text_of(path: Path) -> str | None:
        if path not in texts:
            texts[path] = _text(path)
        return texts[path]

    found: list[SamePage] = []
    for path, _ in files:
        candidates = markdown.get(path.stem.casefold()) if path.suffix.lower() in HTML_SUFFIXES else None
        if not candidates:
            continue
        html_text = text_of(path)
        if html_text is None:
            continue
        for md_path, md_shown in candidates:
            md_text = text_of(md_path)
            if md_text is not None and same_text(md_text, html_text):
                found.append(SamePage(path, md_path, md_shown))
                break
    return found


__all__ = ["SKIP_SAME_PAGE", "SamePage", "find_same_pages", "same_text"]
