"""Members a native JSON body does not have: refused with a 400 ``unknown_field``.

Why refused rather than ignored: on the native face every member changes what the
request does, so a typo that is ignored changes behaviour in silence — ``conversationId``
instead of ``conversation_id`` starts a *new* conversation with a ``201``. The 400 names
each unknown member and, when a known one is close (the same letters in another case or
with other separators, or a near spelling), suggests it. Checked before the fields
themselves: a misspelt required field is reported as the typo it is ("did you mean
message?"), not as "message is required".

The OpenAI-compatible and AI SDK faces do not call this: their clients send many members
this server has no use for (docs/compatible-faces.md).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from app.server.problems import HTTPProblem

#: How many unknown members the detail names (the answer stays short for a body of thousands).
MAX_NAMED = 5
_SHOWN_CHARS = 40
_SEPARATORS = re.compile(r"[^0-9a-z]+")


def refuse_unknown_fields(body: Mapping[str, Any], known: Sequence[str]) -> None:
    """Raise 400 ``unknown_field`` when ``body`` has a member not in ``known``: the detail
    names them (the first five) with a suggestion each where one is close, and lists the
    known fields; ``unknown_fields`` and ``did_you_mean`` say the same for programs."""
    unknown = [name for name in body if name not in known]
    if not unknown:
        return
    suggestions = {name: hint for name in unknown[:MAX_NAMED] if (hint := closest(name, known)) is not None}
    named = [
        _shown(name) + (f" (did you mean {suggestions[name]}?)" if name in suggestions else "")
        for name in unknown[:MAX_NAMED]
    ]
    more = f" and {len(unknown) - MAX_NAMED} more" if len(unknown) > MAX_NAMED else ""
    noun = "field" if len(unknown) == 1 else "fields"
    detail = f"unknown {noun}: {', '.join(named)}{more}; the known fields are {', '.join(known)}"
    shown = {_shown(name, quoted=False): hint for name, hint in suggestions.items()}
    fields: dict[str, Any] = {"unknown_fields": [_shown(n, quoted=False) for n in unknown[:MAX_NAMED]]}
    if shown:
        fields["did_you_mean"] = shown
    raise HTTPProblem(400, "unknown_field", detail, fields=fields)


def closest(name: str, known: Sequence[str]) -> str | None:
    """The known name ``name`` was probably meant to be: the same letters and digits
    ignoring case and separators (``conversationId``, ``Conversation-ID``), else the
    nearest spelling (``mesage``, ``context_types``) when it is near enough."""
    folded = _fold(name)
    if not folded or len(name) > _SHOWN_CHARS:
        return None
    for candidate in known:
        if _fold(candidate) == folded:
            return candidate
    by_fold = {_fold(candidate): candidate for candidate in known}
    near = difflib.get_close_matches(folded, list(by_fold), n=1, cutoff=0.75)
    return by_fold[near[0]] if near else None


def _fold(name: str) -> str:
    return _SEPARATORS.sub("", name.lower())


def _shown(name: str, *, quoted: bool = True) -> str:
    """A member's name as the answer shows it: at most 40 characters."""
    cut = name if len(name) <= _SHOWN_CHARS else name[:_SHOWN_CHARS] + "…"
    return repr(cut) if quoted else cut


__all__ = ["closest", "refuse_unknown_fields"]
