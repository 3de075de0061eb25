"""The OpenAI face's citations (``app/server/openai_citations.py``): ``[1]``, ``[2]`` in
``content`` — one number per source in order of first use, the same whether streamed or
not, whatever the stream's deltas split — and a "Sources:" list ending it. Driven by the
official ``openai`` SDK against a live server (real uvicorn on loopback); the answers that
cite the knowledge base for real are in ``tests/test_openai_compat.py``."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson

import events
from app.config import Settings
from app.server.openai_citations import CitationNumbers
from llm.scripted import ScriptedCall, ScriptedProvider, ScriptedTurn
from llm.types import ChatRequest
from tests.conftest import running_app
from tests.fakes import running_fake
from tests.fakes.perplexity import Answer, FakePerplexity, Source
from tests.test_approvals_faces import registry
from tests.test_openai_compat import DOCS, RESUME_CITED, RESUME_SOURCES

#: A model's answer with its markers cut across deltas, beside brackets that are no markers.
DELTAS = [
    "Resume with Last-Event-ID [doc-res",
    "ume#0]. Refunds take five days [doc-refunds#0;",
    " doc-resume#1][",
    "px_0123456789abcdef#2]. Not markers: [sic], [see below], a",
    "[doc-x#1], `[doc-y#1]`, [doc-z#1](https://example.com/z).\n```\n[doc-w#1]\n```\nEnd [doc-refunds#",
    "3], the web answer's own [2] and [1], the document [doc-resume].",
]
SHOWN = (
    "Resume with Last-Event-ID [1]. Refunds take five days [2][1][3]. Not markers: [sic], [see below], a[doc-x#1], "
    "`[doc-y#1]`, [doc-z#1](https://example.com/z).\n```\n[doc-w#1]\n```\nEnd [2], the web answer's own [3] and [4], "
    "the document [1].\n\nSources:\n- [1] doc-resume#0, doc-resume#1, doc-resume\n- [2] doc-refunds#0, doc-refunds#3"
    "\n- [3] px_0123456789abcdef#2\n- [4] px_0123456789abcdef#1"
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


WEB_PAGE = events.Source(
    id="px_0123456789abcdef#1", title="Paris - Wikipedia", kind="external", url="https://en.wikipedia.org/wiki/Paris",
    metadata={"origin": "perplexity", "result_id": "px_0123456789abcdef", "index": 1},
)
POLICY = events.Source(id="policy#0", title="Refund policy", kind="internal", location="policy.md")
WEB_AND_POLICY_LIST = (
    "\n\nSources:\n- [1] Paris - Wikipedia — https://en.wikipedia.org/wiki/Paris\n- [2] Refund policy — policy.md"
)


def test_a_web_answers_own_marker_is_numbered_as_its_page() -> None:
    """``[1]`` copied from a web answer is that answer's page 1, not the face's first source:
    renumbered, so it never points at another source's line in the list (the run read a
    web answer first: without one, a bare number is prose)."""
    numbers = CitationNumbers()
    numbers.read_web_answer()
    shown = numbers.feed("Paris is the capital [1]. A refund takes 5 days [policy#0].")
    assert shown == "Paris is the capital [1]. A refund takes 5 days [2]."
    mapping = numbers.mapping([WEB_PAGE, POLICY])
    assert numbers.sources_list(mapping) == WEB_AND_POLICY_LIST
    assert [e["ids"] for e in mapping] == [["px_0123456789abcdef#1"], ["policy#0"]]

    numbers = CitationNumbers()  # the other order: the web's [1] is the face's [2]
    numbers.read_web_answer()
    assert numbers.feed("5 days [policy#0]. Paris [1].") == "5 days [1]. Paris [2]."
    assert numbers.sources_list(numbers.mapping([WEB_PAGE, POLICY])) == (
        "\n\nSources:\n- [1] Refund policy — policy.md\n- [2] Paris - Wikipedia — https://en.wikipedia.org/wiki/Paris"
    )

    numbers = CitationNumbers()  # a page cited both ways, in either order, is one number
    numbers.read_web_answer()
    assert numbers.feed("A [2], B [px_0123456789abcdef#2], C [2], D [px_0123456789abcdef#3], E [3].") == (
        "A [1], B [1], C [1], D [2], E [2]."
    )

    numbers = CitationNumbers()  # the sources known first (an answer not streamed before its response)
    numbers.know([WEB_PAGE, POLICY])
    assert numbers.feed("Paris [1]; refunds [policy]; prose [sic].") == "Paris [1]; refunds [2]; prose [sic]."
    assert numbers.sources_list(numbers.mapping([WEB_PAGE, POLICY])) == WEB_AND_POLICY_LIST


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
        {"number": 1, "ids": ["doc-resume#0", "doc-resume#1", "doc-resume"]},
        {"number": 2, "ids": ["doc-refunds#0", "doc-refunds#3"]},
        {"number": 3, "ids": ["px_0123456789abcdef#2"]},
        {"number": 4, "ids": ["px_0123456789abcdef#1"]},
    ]
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert final.model_extra["agentchat"]["event"] == "message_complete"
    assert final.model_extra["agentchat"]["citations"] == expected
    assert whole.model_extra["agentchat"]["citations"] == expected


def step(request: ChatRequest) -> int:
    """How many tool steps this run has taken (the provider is shared by several runs)."""
    asked = max(i for i, m in enumerate(request.messages) if m.role == "user" and not m.tool_results)
    return sum(1 for m in request.messages[asked:] if m.tool_results)


def answer_call(answer: str) -> ScriptedTurn:
    return ScriptedTurn(calls=[ScriptedCall("generate_response", {
        "answer": answer, "sources": [], "confidence_score": 0.8, "used_internal_kb": True, "used_external_kb": False,
    })])


async def ask_both_ways(
    base: str, question: str, model: str = "agentchat-knowledge"
) -> tuple[str, str, list[Any], list[Any]]:
    """The answer streamed and not: (streamed text, whole text, their ``agentchat.citations``)."""
    messages: Any = [{"role": "user", "content": question}]
    async with sdk(base) as client:
        stream = await client.chat.completions.create(model=model, messages=messages, stream=True)
        chunks = [c async for c in stream]
        whole = await client.chat.completions.create(model=model, messages=messages)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    return (
        streamed, whole.choices[0].message.content or "",
        final.model_extra["agentchat"]["citations"], whole.model_extra["agentchat"]["citations"],
    )


async def test_a_document_cited_by_its_doc_id_is_numbered(offline: Settings) -> None:
    """The prompt and the corpus tools say "cite [doc_id]": that marker is numbered like its passages'."""

    def turn(request: ChatRequest, index: int) -> ScriptedTurn:
        match step(request):
            case 0:
                return ScriptedTurn(calls=[ScriptedCall("knowledge_base_search", {"query": "resume a stream"})])
            case 1:
                return ScriptedTurn(calls=[ScriptedCall("search_text", {"query": "Last-Event-ID"})])
        return answer_call("Reconnect with the Last-Event-ID header [doc-resume].")

    async with running_app(offline, provider=ScriptedProvider(turn), embedder=None) as (base, _):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            assert (await http.post("/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        streamed, whole, streamed_cited, whole_cited = await ask_both_ways(base, "How do I resume?")
    assert streamed == whole == "Reconnect with the Last-Event-ID header [1]." + RESUME_SOURCES
    assert streamed_cited == whole_cited == [RESUME_CITED]


async def test_a_web_answers_marker_points_at_its_page_on_the_wire(tmp_path: Path) -> None:
    """A run that read a web answer (the Perplexity fake) and the knowledge base answers
    "… capital [1]. … 5 days [policy#0]." (``[1]`` being the web answer's own marker, which
    ``generate_response`` accepts): the client reads [1] for the web page, [2] for the policy."""

    def turn(request: ChatRequest, index: int) -> ScriptedTurn:
        match step(request):
            case 0:
                return ScriptedTurn(calls=[ScriptedCall("knowledge_base_search", {"query": "refund days"})])
            case 1:
                return ScriptedTurn(calls=[ScriptedCall("perplexity_search", {"query": "capital of France"})])
            case 2:
                px = next(orjson.loads(r.content)["perplexity_result_id"] for m in request.messages
                          for r in m.tool_results if "perplexity_result_id" in r.content)
                keywords = ["capital of France", "Paris capital", "French capital city"]
                return ScriptedTurn(calls=[ScriptedCall("index_keywords", {
                    "keywords": keywords, "perplexity_result_id": px})])
        return answer_call("Paris is the capital [1]. A refund takes 5 days [policy#0].")

    pplx = FakePerplexity()
    page = Source("https://en.wikipedia.org/wiki/Paris", "Paris - Wikipedia")
    for _ in range(2):  # the streamed run and the other
        pplx.add(Answer("Paris is the capital of France [1].", [page]))
    async with running_fake(pplx.app) as pplx_url:
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_ADMIN_OPEN": "true", "OLLAMA_HOST": "http://127.0.0.1:9",
            "PERPLEXITY_API_KEY": pplx.api_key, "PERPLEXITY_BASE_URL": pplx_url,
        })
        async with running_app(settings, provider=ScriptedProvider(turn), embedder=None) as (base, _):
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                policy = {"id": "policy", "title": "Refund policy", "text": "A refund takes 5 days to arrive."}
                assert (await http.post("/v1/kb/documents", json={"documents": [policy]})).status_code == 200
            streamed, whole, streamed_cited, whole_cited = await ask_both_ways(base, "Capital, and refunds?")
    assert streamed == whole
    assert streamed.startswith("Paris is the capital [1]. A refund takes 5 days [2].\n\nSources:\n")
    assert streamed.endswith("- [1] Paris - Wikipedia — https://en.wikipedia.org/wiki/Paris\n- [2] Refund policy — api")
    assert [(e["number"], e["title"]) for e in streamed_cited] == [(1, "Paris - Wikipedia"), (2, "Refund policy")]
    assert [e["ids"][0].split("#")[1] for e in whole_cited] == ["1", "0"]  # the web page's own number, the chunk


