"""Signals the offline answerer's scoring (``llm.extractive_score``) adds to a unit's
coverage of the question, each for a kind of passage that answers but says the
question's words less often than another that does not:

* ``continues_section``: what a section says first, when the chunk holding its heading
  states nothing quotable after it (a list's introduction cut from its list) — it is
  then in the next chunk, which the search result's ``section`` says it continues;
* ``defines_asked``: a glossary entry ("- `backend/`: a reference implementation of …")
  for what a "what is / what does" question asks about ("what is in the backend
  folder?"), over an entry that only mentions it ("`AGENT_BACKEND_URL`: … backend");
* ``how_to_bonus``: a how-to is answered by the thing to use — a setting, a command, a
  path — named in code after what the question asks about;
* ``names_kind``: "which <kind> …" is answered by a unit calling a thing of that kind by
  its name ("An FTS5 full-text index");
* ``row_about_asked``: a table row is about what its first cell names;
* ``after_properties``: a setting's paragraph after the list of its properties opens its
  section, for a question naming the setting;
* ``opens_setting_for``: that paragraph names the setting to use for a how-to that says
  a word of the setting's name;
* ``run_bonus``: a unit saying a run of the question's own words in a row ("set a value
  in the npm configuration") says what the question says.
"""

from __future__ import annotations

import re

from llm.extractive_question import Question
from llm.extractive_read import Read as _Read
from llm.extractive_read import introduces as _introduces
from llm.extractive_read import is_properties as _is_properties
from llm.extractive_read import next_block as _next_block
from llm.extractive_words import Words

#: A lead shorter than this says too little to answer with ("See also:").
MIN_LEAD_CHARS = 25
#: For an entry defining what a "what is" question asks about (``defines_asked``).
GLOSSARY_BONUS = 0.1
#: For a how-to, a unit naming in code a thing named after what the question asks
#: about, and more for an entry defining it (``how_to_bonus``).
HOW_TO_NAME_BONUS = 0.05
HOW_TO_ENTRY_BONUS = 0.15
#: For every unit of a section whose heading asks the question's own question ("Where
#: data lives" for "where is my data stored?"), scaled by the share of the question's
#: words the heading says (``asked_by_heading``). Replayed over every set's captured
#: passages: 0.2-0.5 change that one answer (0.3 and more lead with the section), no other.
ASKED_HEADING_BONUS = 0.3
#: For every word past three of the longest run of the question's own words a unit
#: says in a row, function words included, when the run holds three content words or
#: more (``run_bonus``): "per-user config file (`~/.npmrc`)" says "per-user
#: config file" as "where is the per-user config file?" does, and npm set's summary
#: "Set a value in the npm configuration" says seven words of "how do I set a value in
#: the npm configuration from the command line?" in a row, where other units hold as
#: many of its words here and there ("… can be set via command line flags …"). Replayed
#: over every set's captured passages: 0.05-0.08 gain those two answers and lose none
#: (0.05 changes seven answers); 0.03 gains none; a run of three words, or of two content
#: words, loses one or two ("remove a package from" led with npm unpublish).
RUN_WEIGHT = 0.05
MIN_RUN_WORDS = 4
#: A term an entry defines: in code or bold, then a colon or dash.
_TERM = re.compile(r"^\s*(?:`(?P<code>[^`]+)`|\*\*(?P<bold>[^*]+)\*\*)\s*[:\u2013\u2014-]\s")


def _document(read: _Read) -> str:
    return read.passage.source_id.split("#", 1)[0]


def _states(read: _Read, b: int) -> bool:
    """Block ``b`` says something a lead could quote: a sentence or item long enough, and
    not an introduction of a list the passage does not hold."""
    block = read.blocks[b]
    if block.kind not in ("prose", "list"):
        return block.kind == "table"
    if block.kind == "prose" and _next_block(read, b) is None:
        units = block.units[:-1] + ([] if _introduces(block.units[-1]) else block.units[-1:])
    else:
        units = list(block.units)
    return any(len(u) >= MIN_LEAD_CHARS for u in units)


