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

A page that marks its main region (``<main>``, ``<article>``, ``role="main"``) is first
compared on that region's text, read with the standard library's parser — the same test,
on the text the page itself calls its content — and only a page that check cannot settle
(no such region, or not the same text) has its main content extracted by trafilatura and
compared as before. Node's 64 API pages mark ``role="main"``: 4.3 s of CPU in all against
13 s extracting every page, and two pages trafilatura read with their navigation (too long
beside their Markdown) are found the repeats they are; npm's pages mark no region.
The check reports each page it has compared
(``on_page``), and hands back what it loaded of the files the ingest still reads (the
Markdown kept, an HTML page that is not a repeat) - loaded as the ingest would, so the
ingest uses them instead of loading them again (``Comparison.loaded``, up to
``KEEP_CHARS`` of text held at once).
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from knowledge.filecheck import decode_text
from knowledge.loaders import HTML_SUFFIXES, LoadedDocument, load_file
from knowledge.types import DEFAULT_BUCKET, Rejection

MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
#: The skip reason counted in the ingest report.
SKIP_SAME_PAGE = "same page as a Markdown file (the .md is kept)"
#: Share of the smaller text's word pairs found in the other one.
MIN_CONTAINMENT = 0.75
#: Smallest size ratio of the two texts (in word pairs).
MIN_SIZE_RATIO = 0.5

#: Text (characters) of loaded files a comparison keeps for the ingest to use: beyond
#: it a file is loaded again when its turn comes, as before - the comparison of a huge
#: tree must not hold the whole tree in memory until the ingest reaches each file.
KEEP_CHARS = 64_000_000
#: ``(pages compared, pages to compare)``: after each HTML page (and ``(0, n)`` first).
PageHook = Callable[[int, int], None]
#: What ``load_file`` gives: the file's documents and its rejections.
Loaded = tuple[list[LoadedDocument], list[Rejection]]

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


@dataclass(slots=True)
class Comparison:
    """What ``find_same_pages`` found, and what it loaded of the files the ingest reads."""

    found: list[SamePage] = field(default_factory=list)
    #: ``load_file(path, shown, bucket=bucket)`` of compared files that are not repeats:
    #: the ingest takes each (``take``) instead of loading the file again.
    loaded: dict[Path, Loaded] = field(default_factory=dict)

    def take(self, path: Path) -> Loaded | None:
        """The loaded file, once (``None``: not kept, load it)."""
        return self.loaded.pop(path, None)


def _text(loaded: Loaded) -> str | None:
    docs, _ = loaded
    return docs[0].doc.text if len(docs) == 1 else None


def _size(loaded: Loaded) -> int:
    return sum(len(d.doc.text) for d in loaded[0])


class _MainRegion(HTMLParser):
    """The text of a page's first ``<main>``, ``<article>`` or ``role="main"`` element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tag: str | None = None  # the region's tag once entered
        self.depth = 0  # open elements of that tag inside the region, itself included
        self.done = False
        self.skip = 0
        self.out: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.done:
            return
        if self.tag is None:
            if tag in ("main", "article") or ("role", "main") in attrs:
                self.tag, self.depth = tag, 1
            return
        if tag == self.tag:
            self.depth += 1
        elif tag in ("script", "style"):
            self.skip += 1
        self.out.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if self.tag is None or self.done:
            return
        if tag == self.tag:
            self.depth -= 1
            self.done = self.depth == 0
        elif tag in ("script", "style"):
            self.skip = max(0, self.skip - 1)
        self.out.append(" ")

    def handle_data(self, data: str) -> None:
        if self.tag is not None and not self.done and not self.skip:
            self.out.append(data)


def main_region_text(path: Path) -> str | None:
    """The text of an HTML file's main region (``<main>``, ``<article>`` or ``role="main"``),
    tags stripped; None when the page marks no such region or cannot be read."""
    try:
        decoded = decode_text(path.read_bytes(), html=True)
    except OSError:
        return None
    if decoded.text is None:
        return None
    parser = _MainRegion()
    parser.feed(decoded.text)
    parser.close()
    return "".join(parser.out) if parser.tag is not None else None


def _main_region_twin(
    path: Path, candidates: list[tuple[Path, str]], load: Callable[[Path, str], Loaded]
) -> tuple[Path, str] | None:
    """The Markdown file whose text is the page's marked main region's text (the cheap
    check: the region read with the standard library's parser, no main-content
    extraction), if one is."""
    region = main_region_text(path)
    if region is None:
        return None
    for md_path, md_shown in candidates:
        md_text = _text(load(md_path, md_shown))
        if md_text is not None and same_text(md_text, region):
            return md_path, md_shown
    return None


def find_same_pages(
    files: list[tuple[Path, str]],
    *,
    bucket: str = DEFAULT_BUCKET,
    on_page: PageHook | None = None,
    keep_chars: int = KEEP_CHARS,
) -> Comparison:
    """The HTML files of ``files`` (``(path, shown)`` pairs) that repeat a Markdown file
    of the same list, and the files loaded to compare them that are not repeats (into
    ``bucket``, as the ingest loads them; at most ``keep_chars`` of text). ``on_page``
    hears each HTML page compared. Synchronous file reads: run it in a worker thread."""
    markdown: dict[str, list[tuple[Path, str]]] = {}
    for path, shown in files:
        if path.suffix.lower() in MARKDOWN_SUFFIXES:
            markdown.setdefault(path.stem.casefold(), []).append((path, shown))
    out = Comparison()
    if not markdown:
        return out
    pages = [
        (path, shown, markdown[path.stem.casefold()])
        for path, shown in files
        if path.suffix.lower() in HTML_SUFFIXES and path.stem.casefold() in markdown
    ]
    loaded: dict[Path, Loaded] = {}

    def load(path: Path, shown: str) -> Loaded:
        if path not in loaded:
            loaded[path] = load_file(path, shown, bucket=bucket)
        return loaded[path]

    if on_page is not None:
        on_page(0, len(pages))
    for n, (path, shown, candidates) in enumerate(pages, start=1):
        twin = _main_region_twin(path, candidates, load)
        if twin is None:
            html_text = _text(load(path, shown))
            for md_path, md_shown in candidates if html_text is not None else ():
                md_text = _text(load(md_path, md_shown))
                if md_text is not None and same_text(md_text, html_text or ""):
                    twin = (md_path, md_shown)
                    break
        if twin is not None:
            out.found.append(SamePage(path, *twin))
        if on_page is not None:
            on_page(n, len(pages))
    repeats = {page.html for page in out.found}
    kept = 0
    for path, result in loaded.items():
        size = _size(result)
        if path not in repeats and kept + size <= keep_chars:
            out.loaded[path] = result
            kept += size
    return out


async def compare_pages(
    files: list[tuple[Path, str]], *, bucket: str = DEFAULT_BUCKET, on_page: PageHook | None = None
) -> Comparison:
    """``find_same_pages`` in a worker thread, ``on_page`` called on the event loop's."""
    loop = asyncio.get_running_loop()
    hook = on_page

    def relay(done: int, total: int) -> None:
        if hook is not None:
            loop.call_soon_threadsafe(hook, done, total)

    return await asyncio.to_thread(find_same_pages, files, bucket=bucket, on_page=relay)


__all__ = ["KEEP_CHARS", "SKIP_SAME_PAGE", "Comparison", "PageHook", "SamePage", "compare_pages", "find_same_pages",
           "main_region_text", "same_text"]
