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
its title and section heading and for the search's own rank and score.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

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
_ENUMERATION = re.compile(r"^\s*(?:which\b|what\s+are\b|list\b|name\s+the\b)", re.IGNORECASE)
#: How much a question word found only in the unit's title or heading counts.
CONTEXT_WEIGHT = 0.8
FIRST_UNDER_HEADING_BONUS = 0.05
#: For the first sentence of a document the question names (see ``_units``).
OPENING_BONUS = 0.2
#: A code block up to this long follows the paragraph that leads to it.
FOLLOWING_CODE_CHARS = 500
MAX_ANSWER_CHARS = 1200
MAX_PASSAGES = 2
#: A further passage must score at least this share of the best one.
SECOND_PASSAGE_SHARE = 0.75

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_STOP = frozenset(
    "a an and are as at be by can could do does for from how i if in into is it its me my of on or our "
    "should so than that the their them then there these this those to was we what when where which who "
    "why will with would you your about after before does did get got has have having here just more most "
    "not only other over same some such too under up very via use used using see".split()
)
_PREFIXES = ("dis", "re", "un", "de", "pre", "non")
_REFERRING = frozenset("this that these those it its they their such then so".split())


@dataclass(frozen=True, slots=True)
class Passage:
    source_id: str
    title: str
    text: str
    score: float