def continues_section(read: _Read, reads: list[_Read]) -> int:
    """The block that first states what a section says, when ``read`` continues that
    section and the passage holding its heading stated nothing quotable after it (a
    chunk ending "… adds two headers with information about your environment:" with its
    list in the next chunk): what the section says first is then in this passage.
    -1 otherwise."""
    heading = read.passage.section.rsplit(" › ", 1)[-1].strip()
    if not heading or not read.blocks or read.blocks[0].kind == "heading":
        return -1
    started = False
    for other in reads:
        if other is read or _document(other) != _document(read) or _position(other) != _position(read) - 1:
            continue  # only the chunk right before this one, holding the section's start
        for b, block in enumerate(other.blocks):
            if block.kind == "heading" and block.text.strip() == heading:
                later = range(b + 1, len(other.blocks))
                ends = next((c for c in later if other.blocks[c].kind == "heading"), len(other.blocks))
                if ends < len(other.blocks) or any(_states(other, c) for c in range(b + 1, ends)):
                    return -1  # the section ended there, or said something already
                started = True
    if not started:
        return -1
    for b, block in enumerate(read.blocks):
        if block.kind == "heading":
            return -1
        if _states(read, b):
            return b
    return -1


def _position(read: _Read) -> int:
    """The chunk's position in its document (``doc#3``), or -2 when it is not known."""
    where = read.passage.chunk_id or read.passage.source_id
    tail = where.rsplit("#", 1)[-1] if "#" in where else ""
    return int(tail) if tail.isdigit() else -2


def defines_asked(question: Question, text: str) -> bool:
    """A glossary entry for what the question asks about: an item or sentence that opens
    with a term (in code or bold) and a colon, every word of the term asked."""
    if not question.definition:
        return False
    m = _TERM.match(text)
    if m is None:
        return False
    term = question.words.stems(m.group("code") or m.group("bold") or "")
    return bool(term) and question.words.coverage(term, question.stems | frozenset(question.joined)) >= 1.0


#: A thing named in code: a code span, or a constant (``AGENT_CORS_ORIGINS``).
_IDENT = re.compile(r"`([^`]+)`|\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b")


def how_to_bonus(question: Question, text: str) -> float:
    """A how-to is answered by the thing to use — a setting, a command, a path — named in
    code and named after what the question asks about: an entry for it ("`AGENT_CORS_ORIGINS`:
    allowed browser origins." for "how do I allow my web page's origin …?") gains
    ``HOW_TO_ENTRY_BONUS``, a unit naming it elsewhere ``HOW_TO_NAME_BONUS``."""
    if not question.how_to:
        return 0.0
    term = _TERM.match(text)
    if term is not None and question.words.stems(term.group("code") or term.group("bold") or "") & question.stems:
        return HOW_TO_ENTRY_BONUS
    for m in _IDENT.finditer(text):
        if question.words.stems(m.group(1) or m.group(2)) & question.stems:
            return HOW_TO_NAME_BONUS
    return 0.0


#: A thing called by its name: a code span, or a word mixing letters and digits
#: (``FTS5``, ``unicode61``, ``HS256``) or with a capital inside (``SQLite``); then the
#: word after it.
_CALLED = re.compile(
    r"(?P<name>`[^`\n]+`|(?<![\w.-])[.-]*+(?=[\w.-]*\d)(?=[\w.-]*[A-Za-z])[A-Za-z0-9][\w.-]*\b|\b[A-Z][a-z]*[A-Z][\w]*\b)"
    r"\s+(?P<next>[^\W_]+)"
)


def names_kind(question: Question, text: str) -> bool:
    """The text calls a thing of the kind "which …" asks for by its name, the name right
    before the kind's word: "which full-text engine does the knowledge base index use?"
    is "An FTS5 full-text index …", not "BM25 over the full-text index", which names
    another thing and says the same words; "which tokenizer …" is "unicode61 tokenizer",
    "which claim …" "the `sub` claim". A name the question itself says is not the answer.
    A question asking for several things ("which scripts run …") is answered by their
    list (``FOCUS_BONUS``), not by a sentence naming one of them ("… have `start` scripts")."""
    if not question.kind or question.enumeration:
        return False
    stems = question.words.stems
    for m in _CALLED.finditer(text):
        name = stems(m.group("name"))
        if stems(m.group("next")) <= question.kind and stems(m.group("next")) and not name <= question.stems:
            return True
    return False


#: A table row's first cell of at most this many words is a term (``row_about_asked``).
ROW_KEY_WORDS = 4
_EMPHASIS = re.compile(r"[*_`]")


