"""What the offline answerer quotes for a lead (``llm.extractive_answer``): the lead with
its neighbours and what it introduces (``window``), no sentence said twice
(``new_sentences``) and the citation (``cite``). What a quote gains beyond that (synopsis,
command line, syntax, heading, name) is ``llm.extractive_additions``.
"""

from __future__ import annotations

import re

from llm.extractive_read import (
    Read,
    Unit,
    introduces,
    next_block,
    opening_block,
    opens_named_section,
    prev_block,
    sentence_key,
    table_header,
)
from llm.markdown_blocks import item_body, split_item, split_sentences

#: A paragraph up to this long is quoted whole around its lead sentence.
WHOLE_PARAGRAPH_CHARS = 600
#: A list, table or code block up to this long is quoted whole with its introduction.
WHOLE_BLOCK_CHARS = 1800
#: A code block up to this long follows the paragraph that leads to it.
FOLLOWING_CODE_CHARS = 500
#: A section heading this long says what its paragraph is about (see ``with_heading``).
#: Words a sentence opens with when it points at what came before it: a pronoun ("This
#: command …") or a connective of contrast or consequence ("However, in practice, this
#: resulted in audits often failing …" says nothing without what it answers).
_REFERRING = frozenset(
    "this that these those it its they their such then so however but instead otherwise therefore thus hence".split()
)


#: What a setting's paragraph may open with to say something of the setting its section
#: is headed by ("This is a list of CIDR address …" under ``cidr``): a connective ("However
#: …") still answers something before it.
_OF_THE_NAME = frozenset({"this", "it"})


def window(read: Read, unit: Unit, *, lead: bool = True) -> list[str]:
    """The Markdown pieces quoted for a lead: its neighbours and what it introduces
    (``lead=False``: for a paragraph quoted after the page's summary, which leads)."""
    block = read.blocks[unit.block]
    if block.kind == "table" and unit.index >= 0:
        # One row under its header and rule: still a table a reader can read.
        lines = block.text.split("\n")
        header = lines[:2] if table_header(block) else []
        return ["\n".join([*header, unit.text])]
    if unit.block == read.summary:
        # The summary says what the page is in a line; the page's opening says it in full.
        opening = opening_block(read)
        if opening < 0 or len(" ".join(read.blocks[opening].units)) > WHOLE_PARAGRAPH_CHARS:
            return [block.units[0]]
        first = Unit(unit.passage, opening, 0, read.blocks[opening].units[0], 0.0)
        return [block.units[0], *window(read, first, lead=False)]
    pieces: list[str] = []
    if block.kind in ("list", "table"):
        intro = prev_block(read, unit.block)
        whole = block.markdown()
        introduced = intro is not None and intro.kind == "prose" and bool(intro.units) and introduces(intro.units[-1])
        if unit.index == -1 or (introduced and len(whole) <= WHOLE_BLOCK_CHARS):
            if not introduced or intro is None:
                return [whole]
            return [*_introduction(read, unit.block - 1, lead), whole]
        # One item alone is not a list, unless it opens as no sentence does: an entry
        # naming lower-case terms ("create / destroy: Create a new team …") stays an item.
        item = item_body(block.units[unit.index])
        if item[:1].islower() and not re.match(r"^[a-z][a-z0-9-]*:\s", item):
            item = block.units[unit.index].lstrip()
        shown = item_shows(read, unit.block, unit.index)
        return [item, shown] if shown else [item]
    sentences = block.units
    paragraph = " ".join(sentences)
    if len(paragraph) <= WHOLE_PARAGRAPH_CHARS:
        chosen = list(range(len(sentences)))
    else:
        start = unit.index
        while start > 0 and refers_back(sentences[start]):
            start -= 1
        end = min(len(sentences), unit.index + 2)
        if introduces(sentences[unit.index]):
            end = unit.index + 1
        chosen = list(range(start, end))
    lead_in: list[str] = []
    label = ""
    if lead and chosen and refers_back(sentences[chosen[0]]):
        # "This command removes …" / "This resulted in some shifts …": what "this" is
        # comes first, or the quote starts where a sentence says it itself.
        lead_in = antecedent(read, unit.block)
        of_name = not lead_in and chosen[0] == 0 and _first_word(sentences[0]) in _OF_THE_NAME
        name = opens_named_section(read, unit.block) if of_name else ""
        if name:
            # "This is a list of CIDR address …" opening the section ``cidr``: the name
            # the section is headed by is what "this" is, and labels the quote.
            label = f"**`{name}`:** "
        elif not lead_in:
            while chosen and chosen[0] < unit.index and refers_back(sentences[chosen[0]]):
                chosen = chosen[1:]
            if not chosen or refers_back(sentences[chosen[0]]):
                return []  # the lead itself points at what is not there: no quote
    follower = next_block(read, unit.block)
    ends_paragraph = chosen[-1] == len(sentences) - 1
    shown = ""
    if follower is not None and ends_paragraph:
        introduced = introduces(sentences[chosen[-1]]) and follower.kind in ("list", "code", "table")
        limit = WHOLE_BLOCK_CHARS if introduced else FOLLOWING_CODE_CHARS if follower.kind == "code" else 0
        shown = follower.markdown() if len(follower.markdown()) <= limit else ""
    if not shown and introduces(sentences[chosen[-1]]) and (chosen[-1] != unit.index or not lead):
        # "… ensure the following requirements are met:" with no list after it here (the
        # chunk ended there) is no sentence to end a quote on, unless it is the lead.
        chosen = chosen[:-1]
    if chosen:
        pieces.extend(lead_in)
        pieces.append(label + " ".join(sentences[i] for i in chosen))
    if shown and chosen:
        pieces.append(shown)
    return pieces


