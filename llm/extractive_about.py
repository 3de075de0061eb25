"""What a passage is *about*, for the offline answerer's scoring (``llm.extractive_score``).

A bigger knowledge base offers more passages that share the question's words — "folder",
"readiness", "body" — and most of them only mention the thing asked about. A reader
tells the passage about it from the others by where its words stand: in the heading of
the section, as the name of the thing, as what a sentence says the thing is. Each signal
here is one such place:

* ``heading_states_question``: a section whose heading says the whole question (a
  troubleshooting entry "The run ends with error code mandatory_tool_missing" for "why
  does a run end with mandatory_tool_missing?") is about the question's situation, and
  what it says first is the answer;
* ``folder_terms``: a folder written as a path (```backend/```) is the folder the
  question names ("the backend folder"), as a reader reads it;
* ``clipped_terms``: a name in code says the words it clips (``AGENT_AUTH`` is the
  authentication setting);
* ``heading_about_page``: a heading that says the page's subject again ("MCP servers and
  readiness" on "Connecting MCP servers") is about that subject's side of the matter,
  so a question that never names the subject does not name the section;
* ``says_what_asked_is``: a sentence whose subject is the thing a "what" question asks
  about, saying what it is ("The request body is `{message, context_type, …}`"), over one
  that mentions it in passing ("the largest chat request body");
* ``generic_focus``: "which parts …", "which kinds …" ask for several things of a kind
  no answer calls by that word: a unit listing several things answers;
* ``says_of_subject``: a yes/no question's subject ("can an unscoped package …?") is
  what a sentence answering it opens with ("Unscoped packages are always public").
"""

from __future__ import annotations

import re
from collections.abc import Callable

from llm.extractive_code_names import CODE_NAME, MIN_CLIPPED_CHARS
from llm.extractive_question import Question
from llm.extractive_question import stems as _stems
from llm.extractive_read import Read

_EMPHASIS = re.compile(r"[*_`]")
#: A question this short ("what is readiness?") is said by too many headings.
MIN_STATED_WORDS = 3


def heading_states_question(question: Question, heading: str, title: frozenset[str]) -> float:
    """The share of the question a section's heading says (1.0), when the heading says
    every word of the question and the question is at least half of what it says: a
    heading that states the question's situation in its own sentence ("The run ends with
    error code mandatory_tool_missing") names the section the question is about, though
    it says more words than the question (``_section_named`` takes a heading of at most
    one word more). A heading mostly about something else that happens to hold the
    question's words ("MCP servers, readiness and retries when a run ends") is not it.
    0.0 otherwise."""
    said = question.words.stems(heading)
    own = said - title
    if len(question.stems) < MIN_STATED_WORDS or not own:
        return 0.0
    if question.words.coverage(question.stems, said) < 1.0 or 2 * len(question.stems) < len(own):
        return 0.0
    return question.words.coverage(question.stems, own)


#: The words a reader calls a folder by, and their stems (each word is one stem).
_FOLDER_WORDS = frozenset({"folder", "directory", "dir"})
_FOLDER_STEMS = frozenset(next(iter(_stems(w))) for w in _FOLDER_WORDS)
#: A folder written as a path: a code span ending in "/" (```backend/```, ```knowledge/sample_kb/```).
_FOLDER_PATH = re.compile(r"`([^`\s]*[^\W_][^`\s]*)/`")


def folder_terms(question: Question, text: str) -> frozenset[str]:
    """The question's word for a folder ("folder", "directory"), when ``text`` writes a
    folder as a path whose name the question also says: ```backend/``` *is* "the backend
    folder" to a reader, and an entry "```backend/```: a reference implementation …"
    answers "what is in the backend folder?" as fully as one saying both words. Nothing
    otherwise (a path the question does not name, or a question about no folder)."""
    asked = question.stems & _FOLDER_STEMS
    if not asked:
        return frozenset()
    for m in _FOLDER_PATH.finditer(text):
        last = m.group(1).rsplit("/", 1)[-1]
        if question.words.stems(last) and question.words.coverage(question.words.stems(last), question.stems) >= 1.0:
            return frozenset(asked)
    return frozenset()


