"""The OpenAI face's citations (``app/server/openai_citations.py``): ``[1]``, ``[2]`` in
``content`` — one number per source in order of first use, the same whether streamed or
not, whatever the stream's deltas split — and a "Sources:" list ending it. Driven by the
official ``openai`` SDK against a live server (real uvicorn on loopback); the answers that
cite the knowledge base for real are in ``tests/test_openai_compat.py``."""

from __future__ import annotations

import itertools
import random
from typing import Any

import openai

import events
from app.config import Settings
from app.server.openai_citations import CitationNumbers
from llm.scripted import ScriptedProvider, ScriptedTurn
from tests.conftest import running_app

#: A model's answer with its markers cut across deltas, beside brackets that are no markers.
DELTAS = [
    "Resume with Last-Event-ID [doc-res",
    "ume#0]. Refunds take five days [doc-refunds#0;",
    " doc-resume#1][",
    "px_0123456789abcdef#2]. Not markers: [sic], a",
    "[doc-x#1], `[doc-y#1]`, [doc-z#1](https://example.com/z), [1].\n```\n[doc-w#1]\n```\nEnd [doc-refunds#",
    "3]",
]
SHOWN = (
    "Resume with Last-Event-ID [1]. Refunds take five days [2][1][3]. Not markers: [sic], a[doc-x#1], "
    "`[doc-y#1]`, [doc-z#1](https://example.com/z), [1].\n```\n[doc-w#1]\n```\nEnd [2]"
    "\n\nSources:\n- [1] doc-resume#0, doc-resume#1\n- [2] doc-refunds#0, doc-refunds#3\n- [3] px_0123456789abcdef#2"
)


def numbered(text: str, cuts: list[int]) -> str:
    numbers = CitationNumbers()
    bounds = [0, *sorted(cuts), len(text)]
    return "".join(numbers.feed(text[a:b]) for a, b in itertools.pairwise(bounds)) + numbers.finish()


def test_any_split_of_the_text_gives_the_same_numbered_text() -> None:
    text = "".join(DELTAS)
    whole = numbered(text, [])
    assert whole + CitationNumbers().sources_list([]) == SHOWN.split("\n\nSources:")[0]
    rng = random.Random(7)
    for _ in range(300):
        cuts = rng.sample(range(1, len(text)), rng.randint(1, 40))
        assert numbered(text, cuts) == whole, cuts
    for i in range(1, len(text)):  # every single cut, one character at a time included
        assert numbered(text, [i]) == whole, i


def test_the_list_takes_titles_and_links_from_the_sources_and_numbers_the_uncited_after() -> None:
    numbers = CitationNumbers()
    assert numbers.feed("A [guide#2] and [guide#5]; web [px_0123456789abcdef#1].") == "A [1] and [1]; web [2]."
    sources = [
        events.Source(id="guide#5", title="The  guide\nfor users", kind="internal", location="docs/guide.pdf, page 3"),
        events.Source(id="guide#2", title="The guide", kind="internal", location="docs/guide.pdf, page 1"),
        events.Source(id="px_0123456789abcdef#1", title="A page", kind="external", url="https://example.com/a"),
        events.Source(id="notes#0", title="Notes", kind="internal", location="notes.md"),
    ]
    mapping = numbers.mapping(sources)
    assert mapping == [
        {"number": 1, "ids": ["guide#2", "guide#5"], "title": "The guide for users",
         "location": "docs/guide.pdf, page 3; docs/guide.pdf, page 1"},
        {"number": 2, "ids": ["px_0123456789abcdef#1"], "title": "A page", "url": "https://example.com/a"},
        {"number": 3, "ids": ["notes#0"], "title": "Notes", "location": "notes.md"},  # listed, not marked
    ]
    assert numbers.sources_list(mapping) == (
        "\n\nSources:\n- [1] The guide for users — docs/guide.pdf, page 3; docs/guide.pdf, page 1"
        "\n- [2] A page — https://example.com/a\n- [3] Notes — notes.md"
    )


def sdk(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-local", max_retries=0)


async def test_streamed_and_whole_answers_show_the_same_numbers_and_list(settings: Settings) -> None:
    provider = ScriptedProvider(lambda request, index: ScriptedTurn(chunks=DELTAS))
    messages: Any = [{"role": "user", "content": "How do I resume, and how long do refunds take?"}]
    async with running_app(settings, provider=provider, embedder=None) as (base, _), sdk(base) as client:
        stream = await client.chat.completions.create(model="agentchat-workflow", messages=messages, stream=True)
        chunks = [c async for c in stream]
        whole = await client.chat.completions.create(model="agentchat-workflow", messages=messages)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(deltas) == SHOWN
    assert deltas[0] == "Resume with Last-Event-ID "  # the text before a marker is not held
    assert whole.choices[0].message.content == SHOWN
    expected = [
        {"number": 1, "ids": ["doc-resume#0", "doc-resume#1"]},
        {"number": 2, "ids": ["doc-refunds#0", "doc-refunds#3"]},
        {"number": 3, "ids": ["px_0123456789abcdef#2"]},
    ]
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert final.model_extra["agentchat"]["event"] == "message_complete"
    assert final.model_extra["agentchat"]["citations"] == expected
    assert whole.model_extra["agentchat"]["citations"] == expected