def row_about_asked(question: Question, row: str) -> bool:
    """A table's row whose first cell — what the row is about — is a term the question
    asks about, every word of it: "what does the message_complete event carry?" is the
    row ``| `message_complete` | `{status, run_id, conversation_id, turns, usage}` | …``,
    not ``| `error` | … | always followed by `message_complete` |``, which names it among
    its values and shares as many of the question's words."""
    cells = row.strip().strip("|").split("|")
    key = _EMPHASIS.sub("", cells[0]).strip() if len(cells) > 1 else ""
    if not key or len(key.split()) > ROW_KEY_WORDS:
        return False
    term = question.terms(key)
    return bool(term) and question.words.coverage(term, question.stems | frozenset(question.joined)) >= 1.0


def after_properties(read: _Read, b: int, title: frozenset[str], words: Words) -> bool:
    """Block ``b`` is the paragraph saying what a setting does, right after the list of
    its properties that opens its section (npm's config reference: a heading
    ``fetch-retries``, "* Default: 2", "* Type: Number", then "The "retries" config for
    the `retry` module …"). It counts as the section's opening only for a question that
    names the section (``llm.extractive_score._section_named``): "how can I make npm retry more often when
    fetching a package fails?" asks every word of ``fetch-retries`` and is answered by
    its paragraph, not by ``fetch-retry-factor``'s, ranked higher and also about
    fetching and ``retry``. (As an opening for every question it made the options of
    command pages outrank the commands' own descriptions: four answers lost.) The
    setting's name must be two words or more: a one-word name (``versions``) is named by
    any question using the word ("which versions of Node my package works with")."""
    if b < 2 or b == read.summary or read.blocks[b].kind != "prose" or read.blocks[b - 2].kind != "heading":
        return False
    if len(words.stems(read.headings[b]) - title) < 2:
        return False
    return _is_properties(read.blocks[b - 1])


def opens_setting_for(question: Question, read: _Read, b: int, title: frozenset[str], words: Words) -> bool:
    """For a how-to, block ``b`` opens the section of a setting named in the question's
    words: the paragraph after the setting's properties (``after_properties``) under a
    heading one of whose words the question says. That paragraph says what the setting
    does without naming it ("Include the workspace root when workspaces are enabled for
    a command." under ``include-workspace-root``), yet its quote carries the name as its
    label (``llm.extractive_additions.with_name``), so it names the thing to use as a
    unit naming it in code does (``how_to_bonus``): "how do I also run a command in the
    root project when using --workspaces?" is that setting, not the workspaces page's
    paragraph on running commands, which says more of the question's words and names no
    setting that does it."""
    return (
        question.how_to
        and bool(words.stems(read.headings[b]) & question.stems)
        and after_properties(read, b, title, words)
    )


def asked_by_heading(question: Question, heading: str, words: Words) -> float:
    """The share of the question's own words (not a follow-up's topic) a section heading
    says when it opens with the question's own word of place, time, party, choice or
    reason (``Question.asks``): "Where data lives" is the section answering "where is my
    data stored?", though its sentences say "lands" and "holds", never "stored", while a
    sentence elsewhere says "stored" of something else ("typed fields stored as real
    indexed columns"). Else 0."""
    if not question.asks or not heading:
        return 0.0
    opening = heading.lstrip(" *_`\"'(").split(None, 1)
    if not opening or opening[0].casefold().rstrip(":,") != question.asks:
        return 0.0
    return words.coverage(question.stems - question.topic, words.stems(heading))


def run_bonus(question: Question, text: str) -> float:
    """``RUN_WEIGHT`` for every word past three of the longest run of the question's own
    words ``text`` says in a row as the question does (``Question.said_in_a_row``: three
    content words or more among them): a unit saying "the per-user config file" or "set
    a value in the npm configuration" says what the question says, not only its words."""
    run = question.said_in_a_row(text)
    return RUN_WEIGHT * (run - MIN_RUN_WORDS + 1) if run >= MIN_RUN_WORDS else 0.0


__all__ = [
    "ASKED_HEADING_BONUS",
    "GLOSSARY_BONUS",
    "HOW_TO_ENTRY_BONUS",
    "HOW_TO_NAME_BONUS",
    "MIN_LEAD_CHARS",
    "MIN_RUN_WORDS",
    "RUN_WEIGHT",
    "after_properties",
    "asked_by_heading",
    "continues_section",
    "defines_asked",
    "how_to_bonus",
    "names_kind",
    "opens_setting_for",
    "row_about_asked",
    "run_bonus",
]
