"""Citations an OpenAI client can read: ``[1]``, ``[2]`` in ``content`` and a "Sources:"
list at the end of it, as OpenAI-compatible RAG backends give them (Perplexity's API:
numbered markers in the text, the list beside it).

The run cites passages by their ids (``[agentchat-knowledge-cli#4]``, a chunk of a
document; ``[agentchat-knowledge-cli]``, the document; ``[px_…#2]``, a web page behind a
web answer; ``[2]``, a web answer's own marker for that page), which mean nothing to the
person reading Open WebUI or LibreChat, and the titles travel only in the ``agentchat``
extension those clients do not show. So the OpenAI face renumbers them as it streams:

* A marker is what the run's own citation check reads as one (``agenttools.rag.citations``,
  the same functions, not a copy): ``[id]`` or ``[id, id; id]``, not after a letter,
  digit, ``_``, ``\\`` or ``[``, not followed by ``(`` (a link's text), outside code, its
  tokens id-shaped — but a number is not an id here. It is numbered only when every
  token is a citation: one naming one of the answer's sources or one this answer cited
  already (``[faq]`` after ``[faq#4]``), or an id by its look (``names_an_id``: a digit
  or one of ``-_.:#/@``) with a letter in it (``[doc-resume]``, ``[doc#4]``, ``[px_…#2]``),
  or a web answer's page ``[n]`` (below). So ``[3.11]``, ``[2024]``, ``[0, 1, 2]`` are
  prose: numbered, they would point at nothing. The sources arrive with the ``response``
  event, after the streamed text (a ``generate_response`` answer streams before it too),
  so while streaming a marker is known by its look: ``[sic]`` is prose, and so is a
  document id with none of those characters (``[faq]``) — numbered only in text that
  follows the ``response`` or its own passages' markers.
* A bare ``[n]`` is a web answer's own marker only once the run has read a web answer
  (a ``perplexity_search`` result, ``read_web_answer``, or a ``px_…`` id cited before
  it). Once the sources are known it must name one of their pages; before, it must be a
  page number a web answer gives (1 to ``MAX_WEB_PAGE``): ``[0]`` or a year is prose.
* One number per source, in order of first use: a document's passages and the document
  share one (``doc#4``, ``doc#6`` and ``doc`` are one line in the list); each web page
  behind a web answer has its own (one page behind two web answers is one: the rule of
  ``events.source_key``, as the playground's cards and the tool summary count sources),
  and a web answer's ``[n]`` is that answer's page ``n``
  (``px_…#n``): the one web answer cited so far, else the sources say which once they
  come (its number is kept, the page's title goes in the list). Renumbered, it never
  clashes with the face's own ``[n]``.
* A marker may be split across stream deltas: text from a ``[`` that may still become a
  marker is held until it is one (then its numbers go out) or cannot be (then it goes out
  as it was). Held text goes out before anything that ends the answer: the list, an
  error, a wait for an approval (``finish``). Inline code and fenced blocks pass as they are.
* At the end: ``Sources:`` with one line per number (title, then its link or its file and
  page), and the sources the answer lists without a marker numbered after them.

Streamed and non-streamed answers go through the same object in the same order, so they
are the same text. The ``agentchat`` extension keeps the run's raw ids; ``mapping`` is the
numbering for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import events
from agenttools.rag.citations import bracket_ids, may_become_marker, may_open_marker, names_an_id
from events.source_key import WEB_ANSWER, document_key

#: The highest page number a web answer's bare ``[n]`` is read as before the sources say
#: which pages there are: web answers number a handful of pages (Perplexity's
#: ``search_results``), so ``[2024]`` in prose is a year, not a page.
MAX_WEB_PAGE = 50
MAX_TITLE = 200

_TEXT, _CODE, _FENCE = 0, 1, 2


def source_key(source: events.Source) -> str:
    """What one number stands for: the source's document (``events.source_key``: its
    passages share it, as one web page cited through two web answers does), else its id."""
    doc_id = _metadata(source).get("doc_id")
    url = source.url if isinstance(source.url, str) else None
    return document_key(source.id, url, doc_id if isinstance(doc_id, str) else None)


def _metadata(source: events.Source) -> dict[str, Any]:
    return source.metadata if isinstance(source.metadata, dict) else {}


def resolve(token: str, sources: Sequence[events.Source]) -> events.Source | None:
    """The source a cited token names, by the rules ``generate_response`` checked it with
    (``agenttools.rag.sources``, ``agenttools.rag.citations``): its id, its link (a web
    page's before the answer that carries the same link), its document's id, a web
    answer's ``[n]`` (the page numbered ``n``)."""
    for source in sources:
        if source.id == token:
            return source
    by_url = [s for s in sources if isinstance(s.url, str) and s.url == token]
    if by_url:
        return min(by_url, key=lambda s: "urls" in _metadata(s))
    for source in sources:
        if source.kind == "internal" and (document_key(source.id) == token or _metadata(source).get("doc_id") == token):
            return source
    if token.isdigit():
        for source in sources:
            if source.kind == "external" and str(_metadata(source).get("index")) == token:
                return source
    return None


class CitationNumbers:
    """Feed the answer's text in order (``feed``, then ``finish``); each call returns the
    text to send now, markers numbered. ``know`` hands over the sources when they come;
    ``sources_list`` is the closing list."""

    __slots__ = ("_held", "_ids", "_known", "_mode", "_numbers", "_prev", "_same", "_sources", "_web", "_web_read")

    def __init__(self) -> None:
        self._mode = _TEXT
        #: Text not sent yet: a marker being read (``[…``, ``[…]``) or a run of backticks.
        self._held = ""
        #: The last character sent (a marker does not follow a word character).
        self._prev = ""
        self._numbers: dict[str, int] = {}  # source key → its number
        self._ids: dict[str, list[str]] = {}  # source key → the ids cited for it, in order
        #: The answer's sources, once its ``response`` came (``know``).
        self._sources: list[events.Source] = []
        self._known = False
        #: The run read a web answer (``read_web_answer``): a bare ``[n]`` may be its page.
        self._web_read = False
        #: The web answers cited so far (``px_…``), in order: whose pages a bare ``[n]`` means.
        self._web: dict[str, None] = {}
        #: A number's key → the key of the source it turned out to be, when that source
        #: already had a number of its own (cited both ways before the sources came).
        self._same: dict[str, str] = {}

    def read_web_answer(self) -> None:
        """The run read a web answer (a ``perplexity_search`` result, which comes before the
        answer's text): from now on a bare ``[n]`` may be that answer's page ``n``."""
        self._web_read = True

    def know(self, sources: Sequence[events.Source]) -> None:
        """The answer's sources (its ``response``): markers read from now on are resolved
        against them, and numbers given to what is now found (``[n]``, a link, a document
        id) stand for the source it names."""
        self._sources = list(sources)
        self._known = True
        for key in list(self._numbers):
            if key in self._same or any(source_key(s) == key for s in self._sources):
                continue
            found = next((s for t in self._ids[key] if (s := resolve(t, self._sources)) is not None), None)
            if found is None:
                continue
            target = source_key(found)
            if target in self._numbers:
                self._same[key] = target
            else:
                self._rename(key, target)

    def feed(self, text: str) -> str:
        if not self._held and "`" not in text and (
            (self._mode == _TEXT and "[" not in text) or (self._mode == _CODE and "\n" not in text)
            or self._mode == _FENCE
        ):
            if text:
                self._prev = text[-1]
            return text
        out: list[str] = []
        for c in text:
            self._step(c, out)
        return "".join(out)

    def finish(self) -> str:
        """What was held when the answer ends (its list, an error or a wait comes next): a
        marker closed just there, numbered, or text that began one, as it was."""
        held, self._held = self._held, ""
        if held.startswith("[") and held.endswith("]") and len(held) > 2:
            held = self._marker(held)
        if held:
            self._prev = held[-1]
        return held

    def _step(self, c: str, out: list[str]) -> None:
        held = self._held
        if held:
            if held[0] == "`":
                if c == "`":
                    self._held += c
                    if len(self._held) == 3:
                        self._held = ""
                        self._mode = _TEXT if self._mode == _FENCE else _FENCE
                        self._send("```", out)
                    return
                self._held = ""
                if self._mode == _TEXT and len(held) == 1:  # "`x": inline code ("``" is an empty span)
                    self._mode = _CODE
                self._send(held, out)
            elif held[-1] == "]" and len(held) > 2:  # a marker closed: a link's text if "(" follows
                self._held = ""
                self._send(held if c == "(" else self._marker(held), out)
            elif (c == "]" and len(held) > 1) or (c != "]" and may_become_marker(held[1:] + c)):
                self._held += c  # the marker closes, or goes on
                return
            else:
                self._held = ""
                self._send(held, out)  # not a marker: sent as it was, and ``c`` read afresh
        if self._mode == _TEXT:
            if c == "[" and may_open_marker(self._prev):
                self._held = c
                return
            if c == "`":
                self._held = c
                return
        elif self._mode == _CODE:
            if c in "`\n":
                self._mode = _TEXT
        elif c == "`":  # in a fence: a run of three closes it
            self._held = c
            return
        self._send(c, out)

    def _send(self, text: str, out: list[str]) -> None:
        if text:
            out.append(text)
            self._prev = text[-1]

    def _marker(self, held: str) -> str:
        """``held`` (``[…]``) numbered when it is a citation (``agenttools.rag.citations``);
        else as it was."""
        tokens = bracket_ids(held[1:-1])
        if tokens is None or not all(self._cites(t) for t in tokens):
            return held
        numbers: list[int] = []
        for token in tokens:
            key = self._key(token)
            n = self._numbers.setdefault(key, len(self._numbers) + 1)
            cited = self._ids.setdefault(key, [])
            named = key if token.isdigit() and not key.startswith("#") else token  # [2]: px_…#2
            if named not in cited:
                cited.append(named)
            if n not in numbers:
                numbers.append(n)
        return "".join(f"[{n}]" for n in numbers)

    def _cites(self, token: str) -> bool:
        """Whether ``token`` is a citation: it names a source, or one this answer cited
        already, or looks like an id and has a letter; a bare ``n`` only after a web answer
        was read, as one of its pages. Anything else (``3.11``, ``2024``, ``sic``) is prose."""
        if resolve(token, self._sources) is not None:
            return True
        if token.isdigit():
            return (
                not self._known and (self._web_read or bool(self._web))
                and token[0] != "0" and len(token) <= len(str(MAX_WEB_PAGE)) and int(token) <= MAX_WEB_PAGE
            )
        if names_an_id(token):
            return True
        return document_key(token) in self._numbers

    def _key(self, token: str) -> str:
        """The key of the number ``token`` is shown as."""
        found = resolve(token, self._sources)
        if found is not None:
            return source_key(found)
        if token.isdigit():  # a web answer's own [n]: its page n
            if "#" + token in self._numbers:  # numbered before its web answer was known
                return "#" + token
            if len(self._web) == 1:
                return f"{next(iter(self._web))}#{token}"
            return "#" + token  # which web answer's, the sources will say (``know``)
        key = document_key(token)
        answer, sep, page = key.partition("#")
        if WEB_ANSWER.fullmatch(answer):
            self._web.setdefault(answer, None)
            bare = "#" + page
            if sep and key not in self._numbers and bare in self._numbers and len(self._web) == 1:
                self._rename(bare, key)  # "[2]" before "[px_…#2]": the same page
        return key

    def _rename(self, key: str, target: str) -> None:
        """The number of ``key`` now stands for ``target`` (which has none)."""
        self._numbers[target] = self._numbers.pop(key)
        self._ids[target] = self._ids.pop(key)

    # --- the list ----------------------------------------------------------------------------

    def mapping(self, sources: Sequence[events.Source]) -> list[dict[str, Any]]:
        """Each number with the ids it stands for (the sources' own ids once they are known,
        else what was cited) and its source's title and link or file: the markers' numbers
        first, then the sources listed without a marker. Numbers given to sources listed
        later are recorded, so the list is the same each time it is read."""
        self.know(sources)
        by_key: dict[str, list[events.Source]] = {}
        for source in sources:
            key = source_key(source)
            by_key.setdefault(key, []).append(source)
            if key not in self._numbers:
                self._numbers[key] = len(self._numbers) + 1
                self._ids[key] = []
        out: list[dict[str, Any]] = []
        for key, n in sorted(self._numbers.items(), key=lambda item: item[1]):
            found = by_key.get(self._same.get(key, key), [])
            ids = [i for i in self._ids[key] if any(s.id == i for s in found)] if found else list(self._ids[key])
            ids += [s.id for s in found if s.id not in ids]
            entry: dict[str, Any] = {"number": n, "ids": ids}
            if found:
                entry["title"] = " ".join(found[0].title.split())[:MAX_TITLE]
                url = next((s.url for s in found if isinstance(s.url, str) and s.url), None)
                if url is not None:
                    entry["url"] = url
                places = list(dict.fromkeys(s.location for s in found if isinstance(s.location, str) and s.location))
                if places:
                    entry["location"] = "; ".join(places)
            out.append(entry)
        return out

    def sources_list(self, mapping: Sequence[dict[str, Any]]) -> str:
        """The text that ends the answer: ``Sources:`` and a line per number ('' with none)."""
        if not mapping:
            return ""
        lines = ["", "", "Sources:"]
        for entry in mapping:
            # No title: what was cited, as it was (a web answer's page its sources do not name).
            cited = (f"the web answer's [{i}]" if i.isdigit() else i for i in entry["ids"])
            title = entry.get("title") or ", ".join(cited)
            where = entry.get("url") or entry.get("location")
            lines.append(f"- [{entry['number']}] {title}" + (f" — {where}" if where else ""))
        return "\n".join(lines)


__all__ = ["MAX_WEB_PAGE", "CitationNumbers", "resolve", "source_key"]
