"""How text taken from a tool result reads in a one-line summary: quoted, cut, named.

Why a module of its own: ``agenttools.core.result_shapes`` (what a result's shape means)
and ``agenttools.core.result_summary`` (the line, its fallback and its redaction) both
write retrieved strings into the same line, and both must follow the same rules — every
string a server or a document supplied goes through ``quote`` (inside “”, cut to
``QUOTED_CHARS``, no quote mark of its own that could close ours), ids and hashes are
left out (``is_id_like``), and a key or code reads as words only when it is shaped like a
field name (``label``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

QUOTED_CHARS: Final = 40
_NAMES_SHOWN: Final = 3
_ID_TEXT: Final = re.compile(
    r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[a-z]{1,4}_[0-9a-f]{8,}|[0-9a-f]{12,})$",
    re.IGNORECASE,
)
_FIELD_NAME: Final = re.compile(r"^[a-z][a-z0-9_]{0,30}$")
_DIGIT_RUN: Final = re.compile(r"[0-9]{3}")


def quote(text: str, limit: int = QUOTED_CHARS) -> str:
    """Retrieved text as ``“…”``: one line, at most ``limit`` characters inside, and no
    typographic quote of its own that could close ours early."""
    clean = " ".join(str(text).split()).replace("\u201c", '"').replace("\u201d", '"')
    if len(clean) > limit:
        clean = clean[: limit - 1].rstrip() + "\u2026"
    return f"\u201c{clean}\u201d"


def words(key: str) -> str:
    """A field name as words: ``action_types`` → ``action types``. Only for a name known
    to be one; a key or code from a result goes through ``label``."""
    return key.replace("_", " ").replace("-", " ").strip()


def is_field_name(key: str) -> bool:
    """``key`` looks like an identifier a program chose (``total``, ``action_types``), not
    words addressed to a person: lower-case, no spaces or punctuation, at most 31
    characters, and no run of three digits (a phone or account number spelled as a key)."""
    return bool(_FIELD_NAME.match(key)) and not _DIGIT_RUN.search(key)


def label(key: str) -> str:
    """A key or code of a result in the line: as words when it is shaped like a field name
    (``action types``), otherwise quoted like any other text the result supplied."""
    return words(key) if is_field_name(key) else quote(key)


def is_id_like(text: str) -> bool:
    """A UUID, a prefixed or bare hex id (``q_41b6…``, ``px_…``): nothing a person reads."""
    return bool(_ID_TEXT.match(text.strip()))


def is_id_key(key: str) -> bool:
    return key == "id" or key.endswith(("_id", "_ids", "Id", "Ids"))


def name_of(item: Any) -> str:
    """What an item of a list is called: its title, name, type or question; a string is
    its own name. "" for an item without one (or only an id)."""
    if isinstance(item, str):
        return "" if is_id_like(item) else item
    if isinstance(item, Mapping):
        for key in ("title", "name", "type", "label", "question", "column", "field", "keyword", "message"):
            value = item.get(key)
            if isinstance(value, str) and value.strip() and not is_id_like(value):
                return value
    return ""


def names_of(items: Sequence[Any], shown: int = _NAMES_SHOWN) -> str:
    """The first distinct names of ``items``, quoted: ``“a”, “b”, “c”, …``."""
    names = list(dict.fromkeys(n for n in (name_of(i) for i in items) if n))
    if not names:
        return ""
    text = ", ".join(quote(n) for n in names[:shown])
    return text + (", \u2026" if len(names) > shown else "")


def plural(n: int, noun: str, many: str | None = None) -> str:
    return f"{n} {noun if n == 1 else (many or noun + 's')}"
