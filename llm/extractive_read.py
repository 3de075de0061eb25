"""A search passage as the offline answerer reads it (``llm.extractive_answer``): its
Markdown blocks, the heading each sits under, whether it opens its document, where the
document's one-line summary goes, which paragraph is the document's opening, and a
table's rows. Kept apart from the scoring, so each module does one job.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from llm.extractive_question import WORD as _WORD
from llm.extractive_words import Words
from llm.markdown_blocks import Block, item_body, parse_passage

#: A summary longer than this is no one-line summary (see ``_with_summary``).
MAX_SUMMARY_CHARS = 200
_ASIDE = re.compile(r"^[*_\s]*(?:note|warning|caution|tip|see also|deprecated)\b[*_\s]*:", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Passage:
    source_id: str
    title: str
    text: str
    score: float
    #: The document's one-line summary (a Markdown page's front-matter ``description``:
    #: "Create a tarball from a package"), read with the passage that opens the document.
    summary: str = ""
    #: The chunk the text is, when the passage is cited by its document (a page-scoped
    #: read's results are cited by ``doc_id``): where in the document it sits.
    chunk_id: str = ""
    #: The heading the passage sits under in its document (the search result's
    #: ``section``: "Registry › Does npm send any information about me …?"), which a
    #: passage that continues a section no longer says itself.
    section: str = ""


def sentence_key(text: str) -> str:
    """What makes two sentences the same sentence: their folded words (markup, line
    wrapping, list markers and citations do not count)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_WORD.findall(folded))


@dataclass(slots=True)
class Unit:
    passage: int
    block: int
    index: int  # the sentence or item within the block
    text: str
    score: float


@dataclass(slots=True)
class Read:
    """A passage parsed, with the heading each block sits under."""

    passage: Passage
    blocks: list[Block]
    headings: list[str]
    first: bool  # the passage opens its document
    summary: int = -1  # the block of the document's summary (``_with_summary``), if any
    #: What the document's next chunk opens with when it carries on where this passage
    #: ends (``llm.extractive_next``): the list, code block or table the passage's last
    #: sentence introduces. ``next_block`` of the last block is this block.
    after: Block | None = None


def read_passage(passage: Passage, words: Words | None = None) -> Read:
    """``passage`` read; ``words``: the answerer's memo, which parses a text once."""
    where = passage.chunk_id or passage.source_id
    first = "#" not in where or where.endswith("#0")
    if words is None:
        blocks = parse_passage(passage.text, first_of_document=first)
    else:
        blocks = words.blocks(passage.text, first_of_document=first)
    summary = -1
    if first:
        blocks, summary = _with_summary(blocks, passage.summary)
    headings: list[str] = []
    # What the passage says before its first heading of its own sits under the section
    # it continues: its innermost heading (the path's last part).
    current = passage.section.rsplit(" › ", 1)[-1].strip()
    for b in blocks:
        if b.kind == "heading":
            current = b.text
        headings.append(current)
    return Read(passage, blocks, headings, first, summary)


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


def introduces(text: str) -> bool:
    return text.rstrip("*_ ").endswith(":")


def next_block(read: Read, b: int) -> Block | None:
    """The block after block ``b``; after the passage's last block, what the next chunk of
    the document goes on with, when it is known (``Read.after``)."""
    if b + 1 < len(read.blocks):
        return read.blocks[b + 1]
    return read.after if b == len(read.blocks) - 1 else None


def prev_block(read: Read, b: int) -> Block | None:
    return read.blocks[b - 1] if b > 0 else None


def is_aside(text: str) -> bool:
    """A paragraph set apart from what the document says ("Note: this command is unaware
    of workspaces."): not the document's opening, however early it comes."""
    return _ASIDE.match(text) is not None


def opening_block(read: Read) -> int:
    """The block a document opens with: its first paragraph that is no aside and not the
    summary (which says less than the page's own first words), before any list or table
    (a paragraph after an option's "Default: …" list describes the option, not the
    page); -1 when the passage holds none."""
    for b, block in enumerate(read.blocks):
        if block.kind in ("list", "table"):
            return -1
        if block.kind == "prose" and block.units and not is_aside(block.units[0]) and b != read.summary:
            return b
    return -1


def document_of(read: Read) -> str:
    """The document a passage is of: its ``source_id`` less the chunk's ``#n``. Both the
    scoring (what each page says) and the answer (one passage per part of a page) group
    passages by it."""
    return read.passage.source_id.split("#", 1)[0]


