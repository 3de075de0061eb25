"""How well each unit of the search's passages answers the question, for the offline
answerer (``llm.extractive_answer``): ``score_units`` scores every sentence, list item,
table row and (for a question asking for several things) whole list or table.

Scores are term coverage: the share of the question's content words (stemmed, and
matched by shared prefixes and roots, so "differently" meets "differences" and
"disconnect" half-meets "reconnecting") a unit holds, each word weighed by how few of
the passages say it (``Question.weighed_by``), plus a little for the words of
its title and section heading and for the search's own rank and score
(``llm.extractive_question`` reads the question). A document the question names opens
the answer with its first paragraph (asides such as "Note: …" are not an opening); a
unit holding what the question's form asks for (a path for "where", a number with its
unit for "how many") is preferred; words inside links name another page and count as
context only; a passage continuing a section is read under the section's heading (the
search result's ``section``), and what a section says first may open the next chunk; a
glossary entry ("`backend/`: …") answers "what is" about its term. The signals beyond
coverage are ``llm.extractive_signals`` and ``llm.extractive_about``.

Apart from the answer because scoring and composing change for different reasons: a
round of tuning moves a bonus here and is replayed over the captured passages
(``bench/offline_answers.py --replay``), while which passages join the answer and how
a lead is quoted stay put in ``llm.extractive_answer`` and ``llm.extractive_quote``.
"""

from __future__ import annotations

import re

from llm.extractive_about import SUBJECT_BONUS, YES_NO_SUBJECT_BONUS
from llm.extractive_about import names_focus as _names_focus
from llm.extractive_about import opening_shows_how as _opening_shows_how
from llm.extractive_about import said_otherwise as _said_otherwise
from llm.extractive_about import says_of_subject as _says_of_subject
from llm.extractive_about import says_what_asked_is as _says_what_asked_is
from llm.extractive_about import section_share as _section_share
from llm.extractive_additions import SUBCOMMAND_ITEM as _SUBCOMMAND_ITEM
from llm.extractive_question import NEGATED_CONDITION as _NEGATED_CONDITION
from llm.extractive_question import NEGATION as _NEGATION
from llm.extractive_question import Question as _Question
from llm.extractive_quote import WHOLE_BLOCK_CHARS
from llm.extractive_quote import item_shows as _item_shows
from llm.extractive_read import Read as _Read
from llm.extractive_read import Unit as _Unit
from llm.extractive_read import document_of as _document
from llm.extractive_read import introduces as _introduces
from llm.extractive_read import next_block as _next_block
from llm.extractive_read import opening_block as _opening
from llm.extractive_read import prev_block as _prev_block
from llm.extractive_read import table_header as _table_rows_header
from llm.extractive_read import table_rows as _table_rows
from llm.extractive_signals import ASKED_HEADING_BONUS, HOW_TO_NAME_BONUS, MIN_LEAD_CHARS
from llm.extractive_signals import GLOSSARY_BONUS as _GLOSSARY_BONUS
from llm.extractive_signals import after_properties as _after_properties
from llm.extractive_signals import asked_by_heading as _asked_by_heading
from llm.extractive_signals import continues_section as _continues_section
from llm.extractive_signals import defines_asked as _defines_asked
from llm.extractive_signals import how_to_bonus as _how_to_bonus
from llm.extractive_signals import names_kind as _names_kind
from llm.extractive_signals import opens_setting_for as _opens_setting_for
from llm.extractive_signals import row_about_asked as _row_about_asked
from llm.extractive_signals import run_bonus as _run_bonus
from llm.extractive_words import Words
from llm.markdown_blocks import item_body

