"""What a quote gains beyond its lead and neighbours (``llm.extractive_quote``): the
page's synopsis for a how-to (``with_synopsis``), the command line of a subcommand
(``with_command_line``), a syntax or form that follows (``with_syntax``,
``with_form_after``), a heading that says more than its paragraph (``with_heading``) or
names the option or field the passage is about (``with_name``), or the list item naming
the paragraph under it (``with_item_name``).

Apart from the quoting because each of these is one rule about one kind of page, added
or tuned on its own; the quoting (window, no sentence twice, citation) stays small.
"""

from __future__ import annotations

import re

from llm.extractive_question import WORD as _WORD
from llm.extractive_question import Question
from llm.extractive_quote import FOLLOWING_CODE_CHARS, WHOLE_PARAGRAPH_CHARS, is_verbatim, refers_back
from llm.extractive_read import (
    NAME_HEADING,
    Read,
    Unit,
    introduces,
    opening_block,
    prev_block,
    sentence_key,
)
from llm.extractive_words import Words
from llm.markdown_blocks import item_body

#: A section heading this long says what its paragraph is about (see ``with_heading``).
MIN_HEADING_WORDS = 3


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
    asked = [name for name in labels if question.words.stems(name) & question.stems] or labels
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


#: The label ``with_name`` puts before a quote: "**`save-exact`:** ".
_NAME_LABEL = re.compile(r"^\*\*`[^`\s]+`:\*\* ")
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
    opening = _NAME_LABEL.sub("", pieces[0], count=1)  # the quote's own first words, past its name label
    if read.blocks[unit.block - 2].kind != "heading" or not opening.startswith(read.blocks[unit.block].units[0]):
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


def with_heading(read: Read, unit: Unit, pieces: list[str], memo: Words) -> list[str]:
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
    own = {w for w in memo.stems(title) if not w.isdigit()} - memo.stems(read.passage.title)
    if len(words) < MIN_HEADING_WORDS or not own or memo.stems(title) <= memo.stems(" ".join(pieces)):
        return pieces
    label = title if title.endswith(("?", "!", ".")) else f"{title}."
    return [f"**{label}** {pieces[0]}", *pieces[1:]]


def with_name(read: Read, unit: Unit, pieces: list[str]) -> list[str]:
    """A passage quoted from a section named by one name — a config option, a
    package.json field — keeps the name as its label when it does not say it: "Dependencies
    saved to package.json will be configured with an exact version …" is what the
    ``save-exact`` option does, and without the name the reader cannot use it. The
    heading is the one the passage sits under (its own, or the section it continues)."""
    heading = read.headings[unit.block].strip().strip("#*_ ").strip()
    if not pieces or not heading or NAME_HEADING.match(heading) is None or is_verbatim(pieces[0]):
        return pieces
    name = heading.strip("`")
    if pieces[0].startswith("**") or name.casefold() in " ".join(pieces).casefold():
        return pieces
    if name.casefold() == read.passage.title.strip().casefold():
        return pieces  # the page's own name: the citation says it
    return [f"**`{name}`:** {pieces[0]}", *pieces[1:]]


#: A list item that is only a name in code (``npm pkg fix``), the paragraph under it
#: saying what the name does.
_NAME_ITEM = re.compile(r"^`[^`]+`$")


def with_item_name(read: Read, unit: Unit, pieces: list[str]) -> list[str]:
    """A paragraph quoted from its start under a list of one item that is only a name
    ("* ``npm pkg fix``", then "Auto corrects common errors in your ``package.json``.")
    keeps the name as its label: the item is the paragraph's heading, and without it the
    reader is told what something does but not what to type. Not after a list of several
    names ("… ``.npmrc``, ``npm-debug.log``"): the paragraph after it is not the last one's."""
    block = read.blocks[unit.block]
    item = prev_block(read, unit.block)
    if (
        item is None
        or item.kind != "list"
        or len(item.units) != 1  # a list of several names ends before the paragraph
        # A section opening with the form (a heading, the item, this paragraph) shows it
        # after the paragraph (``with_form_after``'s kind of page).
        or (unit.block >= 2 and read.blocks[unit.block - 2].kind == "heading")
        or block.kind != "prose"
        or not pieces
        or is_verbatim(pieces[0])
        or pieces[0].startswith("**")
        or not pieces[0].startswith(block.units[0])
    ):
        return pieces
    name = item_body(item.units[-1]).strip()
    if _NAME_ITEM.match(name) is None or name.strip("`").casefold() in " ".join(pieces).casefold():
        return pieces
    return [f"**{name}:** {pieces[0]}", *pieces[1:]]


#: A paragraph that is only a name in bold, maybe with a short note ("**prepublishOnly**",
#: "**prepublish** (DEPRECATED)", "**prepare** (since `npm@4.0.0`)"): the name of the list
#: right under it, as npm's scripts page names each life-cycle script. A capitalised word
#: alone, or one in capitals, is a title over the list instead ("**Options**" over an API
#: method's options in undici's docs, "**Bugfixes**", "**Security**" in a changelog, "**NOTE**"):
#: its items are no "**`Options`:**".
_BOLD_NAME = re.compile(
    r"^\*\*(?![A-Z][a-z]*\*\*|[A-Z]+\*\*)(?P<name>[A-Za-z][\w.-]{0,40})\*\*(?:\s+(?P<note>\([^()]{1,40}\)))?$"
)


def with_list_name(read: Read, unit: Unit, pieces: list[str]) -> list[str]:
    """An item quoted alone from a list named by the bold paragraph right above it keeps
    that name as its label: "Does not run during `npm publish`, but does run during `npm
    ci` and `npm install`." is what the ``prepublish`` script does, and quoted without
    "**prepublish** (DEPRECATED)" the reader is not told which script it is, nor that it
    is deprecated. The label is written as ``with_name``'s (the name in code, then a
    colon), the note after it; an item that says the name itself needs none."""
    block = read.blocks[unit.block]
    named_by = prev_block(read, unit.block)
    if (
        block.kind != "list"
        or unit.index < 0
        or named_by is None
        or named_by.kind != "prose"
        or len(named_by.units) != 1
        or not pieces
        or is_verbatim(pieces[0])
        or pieces[0].startswith("**")
    ):
        return pieces
    bold = _BOLD_NAME.match(named_by.units[0].strip())
    if bold is None or not pieces[0].startswith(item_body(block.units[unit.index])):
        return pieces
    if bold.group("name").casefold() in " ".join(pieces).casefold():
        return pieces  # the item says the name itself
    note = f"{bold.group('note')} " if bold.group("note") else ""
    return [f"**`{bold.group('name')}`:** {note}{pieces[0]}", *pieces[1:]]


__all__ = [
    "MIN_HEADING_WORDS",
    "SUBCOMMAND_ITEM",
    "with_command_line",
    "with_form_after",
    "with_heading",
    "with_item_name",
    "with_list_name",
    "with_name",
    "with_synopsis",
    "with_syntax",
]
