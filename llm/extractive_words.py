"""Words for the offline answerer: how a text is cut into content words and stemmed,
which verbs count as one (``SYNONYMS``; "turn on" as "enable"), and how a question's
stems meet a passage's (``coverage``, ``phrase_share``; a word's stem and root are
``llm.extractive_stems``, names in code ``llm.extractive_code_names``). Both the question and every
passage go through these; what a question asks by its form stays in
``llm.extractive_question``, which re-exports the public names (its importers are
unchanged). The answerer does this word work through ``Words``, which memoises it and
is owned by whoever answers (the provider keeps one for its life); the module-level
functions are the same work unmemoised, for a caller with a single text to read.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Callable, Mapping, Set
from functools import lru_cache, partial

from llm.extractive_code_names import beginnings, code_parts
from llm.extractive_stems import _SYNONYM_OF, SYNONYMS, _root, _stem
from llm.markdown_blocks import Block, copied_blocks, parse_passage

WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset(
    "a an and are as at be by can could do does for from how i if in into is it its me my of on or our "
    "should so than that the their them then there these this those to was we what when where which who "
    "why will with would you your about after before does did get got has have having here just more most "
    "not only other over same some such too under up very via use used using".split()
)

#: Phrasal verbs that documentation writes as one verb: a reader asks how to "turn on
#: two-factor authentication" where the page says "enable-2fa: Enables two-factor
#: authentication", and a page says "turn off logs completely" of what a reader asks to
#: "stop" (``SYNONYMS``: stop / disable). Both the question and the text read them as the
#: one verb, so "turn on" meets "enable" and never "disable", which shares the rest.
#: A reader's "pick up" (an answer again, where one left off) is the documentation's
#: "resume" likewise (round 32), only with "again" a few words after it or "where" next
#: (as ``knowledge.word_forms._READER_PHRASES``): "the service picks up a changed file at
#: start" or "a worker picks up queued runs" resumes nothing.
_ONE_VERB = re.compile(
    r"\b(?:(?:turn(?:s|ed|ing)?|switch(?:es|ed|ing)?)\s+(?P<particle>on|off)"
    r"|pick(?:s|ed|ing)?\s+(?P<pick>up)(?=(?:\s+[^\s?.!,;:]+){0,5}?\s+again\b|\s+(?:from\s+)?where\b))\b"
)


def _one_verb(match: re.Match[str]) -> str:
    if match.group("pick"):
        # "pick up an answer again", "pick up where I left off": what documentation
        # writes "resume" (``knowledge.word_forms.reader_terms`` searches it so too).
        return "resume"
    return "enable" if match.group("particle") == "on" else "disable"


def one_verbs(text: str) -> str:
    """``text`` folded, its phrasal verbs written as the one verb (``_ONE_VERB``)."""
    return _ONE_VERB.sub(_one_verb, unicodedata.normalize("NFKC", text).casefold())


#: A path of folders ending with a file's name and a known extension, as documentation
#: writes where a file is: not a route (``/v1/agent/runs/{run_id}/events``), a folder
#: (``~/.npm``) or a bare file name (``package.json``), which are often what is asked.
_FILE_PATH = re.compile(
    r"(?<![\w/.~-])[\w.~{}<>*-]*(?:/[\w.{}<>*-]+)+"
    r"\.(?:toml|json|jsonl|md|py|yaml|yml|txt|js|mjs|cjs|ts|sh|cfg|ini|html|lock|sqlite3|env|conf|pem|log)(?![\w/])"
)


def apart_from_paths(text: str) -> tuple[str, str]:
    """``text`` with the file paths it writes taken out, and those paths (space-separated;
    "" when there are none): a word met only in a path names a file, so the answerer's
    scoring counts it less (``llm.extractive_score.FILE_PATH_WEIGHT``)."""
    paths = _FILE_PATH.findall(text)
    if not paths:
        return text, ""
    return _FILE_PATH.sub(" ", text), " ".join(paths)


def _terms(text: str) -> list[str]:
    folded = one_verbs(text)
    return [w for w in WORD.findall(folded) if w not in _STOP and len(w) > 1]


#: Bounds of ``Words``' memo of the pure word functions below (``_stem``, ``_meets``): one
#: answer stems every word of up to a dozen passages several times over and meets each
#: question stem with each of their words again per unit, the same few thousand words
#: and pairs, so a memo saves most of the answerer's time (the npm answers test spent
#: three quarters of its time here). Bounded so a long-lived provider keeps at most
#: these many entries (about 12 MB with every memo full, measured with tracemalloc), least
#: recently used first out.
STEM_MEMO = 65_536
MEET_MEMO = 131_072
#: Texts (a sentence, a heading, a title) whose stems are memoised: the units of the
#: answer being composed, and more.
TEXT_MEMO = 4_096
#: Term sets whose ``TermIndex`` is memoised (a unit's, a passage's, a heading's stems).
INDEX_MEMO = 1_024
#: Passages whose Markdown blocks are memoised (``Words.blocks``): an answer reads up to
#: a dozen, the provider composes twice per question over the first search's passages
#: (before and after its page-scoped reads), and the same chunks come back question
#: after question. A chunk is at most a few kB of text, its blocks about as much again.
PASSAGE_MEMO = 512


def _stems_with(stem: Callable[[str], str], text: str) -> frozenset[str]:
    return frozenset(stem(t) for t in _terms(text))


def _stem_sequence(stem: Callable[[str], str], text: str) -> tuple[str, ...]:
    """The stems of ``text``'s content words in the order it says them (``phrase_share``
    reads which stand side by side)."""
    return tuple(stem(t) for t in _terms(text))


def _stems_in(sequence: Callable[[str], tuple[str, ...]], text: str) -> frozenset[str]:
    """``_stems_with`` from the (memoised) ``sequence`` of ``text``: the same stems."""
    return frozenset(sequence(text))


def stems(text: str) -> frozenset[str]:
    """The stems of ``text``'s content words (``Words.stems`` memoises it)."""
    return _stems_with(_stem, text)