#: A whole list or table says more than the question asks: an item or sentence that
#: covers the question as well is preferred.
WHOLE_BLOCK_PENALTY = 0.1
#: A question asking for several things ("which events…", "what are the…", "list…")
#: is answered by a whole list or table: it gains this much instead of the penalty, and
#: its length is not held against it.
ENUMERATION_BONUS = 0.05
ANSWER_TYPE_BONUS = 0.15
#: For a unit calling a thing of the kind "which …" asks for by its name
#: (``llm.extractive_signals.names_kind``).
KIND_NAME_BONUS = 0.05
#: A unit stating a number of what "how many <things>" counts ("at most 3 chunks per
#: document") is the answer, whatever other amounts units around it state.
COUNT_BONUS = 0.25
#: A sentence naming what "which <things>" asks for and listing several ("with the
#: operators `=`, `!=`, `>` …", or introducing the list of them) answers it; another
#: that shares the question's other words, or names them without listing any ("streams
#: the events of a run"), does not.
FOCUS_BONUS = 0.1
#: Three or more things in a row: an item of at most three words between two commas.
_LISTED = re.compile(r",\s(?:[^\s,;]+\s){0,2}[^\s,;]+,\s")
#: A question about a negated case ("… when there is no restart script?") is answered by
#: a sentence about that case ("If it does _not_ have a restart script …"), not by the
#: one about the positive case beside it, which holds the same words.
NEGATION_BONUS = 0.1
#: And more for a sentence opening with that negated case as its condition ("If the
#: initializer is omitted (by just calling `npm init`), init will fall back to legacy
#: init behavior", for "what happens when npm init is run without an initializer?"),
#: over one that only says a negation somewhere. Replayed over every set's captured
#: passages: 0.2 gains one answer, 0.25 two, 0.3 the same two and loses one.
NEGATED_CONDITION_BONUS = 0.25
#: For the share of the question's adjacent words a unit says side by side too (of two
#: units sharing as many words, the one saying "each document" as the question does).
PHRASE_WEIGHT = 0.1
#: How much a question word found only in the unit's title or heading counts.
CONTEXT_WEIGHT = 0.8
FIRST_UNDER_HEADING_BONUS = 0.05
#: For every unit of a section whose heading says the question's adjacent words side by
#: side, as no other heading among the passages does ("Resuming a stream with
#: Last-Event-ID" for "how do I resume a stream after a disconnect?"), scaled by the
#: share of the question's pairs it says so: the heading states what the question asks
#: about, which the units' own words cannot tell (the AI SDK's reload section says
#: "resume" and "stream" too, inside `useChat({resume: true})` and its route, in a
#: shorter sentence that opens its section, and led the answer although the search
#: ranked it third). A pair several headings say ("OpenAI-compatible face") names the
#: pages' common subject and tells no section apart. Replayed over every set's captured
#: passages: 0.2 and 0.3 gain one answer, lose none (0.2 changes 10 answers, 0.3 12);
#: counting every heading's pairs, or a shared pair at 1/n, loses one.
HEADING_PHRASE_BONUS = 0.2
#: For the first sentence of a document the question names (see ``score_units``), scaled by
#: the share of the question its title says: "what does npm dedupe do?" is all title and
#: asks what the page says first; "what happens with npm stop when no stop script is
#: defined?" names the page but asks one thing of it, which the opening may not say.
OPENING_BONUS = 0.2
#: A question that asks what a named document is or does ("what does npm rebuild run?",
#: "what does npm doctor check?": the title and at most one more word) is answered by
#: the document's opening, however many other sentences repeat its words.
DEFINITION_BONUS = 0.6
#: A how-to asked of a command's page ("how do I clear out npm's cache?") is answered by
#: the item of its subcommand list that does it ("clean: Delete … out of the cache
#: folder"), which the synopsis turns into the line to type (``with_command_line``),
#: rather than by the page's summary naming every subcommand.
SUBCOMMAND_BONUS = 0.05
#: For a table row about what the question asks (``llm.extractive_signals.row_about_asked``).
ROW_KEY_BONUS = 0.1

#: How much a question word said only inside a file's path counts
#: (``llm.extractive_words.apart_from_paths``): the folders of a path name a file, not
#: what the sentence says. "How do I deploy this on Heroku?" was answered with the MCP
#: servers paragraph, whose one "deploy" is in `deploy/mcp-servers.example.toml` (0.72:
#: the unmentioned Heroku did not decline it), and so was "… with Docker?" over the
#: docker-compose section. Replayed over every set (465 answers): 0 to 0.65 change only
#: the Heroku question, now declined as expected (round35 40/42 -> 41/42), 0.8 nothing;
#: every path (routes, `~/.npm`) lost an original answer, bare file names
#: (`package.json`) changed nine npm answers, `--flag` words three misses.
FILE_PATH_WEIGHT = 0.5
_EMPHASIS = re.compile(r"[*_`]")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


