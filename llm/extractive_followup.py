"""Follow-up questions for the offline answerer (``llm.extractive``).

A person chatting asks "How do I resume a stream after a disconnect?", then "And on the
AI SDK face?", "How big can it be?" or "What about PostgreSQL?": the second question
leans on the first for its topic, and searched and answered on its own words it loses
it ("big" alone finds nothing about attachments). The agent sends the provider the
whole conversation, so the answerer can read the earlier questions as a model would.

A question is a follow-up when it refers back (a pronoun or demonstrative whose thing
is not in the question before it: "its keywords", "does that work", "this one"), opens
elliptically ("and …?", "what about …?"), or has no content word to stand alone on
("How big can it be?", "What is the default?").
A demonstrative before a noun names the question's own thing ("What are those 503
responses during shutdown?", "Is this project open source?"), and a bare "this" is the
thing the person is asking about ("Does this work on Windows?"): neither reads as a
follow-up, as a question with one noun of its own does not ("What is the license?").
Its topic is the previous user question's content words (and, when that one was a
follow-up too, its own topic's, a few questions back at most). The search then asks
for the follow-up's words with the topic's after them, and once more for the
follow-up alone, so that what it asks keeps its own search; the answer weighs the
topic's words below the follow-up's (``llm.extractive_question.TOPIC_WEIGHT``), so a
passage saying what the follow-up asks comes first. A question that stands alone is
read exactly as in a new conversation: no topic, one search.

The rules are about the form of English questions, never about particular questions
or documents.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace

from llm.extractive_long import MAX_QUERY_CHARS, SENTENCE_GAP, search_text
from llm.extractive_question import Question
from llm.extractive_words import _STOP, WORD, _terms
from llm.types import Message

#: An opening that continues the previous question instead of asking a new one: "And on
#: the AI SDK face?", "What about PostgreSQL?", "But with several workers?".
_ELLIPTICAL = re.compile(
    r"^\W*(?:(?:and|but|or|also|plus)\b|(?:what|how)\s+about\b|(?:the\s+)?same\s+(?:for|with|on|in)\b)",
    re.IGNORECASE,
)
#: Pronouns whose thing is said before the question ("How big can it be?", "What happens
#: to its keywords?"). One that follows a content word of the question refers inside it
#: ("Where does npm store its cache?", "How do users change their password?").
_PRONOUNS = frozenset({"it", "its", "itself", "they", "them", "their", "theirs", "themselves"})
_DEMONSTRATIVES = frozenset({"this", "that", "these", "those"})
#: "these"/"those" before a plural noun (a word of its own between, "those 503 responses")
#: are determiners of the thing the question names; standing alone ("Are these kept?")
#: they refer back.
_PLURAL_DEMONSTRATIVES = frozenset({"these", "those"})
#: Nouns that stand in for a thing named elsewhere ("this one", "these ones", "that
#: thing"), and adjectives standing as a noun phrase's head, their noun left out ("the
#: default", "the same", "the other"): after a demonstrative or as a question's only
#: content they name nothing of their own.
_STAND_INS = frozenset(
    "one ones thing things stuff kind sort type way part default defaults same other others rest former latter".split()
)
#: "that" is a demonstrative where a noun phrase stands: after a preposition ("for
#: that"), an auxiliary ("does that work"), first, or last ("how do I change that?");
#: elsewhere it joins a clause ("make sure that …", "the file that …").
_BEFORE_THAT = frozenset(
    "about for with of in on from to by like after before without into over under at is does do did was "
    "can could will would should change set use configure turn".split()
)
#: "it" that stands for no thing: "is it possible to …", "how long does it take to …".
_DUMMY_IT = frozenset(
    "possible necessary true safe ok okay better best worth enough hard easy needed required recommended "
    "mandatory take takes took".split()
)
#: Words of a question's form that say nothing of its topic ("What happens to …", "Does
#: that work …"): not content words when counting whether a question stands alone.
_FORM = frozenset(
    "happen happens happened work works worked way ways tell know want need needs make sure mean means "
    "possible also else instead still really exactly please thing things one ones "
    # the degree "how …" asks about: "how big", "how long", "how many"
    "big large long many much often far old fast small soon "
    "may might must shall".split()
)
#: Earlier questions a topic reaches back through when each was a follow-up too.
MAX_TOPIC_DEPTH = 3


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A follow-up question and what it leans on: ``topic`` is the earlier question(s)
    whose words give it its subject, latest first; ``elliptical`` says it opens with
    "and …" / "what about …" and so asks what the earlier question asked."""

    question: str
    topic: str
    elliptical: bool

    def search_query(self) -> str:
        """The follow-up's words, then the topic's content words it does not say."""
        own = set(_terms(self.question))
        extra: list[str] = []
        for word in _terms(self.topic):
            if word not in own and word not in _FORM and word not in extra:
                extra.append(word)
        return f"{search_text(self.question.strip())} {' '.join(extra)}".strip()[:MAX_QUERY_CHARS]


def _words(text: str) -> list[str]:
    return WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def own_words(question: str) -> list[str]:
    """The question's content words: neither function words nor words of its form."""
    return [w for w in _terms(question) if w not in _FORM]


def _names_a_thing(word: str) -> bool:
    """A word that can be (part of) a noun phrase of the question's own: neither a
    function word, nor a word of the question's form, nor a stand-in."""
    return len(word) > 1 and word not in _STOP and word not in _FORM and word not in _STAND_INS


def _plural(word: str) -> bool:
    """A plural noun, as English marks most: "settings", "responses" (not "process")."""
    return _names_a_thing(word) and word.endswith("s") and not word.endswith("ss")


