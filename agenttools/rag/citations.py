"""Citation verification (seed 004 §4, step 4): every ``[id]`` in an answer must name
evidence this run retrieved.

The model is told to cite ``[doc_id]`` (corpus tools) or ``[source_id]`` (RAG tools).
``verify_citations`` finds those markers, resolves each id against the run's evidence
with the same rules ``generate_response`` uses for its ``sources`` list (exact id, a
chunk's ``doc_id``, a URL), removes the ones that resolve to nothing and returns the
known ones as sources (title and location), in order of first citation.

What counts as a citation marker, so ordinary brackets survive: ``[x]`` where ``x`` is
one or more id-like tokens separated by commas or semicolons, not a Markdown link text
(``[text](url)``), not an index (``a[i]``: preceded by a word character), not inside
code. A token is id-like when it resolves, or when it looks like an identifier (has a
digit or one of ``-_.:#/@``). Plain words in brackets (``[sic]``, ``[optional]``) are
prose, left alone. ``[n]`` (a web answer's own citation marker) resolves to a retrieved
web citation numbered ``n``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agenttools.core.registry import EvidenceSource, RunToolState
from agenttools.rag.sources import resolve_citations

#: The longest inside of a marker, in characters (``_BRACKET``).
MAX_INSIDE = 400
_BRACKET = re.compile(r"(?<![\w\\\[])\[([^\[\]\n]{1,400})\](?!\()")
#: What may not stand right before a marker's ``[`` (``_BRACKET``'s look-behind): an index ``a[i]``.
_NOT_AFTER = re.compile(r"[\w\\\[]")
_SPLIT = re.compile(r"\s*[,;]\s*")
_TOKEN_FIRST = "A-Za-z0-9"
_TOKEN_REST = r"A-Za-z0-9_.:#/@\-"
_TOKEN = re.compile(rf"^[{_TOKEN_FIRST}][{_TOKEN_REST}]{{0,199}}$")
_ID_HINT = re.compile(r"[0-9_.:#/@\-]")
#: What an inside read so far must not hold to still become a marker's: a character no
#: token or separator has, two tokens with no separator between, a token opening with a
#: character only its rest may have, a token longer than ``_TOKEN`` allows.
_NOT_A_MARKER_YET = re.compile(
    rf"[^{_TOKEN_REST},;\s]|\n|[{_TOKEN_REST}]\s+[{_TOKEN_REST}]"
    rf"|(?:^|[\s,;])[^{_TOKEN_FIRST},;\s]|[{_TOKEN_REST}]{{201}}"
)
_CODE = re.compile(r"```.*?(?:```|$)|`[^`\n]*`", re.DOTALL)


@dataclass(slots=True)
class CitationCheck:
    """The outcome of checking one answer.

    ``answer_without_unknown`` is the answer with every unknown id removed (a bracket
    left empty disappears with the space before it); ``unknown_ids`` lists each unknown
    id once, in order; ``cited_sources`` are the known sources cited, each once.
    """

    answer_without_unknown: str
    unknown_ids: list[str] = field(default_factory=list)
    cited_sources: list[EvidenceSource] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unknown_ids


def _resolve(token: str, state: RunToolState) -> EvidenceSource | None:
    found, _unknown = resolve_citations([token], state)
    if found:
        return found[0]
    if token.isdigit():
        matches = [
            s for s in state.sources.values() if s.kind == "external" and str(s.metadata.get("index")) == token
        ]
        if matches:  # several web answers numbering alike: ambiguous, but not invented
            return matches[0]
    return None


def bracket_ids(inside: str) -> list[str] | None:
    """The ids a bracket holding ``inside`` names, when it has a marker's shape (id-like
    tokens separated by commas or semicolons); else None. Whether it is a citation also
    takes one of them resolving or looking like an id (``looks_like_id``): ``[sic]`` is prose."""
    tokens = [t for t in _SPLIT.split(inside.strip()) if t]
    if not tokens or not all(_TOKEN.match(t) for t in tokens):
        return None
    return tokens


def looks_like_id(token: str) -> bool:
    """An id by its look (a digit or one of ``-_.:#/@``), whether or not it resolves."""
    return _ID_HINT.search(token) is not None


def names_an_id(token: str) -> bool:
    """An id by its look with a letter in it (``doc-9``, ``guide#3``, ``px_…#2``): what an
    answer means as a citation whether or not it resolves. A number alone (``2024``,
    ``3.11``) is not one: a year, a version, or at most a web answer's page."""
    return looks_like_id(token) and any(c.isalpha() for c in token)


def may_open_marker(before: str) -> bool:
    """Whether a ``[`` after the character ``before`` ('' at the start) may open a marker."""
    return not before or _NOT_AFTER.fullmatch(before) is None


def may_become_marker(inside: str) -> bool:
    """Whether a bracket's inside read so far (no ``]`` yet) may still be a marker's: for
    a reader of streamed text, which holds text back only while this holds."""
    return len(inside) <= MAX_INSIDE and "[" not in inside and "]" not in inside and (
        _NOT_A_MARKER_YET.search(inside) is None
    )


def _claims_a_source(token: str, state: RunToolState) -> bool:
    """An unresolved token the answer means as a citation: an id by its look with a letter
    in it (``doc-9``, ``guide#3``), or a bare number once the run holds a web answer (its
    pages are numbered). A number otherwise — a year, a version, an index list: ``[2024]``,
    ``[3.11]``, ``[0, 1, 2]`` — is prose, not an invented source to refuse and strip."""
    if names_an_id(token):
        return True
    return token.isdigit() and any(s.kind == "external" for s in state.sources.values())


def _code_spans(answer: str) -> list[tuple[int, int]]:
    return [m.span() for m in _CODE.finditer(answer)]


def verify_citations(answer: str, state: RunToolState) -> CitationCheck:
    """Check ``answer``'s ``[id]`` markers against ``state.sources``; never raises."""
    code = _code_spans(answer)
    cited: dict[str, EvidenceSource] = {}
    unknown: dict[str, None] = {}
    pieces: list[str] = []
    last = 0
    for m in _BRACKET.finditer(answer):
        if any(a <= m.start() < b for a, b in code):
            continue
        tokens = bracket_ids(m.group(1))
        if tokens is None:
            continue
        resolved = [(t, _resolve(t, state)) for t in tokens]
        if not any(src is not None or _claims_a_source(t, state) for t, src in resolved):
            continue  # prose in brackets, e.g. [sic], [2024]
        kept: list[str] = []
        for token, src in resolved:
            if src is not None:
                cited.setdefault(src.id, src)
                kept.append(token)
            elif _claims_a_source(token, state):
                unknown.setdefault(token, None)
            else:
                kept.append(token)
        if len(kept) == len(tokens):
            continue
        start = m.start()
        if not kept:
            # Drop the marker and the whitespace before it: "text [bad]." -> "text."
            while start > last and answer[start - 1] in " \t":
                start -= 1
            pieces.append(answer[last:start])
        else:
            pieces.append(answer[last:start] + "[" + ", ".join(kept) + "]")
        last = m.end()
    pieces.append(answer[last:])
    return CitationCheck("".join(pieces), list(unknown), list(cited.values()))


__all__ = [
    "MAX_INSIDE",
    "CitationCheck",
    "bracket_ids",
    "looks_like_id",
    "may_become_marker",
    "may_open_marker",
    "names_an_id",
    "verify_citations",
]
