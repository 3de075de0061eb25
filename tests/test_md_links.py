"""Markdown reference links made inline when a file is read (knowledge.md_links).

A newcomer review ingested Node's API docs, written with reference links, and the
offline answer quoted ``use the [`child_process.spawn()`][], …`` as literal brackets."""

from __future__ import annotations

from pathlib import Path

from knowledge.filestamps import file_stamp
from knowledge.loaders import load_file
from knowledge.md_links import READ_RULES, inline_reference_links
from knowledge.types import KBConfig

NODE_STYLE = """# Child processes

The module is provided by the [`child_process.spawn()`][] function and
[the stream API][streams]; see [Streams] and [V8][]: the engine.

An undefined one stays: [nowhere][], and [an inline](https://x.test) one too.

```js
// [`child_process.spawn()`][] inside code is code
const a = b[c][d];
```

[`child_process.spawn()`]: #child_processspawncommand-args-options
[Streams]: stream.md "The stream API"
[streams]: https://nodejs.org/api/stream.html
[V8]:   <https://v8.dev/some page>

"""


def test_every_reference_form_is_made_inline_and_definitions_leave() -> None:
    out = inline_reference_links(NODE_STYLE)
    assert "[`child_process.spawn()`](#child_processspawncommand-args-options) function" in out
    # full form [text][label]; labels case-folded, so "streams" finds the first definition ("Streams")
    assert '[the stream API](stream.md "The stream API")' in out
    # shortcut form [text]
    assert '[Streams](stream.md "The stream API")' in out
    # collapsed form followed by a colon; a target with a space is bracketed
    assert "[V8](<https://v8.dev/some page>): the engine" in out
    assert "]:" not in out  # no definition line left
    assert out.endswith("```\n")  # the trailing definitions' blank lines went with them


def test_what_cannot_be_resolved_or_is_code_is_left_as_written() -> None:
    out = inline_reference_links(NODE_STYLE)
    assert "[nowhere][]" in out
    assert "[an inline](https://x.test)" in out
    assert "// [`child_process.spawn()`][] inside code is code" in out
    assert "const a = b[c][d];" in out


def test_text_without_definitions_is_returned_unchanged() -> None:
    text = "An array `a[0][1]` and [text][ref] with no definitions.\n"
    assert inline_reference_links(text) is text
    fenced = "```\n[x]: not-a-definition\n```\n[x][]\n"
    assert inline_reference_links(fenced) == fenced


def test_a_markdown_file_is_read_with_its_references_inline(tmp_path: Path) -> None:
    md = tmp_path / "child_process.md"
    md.write_text(NODE_STYLE)
    txt = tmp_path / "notes.txt"
    txt.write_text(NODE_STYLE)
    (doc,), _ = load_file(md)
    assert "[`child_process.spawn()`](#child_processspawncommand-args-options)" in doc.doc.text
    (plain,), _ = load_file(txt)
    assert plain.doc.text == NODE_STYLE  # only Markdown has reference links


def test_the_read_rules_are_part_of_a_files_stamp() -> None:
    """Files ingested before the rules changed are read again, not skipped by their stamp."""
    stamp = file_stamp(10, 20, "a.md", KBConfig())
    assert f":r{READ_RULES}:" in stamp


def test_code_spans_indented_code_and_tilde_fences_stay_code() -> None:
    """Review: ``hash.digest([encoding])`` in Node's crypto.md headings became a link."""
    text = (
        "### `hash.digest([encoding])`\n\n"
        "Call `hash.digest([encoding])` with [encoding][].\n\n"
        "    arr[encoding] = 1\n\n"
        "  ~~~\n  [encoding][]\n  ~~~\n\n"
        "[encoding]: buffer.md#enc\n"
    )
    out = inline_reference_links(text)
    assert "### `hash.digest([encoding])`\n" in out
    assert "Call `hash.digest([encoding])` with [encoding](buffer.md#enc)." in out
    assert "    arr[encoding] = 1\n" in out
    assert "  [encoding][]\n" in out


def test_a_link_text_over_two_lines_is_one_link() -> None:
    """Review: Node's cli.md 'The [environment\\nvariables which configure Node.js][environment_variables]'."""
    text = (
        "The [environment\nvariables which configure Node.js][environment_variables] apply.\n\n"
        "[environment_variables]: #env\n"
    )
    out = inline_reference_links(text)
    assert out == "The [environment\nvariables which configure Node.js](#env) apply.\n"


def test_images_badges_and_footnotes() -> None:
    text = (
        "![Logo][logo]\n\n"
        "[![Build Status][ci-img]][ci-url]\n\n"
        "A claim.[^1]\n\n"
        "[logo]: img/logo.png\n"
        "[ci-img]: https://ci.test/badge.png\n"
        "[ci-url]: https://ci.test/\n"
        "[^1]: https://example.com/source\n"
    )
    out = inline_reference_links(text)
    assert "![Logo](img/logo.png)" in out
    assert "[![Build Status](https://ci.test/badge.png)](https://ci.test/)" in out
    assert "A claim.[^1]" in out and "[^1]: https://example.com/source" in out  # footnotes are not links


def test_crlf_files_are_read_alike() -> None:
    text = NODE_STYLE.replace("\n", "\r\n")
    assert inline_reference_links(text) == inline_reference_links(NODE_STYLE).replace("\n", "\r\n")


def test_a_list_items_indented_continuation_is_prose() -> None:
    text = "- item\n\n    see [V8][]\n\n[V8]: https://v8.dev\n"
    assert "    see [V8](https://v8.dev)" in inline_reference_links(text)
