"""Text folding and tokenising that agree with the FTS5 ``unicode61 remove_diacritics 2``
tokenizer closely enough for query building, re-ranking and snippet placement, and the
terms keywords are matched by (``keyword_terms`` / ``query_terms``).

The service's one stop-word list lives here (``STOP_WORDS``); the keyword rules
(``agenttools.rag.keywords``) use it too. ``toolindex.hashing`` keeps its own: that room may
not import this one, and its list is part of the ``hashing-v2`` vector space (changing
it would silently change every stored vector).
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the stemmer is imported only when keywords are matched
    from knowledge.stemmer import Stemmer

_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)
_COMBINING_RE = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")

#: English function words: they carry no retrieval signal.
FUNCTION_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am among an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    else few for from further had has have having he her here hers herself him himself his
    how i if in into is it its itself just may me might more most must my myself no nor not
    now of off on once only onto or other our ours ourselves out over own same shall she
    should so some such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while
    who whom whose why will with within without would yet you your yours yourself
    yourselves also yes s t d ll m re ve don doesn didn isn aren wasn weren won wouldn
    """.split()
)

#: The filler of requests ("please tell me", "explain", "list"): not what is asked about.
REQUEST_WORDS: frozenset[str] = frozenset("please tell show find give get know explain describe list".split())
#: Request words that are also what a question may be about: "list every invoice" asks
#: for a list and "what does npm outdated show?" for an output, but "how do I list the
#: installed packages?" asks how listing is done (the ``npm ls`` page says "list"). They
#: are the topic when they are the action a how-question asks about (see
#: ``_asked_action``); anywhere else they are filler.
TOPIC_REQUEST_WORDS: frozenset[str] = frozenset("show find list get".split())
#: Question words that are the topic when a question asks about them rather than with
#: them: "why does … fail?" opens with "why" (the form of the question), but "how do I
#: find out why a package is installed?" asks for the reason itself, which documents
#: name by the word (``npm explain``, "alias: why"; "figure out exactly why …").
_EMBEDDED_ASKS = frozenset({"why"})
#: The subject of a how-question's action: "how do I list", "how can we find", "how to show".
_ACTION_SUBJECTS = frozenset("i we you one to".split())

#: Words that carry no retrieval signal. Dropped from FTS queries because they match
#: nearly every chunk (slow, and they flatten BM25), ignored by the re-ranker and by
#: keyword matching, and a keyword made only of them is too generic to index.
STOP_WORDS: frozenset[str] = FUNCTION_WORDS | REQUEST_WORDS


def fold(text: str) -> str:
    """Casefold and strip diacritics (``"Ünïcödé"`` → ``"unicode"``).

    The result may differ in length from the input; use ``fold_with_map`` when
    positions matter. ASCII text (nearly every chunk and title) has nothing to
    decompose or strip and casefolds as it lowercases, so it skips both: the re-ranker
    folds every candidate's text, title and metadata on each search.
    """
    if text.isascii():
        return text.lower()
    return _COMBINING_RE.sub("", unicodedata.normalize("NFKD", text)).casefold()


def fold_with_map(text: str) -> tuple[str, list[int]]:
    """``fold(text)`` plus, for each folded character, the index of its source character."""
    folded = fold(text)
    if len(folded) == len(text):
        return folded, list(range(len(text)))
    out: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        f = fold(ch)
        out.append(f)
        index.extend([i] * len(f))
    return "".join(out), index


def tokens(text: str) -> list[str]:
    """Folded word tokens (letters and digits; punctuation and ``_`` separate)."""
    return _TOKEN_RE.findall(fold(text))


def content_terms(text: str, *, limit: int = 24) -> list[str]:
    """Distinct folded tokens without stop words, in order, at most ``limit``.

    Falls back to the stop words themselves when nothing else is left, so "who are
    you" still searches for something.
    """
    seen: dict[str, None] = {}
    all_tokens = tokens(text)
    for i, t in enumerate(all_tokens):
        asked = t in TOPIC_REQUEST_WORDS and _asked_action(all_tokens, i) and not _phrasal(all_tokens, i)
        content = t not in STOP_WORDS and (len(t) > 1 or t.isdigit())
        if asked or content or (t in _EMBEDDED_ASKS and i > 0):
            seen.setdefault(t, None)
    if not seen:
        for t in all_tokens:
            seen.setdefault(t, None)
    return list(seen)[:limit]


def _asked_action(words: list[str], i: int) -> bool:
    """True when ``words[i]`` is the action a how-question asks about: "how do I list …",
    "how to find …" (not "list every invoice", "please show me …", "what does … show")."""
    return 2 <= i <= 4 and words[0] == "how" and words[i - 1] in _ACTION_SUBJECTS


def _phrasal(words: list[str], i: int) -> bool:
    """True when a particle follows ``words[i]``: "find out why …" asks to learn
    something, not about finding (``npm find-dupes``); "show up" is not "show"."""
    return i + 1 < len(words) and words[i + 1] in _PARTICLES


