"""What the offline answerer quotes for a lead (``llm.extractive_answer``): the lead with
its neighbours and what it introduces (``window``), the page's synopsis for a how-to
(``with_synopsis``), a heading that says more than its paragraph (``with_heading``) or
names the option or field the passage is about (``with_name``), no sentence said twice
(``new_sentences``) and the citation (``cite``).
"""

from __future__ import annotations

import re

from llm.extractive_question import WORD as _WORD
from llm.extractive_question import Question
from llm.extractive_question import stems as _stems
from llm.extractive_read import (
    Read,
    Unit,
    introduces,
    next_block,
    opening_block,
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
MIN_HEADING_WORDS = 3
#: Words a sentence opens with when it points at what came before it: a pronoun ("This
#: command …") or a connective of contrast or consequence ("However, in practice, this
#: resulted in audits often failing …" says nothing without what it answers).
_REFERRING = frozenset(
    "this that these those it its they their such then so however but instead otherwise therefore thus hence".split()
)


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
    if lead and chosen and refers_back(sentences[chosen[0]]):
        # "This command removes …" / "This resulted in some shifts …": what "this" is
        # comes first, or the quote starts where a sentence says it itself.
        lead_in = antecedent(read, unit.block)
        if not lead_in:
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
        pieces.append(" ".join(sentences[i] for i in chosen))
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


def refers_back(sentence: str) -> bool:
    """The sentence opens with a word pointing at what came before it ("This …",
    "These …", "It …", "They …")."""
    first = sentence.lstrip("*_`\"'( ").split(" ", 1)[0]
    return first.casefold().strip("`*_\"',:;") in _REFERRING


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


def with_synopsis(read: Read, unit: Unit, pieces: list[str], question: Question) -> list[str]:
    """A how-to question quoted from a page's description gets the page's synopsis too
    (the short code block above the description) when the quote does not name the page's
    command itself: "Spawn a subshell in the directory of the installed package
    specified." answers "how do I open a subshell …" only with ``npm explore <pkg>``
    beside it, and "add: Add a new user as a maintainer of a package." (an item of
    ``npm-owner``'s description) only with ``npm owner add <user> <package-spec>``."""
    if not question.how_to or not read.first or not pieces:
        return pieces
    command = " ".join(_WORD.findall(read.passage.title.casefold()))
    if command and command in " ".join(_WORD.findall(" ".join(pieces).casefold())):
        return pieces  # the quote names the command: its synopsis adds nothing
    opening = read.summary if unit.block == read.summary else opening_block(read)
    if opening < 0 or opening > unit.block or read.headings[unit.block] != read.headings[opening]:
        return pieces  # not the page's description: its synopsis is about something else
    code = next((b for b in read.blocks[:opening] if b.kind == "code"), None)
    if code is None:
        return pieces
    shown = code.markdown()
    return [*pieces, shown] if shown and len(shown) <= FOLLOWING_CODE_CHARS else pieces


#: A list item that names a subcommand: "verify: Verify the contents of the cache …",
#: or several that one entry explains together ("create / destroy: Create a new team, or
#: destroy an existing one.").
SUBCOMMAND_ITEM = re.compile(
    r"^[`*_]*(?P<label>[a-z][a-z0-9-]*)[`*_]*(?P<more>(?:\s*/\s*[`*_]*[a-z][a-z0-9-]*[`*_]*)*)\s*:\s"
)
_LABEL_WORD = re.compile(r"[a-z][a-z0-9-]*")
#: At most this many lines of a synopsis show one subcommand.
MAX_COMMAND_LINES = 3


def with_command_line(reads: list[Read], read: Read, unit: Unit, pieces: list[str], question: Question) -> list[str]:
    """A how-to question answered by an item of a page's list of subcommands ("verify:
    Verify the contents of the cache folder …", under ``npm-cache``) gets the lines of
    the page's synopsis that run that subcommand (``npm cache verify``), when the page's
    opening passage is among those found: the item says what the subcommand does, the
    synopsis how to type it. Nothing is added when the quote already names it."""
    block = read.blocks[unit.block]
    if not question.how_to or block.kind != "list" or unit.index < 0 or not pieces:
        return pieces
    label = SUBCOMMAND_ITEM.match(item_body(block.units[unit.index]))
    command = _WORD.findall(read.passage.title.casefold())
    if label is None or not command:
        return pieces
    labels = [label.group("label"), *_LABEL_WORD.findall(label.group("more"))]
    # Of an entry naming several ("create / destroy"), the subcommand the question asks.
    asked = [name for name in labels if _stems(name) & question.stems] or labels
    said = " ".join(_WORD.findall(" ".join(pieces).casefold()))
    if all(" ".join([*command, name]) in said for name in asked):
        return pieces
    document = read.passage.source_id.split("#", 1)[0]
    for other in reads:
        if not other.first or other.passage.source_id.split("#", 1)[0] != document:
            continue
        opening = opening_block(other)
        synopsis = next(
            (b for i, b in enumerate(other.blocks) if b.kind == "code" and (opening < 0 or i < opening)), None
        )
        if synopsis is None:
            continue
        lines = [
            line
            for line in synopsis.text.split("\n")
            if any(_WORD.findall(line.casefold())[: len(command) + 1] == [*command, name] for name in asked)
        ]
        if lines and len(lines) <= MAX_COMMAND_LINES:
            return [*pieces, "```bash\n" + "\n".join(lines) + "\n```"]
    return pieces


#: A list item that is one code span and nothing else: a form to type (``<alias>@npm:<name>``).
_CODE_ITEM = re.compile(r"^`[^`]+`$")


def with_syntax(read: Read, unit: Unit, pieces: list[str], question: Question) -> list[str]:
    """A how-to question answered by what a section says first gets the form the section
    opens with, when it opens with one: under "Aliases", ``* `<alias>@npm:<name>```` is
    what to write and the paragraph after it ("… this refers to a package by an alias")
    explains it. The form is a code block or a short list of items that are code and
    nothing else, between the section's heading and the paragraph quoted."""
    if not question.how_to or not pieces or unit.block < 2 or read.blocks[unit.block].kind != "prose":
        return pieces
    form = read.blocks[unit.block - 1]
    if read.blocks[unit.block - 2].kind != "heading" or not pieces[0].startswith(read.blocks[unit.block].units[0]):
        return pieces
    if form.kind == "list" and form.units and all(_CODE_ITEM.match(item_body(u).strip()) for u in form.units):
        shown = form.markdown()
    elif form.kind == "code":
        shown = form.text
    else:
        return pieces
    if not shown or len(shown) > FOLLOWING_CODE_CHARS or sentence_key(shown) in sentence_key(" ".join(pieces)):
        return pieces
    return [*pieces, shown]


def with_form_after(read: Read, unit: Unit, pieces: list[str], question: Question) -> list[str]:
    """A how-to question answered by a paragraph that says what to do but not how ("You
    should specify a license for your package …") gets the paragraph after it when that
    one shows the form, introducing a code block ("… add a current SPDX license
    identifier …, like this:" and the ``"license"`` example): the how is in the section's
    second paragraph. Only when the quote shows no code itself, the lead's paragraph is
    the first under its heading and was quoted to its end, and the next paragraph is
    right after it in the same section."""
    if not question.how_to or not pieces or any(is_verbatim(p) or "`" in p for p in pieces):
        return pieces
    block, heading = read.blocks[unit.block], prev_block(read, unit.block)
    first_said = heading is not None and heading.kind == "heading"
    if block.kind != "prose" or not first_said or not pieces[-1].endswith(block.units[-1]):
        return pieces  # not what the section says first, or not quoted to its end
    after = unit.block + 1
    if after + 1 >= len(read.blocks) or read.headings[after] != read.headings[unit.block]:
        return pieces
    paragraph, code = read.blocks[after], read.blocks[after + 1]
    if paragraph.kind != "prose" or code.kind != "code" or not paragraph.units or not introduces(paragraph.units[-1]):
        return pieces
    text = " ".join(paragraph.units)
    if len(text) > WHOLE_PARAGRAPH_CHARS or len(code.markdown()) > FOLLOWING_CODE_CHARS or refers_back(text):
        return pieces
    return [*pieces, text, code.markdown()]


def with_heading(read: Read, unit: Unit, pieces: list[str]) -> list[str]:
    """A section quoted from its start keeps its heading when the heading says something
    the paragraph does not ("The answers come from the extractive provider" over "No
    model was reachable at start-up."): a label of one or two words ("Synopsis",
    "`cache`") says nothing, and is left out."""
    block = read.blocks[unit.block]
    heading = prev_block(read, unit.block)
    if (
        heading is None
        or heading.kind != "heading"
        or block.kind != "prose"
        or not pieces
        or is_verbatim(pieces[0])
        or not pieces[0].startswith(block.units[0])
    ):
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


#: A heading that is one name: an option, a field, a command (```save-exact```,
#: ``peerDependencies``, ``ignore_scripts``): in code, or a lower-case word joined by
#: hyphens or underscores, or with a capital inside it ("Keep-alive" is a title).
_NAME_HEADING = re.compile(r"^(?:`[^`\s]+`|[a-z][a-z0-9]*(?:[-_][a-z0-9]+)+|[a-z]+[A-Z][A-Za-z0-9]*)$")


def with_name(read: Read, unit: Unit, pieces: list[str]) -> list[str]:
    """A passage quoted from a section named by one name — a config option, a
    package.json field — keeps the name as its label when it does not say it: "Dependencies
    saved to package.json will be configured with an exact version …" is what the
    ``save-exact`` option does, and without the name the reader cannot use it. The
    heading is the one the passage sits under (its own, or the section it continues)."""
    heading = read.headings[unit.block].strip().strip("#*_ ").strip()
    if not pieces or not heading or _NAME_HEADING.match(heading) is None or is_verbatim(pieces[0]):
        return pieces
    name = heading.strip("`")
    if pieces[0].startswith("**") or name.casefold() in " ".join(pieces).casefold():
        return pieces
    if name.casefold() == read.passage.title.strip().casefold():
        return pieces  # the page's own name: the citation says it
    return [f"**`{name}`:** {pieces[0]}", *pieces[1:]]


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


def cite(pieces: list[str], source_id: str) -> str:
    """The passage's Markdown with its citation after its prose (or after the list)."""
    marker = f"[{source_id}]"
    if not is_verbatim(pieces[0]):
        head = f"{pieces[0]} {marker}"
        return "\n\n".join([head, *pieces[1:]])
    return "\n\n".join([*pieces, marker])


__all__ = [
    "FOLLOWING_CODE_CHARS",
    "MIN_HEADING_WORDS",
    "SUBCOMMAND_ITEM",
    "WHOLE_BLOCK_CHARS",
    "WHOLE_PARAGRAPH_CHARS",
    "cite",
    "is_verbatim",
    "item_shows",
    "new_sentences",
    "window",
    "with_command_line",
    "with_form_after",
    "with_heading",
    "with_synopsis",
    "with_syntax",
]