def item_shows(read: Read, b: int, index: int) -> str:
    """What a list item ending with a colon introduces, as Markdown: the items nested
    under it, or — when it is its list's last item — the code block, table or list right
    after it ("* See what org packages a team member can access:" and the
    ``npm access list packages …`` block under it; Markdown ends a list at an unindented
    fence, so the block is the item's though it is not inside it). "" when the item
    introduces nothing, or what it introduces is not in the passage or is too long to
    quote: such an item promises the reader what the quote would not show."""
    block = read.blocks[b]
    if not introduces(item_body(block.units[index])):
        return ""
    indent = len(split_item(block.units[index])[0]) - len(split_item(block.units[index])[0].lstrip())
    nested: list[str] = []
    for later in block.units[index + 1 :]:
        marker = split_item(later)[0]
        if len(marker) - len(marker.lstrip()) <= indent:
            break
        nested.append(later)
    if nested:
        shown = "\n".join(nested)
        return shown if len(shown) <= WHOLE_BLOCK_CHARS else ""
    follower = next_block(read, b)
    if index != len(block.units) - 1 or follower is None or follower.kind not in ("code", "table", "list"):
        return ""
    shown = follower.markdown()
    return shown if len(shown) <= WHOLE_BLOCK_CHARS else ""


def _introduction(read: Read, b: int, lead: bool) -> list[str]:
    """The sentence introducing a list, with what it refers back to ("These are the
    events:" after the sentence naming them); nothing when that is not in the passage
    (the list is then quoted alone)."""
    units = read.blocks[b].units
    start = len(units) - 1
    while start > 0 and refers_back(units[start]):
        start -= 1
    if not lead or not refers_back(units[start]):
        return [" ".join(units[start:])] if lead else [units[-1]]
    before = antecedent(read, b)
    return [*before, " ".join(units[start:])] if before else []


#: A lead-in label before a sentence's first word: a bold one ending with its colon or
#: full stop ("**Note:** This …"; not "**This flag** disables …") or an alert's ("Tip:
#: This …", ``markdown_blocks.unquote_lines``).
_LEAD_IN = re.compile(r"^(?:\*\*[^*]*[:.]\*\*|\*\*[^*]+\*\*:|(?:Note|Tip|Important|Warning|Caution):)\s+")


def _first_word(sentence: str) -> str:
    """The sentence's first word after any lead-in label: "**Note:** This doesn't catch
    every case" opens with "This", which points at what came before the note."""
    first = _LEAD_IN.sub("", sentence, count=1).lstrip("*_`\"'( ").split(" ", 1)[0]
    return first.casefold().strip("`*_\"',:;")


def refers_back(sentence: str) -> bool:
    """The sentence opens with a word pointing at what came before it ("This …",
    "These …", "It …", "They …")."""
    return _first_word(sentence) in _REFERRING


def antecedent(read: Read, b: int) -> list[str]:
    """What a paragraph opening with "This …" refers back to, when the passage holds it:
    the sentences of the paragraph just before it, from the last one that does not
    itself refer back; else, in a page's opening section, the page's one-line summary
    ("Remove extraneous packages." before "This command removes …"). Nothing when the
    passage holds neither (the chunk starts at that paragraph)."""
    before = prev_block(read, b)
    if before is not None and before.kind == "prose" and before.units:
        start = len(before.units) - 1
        while start > 0 and refers_back(before.units[start]):
            start -= 1
        if not refers_back(before.units[start]):
            return [" ".join(before.units[start:])]
    opening = opening_block(read)
    if 0 <= read.summary < b and opening >= 0 and read.headings[b] == read.headings[opening]:
        return [read.blocks[read.summary].units[0]]
    return []


def is_verbatim(piece: str) -> bool:
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


def new_sentences(pieces: list[str], said: set[str]) -> list[str]:
    """``pieces`` without the sentences (and list items, code blocks) already said;
    the keys of what is kept join ``said``."""
    kept: list[str] = []
    for piece in pieces:
        if is_verbatim(piece):
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


