"""The forms of English questions the offline answerer reads (``llm.extractive_question``):
patterns over a question's words that say what it asks for by its form ("where" a place,
"how many" an amount, "how do I …" a how-to, "which events …" several things), the
names it writes as one, the examples it gives, and the negated cases it asks about - and
the patterns telling a passage's sentence of a negated case. Kept apart from
``Question``, which reads a question with them, so each says one thing: what a form is,
and what a question made of forms and words asks.
"""

from __future__ import annotations

import re

#: "which events (does …)", "which file formats does …": a plural noun right after
#: "which", or one word later when an auxiliary or the end follows it ("which embedder
#: works …" asks for one thing); and "what models can I use?", "what events are …": a
#: plural noun right after "what" with a plural's auxiliary after it ("what does …",
#: "what happens when …" ask for no things).
WHICH_MANY = re.compile(
    r"^\s*(?:which\s+(?:(?P<one>[a-z]+s)\b|[a-z]+\s+(?P<two>[a-z]+s)(?=\s+(?:do|does|did|are|is|can|could|should"
    r"|must|will|would|were|have|has)\b|\s*[?.]?\s*$))"
    r"|what\s+(?P<what>[a-z]+s)(?=\s+(?:do|did|are|can|could|should|must|will|would|were|have)\b))",
    re.IGNORECASE,
)
#: "Which full-text engine does …", "which tokenizer …": the kind of thing asked for by
#: name, up to three words before the question's verb (or the one word after "which").
WHICH_KIND = re.compile(
    r"^\s*which\s+(?:(?P<kind>[\w.-]+(?:\s+[\w.-]+){0,2}?)(?=\s+(?:do|does|did|is|are|was|were|can|could"
    r"|should|must|will|would|has|have)\b)|(?P<word>[\w.-]+))",
    re.IGNORECASE,
)
#: The opening word of a question asking for a place, a time, a party, a choice or a
#: reason. Not "how" or "what", which open how-tos and definitions as well.
ASKS = re.compile(r"^\W*(where|when|who|whom|whose|which|why)\b", re.IGNORECASE)
#: A yes/no question: an auxiliary first, then (after an article or possessive) its
#: subject and the rest ("Can an unscoped package be made private?").
YES_NO = re.compile(
    r"^\s*(?:can|could|is|are|does|do|will|should|may|must)\s+(?:(?:the|a|an|my|your|its|their)\s+)?(?P<rest>.+)$",
    re.IGNORECASE,
)
ENUMERATION = re.compile(r"^\s*(?:what\s+are\b|list\b|name\s+the\b)", re.IGNORECASE)
#: A number followed by one of these counts nothing: "HTTP 204 on reconnect", "HTTP 200
#: with the … content type" are codes, not amounts ("800 characters", "15 seconds" are).
_FUNCTION_WORDS = "(?:on|with|to|in|of|for|and|or|the|is|are|was|at|by|from|if|when|as|an|so|but|then)"
#: What a question asks for by its form, and what a unit holding it looks like: "who"
#: wants a party (an owner, a user); "where" a place (a path: ``~/.npm``, ``{prefix}/lib``,
#: ``/etc/npmrc``), "how many / how large / how often …" an amount (a number with its unit: "800 characters", "15
#: seconds", "3 to 10"). Of the units that cover the question alike, the one that holds
#: what is asked for is the answer; the other only talks about the subject.
WANTS = (
    (
        "place",
        re.compile(r"^\s*where\b", re.IGNORECASE),
        re.compile(r"(?:^|[\s`'\"(])(?:~|\.{1,2}/|/[\w.]|\$\w+/|\{\w+\}/|%\w+%|[A-Za-z]:\\)[^\s`'\")]*"),
    ),
    (
        "amount",
        re.compile(r"^\s*(?:how\s+(?:many|much|large|big|long|often|far|old|fast|small)|what\s+size)\b", re.IGNORECASE),
        re.compile(
            rf"(?<![\w.@=])\d+(?:[.,]\d+)?(?:\s?%|\s?(?:to|-|–)\s?\d+|\s(?!{_FUNCTION_WORDS}\b)[a-z]{{2,}}\b"
            # A unit's symbol: "(20 s)", "(250 ms)", "(5 MiB)", "1 MiB".
            r"|\s?(?:s|ms|min|h|[KMGT]i?B)\b)"
            # A duration in words: "(a day by default)", "an hour".
            r"|\b(?i:an?|one|half\s+an?)\s+(?:second|minute|hour|day|week|month|year)\b",
        ),
    ),
    # "who (may / can …)" wants a party: the owner, an admin, any user, the caller.
    (
        "party",
        re.compile(r"^\s*who(?:m|se)?\b", re.IGNORECASE),
        re.compile(
            r"\b(?:owners?|users?|admins?|administrators?|callers?|maintainers?|authors?|members?"
            r"|collaborators?|anyone|everyone|nobody|no one)\b",
            re.IGNORECASE,
        ),
    ),
)