async def test_a_marker_held_back_is_sent_before_an_error_or_a_wait(settings: Settings) -> None:
    """A closed marker is held for the character after it (a link's ``(``?); an answer that
    ends there in an error, or in a wait for an approval, still shows it, numbered."""
    cases = {
        "provider_error": (ScriptedProvider(
            lambda request, index: ScriptedTurn(chunks=["Partial answer [doc#1]"], error="it fell over")), {}),
        "approval_required": (ScriptedProvider(lambda request, index: ScriptedTurn(
            chunks=["Clearing it [doc#1]"], calls=[ScriptedCall("clear_table", {"table": "stock"})])),
            {"registry": registry([])}),
    }
    for code, (provider, overrides) in cases.items():
        async with running_app(settings, provider=provider, embedder=None, **overrides) as (base, _):
            body = {"model": "agentchat-workflow", "messages": [{"role": "user", "content": "Go."}], "stream": True}
            async with httpx.AsyncClient(base_url=base, timeout=30) as http:
                wire = (await http.post("/v1/chat/completions", json=body)).text
        frames = [orjson.loads(line[6:]) for line in wire.splitlines() if line.startswith("data: {")]
        text = "".join(f["choices"][0]["delta"].get("content") or "" for f in frames if f.get("choices"))
        assert text == ("Partial answer [1]" if code == "provider_error" else "Clearing it [1]"), code
        assert frames[-1]["error"]["code"] == code and wire.rstrip().endswith("data: [DONE]")


