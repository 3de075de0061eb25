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
  cannot be quoted whole, so it is never a lead — another copy of the page has the list;
* a second passage joins only when it covers the question nearly as well, from another
  part of the documents, and adds sentences the answer does not already have: no
  sentence is ever said twice (compared over folded words, so the ``.md`` and ``.html``
  copies of one page are one sentence);
* lists and fenced code stay Markdown (the playground renders it), each passage ends
  with its ``[source_id]`` citation.

Scores are term coverage: the share of the question's content words (stemmed, and
matched by shared prefixes and roots, so "differently" meets "differences" and
"disconnect" half-meets "reconnecting") a unit holds, plus a little for the words of
its title and section heading and for the search's own rank and score
(``llm.extractive_question`` reads the question). A document the question names opens
the answer with its first paragraph (asides such as "Note: …" are not an opening); a
unit holding what the question's form asks for (a path for "where", a number with its
unit for "how many") is preferred; words inside links name another page and count as
context only; a section quoted from its start keeps a heading that says more than its
paragraph; a second passage comes from another document.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from llm.extractive_pages import PageOpening, alias_documents
from llm.extractive_question import NEGATION as _NEGATION
from llm.extractive_question import WORD as _WORD
from llm.extractive_question import Question as _Question
from llm.extractive_question import coverage as _coverage
from llm.extractive_question import stems as _stems
from llm.markdown_blocks import Block, item_body, parse_passage, split_item, split_sentences

MIN_RELEVANCE = 0.08
#: A lead shorter than this says too little to answer with ("See also:").
MIN_LEAD_CHARS = 25
#: A paragraph up to this long is quoted whole around its lead sentence.
WHOLE_PARAGRAPH_CHARS = 600
#: A list, table or code block up to this long is quoted whole with its introduction.
WHOLE_BLOCK_CHARS = 1800
#: A whole list or table says more than the question asks: an item or sentence that
#: covers the question as well is preferred.
WHOLE_BLOCK_PENALTY = 0.1
#: A question asking for several things ("which events…", "what are the…", "list…")
#: is answered by a whole list or table: it gains this much instead of the penalty, and
#: its length is not held against it.
ENUMERATION_BONUS = 0.05
ANSWER_TYPE_BONUS = 0.15
#: A question about a negated case ("… when there is no restart script?") is answered by
#: a sentence about that case ("If it does _not_ have a restart script …"), not by the
#: one about the positive case beside it, which holds the same words.
NEGATION_BONUS = 0.1
#: A section heading this long says what its paragraph is about (see ``_with_heading``).
MIN_HEADING_WORDS = 3
_ASIDE = re.compile(r"^[*_\s]*(?:note|warning|caution|tip|see also|deprecated)\b[*_\s]*:", re.IGNORECASE)
#: How much a question word found only in the unit's title or heading counts.
CONTEXT_WEIGHT = 0.8
FIRST_UNDER_HEADING_BONUS = 0.05
#: For the first sentence of a document the question names (see ``_units``), scaled by
#: the share of the question its title says: "what does npm dedupe do?" is all title and
#: asks what the page says first; "what happens with npm stop when no stop script is
#: defined?" names the page but asks one thing of it, which the opening may not say.
OPENING_BONUS = 0.2
#: A question that asks what a named document is or does ("what does npm rebuild run?",
#: "what does npm doctor check?": the title and at most one more word) is answered by
#: the document's opening, however many other sentences repeat its words.
DEFINITION_BONUS = 0.6
#: A code block up to this long follows the paragraph that leads to it.
FOLLOWING_CODE_CHARS = 500
MAX_ANSWER_CHARS = 1200
MAX_PASSAGES = 2
#: A summary longer than this is no one-line summary (see ``_with_summary``).
MAX_SUMMARY_CHARS = 200
#: A further passage must score at least this share of the best one.
SECOND_PASSAGE_SHARE = 0.75

_EMPHASIS = re.compile(r"[*_`]")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_REFERRING = frozenset("this that these those it its they their such then so".split())


@dataclass(frozen=True, slots=True)
class Passage:
    source_id: str
    title: str
    text: str
    score: float
    #: The document's one-line summary (a Markdown page's front-matter ``description``:
    #: "Create a tarball from a package"), read with the passage that opens the document.
    summary: str = ""