def _demonstrative_refers_back(words: list[str], at: int) -> bool:
    """Whether ``words[at]``, a "this", "these", "those" or "that", points at a thing said
    before the question. Before a stand-in ("this one", "that default") it does. Before a
    noun of its own ("this service", "those 503 responses", "these settings for …") it is
    the determiner of a thing the question names. A bare "this" ("use this with X", "does
    this work") is what the person is asking about - the project in front of them: in a
    first question there is nothing else for it to be, and the same question later in a
    conversation means the same. A bare "these"/"those" refers back ("Are these kept?");
    "that" does where a noun phrase stands (after a preposition, an auxiliary or a verb
    taking an object, first or last), elsewhere it joins a clause ("the file that …")."""
    word, after = words[at], words[at + 1 : at + 3]
    if after and (after[0] in _STAND_INS or (len(after) > 1 and _names_a_thing(after[0]) and after[1] in _STAND_INS)):
        return word != "that" or at == 0 or words[at - 1] in _BEFORE_THAT
    if word == "this":
        return False
    if word in _PLURAL_DEMONSTRATIVES:
        if not after:
            return True
        return not (_plural(after[0]) or (len(after) > 1 and _names_a_thing(after[0]) and _plural(after[1])))
    return word == "that" and (at == 0 or at == len(words) - 1 or words[at - 1] in _BEFORE_THAT)


def refers_back(question: str) -> bool:
    """The question says "it", "its", "those", "for that", "this one" … of a thing it
    does not name: the thing is in the conversation before it."""
    # The sentence asking: an earlier sentence of the same message says its own context
    # ("My plugin needs a host library next to it. How do I declare that?").
    asking = SENTENCE_GAP.split(question.strip())[-1]
    if len(asking) < len(question.strip()):
        return False
    words = _words(asking)
    for at, word in enumerate(words):
        if word == "it" and at + 1 < len(words):
            after = words[at + 1 : at + 3]
            if after[0] in _DUMMY_IT or (after[0] in {"is", "s", "be"} and after[1:] and after[1] in _DUMMY_IT):
                continue  # "is it possible to …": no thing
        if word in _PRONOUNS and not own_words(" ".join(words[:at])):
            return True  # nothing of the question before it: its thing is said earlier
        if word in _DEMONSTRATIVES and _demonstrative_refers_back(words, at):
            return True
    return False


def elliptical(question: str) -> bool:
    """The question opens by continuing another: "and …?", "what about …?"."""
    return _ELLIPTICAL.match(question) is not None


def too_short(question: str) -> bool:
    """No content word to stand alone on: none at all ("How long?", "Why?"), only the
    words of a form ("How big can it be?"), or only a noun phrase's head whose noun is
    left out ("What is the default?": the default of what?). One noun of its own is a
    question of its own ("What is the license?", "What is agentchat?")."""
    return all(w in _STAND_INS for w in own_words(question))


def is_follow_up(question: str) -> bool:
    """The question leans on an earlier one: it refers back, opens elliptically, or has
    no content word to stand alone on."""
    return elliptical(question) or refers_back(question) or too_short(question)


def earlier_questions(messages: Sequence[Message], start: int) -> list[str]:
    """The user's questions before index ``start``, latest first: user messages with
    text, neither tool results nor the agent's own reminders."""
    out: list[str] = []
    for m in reversed(messages[:start]):
        if m.role == "user" and m.content and not m.tool_results and not m.reminder:
            out.append(m.content)
    return out


def follow_up_of(question: str, earlier: Sequence[str]) -> FollowUp | None:
    """``question`` as a follow-up of the ``earlier`` questions (latest first), or None
    when it stands alone or nothing came before it. The topic is the previous question,
    and the one before it while each was a follow-up too (at most ``MAX_TOPIC_DEPTH``)."""
    if not earlier or not question.strip() or not is_follow_up(question):
        return None
    topic: list[str] = []
    for previous in earlier[:MAX_TOPIC_DEPTH]:
        topic.append(previous)
        if not is_follow_up(previous):
            break
    return FollowUp(question, "\n".join(topic), elliptical(question))


def about(question: Question, follow: FollowUp) -> Question:
    """``question`` read as the follow-up ``follow`` of the earlier question(s) it leans
    on: the topic's words it does not say join its own, counting
    ``llm.extractive_question.TOPIC_WEIGHT`` (``Question.topic``). A follow-up with no
    content word of its own, only a form ("How big can it be?", "How long?"), is the
    topic asked in that form, and what the form wants (an amount) is the answer
    (``Question.form_only``). An elliptical follow-up ("And on the AI SDK face?", "What
    about PostgreSQL?") asks what the topic asked (a how-to, a place), unless its own
    form says otherwise."""
    earlier = Question.of(follow.topic, question.words)
    if not earlier.stems:
        return question
    own_form = question.how_to or question.definition or question.wants is not None or question.enumeration
    inherit = follow.elliptical and not own_form
    if not question.stems or not own_words(follow.question):
        form = earlier if inherit else question
        return replace(
            earlier,
            how_to=form.how_to,
            definition=form.definition,
            wants=form.wants,
            enumeration=form.enumeration,
            negated=question.negated,
            counted=question.counted,
            form_only=True,
        )
    match = question.words.match
    extra = frozenset(t for t in earlier.stems if match(t, question.stems) < 1.0)
    if not extra:
        return question
    out = replace(question, stems=question.stems | extra, topic=extra)
    if inherit:
        out = replace(out, how_to=earlier.how_to, definition=earlier.definition, wants=earlier.wants)
    return out


__all__ = [
    "FollowUp",
    "about",
    "earlier_questions",
    "elliptical",
    "follow_up_of",
    "is_follow_up",
    "own_words",
    "refers_back",
    "too_short",
]
