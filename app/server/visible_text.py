"""Whether a question has anything to read: every face refuses a message of only white
space *or invisible characters* with its own 400.

A message of zero-width spaces, NULs or other control and format characters passed the
faces' ``str.strip()`` (and the native schema's ``\\S``), started a run, and then failed
it: the tools' argument checks strip those characters, so the mandatory knowledge search
was refused for an empty query, twice, and the run ended ``mandatory_tool_missing`` - a
failed run in the conversation, and a 500 on the OpenAI face's non-streamed answer. A
character counts as visible unless it is white space or of Unicode category ``Cc``
(control) or ``Cf`` (format: zero-width spaces and joiners, bidirectional marks, the
byte-order mark), the characters the tools' checks strip too.
"""

from __future__ import annotations

import unicodedata

_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf"})


def has_visible_text(text: str) -> bool:
    """True when ``text`` holds a character a person can read (it stops at the first)."""
    return any(not ch.isspace() and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES for ch in text)