def sentence_key(text: str) -> str:
    """What makes two sentences the same sentence: their folded words (markup, line
    wrapping, list markers and citations do not count)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_WORD.findall(folded))


@dataclass(slots=True)
class _Unit:
    passage: int
    block: int
    index: int  # the sentence or item within the block
    text: str
    score: float


@dataclass(slots=True)
class _Read:
    """A passage parsed, with the heading each block sits under."""

    passage: Passage
    blocks: list[Block]
    headings: list[str]
    first: bool  # the passage opens its document
    summary: int = -1  # the block of the document's summary (``_with_summary``), if any


def _read(passage: Passage) -> _Read:
    first = "#" not in passage.source_id or passage.source_id.endswith("#0")
    blocks = parse_passage(passage.text, first_of_document=first)
    summary = -1
    if first:
        blocks, summary = _with_summary(blocks, passage.summary)
    headings: list[str] = []
    current = ""
    for b in blocks:
        if b.kind == "heading":
            current = b.text
        headings.append(current)
    return _Read(passage, blocks, headings, first, summary)


def _with_summary(blocks: list[Block], summary: str) -> tuple[list[Block], int]:
    """The document's summary as a sentence of its own, where a reader meets it: after
    the page's leading title and synopsis (headings and code before any prose), so the
    synopsis stays the command of the page it summarises. ``npm-pack``'s first chunk
    holds its synopsis and option sections only; its summary, "Create a tarball from a
    package.", is what answers "how do I create a tarball of my package?"."""
    text = " ".join(summary.split())
    if not text or len(text) > MAX_SUMMARY_CHARS:
        return blocks, -1
    if not text.endswith((".", "!", "?", ":")):
        text += "."
    at = 0
    for b, block in enumerate(blocks):
        if block.kind not in ("heading", "code"):
            break
        if block.kind == "code":
            at = b + 1
    return [*blocks[:at], Block("prose", [text]), *blocks[at:]], at


def _introduces(text: str) -> bool:
    return text.rstrip("*_ ").endswith(":")


def _next_block(read: _Read, b: int) -> Block | None:
    return read.blocks[b + 1] if b + 1 < len(read.blocks) else None


def _prev_block(read: _Read, b: int) -> Block | None:
    return read.blocks[b - 1] if b > 0 else None


def _unit_score(question: _Question, text: str, context: frozenset[str]) -> float:
    """Coverage of the question by the unit, its title and heading counting a little less
    ("This command removes …" under "npm-prune" is about npm prune), and so do the words
    of its links, which name another page ("refer to [package-lock.json](…)" points at
    the answer, it is not it); less a little for every word past a sentence's worth (of
    two units that cover the question alike, the one that says only that is the answer)."""
    links = " ".join(m.group(1) for m in _LINK.finditer(text))
    if links:
        context = context | question.terms(links)
        text = _LINK.sub("", text)
    terms = question.terms(text)
    own = _coverage(question.stems, terms)
    around = _coverage(question.stems, terms | context)
    words = len(text.split())
    return own + CONTEXT_WEIGHT * (around - own) - min(0.1, 0.002 * max(0, words - 20))


def _aside(text: str) -> bool:
    """A paragraph set apart from what the document says ("Note: this command is unaware
    of workspaces."): not the document's opening, however early it comes."""
    return _ASIDE.match(text) is not None


def _only_links(text: str) -> bool:
    """A unit that is nothing but links ("See also" lists) says nothing itself."""
    return len(_LINK.sub("", item_body(text)).strip(" .,;:-*")) < 3


def _names(question: _Question, title: frozenset[str], shared: frozenset[str]) -> bool:
    """The question names the document: every word of its title is asked about, or every
    word of it that no other passage's title has ("how do I log in" names ``npm-login``
    among ``npm-*`` pages; the shared "npm" names the collection, not a page)."""
    asked = question.stems | frozenset(question.joined)
    if _coverage(title, asked) >= 1.0:
        return True
    own = title - shared
    return bool(own) and own != title and _coverage(own, asked) >= 1.0


def _section_named(question: _Question, heading: str, title: frozenset[str]) -> float:
    """The share of the question a section's heading says, when the question names the
    section (every word of its heading that the page's title has not said is asked:
    "when should perplexity_search be used?" names the section ``perplexity_search``);
    else 0. Like a named page, a named section is answered by what it says first."""
    heading_stems = _stems(heading) - title
    asked = question.stems | frozenset(question.joined)
    if not heading_stems or _coverage(heading_stems, asked) < 1.0:
        return 0.0
    return _coverage(question.stems, heading_stems)


