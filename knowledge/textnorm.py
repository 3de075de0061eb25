"""Text folding and tokenising that agree with the FTS5 ``unicode61 remove_diacritics 2``
tokenizer closely enough for query building, re-ranking and snippet placement, and the
terms keywords are matched by (``keyword_terms`` / ``query_terms``). The other forms a
query's words are written in (joined, clipped, a reader's verb) are
``knowledge.word_forms``'.

The service's one stop-word list lives here (``STOP_WORDS``); the keyword rules
(``agenttools.rag.keywords``) use it too. ``toolindex.hashing`` keeps its own: that room may
not import this one, and its list is part of the ``hashing-v2`` vector space (changing
it would silently change every stored vector).
"""

from __future__ import annotations

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
    return i + 1 < len(words) and words[i + 1] in PARTICLES


#: The adverb particles of English phrasal verbs ("log in", "back up", "check out"):
#: "find out" is not "find" here, and a particle joins the verb before it in
#: ``knowledge.word_forms.joined_terms`` ("log in" -> ``login``).
PARTICLES = frozenset("in up out on off down over back away".split())


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
