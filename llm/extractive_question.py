"""What a question asks, for the offline answerer (``llm.extractive_answer``): its
content words, stemmed (``llm.extractive_words``, which also says how a passage's words
meet them: re-exported here); the words adjacent ones join into ("log in" is what
``npm-login`` is named by) and the phrasal verbs that do not mean their verb alone ("log
in" is not "logs"); whether it asks for several things ("which events …"); and what kind
of thing it wants ("where" a place, "how many" an amount), read by the patterns of
``llm.extractive_forms``.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from llm.extractive_forms import (
    ACTION,
    ASKS,
    BEFORE_VERB,
    CAUSATIVE,
    COMPOUND,
    DEFINITION,
    ENUMERATION,
    EXAMPLES,
    HOW_MANY,
    HOW_TO,
    NAME,
    NEGATED_CASE,
    NEGATED_CONDITION,
    NEGATION,
    NUMBER,
    PARTICLES,
    RECIPROCAL,
    WANTS,
    WHICH_KIND,
    WHICH_MANY,
    YES_NO,
    asking_clause,
)
from llm.extractive_words import (
    _STOP,
    WORD,
    Words,
    _match,
    _terms,
    coverage,
    folded_words,
    one_verbs,
    phrase_share,
    stems,
)
from llm.extractive_written_apart import written_apart

#: How much more a named word counts than another word of the question.
NAME_WEIGHT = 2.0
#: How much more a question word said by one passage counts than one said by every
#: passage being answered from (``Question.weighed_by``; in between, by the share of
#: passages not saying it). Replayed over every set's captured passages: 0.15-0.25 gain
#: two answers and lose none; 0.3 and more lose "how do I turn on two-factor
#: authentication?" (npm-trust's "2FA enabled on account" item, saying the rarer
#: "account", outscores npm profile's ``enable-2fa``); a logarithmic weight loses more.
RARITY_WEIGHT = 0.2
#: How much a word of a follow-up's topic counts (``llm.extractive_followup.about``):
#: the earlier question's words a follow-up leans on ("How big can it be?" after "How do
#: I add a file to one conversation?") say what it is about, but a passage saying what
#: the follow-up itself asks comes first. 0.2-0.8 gave the same answers (round 24).
TOPIC_WEIGHT = 0.5
#: The content words a run of the question's words must hold to count as saying what
#: the question says (``Question.said_in_a_row``): "the per-user config file" holds
#: four, "remove a package from" two (a page's summary "Remove a package from the
#: registry" says no more of "how do I remove a package from my project?" than
#: npm uninstall's "Remove a package.").
MIN_RUN_CONTENT = 3
#: The shortest part of a question's word the passages write apart ("agent" + "chat"):
#: as the knowledge search's split (``knowledge.query_terms.MIN_SPLIT_PART``).
MIN_APART_PART = 3
#: "How do I skip the questions when creating a package.json with npm init?": what a
#: how-to asks to do is the action right after "how do I", up to the first word that
#: opens its circumstances ("when …", "with …", "from …"); the rest says where or when.
#: The action's words count this much more than the circumstances' ("You can also use
#: `-y`/`--yes` to skip the questionnaire" over "… creating or updating `package.json`"
#: on npm init's page). 1.1-1.5 change the same answer and lose none; 1.7 loses two
#: ("resume a stream after a disconnect", "audit only fail for …").
ACTION_WEIGHT = 1.3


def weighted_coverage(
    question: frozenset[str], terms: frozenset[str], names: frozenset[str], action: frozenset[str] = frozenset()
) -> float:
    """``coverage`` with the question's named words (``Question.names``) counting
    ``NAME_WEIGHT`` times and a how-to's action (``Question.action``) ``ACTION_WEIGHT``."""
    if not names and not action:
        return coverage(question, terms)
    if not question or not terms:
        return 0.0
    weights = {q: NAME_WEIGHT if q in names else ACTION_WEIGHT if q in action else 1.0 for q in question}
    return sum(w * _match(q, terms) for q, w in weights.items()) / sum(weights.values())