def _shared_title_stems(reads: list[_Read]) -> frozenset[str]:
    seen: dict[str, int] = {}
    for title in {r.passage.title for r in reads}:
        for stem in _stems(title):
            seen[stem] = seen.get(stem, 0) + 1
    return frozenset(t for t, n in seen.items() if n > 1)


def _units(reads: list[_Read], question: _Question) -> list[_Unit]:
    out: list[_Unit] = []
    shared = _shared_title_stems(reads)
    for p, read in enumerate(reads):
        title = _stems(read.passage.title)
        rank = 0.1 * read.passage.score - 0.02 * p
        # A question that names a document ("what does npm dedupe do?", every word in the
        # title "npm-dedupe") is answered by what that document says first.
        named = read.first and _names(question, title, shared)
        said_by_title = title | {head for word, head in question.joined.items() if word in title}
        named_share = _coverage(question.stems, said_by_title) if named else 0.0
        defines = (
            named
            and question.definition
            and sum(1 for q in question.stems if _coverage(frozenset({q}), said_by_title) < 1.0) <= 1
        )
        opening = _opening(read)
        for b, block in enumerate(read.blocks):
            if block.kind == "heading" or block.kind == "code":
                continue
            context = title | _stems(read.headings[b])
            after_heading = b > 0 and read.blocks[b - 1].kind == "heading"
            if block.kind in ("list", "table") and question.enumeration:
                # The whole block, for a question asking for several things: when its
                # heading, title or introduction names them ("which events …" is the
                # table under "The events", not a list that mentions events).
                whole = block.markdown()
                if len(whole) <= WHOLE_BLOCK_CHARS and not all(_only_links(u) for u in block.units or [whole]):
                    plain = whole
                    intro = _prev_block(read, b)
                    named_by = context | (question.terms(intro.units[-1]) if intro and intro.kind == "prose"
                                          and intro.units else frozenset())
                    of_them = question.focus is None or question.focus in named_by
                    score = _unit_score(question, plain, context) + (
                        ENUMERATION_BONUS + min(0.1, 0.002 * max(0, len(plain.split()) - 20)) if of_them
                        else -WHOLE_BLOCK_PENALTY
                    )
                    if score > 0:
                        out.append(_Unit(p, b, -1, whole, score + rank))
            if block.kind == "table":
                for i, (row, cells) in enumerate(_table_rows(block)):
                    score = _unit_score(question, cells, context | _stems(_table_rows_header(block)))
                    if _coverage(question.stems, question.terms(cells)) > 0:
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
                raw = item_body(text) if block.kind == "list" else text
                plain = _LINK.sub(r"\1", raw)
                score = _unit_score(question, raw, context) + rank - 0.004 * min(i, 10)
                if _coverage(question.stems, question.terms(plain)) <= 0 and not (named and b == opening) \
                        and _coverage(question.stems, _stems(read.headings[b])) < 0.5:
                    continue  # about the question neither itself nor by its section
                if after_heading and i == 0:  # what a section says first is what it is about
                    score += FIRST_UNDER_HEADING_BONUS
                    if not (named and b == opening):
                        score += OPENING_BONUS * _section_named(question, read.headings[b], title)
                if named and b == opening and i == 0:
                    score += DEFINITION_BONUS if defines else OPENING_BONUS * named_share
                if question.holds_wanted(plain):
                    score += ANSWER_TYPE_BONUS
                if question.negated and _NEGATION.search(_EMPHASIS.sub("", plain)):
                    score += NEGATION_BONUS
                out.append(_Unit(p, b, i, text, score))
    return out


def _opening(read: _Read) -> int:
    """The block a document opens with: its first paragraph that is no aside and not the
    summary (which says less than the page's own first words), before any list or table
    (a paragraph after an option's "Default: …" list describes the option, not the
    page); -1 when the passage holds none."""
    for b, block in enumerate(read.blocks):
        if block.kind in ("list", "table"):
            return -1
        if block.kind == "prose" and block.units and not _aside(block.units[0]) and b != read.summary:
            return b
    return -1


_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")


def _table_rows_header(block: Block) -> str:
    """A table's header line (its column names), or "" when it has no header rule."""
    lines = block.text.split("\n")
    return lines[0] if len(lines) > 2 and _TABLE_RULE.match(lines[1]) else ""


def _table_rows(block: Block) -> list[tuple[str, str]]:
    """A table's body rows: ``(the row as Markdown, its cells as plain words)``. A row
    says one thing ("`message_complete` … always last, exactly once") as an item does."""
    lines = block.text.split("\n")
    body = lines[2:] if _table_rows_header(block) else lines
    return [(line, " ".join(cell.strip() for cell in line.strip().strip("|").split("|"))) for line in body
            if line.strip() and not _TABLE_RULE.match(line)]