#: A reviewer's sentence: bracketed numbers in prose, none of them a citation.
PROSE = "Python [3.11] came out before the [2024] release; see the list [0, 1, 2]."
PROSE_DELTAS = ["Python [3.", "11] came out before the [20", "24] release; see the list [0, 1", ", 2]."]


def test_bracketed_numbers_are_prose_unless_a_web_answer_numbers_its_pages() -> None:
    """A number is no id: ``[3.11]``, ``[2024]``, ``[0, 1, 2]`` stay as written, and no
    "web citation" line is made up for them — with or without a web answer read, split
    anywhere. After a web answer, a bare ``[n]`` a page may have is its page ``n``."""
    for web in (False, True):
        for i in range(len(PROSE) + 1):
            numbers = CitationNumbers()
            if web:
                numbers.read_web_answer()
            assert numbers.feed(PROSE[:i]) + numbers.feed(PROSE[i:]) + numbers.finish() == PROSE, (web, i)
            assert numbers.mapping([]) == [], (web, i)
    numbers = CitationNumbers()
    assert numbers.feed("Paris [1]; a year [2024]; none [0]; ") == "Paris [1]; a year [2024]; none [0]; "
    numbers.read_web_answer()
    assert numbers.feed("Paris [1]; a year [2024]; none [0]; a page [2]") + numbers.finish() == (
        "Paris [1]; a year [2024]; none [0]; a page [2]"
    )
    numbers = CitationNumbers()  # the sources known: a bare number must name one of their pages
    numbers.read_web_answer()
    numbers.know([WEB_PAGE, POLICY])
    assert numbers.feed("Paris [1], [2], [1, 2].") == "Paris [1], [2], [1, 2]."
    assert numbers.sources_list(numbers.mapping([WEB_PAGE, POLICY])) == WEB_AND_POLICY_LIST


