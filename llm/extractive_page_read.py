"""The offline answerer's second, page-scoped read (``llm.extractive``).

The first search covers the whole knowledge base and keeps at most three chunks of any
one page, so a page that is the right one can come back without the chunk that answers:
``npx``'s "Any options and arguments after the package name are passed directly to the
executed command" is its second chunk, behind three others that say "npx", "package"
and "options" more often. Once the first search has found the page, the answerer reads
it again through ``search_text`` scoped to that document (``doc_id``), with the
question's words less those of the page's title: every chunk of the ``npx`` page says
"npx", so that word only drowns the ones that tell its chunks apart. The call is an
ordinary tool call, in the stream and the tool-call log like the first search.

Which pages: the first search's best page, and a page the question names by every
word of its title (one it names as written, "npm ci", before one whose title words it
says here and there). A page is read again only when the question says something its
title does not, and the words left include one the page's passages already hold that
the text search searches for (not one of its stop words), so the scoped text search
finds at least that: a scoped search that matches nothing asks the user to rephrase,
which a second read must never do.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

from llm.extractive_question import WORD, stems

#: The tool the page-scoped read calls (``agenttools.rag.corpus_tools``).
PAGE_READ_TOOL = "search_text"
#: Pages read again at most, and chunks asked of each. A search scoped to one document
#: is not capped at three chunks of it (``knowledge.search``), and on a long page the
#: chunk that answers may be the fourth or fifth match of the question's words: with
#: three, "how do I stop npm version from creating a git commit and tag?" read three
#: chunks of ``npm-version`` saying "git", "commit" and "tag" and missed the one saying
#: ``npm --no-git-tag-version version``. Five changed that one answer of 260 (round 14,
#: every set asked live) and lost none.
MAX_PAGES = 2
PAGE_TOP_K = 5
#: The longest text a chunk is shown with (the tool's own maximum): a chunk whole.
PAGE_CONTEXT_CHARS = 4000
#: Words that never tell one chunk of a page from another: the question's own form.
_FORM = frozenset(
    "a an and are as at be by can could do does for from how i if in into is it its me my of on or our "
    "should so than that the their them then there these this those to was we what when where which who "
    "why will with would you your about after before did get got has have having here just more most "
    "not only other over same some such too under up very via use used using see happen happens "
    "make sure way ways tell know want need".split()
)
#: Words the knowledge base's text search does not search for beside others (its stop
#: words: ``knowledge.textnorm.FUNCTION_WORDS`` and ``REQUEST_WORDS``, written out here
#: because the answerer imports no other room). A page read whose only words the page
#: holds are among these matches nothing, and a scoped search that matches nothing ends
#: the run asking the user to rephrase: "how quickly is an MCP server that crashed tried
#: again?" read the MCP page for "quickly crashed tried again", held only "again", and
#: the run ended in a clarification instead of an answer.
_UNSEARCHED = _FORM | frozenset(
    "above again against all am among any because been being below between both but did doing down during "
    "each else few further had he her hers herself him himself his itself may might must myself no nor now "
    "off once onto out own ours ourselves shall she theirs themselves they through until were whom whose "
    "while within without yet yours yourself yourselves also yes don doesn didn isn aren wasn weren won "
    "wouldn please show find give explain describe list s t d ll m re ve".split()
)


@dataclass(frozen=True, slots=True)
class FoundPage:
    """A page the first search returned: its document, bucket, title and the text of
    its passages there, in the order the search ranked them."""

    doc_id: str
    bucket: str
    title: str
    text: str


def found_pages(chunks: list[dict[str, Any]]) -> list[FoundPage]:
    """The pages of a ``knowledge_base_search`` result's ``chunks``, best first."""
    order: list[str] = []
    seen: dict[str, dict[str, Any]] = {}
    texts: dict[str, list[str]] = {}
    for chunk in chunks:
        doc = chunk.get("doc_id")
        meta = chunk.get("metadata") if isinstance(chunk.get("metadata"), dict) else {}
        bucket = meta.get("bucket") if isinstance(meta, dict) else None
        if not isinstance(doc, str) or not doc or not isinstance(bucket, str) or not bucket:
            continue
        if doc not in seen:
            order.append(doc)
            seen[doc] = {"bucket": bucket, "title": str(chunk.get("title") or "")}
            texts[doc] = []
        texts[doc].append(str(chunk.get("text") or ""))
    return [FoundPage(d, seen[d]["bucket"], seen[d]["title"], "\n\n".join(texts[d])) for d in order]


def _words(text: str) -> list[str]:
    return WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def page_query(question: str, page: FoundPage) -> str | None:
    """The question's words that tell the page's chunks apart (not its title's, not the
    question's form), or None when none is left or none is in the page's passages."""
    title = stems(page.title) | set(_words(page.title))
    kept: list[str] = []
    for word in _words(question):
        if word in _FORM or len(word) < 2 or word in title or stems(word) <= title or word in kept:
            continue
        kept.append(word)
    held = set(_words(page.text))
    # The words the search looks for: its stop words are dropped, unless nothing else
    # is left (then it searches for them: ``knowledge.textnorm.content_terms``).
    searched = [w for w in kept if w not in _UNSEARCHED] or kept
    if not any(w in held for w in searched):
        return None
    return " ".join(kept)


def _said_in_a_row(title: str, question: str) -> bool:
    """The question says the title's words one after the other, as the page is named
    ("what does npm ci do if …" names ``npm-ci``), not only somewhere each."""
    named, said = _words(title), _words(question)
    return bool(named) and any(said[i : i + len(named)] == named for i in range(len(said) - len(named) + 1))


def pages_to_read(question: str, pages: list[FoundPage]) -> list[tuple[FoundPage, str]]:
    """The pages to read again and the query for each: the best page, and any page the
    question names by every word of its title — first a page it names as it is written,
    its title's words in a row: "what does npm ci do if my lock file and package.json
    disagree?" names ``npm-ci`` so, and ``package-lock.json`` only by words here and
    there; read in the search's order, the second read went to the lock file's page and
    ``npm ci``'s "will exit with an error" was never among the passages."""
    asked = stems(question)
    named: list[FoundPage] = []
    for page in pages[1:]:
        title = stems(page.title)
        if title and title <= asked and page not in named and page not in pages[:1]:
            named.append(page)
    named.sort(key=lambda page: not _said_in_a_row(page.title, question))  # stable: the search's order otherwise
    chosen: list[FoundPage] = pages[:1] + named
    out: list[tuple[FoundPage, str]] = []
    for page in chosen[:MAX_PAGES]:
        query = page_query(question, page)
        if query is not None:
            out.append((page, query))
    return out


def page_read_args(page: FoundPage, query: str) -> dict[str, Any]:
    """The ``search_text`` arguments of one page-scoped read."""
    return {
        "bucket": page.bucket,
        "query": query,
        "doc_id": page.doc_id,
        "top_k": PAGE_TOP_K,
        "context_chars": PAGE_CONTEXT_CHARS,
    }


__all__ = [
    "MAX_PAGES",
    "PAGE_READ_TOOL",
    "FoundPage",
    "found_pages",
    "page_query",
    "page_read_args",
    "pages_to_read",
]
