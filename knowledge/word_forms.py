"""The other forms documentation writes a query's words in, searched and counted as
those words (``knowledge.query_terms.related_terms``): a pair written apart that is one
word in documents ("log in" -> ``login``, ``joined_terms``), a word's clipped or full form
("configuration" <-> ``config``, ``clipped_terms``), and a reader's verb that
documentation writes otherwise ("see" -> "show", "pick up ... again" -> "resume",
``reader_terms``). Each is a table of the language's, not of any corpus's.

Apart from ``knowledge.textnorm`` (folding, tokens, stems, the stop words), which these
read: that module is the tokenizer's agreement, this one what a query is widened by.
"""

from __future__ import annotations

import itertools
import re

from knowledge.textnorm import PARTICLES, STOP_WORDS, fold, tokens

#: Shortest word a pair of query words may join into ("log in" → ``login``).
_MIN_JOINED = 5


def joined_terms(text: str) -> dict[str, str]:
    """``{joined word: the content word it extends}`` for adjacent word pairs of ``text``
    written apart that documents often write as one word: a phrasal verb or compound
    ("log in" → ``login``, "set up" → ``setup``, "time out" → ``timeout``, "file name"
    → ``filename``). Command names and identifiers are written that way (``npm-login``,
    ``setup.py``), and a question written in words never meets them otherwise.

    Only two content words, or a content word and the particle after it, all letters,
    joined into a word of ``_MIN_JOINED`` letters or more that is not itself a stop word
    (articles, pronouns and auxiliaries never join: "the registry" is no word). A pair
    whose joined form no document holds matches nothing, so offering it costs one term
    lookup.
    """
    words = tokens(text)
    out: dict[str, str] = {}
    for left, right in itertools.pairwise(words):
        if not (left.isalpha() and right.isalpha()) or left in STOP_WORDS:
            continue
        word = left + right
        if (right in STOP_WORDS and right not in PARTICLES) or len(word) < _MIN_JOINED or word in STOP_WORDS:
            continue
        out.setdefault(word, left)
    return out


#: Clipped words of technical English and the words they are clipped from. Documentation
#: writes either ("npm gets its config settings from …", "the repository field"), and a
#: question in the other form never meets the sentence that answers it. Both forms are
#: ordinary dictionary words, so the table is the language's, not any corpus's. ("pkg"
#: is left out: synopses write it as a placeholder, ``<pkg>``, far more than as a word.)
_CLIPPINGS: dict[str, str] = {
    "config": "configuration",
    "configs": "configurations",
    "repo": "repository",
    "repos": "repositories",
    "dir": "directory",
    "dirs": "directories",
    "env": "environment",
    "info": "information",
    "auth": "authentication",
    "docs": "documentation",
    "app": "application",
    "apps": "applications",
    "deps": "dependencies",
    "dep": "dependency",
    "args": "arguments",
    "arg": "argument",
    "params": "parameters",
    "param": "parameter",
    "spec": "specification",
    "specs": "specifications",
    "admin": "administrator",
    "admins": "administrators",
    "db": "database",
    "lib": "library",
    "libs": "libraries",
    "temp": "temporary",
    "stats": "statistics",
    "max": "maximum",
    "min": "minimum",
    "dev": "development",
    "prod": "production",
    "cert": "certificate",
    "certs": "certificates",
}
_UNCLIPPED = {long: short for short, long in _CLIPPINGS.items()}
#: A word standing free: no name character (``-._/@``) joins it to its neighbours.
_FREE_WORD = re.compile(r"(?<![\w\-./@])[^\W\d_]+(?!\w|[\-./@]\w)")


def clipped_terms(text: str) -> dict[str, str]:
    """``{other form: the query word}`` for the words of ``text`` that technical English
    also writes clipped or in full ("configuration" ↔ ``config``, "repo" ↔
    ``repository``): searched and counted as that word, as ``joined_terms`` are. A word
    inside a name ("package-lock.json", "npm_config_cache") is part of that name, not
    the word, and has no other form."""
    out: dict[str, str] = {}
    for match in _FREE_WORD.finditer(fold(text)):
        word = match.group(0)
        other = _CLIPPINGS.get(word) or _UNCLIPPED.get(word)
        if other is not None:
            out.setdefault(other, word)
    return out


