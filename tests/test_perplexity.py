"""PerplexityClient against the loopback fake: the request it sends, the answer and citations
it reads (current ``search_results`` and legacy ``citations``), and every failure mapped to
a PerplexityError kind instead of a transport exception."""

from __future__ import annotations

import httpx
import pytest

from agenttools.rag.perplexity import PerplexityClient, PerplexityError, parse_response
from tests.fakes.perplexity import Answer, Fail, FakePerplexity, Hang, Source
from tests.support.deadline import within
from tests.support.server import serve_app


@pytest.fixture
async def http():
    async with httpx.AsyncClient() as client:
        yield client


async def test_success_reads_answer_and_search_results(http: httpx.AsyncClient) -> None:
    fake = FakePerplexity()
    fake.add(
        Answer(
            "<think>plan</think>Liquid nitrogen boils at 77 K [1][2].",
            [
                Source("https://en.wikipedia.org/wiki/Liquid_nitrogen", "Liquid nitrogen", "2025-01-03"),
                Source("https://www.nist.gov/n2", "NIST nitrogen data", snippet="77.355 K"),
            ],
        )
    )
    async with serve_app(fake.app) as base:
        client = PerplexityClient(http, fake.api_key, base_url=base)
        answer = await client.search("boiling point of liquid nitrogen", "KB: nothing relevant")
    assert answer.answer == "Liquid nitrogen boils at 77 K [1][2]."
    assert [(c.index, c.url, c.title, c.date) for c in answer.citations] == [
        (1, "https://en.wikipedia.org/wiki/Liquid_nitrogen", "Liquid nitrogen", "2025-01-03"),
        (2, "https://www.nist.gov/n2", "NIST nitrogen data", None),
    ]
    assert answer.citations[1].snippet == "77.355 K"
    assert answer.model == "sonar"
    (call,) = fake.calls
    assert call.headers["authorization"] == f"Bearer {fake.api_key}"
    assert call.body["model"] == "sonar"
    assert [m["role"] for m in call.body["messages"]] == ["system", "user"]
    assert call.user_message.startswith("boiling point of liquid nitrogen")
    assert "KB: nothing relevant" in call.user_message


async def test_legacy_citations_field(http: httpx.AsyncClient) -> None:
    fake = FakePerplexity()
    fake.add(
        Answer(
            "Answer [1].",
            [Source("https://a.example/x"), Source("https://b.example/y")],
            legacy_citations=True,
        )
    )
    async with serve_app(fake.app) as base:
        answer = await PerplexityClient(http, fake.api_key, base_url=base + "/").search("q")
    assert [(c.index, c.url) for c in answer.citations] == [
        (1, "https://a.example/x"),
        (2, "https://b.example/y"),
    ]


def test_citation_numbers_survive_skipped_entries() -> None:
    body = (
        b'{"choices":[{"message":{"content":"x [3]"}}],'
        b'"search_results":[{"url":"https://a.example"},{"title":"no url"},{"url":"https://c.example"}]}'
    )
    answer = parse_response(body)
    assert [(c.index, c.url) for c in answer.citations] == [
        (1, "https://a.example"),
        (3, "https://c.example"),
    ]


@pytest.mark.parametrize(
    ("reply", "kind", "status"),
    [
        (Fail(429, "Too many requests", retry_after="7"), "rate_limited", 429),
        (Fail(500, "Internal error"), "unavailable", 500),
        (Fail(503, "Overloaded"), "unavailable", 503),
        (Fail(400, "Bad model"), "bad_request", 400),
    ],
)
async def test_http_failures_become_typed_errors(
    http: httpx.AsyncClient, reply: Fail, kind: str, status: int
) -> None:
    fake = FakePerplexity()
    fake.add(reply)
    async with serve_app(fake.app) as base:
        with pytest.raises(PerplexityError) as info:
            await PerplexityClient(http, fake.api_key, base_url=base).search("q")
    assert info.value.kind == kind
    assert info.value.status == status
    assert reply.message in info.value.detail
    if reply.retry_after:
        assert info.value.retry_after == reply.retry_after


async def test_wrong_key_is_an_auth_error(http: httpx.AsyncClient) -> None:
    fake = FakePerplexity()
    async with serve_app(fake.app) as base:
        with pytest.raises(PerplexityError) as info:
            await PerplexityClient(http, "wrong", base_url=base).search("q")
    assert info.value.kind == "auth"
    assert fake.calls == []


async def test_timeout(http: httpx.AsyncClient) -> None:
    fake = FakePerplexity()
    fake.add(Hang())
    async with serve_app(fake.app) as base:
        with pytest.raises(PerplexityError) as info:
            await PerplexityClient(http, fake.api_key, base_url=base, timeout_s=0.2).search("q")
        assert info.value.kind == "timeout"
        await within(fake.disconnected.wait(), "the fake to see the client give up")


async def test_connection_refused_is_unavailable(http: httpx.AsyncClient) -> None:
    fake = FakePerplexity()
    async with serve_app(fake.app) as base:
        pass  # server gone: nothing listens on that port any more
    with pytest.raises(PerplexityError) as info:
        await PerplexityClient(http, fake.api_key, base_url=base).search("q")
    assert info.value.kind == "unavailable"


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"choices": []}',
        b'{"choices":[{"message":{"content":"   "}}]}',
        b'{"choices":[{"message":{"content":null}}]}',
    ],
)
def test_unusable_bodies(body: bytes) -> None:
    with pytest.raises(PerplexityError) as info:
        parse_response(body)
    assert info.value.kind == "bad_response"


def test_from_env(http: httpx.AsyncClient) -> None:
    assert PerplexityClient.from_env(http, {}) is None
    assert PerplexityClient.from_env(http, {"PERPLEXITY_API_KEY": "  "}) is None
    client = PerplexityClient.from_env(
        http, {"PERPLEXITY_API_KEY": "k", "PERPLEXITY_BASE_URL": "http://127.0.0.1:9"}
    )
    assert client is not None
    assert client.build_request("q")["model"] == "sonar"
