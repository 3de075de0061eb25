"""Block quotes and GitHub alerts in a passage read by the offline answerer
(``llm.markdown_blocks.unquote_lines``): their ``>`` markers are never quoted as words."""

from __future__ import annotations

from llm.markdown_blocks import parse_blocks

TIP = """# Response caching

The service caches rendered pages for five minutes by default.

> [!TIP]
> Set `CACHE_TTL_S` to change how long a rendered page is cached; `0` turns the cache off.

> \\[!WARNING]
> A cache shared between users must never store pages rendered with a user's cookies.
Cached pages are stored in memory, one copy per worker process.
"""


def _read(text: str) -> list[tuple[str, list[str] | str]]:
    return [(b.kind, b.units or b.text) for b in parse_blocks(text)]


def test_an_alert_is_its_label_and_its_text_each_quote_a_paragraph_of_its_own() -> None:
    assert _read(TIP) == [
        ("heading", "Response caching"),
        ("prose", ["The service caches rendered pages for five minutes by default."]),
        ("prose", ["Tip: Set `CACHE_TTL_S` to change how long a rendered page is cached; `0` turns the cache off."]),
        ("prose", ["Warning: A cache shared between users must never store pages rendered with a user's cookies."]),
        ("prose", ["Cached pages are stored in memory, one copy per worker process."]),
    ]


def test_a_quotes_lists_and_code_are_read_as_outside_one_and_a_fenced_prompt_is_kept() -> None:
    text = (
        "Run it:\n\n```sh\n> npm install\n```\n\n"
        "> A quote\n> on two lines.\n> - an item\n>\n> ```js\n> x()\n> ```\nAfter."
    )
    assert _read(text) == [
        ("prose", ["Run it:"]),
        ("code", "```sh\n> npm install\n```"),
        ("prose", ["A quote on two lines."]),
        ("list", ["- an item"]),
        ("code", "```js\nx()\n```"),
        ("prose", ["After."]),
    ]


def test_an_alert_before_a_block_that_is_not_prose_is_a_line_of_its_own() -> None:
    assert _read("> [!TIP]\n> ```sh\n> npm ci\n> ```\n\nAfter.") == [
        ("prose", ["Tip:"]),
        ("code", "```sh\nnpm ci\n```"),
        ("prose", ["After."]),
    ]
    assert _read("> [!NOTE]\n> - First thing.\n> - Second thing.") == [
        ("prose", ["Note:"]),
        ("list", ["- First thing.", "- Second thing."]),
    ]
    assert _read("> [!WARNING]\n\n> A later quote.") == [("prose", ["A later quote."])]  # a label ends with its quote


def test_a_fence_a_quote_leaves_open_ends_with_the_quote() -> None:
    text = "> ```sh\n> npm config list\n\nAfter the quote, prose.\n\n## Heading\n\nMore prose."
    assert _read(text) == [
        ("code", "```sh\nnpm config list\n```"),
        ("prose", ["After the quote, prose."]),
        ("heading", "Heading"),
        ("prose", ["More prose."]),
    ]


def test_what_is_not_a_quote_keeps_its_marks() -> None:
    assert _read("The queue holds\n> 5 items at most.") == [("prose", ["The queue holds > 5 items at most."])]
    assert _read("Example:\n\n>>> import foo\n\nDone.") == [
        ("prose", ["Example:"]),
        ("prose", [">>> import foo"]),
        ("prose", ["Done."]),
    ]
    assert _read("# Title\n> > A nested quote.") == [("heading", "Title"), ("prose", ["A nested quote."])]


def test_a_bold_lead_in_is_a_label_only_with_its_colon_or_full_stop() -> None:
    from llm.extractive_quote import refers_back

    assert refers_back("**Note:** This doesn't catch every case.")
    assert refers_back("**Note**: It is read once.")
    assert refers_back("**This flag** disables caching.")  # the bold words are the sentence's own
    assert not refers_back("**Caching.** Pages are kept five minutes.")