def _match_with(meets: Callable[[str, str], float], q: str, terms: frozenset[str]) -> float:
    """1.0 when the question's stem is among ``terms`` (or shares a long prefix with
    one, or is a synonym of one: ``SYNONYMS``), 0.5 when only their roots meet
    ("disconnect" / "reconnect"), else 0. ``meets`` is ``_meets`` or its memo."""
    if q in terms:
        return 1.0
    if _SYNONYM_OF.get(q, frozenset()) & terms:
        return 1.0
    best = 0.0
    for t in terms:
        met = meets(q, t)
        if met >= 1.0:
            return 1.0
        best = max(best, met)
    return best


def _match(q: str, terms: frozenset[str]) -> float:
    """``_match_with`` unmemoised."""
    return _match_with(_meets, q, terms)


def _probe(q: str) -> tuple[frozenset[str], str, bool]:
    """What ``TermIndex`` looks up for the question stem ``q``: the terms meeting it whole
    (itself, its synonyms, itself but for its last 1-3 letters, at least 5 long), its
    root ("" when shorter than 4 letters), and whether that root is ``q`` itself."""
    n = len(q)
    whole = {q, *_SYNONYM_OF.get(q, frozenset()), *(q[:k] for k in range(max(5, n - 3), n))}
    root = _root(q)
    return frozenset(whole), root if len(root) >= 4 else "", root == q


#: What ``TermIndex`` files one term under: its prefixes a shorter stem may be (up to 3
#: letters short, at least 5 long), its first 7 letters ("" when shorter), its root (""
#: when shorter than 4 letters) and whether that root is not the term itself.
TermKeys = tuple[tuple[str, ...], str, str, bool]