def web_settings(tmp_path: Path, pplx: FakePerplexity, pplx_url: str) -> Settings:
    return Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_ADMIN_OPEN": "true", "OLLAMA_HOST": "http://127.0.0.1:9",
        "PERPLEXITY_API_KEY": pplx.api_key, "PERPLEXITY_BASE_URL": pplx_url,
    })


async def test_bracketed_numbers_in_prose_reach_the_client_as_written(settings: Settings) -> None:
    """The reviewer's sentence streamed by a run that read no web answer: streamed and not,
    the client gets it unchanged, with no list and no citations."""
    provider = ScriptedProvider(lambda request, index: ScriptedTurn(chunks=PROSE_DELTAS))
    async with running_app(settings, provider=provider, embedder=None) as (base, _):
        streamed, whole, streamed_cited, whole_cited = await ask_both_ways(
            base, "When did Python 3.11 come out?", "agentchat-workflow")
    assert streamed == whole == PROSE
    assert streamed_cited == whole_cited == []


async def test_bracketed_numbers_stay_prose_beside_a_web_answer(tmp_path: Path) -> None:
    """The same sentence after the run read a web answer (the Perplexity fake, two pages) and
    cited its page 2 as the answer did, ``[2]``: that is the page, numbered [1] (the run's
    ``perplexity_search`` result tells the face a bare number may be a page); ``[3.11]``,
    ``[2024]`` and ``[0, 1, 2]`` are not, and the list names that page alone."""

    def turn(request: ChatRequest, index: int) -> ScriptedTurn:
        match step(request):
            case 0:
                return ScriptedTurn(calls=[ScriptedCall("knowledge_base_search", {"query": "Python 3.11 release"})])
            case 1:
                return ScriptedTurn(calls=[ScriptedCall("perplexity_search", {"query": "Python 3.11 release"})])
            case 2:
                px = next(orjson.loads(r.content)["perplexity_result_id"] for m in request.messages
                          for r in m.tool_results if "perplexity_result_id" in r.content)
                keywords = ["Python 3.11", "Python release", "CPython 3.11"]
                return ScriptedTurn(calls=[ScriptedCall("index_keywords", {
                    "keywords": keywords, "perplexity_result_id": px})])
        # The answer written as text, then delivered (``generate_response`` holds what was shown).
        done = answer_call("It came out in 2022 [2].")
        return ScriptedTurn(chunks=["It came out in 2022 [2", "]. ", *PROSE_DELTAS], calls=done.calls)

    pplx = FakePerplexity()
    pages = [Source("https://peps.python.org/pep-0664/", "PEP 664"),
             Source("https://www.python.org/downloads/release/python-3110/", "Python 3.11.0")]
    for _ in range(2):  # the streamed run and the other
        pplx.add(Answer("Python 3.11 came out in October 2022 [2].", pages))
    async with running_fake(pplx.app) as pplx_url:
        settings = web_settings(tmp_path, pplx, pplx_url)
        async with running_app(settings, provider=ScriptedProvider(turn), embedder=None) as (base, _):
            streamed, whole, streamed_cited, whole_cited = await ask_both_ways(
                base, "When did Python 3.11 come out?")
    assert streamed == whole == (
        "It came out in 2022 [1]. " + PROSE
        + "\n\nSources:\n- [1] Python 3.11.0 — https://www.python.org/downloads/release/python-3110/"
    )
    assert [(e["number"], e["title"]) for e in streamed_cited] == [(1, "Python 3.11.0")]
    assert [e["ids"][0].split("#")[1] for e in whole_cited] == ["2"]  # the web answer's page 2