def _unit_score(question: _Question, text: str, context: frozenset[str]) -> float:
    """Coverage of the question by the unit, its title and heading counting a little less
    ("This command removes …" under "npm-prune" is about npm prune), and so do the words
    of its links, which name another page ("refer to [package-lock.json](…)" points at
    the answer, it is not it), and those of a file's path less still (``FILE_PATH_WEIGHT``);
    less a little for every word past a sentence's worth (of two units that cover the
    question alike, the one that says only that is the answer);
    plus a little for the question's adjacent words said side by side, and for a run of
    its words said in a row as it says them (``llm.extractive_signals.run_bonus``)."""
    links = " ".join(m.group(1) for m in _LINK.finditer(text))
    if links:
        context = context | question.terms(links)
        text = _LINK.sub("", text)
    words = len(text.split())
    text, paths = question.words.paths_apart(text)
    terms = question.terms(text) | _said_otherwise(question, text)
    own, around = question.covers(terms, context)
    in_paths = 0.0
    if paths:
        _, with_paths = question.covers(terms, context | question.terms(paths))
        in_paths = FILE_PATH_WEIGHT * (with_paths - around)
    phrase = PHRASE_WEIGHT * question.words.phrase_share(question.pairs, text) + _run_bonus(question, text)
    return own + CONTEXT_WEIGHT * (around - own) + in_paths - min(0.1, 0.002 * max(0, words - 20)) + phrase


def _enumerates(text: str) -> bool:
    """A sentence that lists several things ("`=`, `!=`, `>` …"), not one whose clauses
    are set apart by commas."""
    return _LISTED.search(text) is not None


def _only_links(text: str) -> bool:
    """A unit that is nothing but links ("See also" lists) says nothing itself."""
    return len(_LINK.sub("", item_body(text)).strip(" .,;:-*")) < 3


def _names(question: _Question, title: frozenset[str], shared: frozenset[str]) -> bool:
    """The question names the document: every word of its title is asked about, or every
    word of it that no other passage's title has ("how do I log in" names ``npm-login``
    among ``npm-*`` pages; the shared "npm" names the collection, not a page)."""
    asked = question.stems | frozenset(question.joined) | question.asked_apart()
    coverage = question.words.coverage
    if coverage(title, asked) >= 1.0:
        return True
    own = title - shared
    return bool(own) and own != title and coverage(own, asked) >= 1.0


def _section_named(question: _Question, heading: str, title: frozenset[str]) -> float:
    """The share of the question a section's heading says, when the question names the
    section (every word of its heading that the page's title has not said is asked:
    "when should perplexity_search be used?" names the section ``perplexity_search``; or
    the heading says every word of the question and one more: a heading that asks the
    question itself); else 0. Like a named page, a named section is answered by what it
    says first (``llm.extractive_signals.continues_section``: even when that is in the next chunk)."""
    words = question.words
    said = question.terms(heading)  # "Backups" says the question's "back up"
    heading_stems = said - title
    asked = question.stems | frozenset(question.joined)
    if not heading_stems:
        return 0.0
    if words.coverage(heading_stems, asked) < 1.0:
        # A heading that says the whole question and one word more ("Does npm send any
        # information about me back to the registry?") names the section too.
        extra = sum(1 for h in heading_stems if words.coverage(frozenset({h}), asked) < 1.0)
        if extra > 1 or len(heading_stems) < 4 or words.coverage(question.stems, said) < 1.0:
            return 0.0
    return words.coverage(question.stems, heading_stems)


def _heading_phrases(reads: list[_Read], question: _Question) -> dict[str, float]:
    """``{heading: share}``: the share of the question's adjacent word pairs a section
    heading says side by side and no other heading of the passages says, for the
    headings that say one (``HEADING_PHRASE_BONUS``); not a page's title over its
    opening ("Connecting MCP servers" for "how do I connect an MCP server?" is the page
    the question names, answered by what to set, not by the opening's first sentence)."""
    pairs = sorted(question.pairs)
    if not pairs:
        return {}
    # A page's own title heading its opening names the page, which ``_names`` weighs.
    titles = {question.words.stems(r.passage.title) for r in reads}
    headings = {h for r in reads for h in r.headings if h and question.words.stems(h) not in titles}
    saying = {h: [pair for pair in pairs if question.words.phrase_share(frozenset({pair}), h) >= 1.0] for h in headings}
    count: dict[tuple[str, str], int] = {}
    for said in saying.values():
        for pair in said:
            count[pair] = count.get(pair, 0) + 1
    shares = {h: sum(1.0 for pair in said if count[pair] == 1) / len(pairs) for h, said in saying.items()}
    return {h: share for h, share in shares.items() if share > 0}