def term_keys(t: str) -> TermKeys:
    """``TermKeys`` of the term ``t`` (``Words.keys`` memoises it: a unit's index is built
    from the same few thousand words' keys answer after answer)."""
    root = _root(t)
    return (
        tuple(t[:k] for k in range(max(5, len(t) - 3), len(t))),
        t[:7] if len(t) >= 7 else "",
        root if len(root) >= 4 else "",
        root != t,
    )


class TermIndex:
    """``terms`` indexed by what ``_meets`` compares, so ``match(q)`` is ``_match(q,
    terms)`` in a few set look-ups, however many terms there are: their prefixes a
    shorter stem may be (``_heads``: up to 3 letters short, at least 5 long), their first
    7 letters (``_sevens``) and their roots (``_roots``: True where a term of that root is
    not the bare root). A made-up word met nothing after a scan of every word of every
    passage (~3.5 ms each, round 37); through this it costs the same as a real one.
    ``probe`` is ``_probe`` or its memo (``Words``)."""

    __slots__ = ("_heads", "_probe", "_roots", "_sevens", "terms")

    def __init__(
        self,
        terms: frozenset[str],
        probe: Callable[[str], tuple[frozenset[str], str, bool]] = _probe,
        keys: Callable[[str], TermKeys] = term_keys,
    ) -> None:
        self.terms = terms
        self._probe = probe
        heads: set[str] = set()
        sevens: set[str] = set()
        roots: dict[str, bool] = {}
        for t in terms:
            prefixes, seven, root, prefixed = keys(t)
            heads.update(prefixes)
            if seven:
                sevens.add(seven)
            if root:
                roots[root] = roots.get(root, False) or prefixed
        self._heads: Set[str] = heads
        self._sevens: Set[str] = sevens
        self._roots: Mapping[str, bool] = roots

    def match(self, q: str) -> float:
        whole, root, bare = self._probe(q)
        # ``_heads`` holds only prefixes of 5 letters or more, ``_sevens`` of exactly 7.
        if not whole.isdisjoint(self.terms) or q in self._heads or q[:7] in self._sevens:
            return 1.0
        # Only the roots meet ("disconnect"/"reconnect"): not a bare root with itself.
        prefixed = self._roots.get(root) if root else None
        return 0.5 if prefixed is not None and (prefixed or not bare) else 0.0


def _meets(q: str, t: str) -> float:
    """How one question stem meets one word's stem (``_match`` over a single word)."""
    if q == t or t in _SYNONYM_OF.get(q, frozenset()):
        return 1.0
    shorter, longer = sorted((len(q), len(t)))
    if shorter >= 5 and longer - shorter <= 3 and q[:shorter] == t[:shorter]:  # "configur"/"configure"
        return 1.0
    if shorter >= 7 and q[:7] == t[:7]:  # a long common prefix
        return 1.0
    root = _root(q)
    return 0.5 if len(root) >= 4 and root == _root(t) and (root != q or root != t) else 0.0


def _phrase_share_with(
    sequence: Callable[[str], tuple[str, ...]],
    stems: Callable[[str], frozenset[str]],
    meets: Callable[[str, str], float],
    index: Callable[[frozenset[str]], TermIndex],
    pairs: frozenset[tuple[str, str]],
    text: str,
) -> float:
    if not pairs:
        return 0.0
    said = sequence(text)
    # A pair whose either word the text never says is not said side by side: ruled out in
    # a look-up each, before any scan of the text's words.
    says = index(stems(text)).match
    found = 0
    for a, b in pairs:
        if says(a) < 1.0 or says(b) < 1.0:
            continue
        if any(meets(a, x) >= 1.0 and meets(b, y) >= 1.0 for x, y in itertools.pairwise(said)):
            found += 1
    return found / len(pairs)


