"""Citations an OpenAI client can read: ``[1]``, ``[2]`` in ``content`` and a "Sources:"
list at the end of it, as OpenAI-compatible RAG backends give them (Perplexity's API:
numbered markers in the text, the list beside it).

The run cites passages by their ids (``[agentchat-knowledge-cli#4]``, a chunk of a
document; ``[px_…#2]``, a web page behind a web answer), which mean nothing to the person
reading Open WebUI or LibreChat, and the titles travel only in the ``agentchat``
extension those clients do not show. So the OpenAI face renumbers them as it streams:

* A marker is ``[id]`` or ``[id, id; id]``, not preceded by a letter, digit, ``_``,
  ``\\`` or ``[`` and not followed by ``(`` (a link's text), outside code — the grammar
  ``agenttools.rag.citations`` checks the answer with — whose every id has a source id's
  shape: ``<document>#<n>`` or ``px_<16 hex>`` (the ids are known by shape: the sources
  themselves arrive only with the ``response`` event, after the text). Brackets that are
  not markers (``[sic]``, ``[1]``, a link) pass untouched.
* One number per source, in order of first use: a document's passages share its number
  (``doc#4`` and ``doc#6`` are one document, one line in the list); each web page behind a
  web answer (``px_…#n``) has its own.
* A marker may be split across stream deltas: text from a ``[`` that may still become a
  marker is held until it is one (then its numbers go out) or cannot be (then it goes out
  as it was). Inline code and fenced blocks are passed as they are.
* At the end: ``Sources:`` with one line per number (title, then its link or its file and
  page), and the sources the answer lists without a marker numbered after them.

Streamed and non-streamed answers go through the same object in the same order, so they
are the same text. The ``agentchat`` extension keeps the run's raw ids; ``mapping`` is the
numbering for it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import events

#: A source id by its shape: a knowledge-base chunk (``<doc_id>#<position>``; document
#: ids have no ``#``) or a web answer and its pages (``px_`` + 16 hex, ``…#<n>``).
_SOURCE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}#[0-9]{1,9}|px_[0-9a-f]{16}")
_WEB_ANSWER = re.compile(r"px_[0-9a-f]{16}")
_SPLIT = re.compile(r"\s*[,;]\s*")
#: What a marker's inside may hold (ids, separators, spaces); anything else ends the hope.
_INSIDE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-#,; \t")
#: The longest marker read (``agenttools.rag.citations._BRACKET``: 400 characters inside).
MAX_MARKER = 402
MAX_TITLE = 200

_TEXT, _CODE, _FENCE = 0, 1, 2


def source_key(source_id: str) -> str:
    """What one number stands for: a document (its passages share it), else the id."""
    doc, sep, _ = source_id.partition("#")
    return doc if sep and not _WEB_ANSWER.fullmatch(doc) else source_id


class CitationNumbers:
    """Feed the answer's text in order (``feed``, then ``finish``); each call returns the
    text to send now, markers numbered. ``sources_list`` is the closing list."""

    __slots__ = ("_held", "_ids", "_mode", "_numbers", "_prev")

    def __init__(self) -> None:
        self._mode = _TEXT
        #: Text not sent yet: a marker being read (``[…``, ``[…]``) or a run of backticks.
        self._held = ""
        #: The last character sent (a marker is not preceded by a word character).
        self._prev = ""
        self._numbers: dict[str, int] = {}  # source key → its number
        self._ids: dict[str, list[str]] = {}  # source key → the ids cited for it, in order

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
        """What was held at the answer's end: a marker closed just there, or text that began one."""
        held, self._held = self._held, ""
        if held.startswith("[") and held.endswith("]") and len(held) > 2:
            return self._marker(held)
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
            elif (c == "]" and len(held) > 1) or (c in _INSIDE and len(held) < MAX_MARKER):
                self._held += c  # the marker closes, or goes on
                return
            else:
                self._held = ""
                self._send(held, out)  # not a marker: sent as it was, and ``c`` read afresh
        if self._mode == _TEXT:
            if c == "[" and not (self._prev.isalnum() or self._prev in "_\\["):
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
        """``held`` (``[…]``) numbered when every id in it has a source id's shape; else as it was."""
        ids = _SPLIT.split(held[1:-1].strip())
        if not ids or not all(_SOURCE_ID.fullmatch(t) for t in ids):
            return held
        numbers: list[int] = []
        for source_id in ids:
            key = source_key(source_id)
            n = self._numbers.setdefault(key, len(self._numbers) + 1)
            cited = self._ids.setdefault(key, [])
            if source_id not in cited:
                cited.append(source_id)
            if n not in numbers:
                numbers.append(n)
        return "".join(f"[{n}]" for n in numbers)

    # --- the list ----------------------------------------------------------------------------

    def mapping(self, sources: Sequence[events.Source]) -> list[dict[str, Any]]:
        """Each number with the ids it stands for and its source's title and link or file:
        the markers' numbers first, then the sources listed without a marker. Numbers given
        to sources listed later are recorded, so the list is the same each time it is read."""
        by_key: dict[str, list[events.Source]] = {}
        for source in sources:
            key = source_key(source.id)
            by_key.setdefault(key, []).append(source)
            if key not in self._numbers:
                self._numbers[key] = len(self._numbers) + 1
                self._ids[key] = []
            if source.id not in self._ids[key]:
                self._ids[key].append(source.id)
        out: list[dict[str, Any]] = []
        for key, n in sorted(self._numbers.items(), key=lambda item: item[1]):
            found = by_key.get(key, [])
            entry: dict[str, Any] = {"number": n, "ids": list(self._ids[key])}
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
            title = entry.get("title") or ", ".join(entry["ids"])
            where = entry.get("url") or entry.get("location")
            lines.append(f"- [{entry['number']}] {title}" + (f" — {where}" if where else ""))
        return "\n".join(lines)


__all__ = ["CitationNumbers", "source_key"]