#: "how many chunks …": the thing counted. A unit stating a number of it ("at most 3
#: chunks per document") answers; another amount beside it ("800 characters") does not.
HOW_MANY = re.compile(r"^\s*how\s+many\s+(?P<noun>[a-z]{3,})\b", re.IGNORECASE)
NUMBER = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|twelve|a\s+single)"

#: "How do I …", "how can we …", "how to …": the question asks how a thing is done, and
#: a command is how it is done (see ``Question.how_to``).
HOW_TO = re.compile(r"^\s*how\s+(?:(?:do|does|can|could|should|would|may|must)\s+(?:i|we|you|one)|to)\b", re.IGNORECASE)

#: "What does npm rebuild run?", "what is package-lock.json for?": asks what a thing is
#: or does (see ``Question.definition``).
DEFINITION = re.compile(r"^\s*what\s+(?:does|do|is|are)\b", re.IGNORECASE)

#: A negation: a sentence about a negated case ("if it does not have a restart script …").
NEGATION = re.compile(r"\b(?:no|not|without|never|none|nothing|unless|omitted|cannot)\b|n't\b", re.IGNORECASE)
#: A question about a negated case: a condition with a negation ("… when there is no
#: restart script?", "what happens if … is run without an initializer?"); "how do I run
#: a command without installing it?" asks for a way, not about a case.
NEGATED_CASE = re.compile(
    r"\b(?:when|if|unless)\b[^?]*?(?:\b(?:no|not|without|never|none|nothing)\b|n't\b)", re.IGNORECASE
)

#: A sentence that opens with a negated condition ("If no `"command"` is provided, …",
#: "If the initializer is omitted …", "If it does _not_ have a restart script …"): it
#: says what happens in the case a negated-case question asks about, where a sentence
#: saying "without" somewhere else ("Runs on local `npm install` without package
#: arguments") only shares the negation.
NEGATED_CONDITION = re.compile(
    r"^\W*(?:if|when|unless|without)\b[^,.;:]*?(?:\b(?:no|not|without|never|none|nothing|omitted|cannot)\b|n't\b)",
    re.IGNORECASE,
)

#: English adverb particles: "log in" is the ``login`` a command or page is named by.
PARTICLES = frozenset("in up out on off down over back away".split())
#: What comes before a verb: a word before a particle is a phrasal verb only after one
#: of these ("how do I log in", "am I logged in") or first ("log in to …"); elsewhere
#: the particle is a preposition ("change my password on the registry": the password
#: is the password wherever the text says it).
BEFORE_VERB = frozenset("i we you they one to am are is be been get got and or please".split())
#: Verbs whose object is followed by a bare verb ("how do I make users log in", "let
#: people sign up"): a word after such a verb's object, with a particle ending the
#: question, is a phrasal verb too, as one after "I" is. Not "have" or "help": "which
#: of my dependencies have newer versions out" has no verb after "have"'s object.
CAUSATIVE = frozenset("make let".split())

#: A name the question writes as one (a path ``/metrics``, an identifier
#: ``perplexity_search``, a code span, a hyphenated name ``install-scripts``, an option
#: ``--global``): what the question is about, which a passage about something else does
#: not say however many of the other words it shares ("what happens if I run npm
#: install-scripts with --global?" is the sentence about ``--global``, not one that
#: "runs" after "installation" and says "scripts").
NAME = re.compile(
    r"`[^`]+`|(?<![\w/.])/[^\W_][\w./-]*|\b[^\W\d_]\w*_\w+"
    r"|(?<![\w-])--?[^\W\d_][\w-]*|\b[^\W\d_]+(?:-[^\W\d_]+)+\b"
)
#: An identifier written with underscores (``search_text``, ``tool_call_result``,
#: ``AGENT_DB_PATH``): one name, not its words. Its parts are met only where a text writes
#: it whole: "``knowledge_base_search`` searches … and returns … ``text``" says "search"
#: and "text" but nothing of ``search_text``.
COMPOUND = re.compile(r"(?<!\w)[^\W_]+(?:_[^\W_]+)+(?!\w)")

