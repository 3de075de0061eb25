"""The offline answer: the best passage(s) of the search results, quoted whole.

What a newcomer reads first must read like an answer, so the unit of an answer is a
passage, not a bag of sentences:

* the sentence (or list item) that best covers the question is the *lead*; it is quoted
  with its neighbours — its whole paragraph when that is short, else the sentence after
  it (and the one before, when it opens with "This"/"It"…);
* a lead that introduces something ("… are:") brings the list or code block it
  introduces, whole; a lead that is one item of such a list brings the introduction and
  the list; a short code block right after the lead's paragraph comes along;
* a sentence that introduces a list the passage does not hold (the chunk ended there)
  cannot be quoted whole, so it is never a lead — unless the document's next chunk opens
  with that list or code block (``llm.extractive_next``), which is then quoted after it;
* a second passage joins only when it covers the question nearly as well, from another
  part of the documents, and adds sentences the answer does not already have: no
  sentence is ever said twice (compared over folded words, so the ``.md`` and ``.html``
  copies of one page are one sentence);
* lists and fenced code stay Markdown (the playground renders it), each passage ends
  with its ``[source_id]`` citation.

How well each unit covers the question is ``llm.extractive_score`` (term coverage,
each word weighed by how few of the passages say it, and the signals beyond it); this
module takes the units best first and chooses which join the answer. A section quoted
from its start keeps a heading that says more than its paragraph; a second passage
comes from another document, or from another part of a page already quoted. Reading a
passage is ``llm.extractive_read``, quoting a lead ``llm.extractive_quote``, and alias
pages ``llm.extractive_pages``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llm.extractive_additions import with_command_line as _with_command_line
from llm.extractive_additions import with_form_after as _with_form_after
from llm.extractive_additions import with_heading as _with_heading
from llm.extractive_additions import with_item_name as _with_item_name
from llm.extractive_additions import with_list_name as _with_list_name
from llm.extractive_additions import with_name as _with_name
from llm.extractive_additions import with_synopsis as _with_synopsis
from llm.extractive_additions import with_syntax as _with_syntax
from llm.extractive_followup import FollowUp
from llm.extractive_followup import about as _about
from llm.extractive_long import read_part
from llm.extractive_next import NextChunk, attach_next, chunk_position, wants_next
from llm.extractive_pages import PageOpening, alias_documents
from llm.extractive_question import Question as _Question
from llm.extractive_quote import cite as _cite
from llm.extractive_quote import new_sentences as _new_sentences
from llm.extractive_quote import window as _window
from llm.extractive_quote import without_answer_word as _without_answer_word
from llm.extractive_read import Passage, sentence_key
from llm.extractive_read import Read as _Read
from llm.extractive_read import document_of as _document
from llm.extractive_read import opening_block as _opening
from llm.extractive_read import read_passage as _read
from llm.extractive_score import score_units as _units
from llm.extractive_subject import ask_of as _ask_of
from llm.extractive_subject import declined as _declined
from llm.extractive_subject import proper_names_asked as _proper_names_asked
from llm.extractive_subject import unmentioned as _unmentioned
from llm.extractive_words import Words

MIN_RELEVANCE = 0.08
#: The best unit's score under which a question naming something no passage mentions is
#: declined (``llm.extractive_subject``). Over the sample KB, off-topic questions' best
#: units score 0.26-0.48 ("npm ci … npm install" 0.30, "restart a Kubernetes pod" 0.38,
#: "deploy to AWS Lambda" 0.48), questions with a name given only as context 0.68-0.84
#: ("in Chrome" 0.68, "I'm on Ubuntu" 0.78, "On my Mac" 0.84). A question about the name
#: (``llm.extractive_subject.asked_about``) is declined whatever its best unit scores:
#: "How do I configure webpack's dev server port?" finds ``AGENT_PORT`` at 0.70.
UNMENTIONED_MIN_SCORE = 0.6
MAX_ANSWER_CHARS = 1200
MAX_PASSAGES = 2
#: A further passage must score at least this share of the best one.
SECOND_PASSAGE_SHARE = 0.75
#: A further passage from a page already quoted must score at least this share of the
#: best one, and come from another part of the page (neither the quoted chunk nor the
#: one right before or after it, which continue it: ``_near``). A page often answers
#: in two places — "how does the full-text index stay in step with the documents?" is
#: the search section (BM25 over the full-text index, scored first) and the storage
#: section ("kept in sync by triggers", 0.004 behind) of the same page — and a second
#: passage was only ever taken from another page, so the second place was never quoted.
#: Replayed over every set's captured passages: 0.75-0.85 gain the same four answers and
#: lose none, 0.9 gains three; without the adjacency rule a continuation of the first
#: chunk took the second place and one answer was lost. The highest of the four-answer
#: shares is kept: the second passage must answer nearly as well as the first.
SAME_PAGE_SHARE = 0.85
#: Another part of the page already quoted joins at this share of the best instead of
#: ``SAME_PAGE_SHARE`` when it says every word of the question the answer has not said
#: yet (``_completes``): a page that answers in two places often splits the question's
#: words between them — "what environment variables configure the database?" is the
#: configuration page's opening ("configured through environment variables", 0.97) and
#: its ``AGENT_DB_PATH`` / ``AGENT_DATABASE_URL`` item (0.73: "database" is said by most
#: passages, so it weighs little), and the item, the half that names the variables, was
#: left out. Only the page already quoted: another page saying the one missing word
#: (a Perplexity setting for "web" in "my web page's origin") is noise. Replayed over
#: every set's captured passages: 0.6 gains one answer and loses none (eight answers
#: change, seven gain a second place of the same page); letting other pages complete at
#: 0.6-0.7 changed 13-35 answers, several with an unrelated passage, and gained nothing
#: more.
COMPLETING_SHARE = 0.6
#: A passage from another document joins only when the search scored it at least this
#: share of the passage the answer opens with. The answerer scores a unit by the
#: question's words it says, and a page the search found far less relevant may say the
#: one word the answer lacks in another sense: "Is my data sent anywhere?" (0.64, the
#: overview's "What leaves the machine") was followed by tool selection's "… the result
#: is sent as the `tool_selection` event" (0.15 with the sample KB alone; 0.24 beside
#: npm's documentation, where it stays), "How do I make someone an administrator?" (0.50)
#: by ``make bench`` (0.10). Replayed over every set's captured
#: passages: of 349 answers with two passages, the four under 0.3 carried no fact in the
#: second (three unrelated, one another part of the same page, which this leaves alone);
#: the lowest second passage carrying the answer's fact was at 0.35.
SECOND_SEARCH_SHARE = 0.3


def _chunk_position(read: _Read) -> int | None:
    return chunk_position(read.passage)


def _near(quoted: _Read, other: _Read) -> bool:
    """``other`` is the chunk already quoted from its document or continues it (the one
    right before or after it, which repeat each other's boundary sentences): more of
    the same passage, not another part of the page. Of chunks of different documents,
    or where a position is unknown, it is said to be near, so such a chunk is not taken."""
    if _document(quoted) != _document(other):
        return False
    a, b = _chunk_position(quoted), _chunk_position(other)
    return a is None or b is None or abs(a - b) <= 1


def _completes(question: _Question, lead: str, said: frozenset[str]) -> bool:
    """The lead says every word of the question the answer has not said yet (and there is
    at least one): quoted beside it, the answer covers the whole question."""
    match = question.words.match
    missing = [q for q in question.stems - question.topic if match(q, said) < 1.0]
    if not missing:
        return False
    terms = question.terms(lead)
    return all(match(q, terms) >= 1.0 for q in missing)


def _proper_names(asked: str, missing: tuple[str, ...], words: Words) -> frozenset[str]:
    """The stems of the capitalised names ``asked`` is about that a passage mentions
    (``Question.naming``); a name no passage says (``missing``) tells no passage apart."""
    return frozenset(s for name in _proper_names_asked(asked) if name not in missing for s in words.stems(name))


def _page_opening(read: _Read) -> PageOpening:
    """What a passage that opens its document says first (``llm.extractive_pages``)."""
    opening = _opening(read)
    text = " ".join(read.blocks[opening].units) if opening >= 0 else ""
    return PageOpening(_document(read), read.passage.summary, text)


def _said(question: _Question, reads: list[_Read]) -> list[frozenset[str]]:
    """What each distinct passage says of the question, its title and section included,
    for weighing the question's words by their rarity (``Question.weighed_by``); a
    passage read twice (the first search's and the page-scoped read's) counts once."""
    seen: dict[str, frozenset[str]] = {}
    words = question.words
    for read in reads:
        p = read.passage
        # ``sentence_key`` of the text, from its memoised folded words.
        seen[" ".join(words.folded(p.text))] = question.terms(p.text) | question.terms(p.title) | words.stems(p.section)
    return list(seen.values())


@dataclass(slots=True)
class Composed:
    """An answer: its Markdown, the cited source ids, its confidence, and the next chunks
    its quotes would go on into (``llm.extractive_next``: an introduction whose list or
    code block the next chunk holds, left out of this answer for want of it). With no
    answer, ``unmentioned`` holds what the question names that no passage mentions
    (``llm.extractive_subject``), for the answerer to say so."""

    answer: str = ""
    sources: list[str] = field(default_factory=list)
    confidence: float = 0.0
    wants: list[NextChunk] = field(default_factory=list)
    unmentioned: tuple[str, ...] = ()


def compose_answer(
    question: str,
    passages: list[Passage],
    words: Words | None = None,
    follow_up: FollowUp | None = None,
    following: list[Passage] | None = None,
) -> tuple[str, list[str], float]:
    """The best passage(s) for ``question``: ``(answer Markdown, cited source ids,
    confidence)`` (``compose``)."""
    composed = compose(question, passages, words, follow_up, following)
    return composed.answer, composed.sources, composed.confidence


def compose(
    question: str,
    passages: list[Passage],
    words: Words | None = None,
    follow_up: FollowUp | None = None,
    following: list[Passage] | None = None,
) -> Composed:
    """The best passage(s) for ``question``. ``words`` is the answerer's memoised word
    work (``ExtractiveProvider`` keeps one for its life); without it the answer builds
    its own, which only it uses. ``follow_up``: the question leans on earlier ones
    (``llm.extractive_followup``), whose words count too, below its own
    (``llm.extractive_followup.about``). ``following``: chunks read only for what they
    go on with after a passage ending with an introduction (``llm.extractive_next``),
    never quoted for themselves. ``question`` is the whole message: a greeting, context
    or sign-off naming what no passage says is left out of what the passages are scored
    by (``llm.extractive_subject.ask_of``), and only a name in what it asks declines it.
    Of a long message only its last words are read (``llm.extractive_long.read_part``):
    the work grows with the words read, on a thread holding the GIL."""
    question = read_part(question).text
    q = _Question.of(question, words)
    if follow_up is not None:
        q = _about(q, follow_up)
    if not q.stems or not passages:
        return Composed()
    reads = [_read(p, q.words) for p in passages]
    attach_next(reads, [*passages, *(following or [])])
    aliases = alias_documents(_page_opening(r) for r in reads if r.first)
    reads = [r for r in reads if _document(r) not in aliases]
    texts = [t for r in reads for t in (r.passage.title, r.passage.text)]
    q = q.written_apart(texts).modifier_alone_in(texts)
    said_by = _said(q, reads)
    missing = _unmentioned(question, said_by, q.words)
    asked = _ask_of(question, missing)
    if asked != question:
        # Scored by what the message asks, without the context naming the reader's own
        # stack ("My team uses Slack; how do I add an MCP server?" scored every passage by
        # "team" and "Slack" too, which none says).
        q = _Question.of(asked, q.words)
        if follow_up is not None:
            q = _about(q, follow_up)
        q = q.written_apart(texts).modifier_alone_in(texts)
        said_by = _said(q, reads)
    q = q.weighed_by(said_by).naming(_proper_names(asked, missing, q.words))
    units = sorted(_units(reads, q), key=lambda u: (-u.score, u.passage, u.block, u.index))
    units = [u for u in units if u.score >= MIN_RELEVANCE]
    declined = _declined(question, missing, bool(units) and units[0].score >= UNMENTIONED_MIN_SCORE)
    if declined:
        # The question's ask names something no passage mentions and is about it (its
        # owner, "webpack's dev server"; a code span; what "what is X" asks), or no unit
        # answers the rest of it well: whatever they share is common words, and quoting
        # that would answer another question. A name given as the setting ("resume a
        # stream in Chrome") leaves a unit answering the rest, and one outside the ask
        # ("I'm on Ubuntu. How do I …?", "Hello from Berlin!") never declines.
        return Composed(unmentioned=declined)
    if q.form_only and q.wants is not None:
        # "How big can it be?" of a file: only a unit stating an amount answers it.
        units = [u for u in units if q.holds_wanted(u.text)] or units
    if not units:
        return Composed()
    best = units[0].score
    said: set[str] = set()
    parts: list[str] = []
    sources: list[str] = []
    used_blocks: set[tuple[int, int]] = set()
    used_documents: set[str] = set()
    used_passages: list[int] = []
    length = 0
    covered: frozenset[str] = frozenset()  # what the answer says so far, as the question's terms
    wants: list[NextChunk] = []
    lead_found = 0.0  # the search's score of the passage the answer opens with
    for unit in units:
        if len(parts) >= MAX_PASSAGES or (parts and unit.score < COMPLETING_SHARE * best):
            break
        read = reads[unit.passage]
        document = _document(read)
        if (unit.passage, unit.block) in used_blocks or sentence_key(unit.text) in said:
            continue
        if document not in used_documents and parts and unit.score < SECOND_PASSAGE_SHARE * best:
            continue
        if document not in used_documents and parts and read.passage.score < SECOND_SEARCH_SHARE * lead_found:
            continue  # a page the search found far less relevant than the answer's first
        if document in used_documents and (
            any(_near(reads[i], read) for i in used_passages)
            or (unit.score < SAME_PAGE_SHARE * best and not _completes(q, unit.text, covered))
        ):
            continue  # more of a page already quoted: only another part of it, answering as well
        quoted = _with_item_name(read, unit, _with_heading(read, unit, _window(read, unit), q.words))
        quoted = _with_list_name(read, unit, quoted)
        quoted = _with_synopsis(read, unit, _with_name(read, unit, quoted), q)
        quoted = _with_command_line(reads, read, unit, quoted, q)
        quoted = _with_syntax(read, unit, quoted, q)
        quoted = _with_form_after(read, unit, quoted, q)
        quoted = _without_answer_word(quoted, asked)
        pieces = _new_sentences(quoted, said.copy())
        size = sum(len(p) for p in pieces)
        if not pieces or (parts and length + size > MAX_ANSWER_CHARS):
            continue
        pieces = _new_sentences(pieces, said)
        used_blocks.add((unit.passage, unit.block))
        used_documents.add(document)
        used_passages.append(unit.passage)
        if len(parts) == 0:
            lead_found = read.passage.score
        source_id = read.passage.source_id
        parts.append(_cite(pieces, source_id))
        covered |= q.terms(" ".join(pieces))
        length += size
        if source_id not in sources:
            sources.append(source_id)
        wanted = wants_next(read, unit)
        if wanted is not None and wanted not in wants:
            wants.append(wanted)
    confidence = round(min(0.9, best), 2)
    return Composed("\n\n".join(parts), sources, confidence, wants)


__all__ = ["MAX_ANSWER_CHARS", "MIN_RELEVANCE", "Composed", "Passage", "compose", "compose_answer", "sentence_key"]