def _window(read: _Read, unit: _Unit) -> list[str]:
    """The Markdown pieces quoted for a lead: its neighbours and what it introduces."""
    block = read.blocks[unit.block]
    if block.kind == "table" and unit.index >= 0:
        # One row under its header and rule: still a table a reader can read.
        lines = block.text.split("\n")
        header = lines[:2] if _table_rows_header(block) else []
        return ["\n".join([*header, unit.text])]
    if unit.block == read.summary:
        # The summary says what the page is in a line; the page's opening says it in full.
        opening = _opening(read)
        if opening < 0 or len(" ".join(read.blocks[opening].units)) > WHOLE_PARAGRAPH_CHARS:
            return [block.units[0]]
        return [block.units[0], *_window(read, _Unit(unit.passage, opening, 0, read.blocks[opening].units[0], 0.0))]
    pieces: list[str] = []
    if block.kind in ("list", "table"):
        intro = _prev_block(read, unit.block)
        whole = block.markdown()
        introduced = intro is not None and intro.kind == "prose" and bool(intro.units) \
            and _introduces(intro.units[-1])
        if unit.index == -1 or (introduced and len(whole) <= WHOLE_BLOCK_CHARS):
            return [intro.units[-1], whole] if introduced and intro is not None else [whole]
        return [item_body(block.units[unit.index])]  # one item alone is not a list
    sentences = block.units
    paragraph = " ".join(sentences)
    if len(paragraph) <= WHOLE_PARAGRAPH_CHARS:
        chosen = list(range(len(sentences)))
    else:
        start = unit.index
        first_word = (sentences[start].split(" ", 1)[0]).casefold().strip("`*_\"'")
        if start > 0 and first_word in _REFERRING:
            start -= 1
        end = min(len(sentences), unit.index + 2)
        if _introduces(sentences[unit.index]):
            end = unit.index + 1
        chosen = list(range(start, end))
    pieces.append(" ".join(sentences[i] for i in chosen))
    follower = _next_block(read, unit.block)
    ends_paragraph = chosen[-1] == len(sentences) - 1
    if follower is not None and ends_paragraph:
        shown = follower.markdown()
        introduced = _introduces(sentences[chosen[-1]]) and follower.kind in ("list", "code", "table")
        limit = WHOLE_BLOCK_CHARS if introduced else FOLLOWING_CODE_CHARS if follower.kind == "code" else 0
        if shown and len(shown) <= limit:
            pieces.append(shown)
    return pieces


def _with_synopsis(read: _Read, unit: _Unit, pieces: list[str], question: _Question) -> list[str]:
    """A how-to question quoted from a page's description gets the page's synopsis too
    (the short code block above the description) when the quote does not name the page's
    command itself: "Spawn a subshell in the directory of the installed package
    specified." answers "how do I open a subshell …" only with ``npm explore <pkg>``
    beside it, and "add: Add a new user as a maintainer of a package." (an item of
    ``npm-owner``'s description) only with ``npm owner add <user> <package-spec>``."""
    if not question.how_to or not read.first:
        return pieces
    command = " ".join(_WORD.findall(read.passage.title.casefold()))
    if command and command in " ".join(_WORD.findall(" ".join(pieces).casefold())):
        return pieces  # the quote names the command: its synopsis adds nothing
    opening = read.summary if unit.block == read.summary else _opening(read)
    if opening < 0 or opening > unit.block or read.headings[unit.block] != read.headings[opening]:
        return pieces  # not the page's description: its synopsis is about something else
    code = next((b for b in read.blocks[:opening] if b.kind == "code"), None)
    if code is None:
        return pieces
    shown = code.markdown()
    return [*pieces, shown] if shown and len(shown) <= FOLLOWING_CODE_CHARS else pieces