def phrase_share(pairs: frozenset[tuple[str, str]], text: str) -> float:
    """The share of the question's adjacent content words (``Question.pairs``) that
    ``text`` also says side by side, in the same order: "Each document has an id, a
    bucket, … a content hash" says the question's "each document"; "… tables are cut
    … and keep their Markdown" says "keep" apart from anything else asked."""
    return _phrase_share_with(partial(_stem_sequence, _stem), stems, _meets, TermIndex, pairs, text)


def folded_words(text: str) -> tuple[str, ...]:
    """``text``'s words as written, folded, function words included (``said_in_a_row``)."""
    return tuple(WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def said_in_a_row(asked: tuple[str, ...], text: str, min_content: int) -> int:
    """The number of words in the longest run of the question's words (``asked``:
    ``folded_words`` of it) that ``text`` says one after the other as the question does,
    function words included, among the runs holding at least ``min_content`` content
    words; 0 when there is none. "Where is the per-user config file?" is said in a row
    by "per-user config file (`~/.npmrc`)", four words; "How do I set a value in the npm
    configuration from the command line?" by npm set's "Set a value in the npm
    configuration", seven."""
    return _said_in_a_row_in(asked, folded_words(text), min_content)


def _said_in_a_row_in(asked: tuple[str, ...], said: tuple[str, ...], min_content: int) -> int:
    """``said_in_a_row`` over the text's ``folded_words`` (``said``): the longest common run
    ending at each place the text says a word of the question, per word of the question
    - the dynamic programme over every (question word, text word) pair, visiting only
    the pairs that are the same word (a unit of 40 words against a question of 10 was
    400 steps for the few that meet). The order the pairs are visited in does not
    matter: the answer is the longest qualifying run of any pair."""
    if not asked or not said:
        return 0
    wanted = frozenset(asked)
    positions: dict[str, list[int]] = {}
    for j, word in enumerate(said):
        if word in wanted:
            positions.setdefault(word, []).append(j)
    if not positions:
        return 0
    best = 0
    previous: dict[int, int] = {}
    for i, word in enumerate(asked):
        current: dict[int, int] = {}
        for j in positions.get(word, ()):
            length = current[j + 1] = previous.get(j, 0) + 1
            if length > best and _content_count(asked[i + 1 - length : i + 1]) >= min_content:
                best = length
        previous = current
    return best


def _content_count(words: tuple[str, ...]) -> int:
    return sum(1 for w in words if w not in _STOP and len(w) > 1)


def coverage(question: frozenset[str], terms: frozenset[str]) -> float:
    if not question or not terms:
        return 0.0
    return sum(_match(q, terms) for q in question) / len(question)


def _blocks_of(text: str, first_of_document: bool) -> tuple[Block, ...]:
    """``parse_passage`` kept as a tuple, for ``Words.blocks``' memo: its blocks are
    copied out (``copied_blocks``) so that no caller shares one."""
    return tuple(parse_passage(text, first_of_document=first_of_document))


class Words:
    """The answerer's word work, memoised: ``stem`` (``STEM_MEMO`` entries), a question
    stem meeting a word (``MEET_MEMO``), a text's stems (``TEXT_MEMO``), a term set's
    ``TermIndex`` (``INDEX_MEMO``) and what it looks up for a stem (``STEM_MEMO``), each
    a bounded least-recently-used memo, so ``match``, ``coverage`` and ``phrase_share``
    are the pure functions' answers, only faster. One answer reads the same few thousand
    words and pairs many times over; the provider keeps one ``Words`` for its life (built
    with it in the app factory), so its answers share the memo and a process holds none
    outside it. The CPU cut of 2026-11-29 added the rest of the per-text work a unit's score repeats (its
    words in order and folded, its file paths, the names it writes in code) and a
    passage's Markdown blocks (``PASSAGE_MEMO``), which the provider parsed twice per
    question and again whenever a search found the chunk: ~40 % of the answerer's CPU
    (16.5-18.5 -> 9.9-10.8 ms an answer replayed), every answer unchanged."""

    __slots__ = (
        "_blocks",
        "beginnings",
        "code_parts",
        "folded",
        "index",
        "keys",
        "meets",
        "paths_apart",
        "probe",
        "sequence",
        "stem",
        "stems",
    )

    def __init__(self) -> None:
        self.stem: Callable[[str], str] = lru_cache(maxsize=STEM_MEMO)(_stem)
        self.meets: Callable[[str, str], float] = lru_cache(maxsize=MEET_MEMO)(_meets)
        #: A text's stems in order (``TEXT_MEMO``), and as a set.
        self.sequence: Callable[[str], tuple[str, ...]] = lru_cache(maxsize=TEXT_MEMO)(
            partial(_stem_sequence, self.stem)
        )
        self.stems: Callable[[str], frozenset[str]] = lru_cache(maxsize=TEXT_MEMO)(partial(_stems_in, self.sequence))
        #: A text's words as written, folded (``folded_words``, ``TEXT_MEMO``), for
        #: ``said_in_a_row`` and ``Question.terms``; and its file paths set apart
        #: (``apart_from_paths``).
        self.folded: Callable[[str], tuple[str, ...]] = lru_cache(maxsize=TEXT_MEMO)(folded_words)
        self.paths_apart: Callable[[str], tuple[str, str]] = lru_cache(maxsize=TEXT_MEMO)(apart_from_paths)
        #: The parts of the names a text writes in code (``code_parts``, ``TEXT_MEMO``).
        self.code_parts: Callable[[str], frozenset[str]] = lru_cache(maxsize=TEXT_MEMO)(code_parts)
        #: The beginnings of a question's stems (``beginnings``, ``INDEX_MEMO``).
        self.beginnings: Callable[[frozenset[str]], Mapping[str, frozenset[str]]] = lru_cache(maxsize=INDEX_MEMO)(
            beginnings
        )
        #: A term set's ``TermIndex`` (``INDEX_MEMO``): a unit's stems are met by every
        #: question stem, a passage's by each again; built from its terms' memoised keys.
        self.probe: Callable[[str], tuple[frozenset[str], str, bool]] = lru_cache(maxsize=STEM_MEMO)(_probe)
        self.keys: Callable[[str], TermKeys] = lru_cache(maxsize=STEM_MEMO)(term_keys)
        self.index: Callable[[frozenset[str]], TermIndex] = lru_cache(maxsize=INDEX_MEMO)(
            partial(TermIndex, probe=self.probe, keys=self.keys)
        )
        #: A passage's Markdown blocks (``PASSAGE_MEMO``; ``blocks``).
        self._blocks: Callable[[str, bool], tuple[Block, ...]] = lru_cache(maxsize=PASSAGE_MEMO)(_blocks_of)

    def blocks(self, text: str, *, first_of_document: bool) -> list[Block]:
        """``parse_passage(text, first_of_document=…)``, parsed once per text and copied out."""
        return copied_blocks(self._blocks(text, first_of_document))

    def match(self, q: str, terms: frozenset[str]) -> float:
        """``_match(q, terms)``, through ``terms``' memoised ``TermIndex``."""
        return self.index(terms).match(q)

    def coverage(self, question: frozenset[str], terms: frozenset[str]) -> float:
        if not question or not terms:
            return 0.0
        match = self.index(terms).match
        return sum(match(q) for q in question) / len(question)

    def phrase_share(self, pairs: frozenset[tuple[str, str]], text: str) -> float:
        return _phrase_share_with(self.sequence, self.stems, self.meets, self.index, pairs, text)

    def said_in_a_row(self, asked: tuple[str, ...], text: str, min_content: int) -> int:
        """``said_in_a_row``, through ``text``'s memoised ``folded_words``."""
        return _said_in_a_row_in(asked, self.folded(text), min_content)


__all__ = [
    "SYNONYMS",
    "WORD",
    "TermIndex",
    "Words",
    "apart_from_paths",
    "coverage",
    "folded_words",
    "phrase_share",
    "said_in_a_row",
    "stems",
]