def _terms(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [w for w in _WORD.findall(folded) if w not in _STOP and len(w) > 1]


def _stem(word: str) -> str:
    for suffix in ("ations", "ation", "ings", "ing", "ies", "ied", "ences", "ence", "ently", "ent",
                   "es", "ed", "ly", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def _root(stem: str) -> str:
    for prefix in _PREFIXES:
        if stem.startswith(prefix) and len(stem) - len(prefix) >= 4:
            return stem[len(prefix):]
    return stem


def _stems(text: str) -> frozenset[str]:
    return frozenset(_stem(t) for t in _terms(text))


def _match(q: str, terms: frozenset[str]) -> float:
    """1.0 when the question's stem is among ``terms`` (or shares a long prefix with
    one), 0.5 when only their roots meet ("disconnect" / "reconnect"), else 0."""
    if q in terms:
        return 1.0
    best = 0.0
    for t in terms:
        shorter, longer = sorted((len(q), len(t)))
        if shorter >= 5 and longer - shorter <= 3 and q[:shorter] == t[:shorter]:  # "configur"/"configure"
            return 1.0
        if shorter >= 7 and q[:7] == t[:7]:  # a long common prefix
            return 1.0
        if best < 0.5 and len(_root(q)) >= 4 and _root(q) == _root(t) and (_root(q) != q or _root(t) != t):
            best = 0.5
    return best


def _coverage(question: frozenset[str], terms: frozenset[str]) -> float:
    if not question or not terms:
        return 0.0
    return sum(_match(q, terms) for q in question) / len(question)


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


def _read(passage: Passage) -> _Read:
    first = "#" not in passage.source_id or passage.source_id.endswith("#0")
    blocks = parse_passage(passage.text, first_of_document=first)
    headings: list[str] = []
    current = ""
    for b in blocks:
        if b.kind == "heading":
            current = b.text
        headings.append(current)
    return _Read(passage, blocks, headings, first)


def _introduces(text: str) -> bool:
    return text.rstrip("*_ ").endswith(":")


def _next_block(read: _Read, b: int) -> Block | None:
    return read.blocks[b + 1] if b + 1 < len(read.blocks) else None


def _prev_block(read: _Read, b: int) -> Block | None:
    return read.blocks[b - 1] if b > 0 else None


def _unit_score(question: frozenset[str], text: str, context: frozenset[str]) -> float:
    """Coverage of the question by the unit, its title and heading counting a little less
    ("This command removes …" under "npm-prune" is about npm prune), less a little for
    every word past a sentence's worth (of two units that cover the question alike, the
    one that says only that is the answer)."""
    terms = _stems(text)
    own = _coverage(question, terms)
    around = _coverage(question, terms | context)
    words = len(text.split())
    return own + CONTEXT_WEIGHT * (around - own) - min(0.1, 0.002 * max(0, words - 20))


def _only_links(text: str) -> bool:
    """A unit that is nothing but links ("See also" lists) says nothing itself."""
    return len(_LINK.sub("", item_body(text)).strip(" .,;:-*")) < 3


def _units(reads: list[_Read], question: frozenset[str], enumeration: bool) -> list[_Unit]:
    out: list[_Unit] = []
    for p, read in enumerate(reads):
        title = _stems(read.passage.title)
        rank = 0.1 * read.passage.score - 0.02 * p
        # A question that names a document ("what does npm dedupe do?", every word in the
        # title "npm-dedupe") is answered by what that document says first.
        named = read.first and _coverage(title, question) >= 1.0
        opening = next((b for b, block in enumerate(read.blocks) if block.kind == "prose"), -1)
        for b, block in enumerate(read.blocks):
            if block.kind == "heading" or block.kind == "code":
                continue
            context = title | _stems(read.headings[b])
            after_heading = b > 0 and read.blocks[b - 1].kind == "heading"
            if block.kind in ("list", "table"):  # the whole block, when no one item says it
                whole = block.markdown()
                if len(whole) <= WHOLE_BLOCK_CHARS and not all(_only_links(u) for u in block.units or [whole]):
                    plain = _LINK.sub(r"\1", whole)
                    score = _unit_score(question, plain, context) + (
                        ENUMERATION_BONUS + min(0.1, 0.002 * max(0, len(plain.split()) - 20)) if enumeration
                        else -WHOLE_BLOCK_PENALTY
                    )
                    if score > 0:
                        out.append(_Unit(p, b, -1, whole, score + rank))
            if block.kind == "table":
                continue
            for i, text in enumerate(block.units):
                if len(text) < MIN_LEAD_CHARS or _only_links(text):
                    continue
                last = i == len(block.units) - 1
                if block.kind == "prose" and last and _introduces(text) and _next_block(read, b) is None:
                    continue  # introduces what this passage does not hold
                plain = _LINK.sub(r"\1", item_body(text) if block.kind == "list" else text)
                score = _unit_score(question, plain, context) + rank - 0.004 * min(i, 10)
                if _coverage(question, _stems(plain)) <= 0 and not (named and b == opening) \
                        and _coverage(question, _stems(read.headings[b])) < 0.5:
                    continue  # about the question neither itself nor by its section
                if after_heading and i == 0:  # what a section says first is what it is about
                    score += FIRST_UNDER_HEADING_BONUS
                if named and b == opening and i == 0:
                    score += OPENING_BONUS
                out.append(_Unit(p, b, i, text, score))
    return out


def _window(read: _Read, unit: _Unit) -> list[str]:
    """The Markdown pieces quoted for a lead: its neighbours and what it introduces."""
    block = read.blocks[unit.block]
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


def compose_answer(question: str, passages: list[Passage]) -> tuple[str, list[str], float]:
    """The best passage(s) for ``question``: ``(answer Markdown, cited source ids, confidence)``."""
    q = _stems(question)
    if not q or not passages:
        return "", [], 0.0
    reads = [_read(p) for p in passages]
    enumeration = bool(_ENUMERATION.search(question))
    units = sorted(_units(reads, q, enumeration), key=lambda u: (-u.score, u.passage, u.block, u.index))
    units = [u for u in units if u.score >= MIN_RELEVANCE]
    if not units:
        return "", [], 0.0
    best = units[0].score
    said: set[str] = set()
    parts: list[str] = []
    sources: list[str] = []
    used_blocks: set[tuple[int, int]] = set()
    length = 0
    for unit in units:
        if len(parts) >= MAX_PASSAGES or (parts and unit.score < SECOND_PASSAGE_SHARE * best):
            break
        if (unit.passage, unit.block) in used_blocks or sentence_key(unit.text) in said:
            continue
        read = reads[unit.passage]
        pieces = _new_sentences(_window(read, unit), said.copy())
        size = sum(len(p) for p in pieces)
        if not pieces or (parts and length + size > MAX_ANSWER_CHARS):
            continue
        pieces = _new_sentences(pieces, said)
        used_blocks.add((unit.passage, unit.block))
        source_id = read.passage.source_id
        parts.append(_cite(pieces, source_id))
        length += size
        if source_id not in sources:
            sources.append(source_id)
    confidence = round(min(0.9, best), 2)
    return "\n\n".join(parts), sources, confidence


__all__ = ["MAX_ANSWER_CHARS", "MIN_RELEVANCE", "Passage", "compose_answer", "sentence_key"]