#: A thing named in code: a code span, or a constant (``AGENT_AUTH``).
_IDENT = CODE_NAME


def clipped_terms(question: Question, text: str) -> frozenset[str]:
    """The question's words that a name in code says clipped: settings and commands are
    named with the short forms of words (``AGENT_AUTH``, ``npm config``), and a reader
    reads ``AGENT_AUTH`` as the authentication setting, so "how do I turn on
    authentication?" meets "`AGENT_AUTH` chooses how callers are identified". A part of
    the name of at least ``MIN_CLIPPED_CHARS`` letters that begins a longer word of the
    question says that word; prose is read as written."""
    parts = question.words.code_parts(text)
    if not parts:
        return frozenset()
    beginning = question.words.beginnings(question.stems)
    out: set[str] = set()
    for part in parts:
        out.update(beginning.get(part, ()))
    return frozenset(out)


def said_otherwise(question: Question, text: str) -> frozenset[str]:
    """The question's words ``text`` says in another form than their own: a folder as a
    path (``folder_terms``), a word clipped in a name (``clipped_terms``)."""
    return folder_terms(question, text) | clipped_terms(question, text)


def opening_shows_how(question: Question, read: Read, b: int) -> bool:
    """A named page's opening (block ``b``) answers a how-to only when it shows what to
    do: a name in code in it (a command, a setting) or the synopsis above it, which the
    quote brings along (``llm.extractive_additions.with_synopsis``: ``npm pack`` under "Create
    a tarball from a package."). "Tools of Model Context Protocol (MCP) servers join the
    tool catalog …" says what MCP servers are to the service, not how to connect one:
    for "how do I connect an MCP server?" it is one more sentence of the page, and the
    section that says what to set (``AGENT_MCP_SERVERS``) answers. Any opening answers
    a question that is no how-to, and a page named after a thing to use (a title of one
    word or name: ``npm-login``, ``package.json``) shows it by its name."""
    if not question.how_to or len(read.passage.title.split()) == 1:
        return True
    if any(block.kind == "code" for block in read.blocks[:b]):
        return True
    return any(_IDENT.search(unit) for unit in read.blocks[b].units)


def heading_about_page(question: Question, heading: str, title: frozenset[str]) -> bool:
    """The heading says a word of its page's title that the question does not ask: "MCP
    servers and readiness" on the page "Connecting MCP servers" is about the MCP servers'
    part in readiness, and "which parts of the service does the readiness check cover?"
    (no MCP in it) does not name it, though its one word besides the title's,
    "readiness", is asked. A heading that does not repeat the title ("delete" on npm
    config's page) is named by its own words as before."""
    repeated = question.words.stems(heading) & title
    asked = question.stems | frozenset(question.joined)
    return any(question.words.coverage(frozenset({t}), asked) < 1.0 for t in repeated)


#: Nouns for "several things of some kind" that say nothing of the kind: "which parts of
#: the service …" is answered by "the provider, the embedder, the tool index and the
#: database", which never says "parts".
_GENERIC = frozenset(next(iter(_stems(w))) for w in ("parts", "kinds", "sorts", "types", "things", "pieces"))


def generic_focus(question: Question) -> bool:
    """The "which <things>" question asks for a generic kind (``_GENERIC``): a unit
    listing several things names what it asks for, as "the operators `=`, `!=` …" names
    "which operators"."""
    return question.focus is not None and next(iter(question.words.stems(question.focus)), "") in _GENERIC


#: For the sentence saying what the thing a "what" question asks about is
#: (``says_what_asked_is``): as much as a named page's opening
#: (``llm.extractive_score.OPENING_BONUS``), the other place a reader finds what a thing is.
SUBJECT_BONUS = 0.2
#: "The request body is …", "A bucket's fields are …": a sentence opening with its
#: subject (at most four words after an article) and "is" / "are".
_COPULA = re.compile(
    r"^(?:(?:the|a|an|its|their|each|every)\s+)?(?P<subject>[^\s,;:.()]+(?:\s+[^\s,;:.()]+){0,3}?)\s+(?:is|are)\s+\S",
    re.IGNORECASE,
)
#: The subject must say this many of the question's words: "the knowledge base is one
#: corpus …" says what the knowledge base is, not what it keeps for each document.
MIN_SUBJECT_SHARE = 0.5