ACTION = re.compile(
    r"^\s*how\s+(?:(?:do|does|can|could|should|would|may|must)\s+(?:i|we|you|one)|to)\s+"
    r"(?P<action>.+?)(?=\s+(?:when|if|while|with|without|from|in|on|for|into|by|after|before|so|using|via)\b"
    r"|[?.]|$)",
    re.IGNORECASE,
)


#: A question word opening a clause after a statement, a greeting or a condition ("I
#: upgraded Node.js; how do I …", "Quick question: what is …", "In npm outdated's
#: output, what does …"): where the question's form is read from (``asking_clause``).
_ASKING_CLAUSE = re.compile(
    r"(?<=[;:.!?,])\s+(?=(?:how|what|where|when|who|whom|whose|which|why|can|could|is|are|does|do|will"
    r"|should|may|must)\b)",
    re.IGNORECASE,
)
_OPENS_ASKING = re.compile(
    r"^\W*(?:how|what|where|when|who|whom|whose|which|why|can|could|is|are|does|do|will|should|may|must|list"
    r"|name)\b",
    re.IGNORECASE,
)


def asking_clause(question: str) -> str:
    """The part of ``question`` its form is read from: all of it when it opens with a
    question word, else from the last clause that does. Every form above is anchored at
    the start, so "I upgraded Node.js; how do I recompile my native add-ons?" was no
    how-to and its answer never showed the command (``with_synopsis``)."""
    if _OPENS_ASKING.match(question):
        return question
    starts = [m.end() for m in _ASKING_CLAUSE.finditer(question)]
    return question[starts[-1] :] if starts else question


#: The examples a question gives of what it asks about (", like alpha or beta,", "such as
#: 1.2.0-5", "e.g. …"): they show what is meant, and a text answering need not say them.
#: "How do I choose the identifier, like alpha or beta, used in a prerelease version?" is
#: answered by ``preid``'s "The prerelease identifier to use as a prefix …", not by npm
#: dist-tag's "… use a different tag for each stream, e.g., stable, beta …", which says
#: "choose", "use" and "beta". "like" only after a comma: "what would I like to …" is a verb.
#: An example ends at a comma, or is the question's last words (at most three: "such as
#: 1.2.0-5?"); one followed by more of the question without a comma is left in, since
#: where it ends is unknown ("which tools such as npm ci fail when the lock file is out
#: of date?" would lose everything after "tools").
EXAMPLES = re.compile(
    r"(?:,\s*like|\bsuch\s+as|\be\.g\.|\bfor\s+(?:example|instance))\s+"
    r"(?:[^,?]*,|(?:[^\s,?]+\s+){0,2}[^\s,?]+\s*(?=\?|$))",
    re.IGNORECASE,
)

#: A reciprocal pronoun ("see each other's conversations", "one another"): no content
#: word of the question. "Can two users see each other's conversations?" was answered
#: second by the hybrid search's "The two score lists are each min-max normalised …",
#: whose "each" said the question's "each".
RECIPROCAL = re.compile(r"\b(?:each\s+other|one\s+another)(?:['\u2019]s)?\b", re.IGNORECASE)


__all__ = [
    "ACTION",
    "ASKS",
    "BEFORE_VERB",
    "CAUSATIVE",
    "COMPOUND",
    "DEFINITION",
    "ENUMERATION",
    "EXAMPLES",
    "HOW_MANY",
    "HOW_TO",
    "NAME",
    "NEGATED_CASE",
    "NEGATED_CONDITION",
    "NEGATION",
    "NUMBER",
    "PARTICLES",
    "RECIPROCAL",
    "WANTS",
    "WHICH_KIND",
    "WHICH_MANY",
    "YES_NO",
    "asking_clause",
]