#: A question asking for a yes or a no: an auxiliary verb (or its negation, "can't",
#: "won't", either apostrophe) opening it, or opening a clause or sentence after its
#: setting ("On my Mac, can I …?", "I run three replicas. Can I …?", "Hi! Is it …?",
#: "Quick question - can I …?").
_ASKS_YES_NO = re.compile(
    r"(?:^|[,;:]\s*|[.!?]\s+|\s[\u2014\u2013-]\s*)"
    r"(?:(?:am|is|are|was|were|do|does|did|can|could|will|would|shall|should|may|might|must"
    r"|has|have|had)(?:n['\u2019]t|not)?|can['\u2019]t|won['\u2019]t|shan['\u2019]t|ain['\u2019]t)\s",
    re.IGNORECASE,
)
#: An open question's word: without one and without an auxiliary opening a clause, a
#: question is still closed ("Any way to run without Docker?", "Possible to use
#: PostgreSQL?", "PostgreSQL for every store?") and a "Yes." or "No." answers it.
_OPEN_QUESTION = re.compile(r"\b(?:how|what|where|why|which|when|who|whom|whose)\b", re.IGNORECASE)
#: A paragraph opening with the bare answer to a question it does not repeat ("Yes. By
#: default everything durable lives in one SQLite file …", an FAQ's answer under a
#: heading that is no question): the word, its emphasis and the mark after it.
_ANSWER_WORD = re.compile(r"^(?:\*\*|__)?(?:yes|no)(?:\*\*|__)?(?:[.!,;:]|\s+[\u2014\u2013-])\s+", re.IGNORECASE)


def asks_yes_no(question: str) -> bool:
    """The question asks for a yes or a no (``_ASKS_YES_NO``), or may: only a question
    plainly open (``_OPEN_QUESTION``: "How do I …?", "Where does …?") asks for none, so
    one phrased without an auxiliary ("Any way to …?") keeps an FAQ's "No."."""
    text = question.strip()
    return _ASKS_YES_NO.search(text) is not None or _OPEN_QUESTION.search(text) is None


def without_answer_word(pieces: list[str], question: str) -> list[str]:
    """``pieces`` without a bare "Yes." / "No," opening a paragraph when ``question``
    asks for no yes or no: the word answers the document's own question, which the
    reader did not ask, and quoted for "How do I put my own files into the knowledge
    base?" a "Yes." reads as nonsense. The sentence after it says the answer itself,
    so only the word goes (and the next word takes its capital, ``_capitalised``)."""
    if asks_yes_no(question):
        return pieces
    out: list[str] = []
    for piece in pieces:
        word = None if is_verbatim(piece) else _ANSWER_WORD.match(piece)
        rest = piece[word.end() :] if word is not None else ""
        opening = _capitalised(rest)
        out.append(piece if word is None or opening is None else opening)
    return out


#: Words a clause after "Yes," / "No," opens with in prose, which take a capital when the
#: clause stands alone: pronouns, articles, determiners, conjunctions, prepositions and
#: auxiliaries ("No, the service …", "Yes, you can …", "Yes, by default …").
_PROSE_OPENINGS = frozenset(
    "i you we they it he she one this that these those there here the a an my your our its their "
    "each every all any both either neither no none some only just not but and or so as if when "
    "while once unless until because since though although however instead also even still then "
    "by in on at for from with without to of after before during under over through within "
    "is are was were be been can could will would should may might must do does did has have had "
    "everything nothing something anything most many several another other such what which who where "
    "yes no".split()
)


def _capitalised(rest: str) -> str | None:
    """The clause after a dropped answer word as a sentence of its own: its first letter
    capitalised when it opens with a word of prose (``_PROSE_OPENINGS``), as it is when
    it opens with a capital or a mark (a code span, a quote, emphasis, a digit); None
    when it opens with another lower-case word, which may be written so by convention -
    a command or identifier ("Yes, npm ci installs …" was quoted "Npm ci installs …") -
    and the sentence is then quoted as written, its "Yes," kept."""
    if not rest:
        return None
    first = rest.split(None, 1)[0].rstrip(",.;:!?")
    if not first[:1].isalpha() or first[:1].isupper():
        return rest
    if first.isalpha() and first in _PROSE_OPENINGS:
        return rest[:1].upper() + rest[1:]
    return None


def cite(pieces: list[str], source_id: str) -> str:
    """The passage's Markdown with its citation after its prose (or after the list)."""
    marker = f"[{source_id}]"
    if not is_verbatim(pieces[0]):
        head = f"{pieces[0]} {marker}"
        return "\n\n".join([head, *pieces[1:]])
    return "\n\n".join([*pieces, marker])


__all__ = [
    "FOLLOWING_CODE_CHARS",
    "WHOLE_BLOCK_CHARS",
    "WHOLE_PARAGRAPH_CHARS",
    "asks_yes_no",
    "cite",
    "is_verbatim",
    "item_shows",
    "new_sentences",
    "refers_back",
    "window",
    "without_answer_word",
]
