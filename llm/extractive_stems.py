"""How the offline answerer stems a word (``_stem``: "stores", "stored" and "store" are
"stor"), finds its root under a prefix (``_root``: "disconnect" / "reconnect"), and which
verbs a reader and the documentation write for one action (``SYNONYMS``). Pure functions
of a word and constants, kept apart from ``llm.extractive_words`` (which cuts texts into
words and meets a question's stems with them, and re-exports these names).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

_PREFIXES = ("dis", "re", "un", "de", "pre", "non")


def _stem(word: str) -> str:
    for suffix in (
        "ations",
        "ation",
        "ings",
        "ing",
        "ies",
        "ied",
        "ences",
        "ence",
        "ently",
        "ent",
        "es",
        "ed",
        "ly",
        "s",
    ):
        if suffix == "es" and not _SIBILANT_ES.search(word):
            continue  # "files" is "file" + "s": the "s" goes, then a silent "e" as below
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s":
                return _silent_e(word[:-1])
            # "retries" is "retry" again ("ies" and "ied" of a word ending in "y"): the
            # prefix match in ``_match`` joins long words ("dependencies"/"dependency")
            # but a short one stripped to "retr" never met the question's "retry".
            return word[:-3] + "y" if suffix in ("ies", "ied") else word[: -len(suffix)]
    return _silent_e(word)


#: A plural or verb in "-es" that adds the syllable to a word not ending in "e"
#: ("matches", "pushes", "boxes", "processes", "goes"). Elsewhere "-es" is "-e" + "s":
#: "files", "names", "types", "nodes" were cut to "fil", "nam", "typ", "nod", which
#: never met "file", "name", "type", "node" (too short for ``_match``'s shared prefix):
#: "Which file formats …" did not meet "reads the supported files".
_SIBILANT_ES = re.compile(r"(?:ch|sh|x|ss|o)es$")


def _silent_e(word: str) -> str:
    """A silent final "e" goes too, so "store" meets "stored" and "stores" ("stor")."""
    return word[:-1] if word.endswith("e") and len(word) >= 5 else word


def _root(stem: str) -> str:
    for prefix in _PREFIXES:
        if stem.startswith(prefix) and len(stem) - len(prefix) >= 4:
            return stem[len(prefix) :]
    return stem


#: Verbs documentation and its readers write for one action ("how do I remove a key"
#: is npm config's "delete: Deletes the specified keys"): a word meets the others of its
#: group as itself, since to the reader they are one word. Only actions a command or
#: setting performs, each group's words interchangeable in any sentence about it; and
#: the distributive quantifier, which a reader writes "each" where a reference page
#: writes "every" ("in what format is the data of each SSE event written?" is "Every
#: event has … `data: <compact JSON>`", not a table row saying "after each tool").
#: What a reader asks to "see" is what a command lists, shows, displays or prints ("how
#: can I see which access tokens my account has?" is npm token's "This lets you list,
#: create and revoke authentication tokens" over the synopsis ``npm token list``), so
#: "see" is no function word (``_STOP``) but one of that group. Where a reader asks
#: what the service "keeps", documentation says what it stores or holds ("Where does the
#: service keep its data?" is the overview's "Where data lives": "one SQLite file named
#: by `AGENT_DB_PATH` … It holds conversations …"; with "keep" alone no sentence of that
#: section met the question, and units saying `data` as a field name led).
SYNONYMS = (
    "remove delete clear rm",
    "show display print see list",
    "change modify edit",
    "make create",
    "stop disable",
    "fix repair",
    "check verify",
    "each every",
    "keep store hold",
)


def _synonym_table() -> dict[str, frozenset[str]]:
    table: dict[str, frozenset[str]] = {}
    for group in SYNONYMS:
        words = frozenset(_stem(w) for w in group.split())
        for w in words:
            table[w] = words - {w}
    return table


#: Built once from the constants above and read-only.
_SYNONYM_OF: Mapping[str, frozenset[str]] = MappingProxyType(_synonym_table())


__all__ = ["SYNONYMS"]