def _shared_title_stems(reads: list[_Read], words: Words) -> frozenset[str]:
    seen: dict[str, int] = {}
    for title in {r.passage.title for r in reads}:
        for stem in words.stems(title):
            seen[stem] = seen.get(stem, 0) + 1
    return frozenset(t for t, n in seen.items() if n > 1)


def score_units(reads: list[_Read], question: _Question) -> list[_Unit]:
    """Every unit of ``reads`` that is about the question, scored: what the answer
    chooses its lead and further passages from (``llm.extractive_answer``), in the
    passages' order; units about the question neither themselves nor by their section
    are left out."""
    out: list[_Unit] = []
    words = question.words
    shared = _shared_title_stems(reads, words)
    page_terms: dict[str, frozenset[str]] = {}  # what each page says, over its passages here
    for read in reads:
        document = _document(read)
        page_terms[document] = page_terms.get(document, frozenset()) | question.terms(read.passage.text)
    heading_phrase = _heading_phrases(reads, question)
    for p, read in enumerate(reads):
        # A title and a heading are read as the unit's own words are (``Question.terms``):
        # "What the OpenAI-compatible face sends back" says nothing of "how do I back up
        # my data?" (a phrasal verb without its particle), "Backups" says its "back up".
        title = question.terms(read.passage.title)
        rank = 0.1 * read.passage.score - 0.02 * p
        # A question that names a document ("what does npm dedupe do?", every word in the
        # title "npm-dedupe") is answered by what that document says first.
        named = read.first and _names(question, title, shared)
        said_by_title = title | {head for word, head in question.joined.items() if word in title}
        named_share = words.coverage(question.stems, said_by_title) if named else 0.0
        # What the title does not say of the question is at most one word, and one the
        # page says ("what does npm doctor check?"): "what is in the backend folder?"
        # names npm's "Folders" page by its title but asks about something it never says.
        unsaid = frozenset(q for q in question.stems if words.coverage(frozenset({q}), said_by_title) < 1.0)
        defines = (
            named
            and question.definition
            and len(unsaid) <= 1
            and (not unsaid or words.coverage(unsaid, page_terms[_document(read)]) >= 1.0)
        )
        opening = _opening(read)
        continued = _continues_section(read, reads)
        page_named = _names(question, title, shared)
        for b, block in enumerate(read.blocks):
            if block.kind == "heading" or block.kind == "code":
                continue
            context = title | question.terms(read.headings[b])
            after_heading = (b > 0 and read.blocks[b - 1].kind == "heading") or b == continued or after_form(read, b)
            if block.kind in ("list", "table") and question.enumeration:
                # The whole block, for a question asking for several things: when its
                # heading, title or introduction names them ("which events …" is the
                # table under "The events", not a list that mentions events).
                whole = block.markdown()
                if len(whole) <= WHOLE_BLOCK_CHARS and not all(_only_links(u) for u in block.units or [whole]):
                    plain = whole
                    intro = _prev_block(read, b)
                    named_by = context | (
                        question.terms(intro.units[-1])
                        if intro and intro.kind == "prose" and intro.units
                        else frozenset()
                    )
                    of_them = question.focus is None or question.focus in named_by
                    score = _unit_score(question, plain, context) + (
                        ENUMERATION_BONUS + min(0.1, 0.002 * max(0, len(plain.split()) - 20))
                        if of_them
                        else -WHOLE_BLOCK_PENALTY
                    )
                    if score > 0:
                        out.append(_Unit(p, b, -1, whole, score + rank))
            if block.kind == "table":
                for i, (row, cells) in enumerate(_table_rows(block)):
                    score = _unit_score(question, cells, context | words.stems(_table_rows_header(block)))
                    if _row_about_asked(question, row):
                        score += ROW_KEY_BONUS
                    if words.coverage(question.stems, question.terms(cells)) > 0:
                        out.append(_Unit(p, b, i, row, score + rank - 0.004 * min(i, 10)))
                continue
            for i, text in enumerate(block.units):
                # A page's summary is a whole sentence however short ("List installed
                # packages."), and it is quoted with the page's opening.
                if (len(text) < MIN_LEAD_CHARS and b != read.summary) or _only_links(text):
                    continue
                last = i == len(block.units) - 1
                if block.kind == "prose" and last and _introduces(text) and _next_block(read, b) is None:
                    continue  # introduces what this passage does not hold
                if block.kind == "list" and _introduces(item_body(text)) and not _item_shows(read, b, i):
                    continue  # an item introducing what the passage does not hold, or not here
                raw = item_body(text) if block.kind == "list" else text
                plain = _LINK.sub(r"\1", raw)
                score = _unit_score(question, raw, context) + rank - 0.004 * min(i, 10)
                score += HEADING_PHRASE_BONUS * heading_phrase.get(read.headings[b], 0.0)
                score += ASKED_HEADING_BONUS * _asked_by_heading(question, read.headings[b], words)
                if (
                    words.coverage(question.stems, question.terms(plain) | _said_otherwise(question, plain)) <= 0
                    and not (named and b == opening)
                    and words.coverage(question.stems, question.terms(read.headings[b])) < 0.5
                ):
                    continue  # about the question neither itself nor by its section
                if after_heading and i == 0:  # what a section says first is what it is about
                    score += FIRST_UNDER_HEADING_BONUS
                    if not (named and b == opening):
                        score += OPENING_BONUS * _section_share(question, read.headings[b], title, _section_named)
                elif i == 0 and _after_properties(read, b, title, words):
                    score += OPENING_BONUS * _section_named(question, read.headings[b], title)
                if named and b == opening and i == 0 and _opening_shows_how(question, read, b):
                    score += DEFINITION_BONUS if defines else OPENING_BONUS * named_share
                if question.holds_wanted(plain):
                    score += ANSWER_TYPE_BONUS
                if _names_kind(question, plain):
                    score += KIND_NAME_BONUS
                if _defines_asked(question, raw):
                    score += _GLOSSARY_BONUS
                if _says_what_asked_is(question, plain):
                    score += SUBJECT_BONUS
                if _says_of_subject(question, plain):
                    score += YES_NO_SUBJECT_BONUS
                how = _how_to_bonus(question, raw)
                if not how and i == 0 and _opens_setting_for(question, read, b, title, words):
                    how = HOW_TO_NAME_BONUS  # its quote names the setting (``with_name``)
                score += how
                if block.kind == "list" and page_named and _subcommand(question, raw):
                    score += SUBCOMMAND_BONUS
                bare = _EMPHASIS.sub("", plain)  # the sentence without Markdown emphasis
                if question.holds_count(bare):
                    score += COUNT_BONUS
                follower = _next_block(read, b)
                introduces_list = (
                    last and _introduces(text) and follower is not None and follower.kind in ("list", "table")
                )
                if _names_focus(question, plain) and (introduces_list or _enumerates(plain)):
                    score += FOCUS_BONUS
                if question.negated and _NEGATION.search(bare):
                    score += NEGATION_BONUS
                    if _NEGATED_CONDITION.match(bare):
                        score += NEGATED_CONDITION_BONUS
                out.append(_Unit(p, b, i, text, score))
    return out