def _with_heading(read: _Read, unit: _Unit, pieces: list[str]) -> list[str]:
    """A section quoted from its start keeps its heading when the heading says something
    the paragraph does not ("The answers come from the extractive provider" over "No
    model was reachable at start-up."): a label of one or two words ("Synopsis",
    "`cache`") says nothing, and is left out."""
    block = read.blocks[unit.block]
    heading = _prev_block(read, unit.block)
    if heading is None or heading.kind != "heading" or block.kind != "prose" or not pieces \
            or _is_verbatim(pieces[0]) or not pieces[0].startswith(block.units[0]):
        return pieces
    title = heading.text.strip().strip("#*_ ").strip()
    words = _WORD.findall(title)
    # The page's own title over its opening ("package.json @11.19.1" in an HTML copy)
    # names the page, not what the paragraph says.
    own = {w for w in _stems(title) if not w.isdigit()} - _stems(read.passage.title)
    if len(words) < MIN_HEADING_WORDS or not own or _stems(title) <= _stems(" ".join(pieces)):
        return pieces
    label = title if title.endswith(("?", "!", ".")) else f"{title}."
    return [f"**{label}** {pieces[0]}", *pieces[1:]]


def _is_verbatim(piece: str) -> bool:
    return piece.startswith(("```", "~~~", "|"))


def _fresh(text: str, said: set[str]) -> str:
    """The sentences of ``text`` not yet said (their keys join ``said``)."""
    kept: list[str] = []
    for sentence in split_sentences(text):
        key = sentence_key(sentence)
        if key and key not in said:
            said.add(key)
            kept.append(sentence)
    return " ".join(kept)


def _new_sentences(pieces: list[str], said: set[str]) -> list[str]:
    """``pieces`` without the sentences (and list items, code blocks) already said;
    the keys of what is kept join ``said``."""
    kept: list[str] = []
    for piece in pieces:
        if _is_verbatim(piece):
            key = sentence_key(piece)
            if key and key not in said:
                said.add(key)
                kept.append(piece)
            continue
        lines: list[str] = []
        for line in piece.split("\n"):
            marker, body = split_item(line)
            text = _fresh(body, said)
            if text:
                lines.append(marker + text)
        if lines:
            kept.append("\n".join(lines))
    return kept


def _cite(pieces: list[str], source_id: str) -> str:
    """The passage's Markdown with its citation after its prose (or after the list)."""
    marker = f"[{source_id}]"
    if not _is_verbatim(pieces[0]):
        head = f"{pieces[0]} {marker}"
        return "\n\n".join([head, *pieces[1:]])
    return "\n\n".join([*pieces, marker])


def _document(read: _Read) -> str:
    return read.passage.source_id.split("#", 1)[0]


def _page_opening(read: _Read) -> PageOpening:
    """What a passage that opens its document says first (``llm.extractive_pages``)."""
    opening = _opening(read)
    text = " ".join(read.blocks[opening].units) if opening >= 0 else ""
    return PageOpening(_document(read), read.passage.summary, text)


def compose_answer(question: str, passages: list[Passage]) -> tuple[str, list[str], float]:
    """The best passage(s) for ``question``: ``(answer Markdown, cited source ids, confidence)``."""
    q = _Question.of(question)
    if not q.stems or not passages:
        return "", [], 0.0
    reads = [_read(p) for p in passages]
    aliases = alias_documents(_page_opening(r) for r in reads if r.first)
    reads = [r for r in reads if _document(r) not in aliases]
    units = sorted(_units(reads, q), key=lambda u: (-u.score, u.passage, u.block, u.index))
    units = [u for u in units if u.score >= MIN_RELEVANCE]
    if not units:
        return "", [], 0.0
    best = units[0].score
    said: set[str] = set()
    parts: list[str] = []
    sources: list[str] = []
    used_blocks: set[tuple[int, int]] = set()
    used_documents: set[str] = set()
    length = 0
    for unit in units:
        if len(parts) >= MAX_PASSAGES or (parts and unit.score < SECOND_PASSAGE_SHARE * best):
            break
        read = reads[unit.passage]
        document = _document(read)
        if (unit.passage, unit.block) in used_blocks or sentence_key(unit.text) in said \
                or document in used_documents:
            continue  # a second passage adds another page's answer, not more of the first's
        quoted = _with_synopsis(read, unit, _with_heading(read, unit, _window(read, unit)), q)
        pieces = _new_sentences(quoted, said.copy())
        size = sum(len(p) for p in pieces)
        if not pieces or (parts and length + size > MAX_ANSWER_CHARS):
            continue
        pieces = _new_sentences(pieces, said)
        used_blocks.add((unit.passage, unit.block))
        used_documents.add(document)
        source_id = read.passage.source_id
        parts.append(_cite(pieces, source_id))
        length += size
        if source_id not in sources:
            sources.append(source_id)
    confidence = round(min(0.9, best), 2)
    return "\n\n".join(parts), sources, confidence


__all__ = ["MAX_ANSWER_CHARS", "MIN_RELEVANCE", "Passage", "compose_answer", "sentence_key"]
