"""Pages that stand for another page, for the offline answerer (``llm.extractive_answer``).

Documentation trees hold alias pages: ``npm-ll`` and ``npm-ls`` share their one-line
summary ("List installed packages"), but only ``npm-ls`` goes on to say what the command
does — ``npm-ll``'s description is the summary again, followed by option sections that
mention installed packages everywhere. Its text is not a copy of ``npm-ls``'s (the search's
copy check, ``knowledge.duplicates``, compares passages, and these share little), so it
outranks the real page and answers "how do I list the installed packages?" with an
option's paragraph. Two pages with the same summary are pages of one thing; the one
whose opening only repeats that summary says nothing the other does not, so its passages
give way to the page that explains it. A page is never dropped for another that says no
more than it does.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class PageOpening:
    """What one passage that opens its document says first."""

    document: str
    summary: str  # the page's one-line summary ("" when it has none)
    opening: str  # its first paragraph of its own ("" when the passage holds none)


def _key(text: str) -> str:
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def _says_more(page: PageOpening) -> bool:
    """The page's opening says something its summary does not."""
    opening = _key(page.opening)
    return bool(opening) and opening != _key(page.summary)


def alias_documents(pages: Iterable[PageOpening]) -> frozenset[str]:
    """The documents whose passages give way: each shares its summary with another page
    whose opening explains it, while its own opening only repeats the summary (or it has
    none)."""
    by_summary: dict[str, dict[str, PageOpening]] = {}
    for page in pages:
        key = _key(page.summary)
        if key:
            by_summary.setdefault(key, {}).setdefault(page.document, page)
    out: set[str] = set()
    for group in by_summary.values():
        if len(group) < 2 or not any(_says_more(p) for p in group.values()):
            continue
        out.update(doc for doc, p in group.items() if not _says_more(p))
    return frozenset(out)


__all__ = ["PageOpening", "alias_documents"]