#: Shortest word a pair of query words may join into ("log in" → ``login``).
_MIN_JOINED = 5
#: The adverb particles of English phrasal verbs ("log in", "back up", "check out").
_PARTICLES = frozenset("in up out on off down over back away".split())


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
        if (right in STOP_WORDS and right not in _PARTICLES) or len(word) < _MIN_JOINED or word in STOP_WORDS:
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


def stem(word: str) -> str:
    """A light English suffix stripper for re-ranking (FTS5 itself uses Porter).

    Crude on purpose: it only has to make "tests"/"test" and "running"/"run" meet when
    counting which query terms a chunk contains.
    """
    n = len(word)
    if n > 5 and word.endswith("ies"):
        return word[:-3] + "y"
    if n > 5 and word.endswith("ing"):
        w = word[:-3]
        return w[:-1] if len(w) > 2 and w[-1] == w[-2] else w
    if n > 4 and word.endswith("ed"):
        w = word[:-2]
        return w[:-1] if len(w) > 2 and w[-1] == w[-2] else w
    if n > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if n > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


# --------------------------------------------------------------------------- keyword terms

#: Joined n-grams a query contributes, so "real time" meets the keyword "real-time" and
#: "return to office" meets "return-to-office".
_JOIN_SIZES = (2, 3)
#: Words of a query considered for matching (a model's KB query is a sentence, not a page).
MAX_QUERY_WORDS = 96

_BRITISH_SUFFIXES = (
    ("isations", "izations"),
    ("isation", "ization"),
    ("ising", "izing"),
    ("ised", "ized"),
    ("ises", "izes"),
    ("ise", "ize"),
    ("ysing", "yzing"),
    ("ysed", "yzed"),
    ("yses", "yzes"),
    ("yse", "yze"),
)


def _american(word: str) -> str:
    """British → American spelling where a suffix rule suffices ("optimisation",
    "analyse", "haemoglobin"), so both spellings reach one stem. Applied to both sides of
    a match, so an over-eager rewrite ("promise" → "promize") costs nothing."""
    for british, american in _BRITISH_SUFFIXES:
        # A stem of three letters or more: "raise"/"raises" and "rise" stay as they are.
        if word.endswith(british) and len(word) - len(british) >= 3:
            word = word[: -len(british)] + american
            break
    ae = word.find("ae", 1)
    if ae > 0 and word.isalpha():
        word = word[:ae] + word[ae + 1 :]
    return word


def match_stem(word: str, stemmer: Stemmer | None = None) -> str:
    """The matching form of one folded word: American spelling, then its Porter stem
    (through ``stemmer``'s memo when given: the service's keyword index has one)."""
    # Imported here: the stemmer is only needed by keyword matching.
    from knowledge.stemmer import porter_stem

    american = _american(word)
    return stemmer.stem(american) if stemmer is not None else porter_stem(american)


def _is_content(part: str) -> bool:
    return part not in STOP_WORDS and (len(part) > 1 or part.isdigit())


def keyword_terms(text: str, stemmer: Stemmer | None = None) -> tuple[str, ...]:
    """The terms a keyword is matched by: its stemmed content words, in order, no repeats.

    A word written with inner punctuation is one term, joined ("node-pressure" →
    ``nodepressur``, "Trip.com" → ``tripcom``, "16:8" → ``168``); ``query_terms`` offers
    both the joined form and the parts, so the keyword "real-time analytics" meets
    "real time analytics", "real-time analytics" and "realtime analytics" alike. Stop
    words go; a keyword of stop words only keeps them (it still has to match something).
    """
    out: dict[str, None] = {}
    everything: dict[str, None] = {}
    for raw in fold(text).split():
        parts = _TOKEN_RE.findall(raw)
        if not parts:
            continue
        word = "".join(parts)
        term = match_stem(word, stemmer)
        everything.setdefault(term, None)
        if len(parts) > 1 or _is_content(word):
            out.setdefault(term, None)
    return tuple(out or everything)


def query_terms(text: str, stemmer: Stemmer | None = None) -> set[str]:
    """Every term of ``text`` a keyword could be matched by (see ``keyword_terms``).

    The stemmed content words; for a word with inner punctuation also the joined form;
    and the joined pairs and triples of consecutive words ("real time" → ``realtim``),
    which is how a compound written apart meets one written together.
    """
    words: list[str] = []
    terms: set[str] = set()
    for raw in fold(text).split():
        parts = _TOKEN_RE.findall(raw)
        if not parts:
            continue
        if len(parts) > 1:
            terms.add(match_stem("".join(parts), stemmer))
        words.extend(parts)
        if len(words) >= MAX_QUERY_WORDS:
            break
    words = words[:MAX_QUERY_WORDS]
    terms.update(match_stem(w, stemmer) for w in words if _is_content(w))
    for n in _JOIN_SIZES:
        for i in range(len(words) - n + 1):
            terms.add(match_stem("".join(words[i : i + n]), stemmer))
    return terms