@dataclass(frozen=True, slots=True)
class Question:
    """What the answerer knows of the question: its stems, the words adjacent ones join
    into (a unit holding ``login`` holds the question's "log in"), whether it asks for
    several things and what kind of thing it wants."""

    stems: frozenset[str]
    joined: dict[str, str]
    #: ``{verb: particle}`` of the question's phrasal verbs ("log in"): the verb alone
    #: ("logs") is another word.
    phrasal: dict[str, str]
    enumeration: bool
    focus: str | None  # the plural noun of "which events …"
    wants: re.Pattern[str] | None
    #: "How do I …": the answer should show the command that does it.
    how_to: bool = False
    #: "What does … do / what is …": asks what a thing is or does, which a document
    #: named by the question says first.
    definition: bool = False
    #: The question asks about a negated case ("when there is no … script").
    negated: bool = False
    #: "How many <noun>": a number of it, as a pattern ("3 chunks", "one retry").
    counted: re.Pattern[str] | None = None
    #: The stems of the words the question writes as a name (see ``NAME``).
    names: frozenset[str] = frozenset()
    #: The question's adjacent content words ("each document", "keep each"): a unit
    #: that says them side by side says what the question says (``phrase_share``).
    pairs: frozenset[tuple[str, str]] = frozenset()
    #: The stems of what a how-to asks to do (``ACTION``), less its names.
    action: frozenset[str] = frozenset()
    #: Each underscore identifier of the question (``COMPOUND``), folded, as a pattern
    #: finding it whole, with the stems only it gives the question (not also said apart).
    compounds: tuple[tuple[re.Pattern[str], frozenset[str]], ...] = ()
    #: The stems of the kind of thing "which …" asks for by name (``WHICH_KIND``).
    kind: frozenset[str] = frozenset()
    #: The stem of the word before the focus of "which <word> <things>" ("language" of
    #: "which language models can I use?"): it says which of the things.
    focus_modifier: str | None = None
    #: The passages say the focus but never with ``focus_modifier`` (``modifier_alone_in``):
    #: where a unit says it, it is another sense ("`filters` is one small language"), so
    #: it is not the question's word there (``terms``).
    modifier_alone: bool = False
    #: How much each stem counts for its rarity among the passages being answered from
    #: (``weighed_by``); a stem not here counts 1.
    rarity: Mapping[str, float] = field(default_factory=dict)
    #: ``{(left, right): the question's stem}`` for a word of the question the passages
    #: write apart as two words ("agentchat" / "agent chat": ``written_apart``).
    apart: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: The word a question of place, time, party, choice or reason opens with ("where",
    #: "when", "who", "which", "why"; ``ASKS``), folded, else "".
    asks: str = ""
    #: The stems of a follow-up's topic (``llm.extractive_followup.about``): the earlier
    #: question's words the follow-up does not say, among ``stems`` but counting
    #: ``TOPIC_WEIGHT``.
    topic: frozenset[str] = frozenset()
    #: A follow-up asking only by its form of what the earlier question was about ("How
    #: big can it be?"): only a unit holding what the form wants answers it.
    form_only: bool = False
    #: The question's words as written, folded, function words included: a unit saying
    #: a run of them in a row says what the question says (``said_in_a_row``).
    spoken: tuple[str, ...] = ()
    #: A yes/no question's words after its auxiliary and article ("unscoped package be
    #: made private" of "Can an unscoped package be made private?"), its subject first;
    #: () for any other question (``llm.extractive_about.says_of_subject``).
    after_auxiliary: tuple[str, ...] = ()
    #: The answerer's memoised word work (``llm.extractive_words.Words``) this question
    #: and every passage read against it go through.
    words: Words = field(default_factory=Words, compare=False, repr=False)
    #: ``terms`` of each text read against this question so far: a unit's text is read by
    #: its score, its coverage and several signals, each of which asked for its terms. Per
    #: question object (a ``replace`` starts a new one: its terms may differ), so it lives
    #: as long as one answer's scoring and holds the texts of its passages.
    _terms_of: dict[str, frozenset[str]] = field(default_factory=dict, init=False, compare=False, repr=False)

    @classmethod
    def of(cls, question: str, memo: Words | None = None) -> Question:
        """The question read; ``memo`` is the answerer's ``Words`` (a fresh one if none)."""
        w = memo if memo is not None else Words()
        stem, stems_of = w.stem, w.stems
        words = WORD.findall(unicodedata.normalize("NFKC", question).casefold())
        joined: dict[str, str] = {}
        phrasal: dict[str, str] = {}
        for at, (left, right) in enumerate(itertools.pairwise(words)):
            if (
                left.isalpha()
                and right.isalpha()
                and left not in _STOP
                and len(left + right) >= 5
                and (right not in _STOP or right in PARTICLES)
            ):
                joined.setdefault(stem(left + right), stem(left))
                # A verb stands first, after a subject ("how do I log in") or after a
                # causative verb's object when the particle ends the question ("make
                # users log in": the Logs section's "logs" is not what it asks).
                after_object = at + 2 == len(words) and at >= 2 and words[at - 2] in CAUSATIVE
                if right in PARTICLES and (at == 0 or words[at - 1] in BEFORE_VERB or after_object):
                    phrasal.setdefault(stem(left), right)
        form = asking_clause(question)
        many = WHICH_MANY.search(form)
        focus = stem((many.group("one") or many.group("two") or many.group("what")).casefold()) if many else None
        modifier = many.group(0).split()[1].casefold() if many and many.group("two") else None
        wants = next((unit for _, asks, unit in WANTS if asks.search(form)), None)
        enumeration = bool(many) or bool(ENUMERATION.search(form))
        how_to = HOW_TO.search(form) is not None
        definition = DEFINITION.search(form) is not None
        negated = NEGATED_CASE.search(question) is not None
        noun = HOW_MANY.search(form)
        counted = None
        if noun is not None:
            head = stem(noun.group("noun").casefold())
            # The number, at most one word before the noun ("3 chunks", "3 more chunks").
            noun_form = re.escape(head[:-1]) + "(?:y|ies)" if head.endswith("y") else re.escape(head)
            counted = re.compile(rf"\b{NUMBER}\s+(?:[\w-]+\s+)?{noun_form}", re.IGNORECASE)
        names = frozenset(s for m in NAME.finditer(question) for s in stems_of(m.group(0)))
        pairs = frozenset(itertools.pairwise(stem(t) for t in _terms(question)))
        # "how do I turn on X" asks to enable X: the particle is the verb's, not the
        # start of the action's circumstances ("on the registry").
        acts = ACTION.match(one_verbs(form))
        action = stems_of(acts.group("action")) - names if acts is not None else frozenset()
        folded = unicodedata.normalize("NFKC", question).casefold()
        apart = stems_of(COMPOUND.sub(" ", folded))
        compounds = tuple(
            (re.compile(rf"(?<!\w){re.escape(m.group(0))}(?!\w)"), stems_of(m.group(0)) - apart)
            for m in COMPOUND.finditer(folded)
        )
        return cls(
            stems_of(RECIPROCAL.sub(" ", EXAMPLES.sub(" ", question))) or stems_of(question),
            joined,
            phrasal,
            enumeration,
            focus,
            wants,
            how_to,
            definition,
            negated,
            counted,
            names,
            pairs,
            action,
            tuple(c for c in compounds if c[1]),
            stems_of(next((g for g in k.groups() if g), "")) if (k := WHICH_KIND.search(form)) else frozenset(),
            focus_modifier=stem(modifier) if modifier and modifier not in _STOP else None,
            asks=a.group(1).casefold() if (a := ASKS.match(form)) else "",
            words=w,
            spoken=folded_words(question),
            after_auxiliary=folded_words(y.group("rest")) if (y := YES_NO.match(form)) else (),
        )

    def terms(self, text: str) -> frozenset[str]:
        """The stems of ``text``, with the question's words a joined word stands for, and
        without a phrasal verb of the question met without its particle."""
        known = self._terms_of.get(text)
        if known is None:
            known = self._terms_of[text] = self._read_terms(text)
        return known

    def _read_terms(self, text: str) -> frozenset[str]:
        """``terms`` of ``text``, read (``terms`` keeps what it read)."""
        found = self.words.stems(text)
        extra = {head for word, head in self.joined.items() if word in found}
        if self.phrasal and found & self.phrasal.keys():
            stem = self.words.stem
            words = self.words.folded(text)
            met = {stem(a) for a, b in itertools.pairwise(words) if self.phrasal.get(stem(a)) == b}
            found = found - (self.phrasal.keys() - met)
        found = found - self.split_names(text)
        if self.modifier_alone and self.focus_modifier in found and self.focus not in found:
            found = found - {self.focus_modifier}
        if self.apart:
            words = self.words.folded(text)
            extra |= {self.apart[pair] for pair in itertools.pairwise(words) if pair in self.apart}
        return found | extra if extra else found

    def asked_apart(self) -> frozenset[str]:
        """The stems of the words the passages write apart for a word of the question
        ("agent" and "chat" for "agentchat"): asked too, as the search asks for them."""
        stem = self.words.stem
        return frozenset(stem(part) for pair in self.apart for part in pair)

    def written_apart(self, texts: Iterable[str]) -> Question:
        """The question with each of its words that the passages write as two adjacent
        words ("what is agentchat?" where the overview's title and opening say "the agent
        chat service") met by those two words wherever they stand side by side, as the
        knowledge search splits a joined word the documents write apart. A word of
        letters only, cut into parts of ``MIN_APART_PART`` letters or more."""
        wanted = frozenset(q for q in self.stems if q.isalpha() and len(q) >= 2 * MIN_APART_PART)
        apart = written_apart(wanted, texts, self.words.stem, MIN_APART_PART, self.words.folded) if wanted else {}
        return replace(self, apart=apart) if apart else self

    def modifier_alone_in(self, texts: Iterable[str]) -> Question:
        """The question knowing whether the passages (``texts``) say its focus but never
        with the word before it: "Which language models can I use?" over passages saying
        "model" on many pages and "language" only as the search tools' filter language
        (its rarest word, so that sentence led the answer). Where a passage says both
        ("typed fields" for "which field types …"), or none says the focus ("which file
        formats …" over pages listing the files read), the word counts wherever it is said."""
        if self.focus_modifier is None or self.focus is None:
            return self
        said = [self.words.stems(text) for text in texts]
        alone = any(self.focus in terms for terms in said) and not any(
            self.focus in terms and self.focus_modifier in terms for terms in said
        )
        return replace(self, modifier_alone=alone) if alone != self.modifier_alone else self

    def split_names(self, text: str) -> frozenset[str]:
        """The stems of the question's underscore identifiers that ``text`` says only
        apart, not as the identifier (``COMPOUND``): they are not the name there."""
        if not self.compounds:
            return frozenset()
        folded = unicodedata.normalize("NFKC", text).casefold()
        out: set[str] = set()
        for whole, parts in self.compounds:
            if whole.search(folded) is None:
                out |= parts
        return frozenset(out)

    def naming(self, named: frozenset[str]) -> Question:
        """The question with the stems ``named`` counting as its names (``NAME_WEIGHT``,
        out of its action): a capitalised name it asks about ("Gemini" of "how do I
        connect Gemini?", ``llm.extractive_subject.proper_names_asked``) is what the answer
        must say, more than the common verb beside it, which passages about something
        else say too ("Servers connect in the background", ``connect_timeout_s``)."""
        named = named & self.stems
        if not named or named <= self.names:
            return self
        return replace(self, names=self.names | named, action=self.action - named)

    def weighed_by(self, passages: Iterable[frozenset[str]]) -> Question:
        """The question with each of its stems weighed by how few of the passages say it
        (``RARITY_WEIGHT``): of the passages found for "which model names does the
        OpenAI-compatible face list?", every one says "OpenAI-compatible" and "face";
        the words that tell them apart ("model", "list") are the rarer ones, and a unit
        saying those is the answer. A stem no passage says keeps its weight (it tells
        none apart), and so do all with fewer than two passages."""
        said = list(passages)
        if len(said) < 2:
            return self
        rarity: dict[str, float] = {}
        indexes = [self.words.index(terms).match for terms in said]
        for q in self.stems:
            saying = sum(1 for match in indexes if match(q) >= 1.0)
            if saying:
                rarity[q] = 1.0 + RARITY_WEIGHT * (1.0 - saying / len(said))
        return replace(self, rarity=rarity)

    def covers(self, terms: frozenset[str], context: frozenset[str]) -> tuple[float, float]:
        """``weighted_coverage`` of ``terms``, and of ``terms | context``, in one pass: a
        stem met by the text is met by the text with its context, so each question stem
        is matched against the (small) context only when the text does not meet it."""
        total = own = around = 0.0
        in_terms = self.words.index(terms).match
        in_context = self.words.index(context).match
        for q in self.stems:
            weight = NAME_WEIGHT if q in self.names else ACTION_WEIGHT if q in self.action else 1.0
            weight *= self.rarity.get(q, 1.0) * (TOPIC_WEIGHT if q in self.topic else 1.0)
            met = in_terms(q) if terms else 0.0
            total += weight
            own += weight * met
            around += weight * (met if met >= 1.0 or not context else max(met, in_context(q)))
        if not total:
            return 0.0, 0.0
        return own / total, around / total

    def said_in_a_row(self, text: str) -> int:
        """The words of the longest run of the question's own words ``text`` says in a
        row, at least ``MIN_RUN_CONTENT`` of them content words (``said_in_a_row``)."""
        return self.words.said_in_a_row(self.spoken, text, MIN_RUN_CONTENT)

    def holds_wanted(self, text: str) -> bool:
        return self.wants is not None and self.wants.search(text) is not None

    def holds_count(self, text: str) -> bool:
        """The text states a number of what a "how many" question counts."""
        return self.counted is not None and self.counted.search(text) is not None

    def names_focus(self, text: str) -> bool:
        """The text names what a "which <things>" question asks for ("the operators …")."""
        return self.focus is not None and self.focus in self.terms(text)


__all__ = [
    "NEGATED_CONDITION",
    "NEGATION",
    "TOPIC_WEIGHT",
    "WORD",
    "Question",
    "coverage",
    "phrase_share",
    "stems",
    "weighted_coverage",
]
