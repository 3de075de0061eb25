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