#: A reader's verb and the words documentation writes for the same action. What a
#: reader asks to "see" is what a command shows, lists, displays or prints ("how do I see
#: all the npm settings that are currently in effect?" is npm config's "list: Show all
#: the config settings"), while documentation writes "see" for pointers to other pages
#: ("See also", "see `npm help config`"): searched alone, the reader's "see" finds those
#: pointers and never the action. The offline answerer reads "see" as one of that group
#: already (``llm.extractive_words.SYNONYMS``, round 27); the search now does too. Only
#: "see": the answerer's other action groups (remove / delete, change / modify …) are
#: words documentation writes for the action itself, and searching each for the others
#: lost answers when measured (round 29, docs/knowledge-base.md).
_READER_VERBS: dict[str, tuple[str, ...]] = {"see": ("show", "list", "display", "print")}
#: A reader's phrasal verb and the word documentation writes for it: to "pick up" an
#: answer again, or where one left off, is to resume it ("How can I pick up an answer
#: again after my connection dropped?" is durable runs' "To resume a run's stream after a
#: reload or a lost network …"; searched without it, the question's "connection" found
#: the connection pools). The offline answerer reads the phrase as "resume" too
#: (``llm.extractive_words.one_verbs``). Only in that sense: "again" within a few words
#: after it, or "where" ("pick up where I left off"); a reader's "Which settings does the
#: service pick up at start?" or "the worker picks up queued runs" resumes nothing, and
#: searched so found durable runs' "resume" paragraph and was answered with it (review of
#: f715e61).
_READER_PHRASES: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    (
        re.compile(
            r"(?<![\w\-./@])pick(?:s|ed|ing)?\s+up\b(?=(?:\s+[^\s?.!,;:]+){0,5}?\s+again\b|\s+(?:from\s+)?where\b)"
        ),
        "pick",
        ("resume",),
    ),
)


def reader_terms(text: str) -> dict[str, str]:
    """``{documentation's word: the query word}`` for the reader's verbs of ``text`` that
    documentation writes otherwise (``_READER_VERBS``: "see" is "show", "list",
    "display", "print"; ``_READER_PHRASES``: "pick up" is "resume"), searched and
    counted as that word, as ``clipped_terms`` are.
    Only the English verb in plain text (``_plain_verb``): a word inside a name is part
    of that name, a backticked `` `see` `` is a code identifier, and a capitalised "See"
    inside a sentence is a noun (German "der See", the lake)."""
    out: dict[str, str] = {}
    for match in _FREE_WORD.finditer(text):
        word = fold(match.group(0))
        if word in _READER_VERBS and _plain_verb(text, match):
            for other in _READER_VERBS[word]:
                out.setdefault(other, word)
    folded = fold(text)
    for phrase, verb, others in _READER_PHRASES:
        if phrase.search(folded) is not None:
            for other in others:
                out.setdefault(other, verb)
    return out


#: What ends a sentence, so that the next word may be capitalised as its first - maybe
#: after the marks a sentence opens with: a list item's ("- ", "* ", "2) "), a block
#: quote's ("> "), an opening quote, bracket or emphasis ("\"", "(", "**", "¿").
_SENTENCE_END = re.compile(r"(?:^|[.!?:;]|\n)\s*(?:(?:[-*+•>]|\d{1,3}[.)])\s+)?[\"'\u201c\u2018«(\[¿¡*_]*$")


def _plain_verb(text: str, match: re.Match[str]) -> bool:
    """True when ``match`` is written as a verb in running text: outside a code span (an
    even number of backticks before it) and in lower case, or capitalised only as a
    sentence's first word ("See which tokens …?", "- See my tokens": ``_SENTENCE_END``);
    a capital inside a sentence is a noun's
    ("Wie tief ist der See?")."""
    before = text[: match.start()]
    if before.count("`") % 2:
        return False
    word = match.group(0)
    if word.islower():
        return True
    return word[0].isupper() and word[1:].islower() and _SENTENCE_END.search(before) is not None


__all__ = ["clipped_terms", "joined_terms", "reader_terms"]
