"""HTML to heading-preserving plain text, with the standard library's parser.

Scripts, styles and other non-content elements are dropped; ``<h1>``–``<h6>`` become
Markdown headings so the chunker can split on them; block elements become paragraph
breaks. The ``<title>`` (or first ``<h1>``) becomes the document title.
"""

from __future__ import annotations

import re
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
