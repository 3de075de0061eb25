"""HTML to heading-preserving plain text.

``extract_html`` is what ingestion uses: the page's *main content* (navigation
sidebars, menus, headers and footers left out) by ``trafilatura``, a maintained
extractor, as Markdown with its headings; when trafilatura is not installed, or finds
too little on a tiny page, the standard library's stripper (``html_to_text``) below.

The stripper drops scripts, styles and other non-content elements, turns ``<h1>``–``<h6>``
into Markdown headings so the chunker can split on them, and block elements into
paragraph breaks. The ``<title>`` (or first ``<h1>``) becomes the document title.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from functools import cache
from html import unescape
from html.parser import HTMLParser

_SKIP = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
_BLOCK = {
    "p", "div", "section", "article", "main", "header", "footer", "aside", "nav", "ul", "ol",
    "table", "tr", "blockquote", "pre", "figure", "form", "dl", "dt", "dd", "hr", "br",
}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_VOID = {"br", "hr", "img", "meta", "link", "input", "area", "base", "col", "embed", "source", "wbr"}


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skip_depth = 0
        self.in_title = False
        self.title = ""
        self.heading_level = 0
        self.heading_buf: list[str] = []
        self.first_h1 = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
            return
        if tag in _SKIP and tag not in _VOID:
            self.skip_depth += 1
            return
        if self.skip_depth:
            return
        if tag in _HEADINGS:
            self.out.append("\n\n")
            self.heading_level = _HEADINGS[tag]
            self.heading_buf = []
        elif tag == "li":
            self.out.append("\n- ")
        elif tag in ("td", "th"):
            self.out.append(" | ")
        elif tag in _BLOCK:
            self.out.append("\n\n" if tag not in ("br", "tr") else "\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
            return
        if tag in _SKIP and tag not in _VOID:
            self.skip_depth = max(0, self.skip_depth - 1)
            return
        if self.skip_depth:
            return
        if tag in _HEADINGS and self.heading_level:
            text = " ".join("".join(self.heading_buf).split())
            if text:
                self.out.append("#" * self.heading_level + " " + text + "\n\n")
                if self.heading_level == 1 and not self.first_h1:
                    self.first_h1 = text
            self.heading_level = 0
        elif tag in _BLOCK:
            self.out.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title += data
            return
        if self.skip_depth:
            return
        if self.heading_level:
            self.heading_buf.append(data)
        else:
            self.out.append(data)


def html_to_text(html: str) -> tuple[str, str]:
    """``(title, text)`` of an HTML document."""
    parser = _Extractor()
    parser.feed(html)
    parser.close()
    raw = "".join(parser.out)
    lines = [re.sub(r"[ \t\f\v]+", " ", line).strip() for line in raw.split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    title = " ".join(parser.title.split()) or parser.first_h1
    return title, text


#: Below this many characters, the extractor's result is not trusted over the stripper's
#: (on a tiny page it falls back to a bare text dump without headings).
MIN_EXTRACTED_CHARS = 200
_HEADERLINK = re.compile(r"[ \t]*[¶\uf0c1]")


# A module-level cache on purpose: whether trafilatura is installed, fixed for the process, one bool.
@cache
def extractor_available() -> bool:
    return importlib.util.find_spec("trafilatura") is not None


def extract_html(html: str) -> tuple[str, str, str]:
    """``(title, text, extractor)`` of a page: its main content by ``trafilatura`` when
    installed (``extractor`` is ``"trafilatura"``), else the whole text (``"stdlib"``)."""
    if not extractor_available():
        return (*html_to_text(html), "stdlib")
    import trafilatura  # optional at run time: the stripper above is the fallback

    logging.getLogger("trafilatura").setLevel(logging.ERROR)
    try:
        main = trafilatura.extract(
            html,
            output_format="markdown",
            include_tables=True,
            include_formatting=True,
            include_links=False,
            include_images=False,
            include_comments=False,
            favor_recall=True,
            deduplicate=False,
        )
    except Exception:  # a page trafilatura cannot parse still has the stripper's text
        main = None
    if not main or len(main) < MIN_EXTRACTED_CHARS:
        return (*html_to_text(html), "stdlib")
    main = _HEADERLINK.sub("", main)
    main = re.sub(r"\n{3,}", "\n\n", main).strip()
    return _title(html, main), main, "trafilatura"


_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_MD_H1 = re.compile(r"^#\s+(.+?)\s*$", re.MULTILINE)


def _title(html: str, main: str) -> str:
    """The page's ``<title>`` (without parsing the page a second time), else the first
    heading of its main content."""
    m = _TITLE.search(html, 0, 200_000)
    if m:
        title = " ".join(unescape(_TAGS.sub(" ", m.group(1))).split())
        if title:
            return title
    h1 = _MD_H1.search(main)
    return h1.group(1).strip() if h1 else ""


_TAGS = re.compile(r"<[^>]*>")