def after_form(read: _Read, b: int) -> bool:
    """Block ``b`` is what a section says first after the form it opens with: a heading,
    a code block (``npm config delete key [key ...]`` under "delete"), then this
    paragraph, which says what the form does — as much the section's opening as a
    paragraph right under its heading. Not a page's one-line summary, which the reader
    meets after the page's synopsis but which the page's opening says in full."""
    return b >= 2 and b != read.summary and read.blocks[b - 1].kind == "code" and read.blocks[b - 2].kind == "heading"


def _subcommand(question: _Question, item: str) -> bool:
    """A how-to's item of a subcommand list ("clean: Delete …") that shares a word of the
    question besides its label."""
    label = _SUBCOMMAND_ITEM.match(item)
    return question.how_to and label is not None and question.words.coverage(question.stems, question.terms(item)) > 0


__all__ = [
    "ANSWER_TYPE_BONUS",
    "CONTEXT_WEIGHT",
    "COUNT_BONUS",
    "DEFINITION_BONUS",
    "ENUMERATION_BONUS",
    "FILE_PATH_WEIGHT",
    "FIRST_UNDER_HEADING_BONUS",
    "FOCUS_BONUS",
    "HEADING_PHRASE_BONUS",
    "KIND_NAME_BONUS",
    "NEGATED_CONDITION_BONUS",
    "NEGATION_BONUS",
    "OPENING_BONUS",
    "PHRASE_WEIGHT",
    "ROW_KEY_BONUS",
    "SUBCOMMAND_BONUS",
    "WHOLE_BLOCK_PENALTY",
    "after_form",
    "score_units",
]