def says_what_asked_is(question: Question, text: str) -> bool:
    """A "what" question ("what do I send in the body of a chat request?") is answered by
    the sentence saying what the thing asked about is: its subject is that thing (two
    words or more, every one asked, at least half of the question) and its verb "is":
    "The request body is `{message, context_type, context?, conversation_id?}`". Another
    sentence holding as many of the question's words only mentions the thing ("the
    largest chat request body; a larger one is 413"), as a glossary entry for another
    term does (``llm.extractive_signals.defines_asked``)."""
    if not question.definition:
        return False
    m = _COPULA.match(text.strip())
    if m is None:
        return False
    subject = question.words.stems(m.group("subject"))
    asked = question.stems | frozenset(question.joined)
    return (
        len(subject) >= 2
        and question.words.coverage(subject, asked) >= 1.0
        and len(subject) >= MIN_SUBJECT_SHARE * len(question.stems)
    )


#: For the sentence saying what the subject of a yes/no question is or does
#: (``says_of_subject``). Replayed over every set's captured passages: 0.1-0.2 change
#: one answer (gained), 0.3 two.
YES_NO_SUBJECT_BONUS = 0.15
#: A sentence opening with its subject (at most four words after an article) and a verb
#: saying what the subject is, can or does: "Unscoped packages are always public".
_SUBJECT_FIRST = re.compile(
    r"^(?:(?:the|a|an|its|their|each|every)\s+)?(?P<subject>[^\s,;:.()]+(?:\s+[^\s,;:.()]+){0,3}?)"
    r"\s+(?:is|are|can|cannot|can't|must|will|may|does|do|doesn't|don't|should)\s+\S",
    re.IGNORECASE,
)


def says_of_subject(question: Question, text: str) -> bool:
    """A yes/no question ("can an unscoped package be made private?") is answered by a
    sentence about its subject — the words right after its auxiliary, two or more —
    saying what that subject is or can do: "Unscoped packages are *always public*",
    "Unscoped packages cannot be set to `restricted`"; not by one that only holds the
    question's words elsewhere ("To publish a private scoped package …"). A subject the
    question does not open with ("Does npm send any information …?" against "The npm
    registry does not …") is another thing."""
    if not question.after_auxiliary:
        return False
    m = _SUBJECT_FIRST.match(_EMPHASIS.sub("", text).strip())
    if m is None:
        return False
    stems = question.words.stems
    subject = stems(m.group("subject"))
    asked = stems(" ".join(question.after_auxiliary[: len(m.group("subject").split())]))
    same = question.words.coverage(subject, asked) >= 1.0 and question.words.coverage(asked, subject) >= 1.0
    return len(subject) >= 2 and bool(asked) and same


def section_share(
    question: Question, heading: str, title: frozenset[str], named: Callable[[Question, str, frozenset[str]], float]
) -> float:
    """The share of the question a section's heading says when the question names the
    section or the heading states the question, for the bonus of what the section says
    first: ``named`` (``llm.extractive_score._section_named``) unless the heading is
    about its page's subject (``heading_about_page``), or the heading stating the whole
    question (``heading_states_question``)."""
    own = 0.0 if heading_about_page(question, heading, title) else named(question, heading, title)
    return max(own, heading_states_question(question, heading, title))


def names_focus(question: Question, text: str) -> bool:
    """The text names what a "which <things>" question asks for ("the operators …"), or
    the question asks for things of a generic kind (``generic_focus``), which no text names."""
    return question.names_focus(text) or generic_focus(question)


__all__ = [
    "MIN_CLIPPED_CHARS",
    "MIN_STATED_WORDS",
    "MIN_SUBJECT_SHARE",
    "SUBJECT_BONUS",
    "YES_NO_SUBJECT_BONUS",
    "clipped_terms",
    "folder_terms",
    "generic_focus",
    "heading_about_page",
    "heading_states_question",
    "names_focus",
    "opening_shows_how",
    "said_otherwise",
    "says_of_subject",
    "says_what_asked_is",
    "section_share",
]