#: Lower-case words alone that title a section rather than name a thing in it: the
#: READMEs of npm's own packages head theirs "## usage", "## install", "## api", "#
#: example", "# methods" (safe-buffer, once, minimist), and a paragraph under them was
#: labelled "**`usage`:**". None is a package.json field or an npm subcommand; "license"
#: and "description" are fields, so they stay names.
_SECTION_TITLES = (
    "about", "api", "authors", "background", "benchmarks", "caveats", "changelog", "changes",
    "compatibility", "configuration", "contents", "contributing", "contributors", "credits",
    "details", "example", "examples", "faq", "features", "history", "install", "installation",
    "introduction", "limitations", "links", "methods", "motivation", "note", "notes", "options",
    "overview", "prerequisites", "reference", "references", "requirements", "setup", "summary",
    "support", "synopsis", "testing", "tests", "todo", "troubleshooting", "usage",
)  # fmt: skip
#: A heading that is one name: an option, a field, a command (```save-exact```,
#: ``peerDependencies``, ``ignore_scripts``, ``bin``): in code, or lower-case words
#: joined by hyphens or underscores, or a lower-case word alone (package.json's fields
#: ``bin``, ``overrides``, ``funding`` and npm config's subcommands ``set``, ``list``
#: head their sections so; a title is capitalised) unless it is a section's title
#: (``_SECTION_TITLES``), or a word with a capital inside it ("Keep-alive" is a title).
NAME_HEADING = re.compile(
    rf"^(?:`[^`\s]+`|(?!(?:{'|'.join(_SECTION_TITLES)})$)[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*|[a-z]+[A-Z][A-Za-z0-9]*)$"
)
#: An item of a setting's properties ("* Default: 2", "* Type: Number"): a label and its
#: value, short.
_PROPERTY_ITEM = re.compile(r"^[A-Z][\w -]{0,24}:\s\S")
_PROPERTY_ITEM_CHARS = 80


def is_properties(block: Block) -> bool:
    """The list of a setting's properties its section opens with ("* Default: 2",
    "* Type: Number")."""
    return (
        block.kind == "list"
        and bool(block.units)
        and all(
            len(item_body(u)) <= _PROPERTY_ITEM_CHARS and _PROPERTY_ITEM.match(item_body(u)) is not None
            for u in block.units
        )
    )


def opens_named_section(read: Read, b: int) -> str:
    """The name a section is headed by (``cidr``, ``read-only``: ``NAME_HEADING``) when
    paragraph ``b`` is what that section says first — right under the heading, or after
    the setting's properties — else "". npm's settings open so: "#### `cidr`", its
    Default/Type, then "This is a list of CIDR address to be used …": the "this" is the
    setting the heading names."""
    if read.blocks[b].kind != "prose":
        return ""
    at = b - 1 if b >= 2 and is_properties(read.blocks[b - 1]) else b
    heading = read.blocks[at - 1] if at >= 1 else None
    if heading is None or heading.kind != "heading":
        return ""
    name = heading.text.strip().strip("#*_ ").strip()
    return name.strip("`") if NAME_HEADING.match(name) else ""


_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")


def table_header(block: Block) -> str:
    """A table's header line (its column names), or "" when it has no header rule."""
    lines = block.text.split("\n")
    return lines[0] if len(lines) > 2 and _TABLE_RULE.match(lines[1]) else ""


def table_rows(block: Block) -> list[tuple[str, str]]:
    """A table's body rows: ``(the row as Markdown, its cells as plain words)``. A row
    says one thing ("`message_complete` … always last, exactly once") as an item does."""
    lines = block.text.split("\n")
    body = lines[2:] if table_header(block) else lines
    return [
        (line, " ".join(cell.strip() for cell in line.strip().strip("|").split("|")))
        for line in body
        if line.strip() and not _TABLE_RULE.match(line)
    ]


__all__ = [
    "MAX_SUMMARY_CHARS",
    "NAME_HEADING",
    "Passage",
    "Read",
    "Unit",
    "document_of",
    "introduces",
    "is_aside",
    "is_properties",
    "next_block",
    "opening_block",
    "opens_named_section",
    "prev_block",
    "read_passage",
    "sentence_key",
    "table_header",
    "table_rows",
]
