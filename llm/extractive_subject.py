"""What the question is about by name, and whether the passages found mention it at all.

A question naming a tool, product or identifier the knowledge base never mentions ("How
do I restart a Kubernetes pod?", "What does npm ci do differently from npm install?"
over a knowledge base about this service) still shares common words with some passage
("restart", "install"), and the best of those scored as an answer: the list of HTTP
error codes for npm ci. A reader takes that for a broken service. The passages are the
knowledge search's best for the question, its full-text half ranking by the question's
rarest words, so a name none of them says is one the knowledge base does not hold, and
no passage can be about it: the answerer says so instead.

A name is what the question writes as one, not any word the passages lack (a reader's
paraphrase uses words the documents do not, "pick up an answer again", and still has
an answer):

* a run of capitalised words, not opening the question, holding a proper noun (a word
  with lower-case letters after its capital: "Kubernetes", "AWS Lambda", "Django's
  ORM"); an acronym alone ("CPU cores") is a common noun of technical prose;
* the owner of a possessive ("webpack's dev server");
* a code span, a path, an underscore identifier or an option (``llm.extractive_forms``'s
  ``NAME`` less its hyphenated words, which are as often adjectives: "built-in");
* what a definition question asks about ("What does npm ci do …?", "what is X?").

A name is unmentioned when no passage (its text, title or section) says any of its
words.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable

from llm.extractive_words import Words

#: A word of the question as written, with a possessive ending it may carry.
_WORD = re.compile(r"[^\W_][\w.+#]*(?<![.])(?P<possessive>['\u2019]s\b)?")
#: What ends a sentence of the question before a word (with a space after it), and what
#: opens one (with or without): a word after either is capitalised as a sentence's first.
_SENTENCE_END = ".!?:;"
_SENTENCE_OPENING = '"\u201c('
#: A proper noun: a capital with lower-case letters after it ("Kubernetes", "GitHub").
_PROPER = re.compile(r"^[A-Z].*[a-z]")
#: Code spans, paths, underscore identifiers and options (``NAME`` without hyphenated words).
_CODE = re.compile(r"`[^`]+`|(?<![\w/.])/[^\W_][\w./-]*|\b[^\W\d_]\w*_\w+|(?<![\w-])--?[^\W\d_][\w-]*")
#: "What does X do …?" / "what is X?": X is what the question asks about.
_DEFINED = re.compile(r"^\s*what\s+(?:does|do|is|are)\s+(?P<subject>.+?)(?:\s+do\b.*)?\s*[?.!]*\s*$", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:the|a|an|my|your|our|its|their)\s+", re.IGNORECASE)
#: A preposition ending a definition's subject ("what is X for?") is not part of it.
_TRAILING = re.compile(r"\s+(?:for|in|about|of|like|with|to|on)$", re.IGNORECASE)


def _starts_sentence(text: str, at: int) -> bool:
    """The word at ``at`` opens the question or a sentence of it: nothing but spaces
    before it (a question sent with a leading space or blank line), or a sentence's end
    and a space, or an opening quote or bracket. Read backwards over the spaces only: a
    search through all the text before, once per capitalised word, took 2.7 s of CPU for
    a question of ``AGENT_MAX_MESSAGE_CHARS`` (32,000)."""
    mark = at
    while mark > 0 and text[mark - 1].isspace():
        mark -= 1
    if mark == 0:
        return True  # only spaces before it: the question's first word
    return text[mark - 1] in _SENTENCE_OPENING or (mark < at and text[mark - 1] in _SENTENCE_END)


def _capitalised_runs(question: str) -> list[str]:
    """The runs of capitalised words holding a proper noun, and possessives' owners."""
    runs: list[str] = []
    run: list[tuple[int, int]] = []  # each word's start and end (its possessive left out)
    proper = False
    end = -1

    def close() -> None:
        nonlocal run, proper
        if run and proper:
            runs.append(question[run[0][0] : run[-1][1]])
        run, proper = [], False

    for m in _WORD.finditer(question):
        word = m.group(0)
        bare = word[: -len(m.group("possessive"))] if m.group("possessive") else word
        gap = question[end : m.start()] if end >= 0 else ""
        capital = bare[:1].isupper() and bare != "I" and not _starts_sentence(question, m.start())
        if run and (not capital or gap.strip()):
            close()
        if capital:
            run.append((m.start(), m.start() + len(bare)))
            proper = proper or _PROPER.match(bare) is not None
        elif m.group("possessive"):
            runs.append(bare)
        if m.group("possessive") and capital:
            proper = True  # "Django's ORM": an owner named in capitals is a proper name
        end = m.end()
    close()
    return runs


def _named(question: str, keep_run: Callable[[str, str], bool]) -> list[str]:
    """The question's names, as written: its capitalised runs that ``keep_run(text, run)``
    keeps, then its code spans, paths, identifiers and options, then a definition
    question's subject; each once."""
    text = unicodedata.normalize("NFKC", question)
    out = [run for run in _capitalised_runs(text) if keep_run(text, run)]
    out += [m.group(0) for m in _CODE.finditer(text)]
    defined = _DEFINED.match(text)
    if defined is not None:
        out.append(_TRAILING.sub("", _ARTICLE.sub("", defined.group("subject").strip())))
    return list(dict.fromkeys(n for n in out if n))


def names(question: str) -> list[str]:
    """What the question writes as a name (see the module docstring), as written."""
    return _named(question, lambda _text, _run: True)


#: Words before a name that make it where or with what the question is set ("on Ubuntu",
#: "in Chrome", "On my Mac"), and the determiners that may stand between.
_SETTING = frozenset("on in with from under inside using via behind through at within for".split())
_DETERMINER = frozenset("my our your the a an their its this that".split())


def _is_object(text: str, name: str) -> bool:
    """Whether a capitalised name is what the question is about rather than its setting:
    an owner ("Django's ORM"), or a name in the question's last clause not after a
    preposition ("restart a Kubernetes pod", "use Elasticsearch instead of SQLite");
    "I'm on Ubuntu, how do I …", "My team uses Slack; how do I …", "I use Podman. How do
    I …", "(I use Podman)" and "in Chrome" set it."""
    at = text.find(name)
    if at < 0:
        return False
    after = text[at + len(name) :]
    if "'s" in name or re.match(r"['\u2019]s\b", after):
        return True
    if re.search(r"[,;:]\s", after):
        return False  # an earlier clause: the question proper comes after it
    said = re.search(r"[.!?](?=\s+\S)", after)
    if said is not None and said.group(0) != "?":
        return False  # a sentence before the question: "I use Podman. How do I …?"
    if text[:at].count("(") > text[:at].count(")"):
        return False  # an aside: "How do I start the service (I use Podman)?"
    before = [w.casefold() for w in re.findall(r"[^\W\d_]+", text[:at])][-3:]
    while before and before[-1] in _DETERMINER:
        before.pop()
    return not (before and before[-1] in _SETTING)


def asked_about(question: str) -> list[str]:
    """The names (``names``) the question is about, not merely set in: a possessive's
    owner or a name holding one ("webpack's dev server", "Django's ORM"), a code span,
    path, identifier or option, a definition question's subject. A capitalised name
    may be only the setting of a question the knowledge base answers ("I'm on Ubuntu,
    how do I start the service?", "resume a stream in Chrome"): ``_is_object``."""
    return _named(question, _is_object)


def unmentioned(question: str, said: Iterable[frozenset[str]], words: Words) -> tuple[str, ...]:
    """The question's names (``names``) of which no passage says a word: ``said`` is what
    each passage says, its title and section included, as stems. A name with no content
    word ("what is it?") is never unmentioned; nor is anything when no passage was found
    (the answer then says that nothing was found at all)."""
    passages = list(said)
    if not passages:
        return ()
    everything = frozenset().union(*passages)
    out: list[str] = []
    for name in names(question):
        stems = words.stems(name)
        if stems and all(words.match(s, everything) < 1.0 for s in stems):
            out.append(name)
    # "What is a Helm chart?" names "Helm" and asks about "Helm chart": say "Helm" once.
    return tuple(n for n in out if not any(o != n and o.strip("`") in n for o in out))


__all__ = ["asked_about", "names", "unmentioned"]
