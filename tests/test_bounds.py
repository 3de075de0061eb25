"""Bounded inputs: every integer a client sends is range-checked, JSON bodies are no deeper
than the encoders can take, and a 405 names the allowed methods — bad input always gets a
clear 4xx with a JSON body, never a 500. Agent and reference backend, over real servers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from app.config import Settings
from app.server.bounds import MAX_SAFE_INTEGER, check_int, check_json, parse_int
from app.server.problems import HTTPProblem
from backend import create_backend_app
from backend.seed import ENTITIES, TRIGGER_TYPES
from llm.scripted import ScriptedProvider, ScriptedTurn
from tests.conftest import collect_sse, running_app
from tests.support.server import serve_app

# The servers are module fixtures; their tests share the module's event loop.
module_loop = pytest.mark.asyncio(loop_scope="module")

# Integers as text (headers, query strings): too large for SQLite, negative, far too large,
# not decimal, not a number, and forms Python's int() accepts but other languages do not.
BAD_INT_TEXT = ["9223372036854775808", "-1", "1" + "0" * 30, "1e3", "abc", "1_000", "+5", "0x10", "\u0661\u0662", " 7"]
# The same, as JSON values.
BAD_INT_JSON: list[Any] = [2**63, -1, 10**30, "1e3", "abc", 1.5, True, None, [1], {"n": 1}]


def nested(depth: int) -> Any:
    value: Any = {"leaf": 1}
    for i in range(depth - 1):
        value = {"k": value} if i % 2 else [value]
    return value


def assert_problem(resp: httpx.Response, status: int, error: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = resp.json()
    assert set(body) == {"error", "detail"} and isinstance(body["detail"], str) and body["detail"]
    if error is not None:
        assert body["error"] == error, body
    return body


# --- the checkers themselves -----------------------------------------------------------------


def test_parse_int_takes_plain_decimal_integers_in_range() -> None:
    assert parse_int("0", name="n", lo=0, hi=10) == 0
    assert parse_int("-3", name="n", lo=-5, hi=10) == -3
    assert parse_int(None, name="n", lo=0, hi=10, default=4) == 4
    assert parse_int(str(MAX_SAFE_INTEGER), name="n", lo=0, hi=MAX_SAFE_INTEGER) == MAX_SAFE_INTEGER
    for raw in [*BAD_INT_TEXT, "11", "9" * 5000]:
        with pytest.raises(HTTPProblem) as caught:
            parse_int(raw, name="n", lo=0, hi=10)
        assert caught.value.status == 400 and caught.value.error == "invalid_field"
        assert len(caught.value.detail) < 200  # the detail never echoes a huge input
    with pytest.raises(HTTPProblem):
        parse_int("", name="n", lo=0, hi=10)


def test_check_int_refuses_booleans_floats_strings_and_out_of_range() -> None:
    assert check_int(7, name="n", lo=1, hi=10) == 7
    for value in [*BAD_INT_JSON, 0, 11]:
        with pytest.raises(HTTPProblem):
            check_int(value, name="n", lo=1, hi=10)


def test_check_json_bounds_depth_and_integers_iteratively() -> None:
    check_json(nested(64))
    check_json({"n": 2**63 - 1, "m": -(2**63), "f": 1e300})
    for value, error in [
        (nested(65), "too_deep"),
        (nested(100_000), "too_deep"),  # far past Python's recursion limit
        ({"n": 2**63}, "number_out_of_range"),
        ([[[-(2**63) - 1]]], "number_out_of_range"),
    ]:
        with pytest.raises(HTTPProblem) as caught:
            check_json(value)
        assert caught.value.status == 400 and caught.value.error == error
    with pytest.raises(HTTPProblem) as caught:
        check_json(list(range(10)), max_nodes=5)
    assert caught.value.status == 413


# --- the agent over a real server --------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def agent(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """An agent whose one finished run lives only in the database: it ran in an earlier
    process (app) on the same file, so the events route reads it from SQLite."""
    db = tmp_path_factory.mktemp("bounds") / "agent.sqlite3"
    settings = Settings.from_env(
        {
            "AGENT_DB_PATH": str(db),
            "AGENT_ADMIN_OPEN": "true",  # the admin routes are refused in `none` mode otherwise
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "OLLAMA_HOST": "http://127.0.0.1:9",
        }
    )
    provider = ScriptedProvider([ScriptedTurn(chunks=("stored ", "answer"))])
    async with (
        running_app(settings, provider=provider, embedder=None) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        created = await client.post("/v1/agent/runs", json={"message": "hi", "context_type": "knowledge"})
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        events = await collect_sse(client, "GET", created.json()["stream_url"])
        assert events[-1].event == "message_complete"
    async with (
        running_app(settings, provider=ScriptedProvider([]), embedder=None) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        yield client, f"/v1/agent/runs/{run_id}/events"


@module_loop
async def test_event_cursor_out_of_range_is_a_400_for_a_stored_run(agent: tuple[httpx.AsyncClient, str]) -> None:
    client, url = agent
    for raw in BAD_INT_TEXT:
        body = assert_problem(await client.get(url, params={"after": raw}), 400, "invalid_field")
        assert "after" in body["detail"]
        if raw.strip() == raw:  # h11 strips whitespace around header values
            resp = await client.get(url, headers={"Last-Event-ID": raw.encode()})
            body = assert_problem(resp, 400, "invalid_field")
            assert "Last-Event-ID" in body["detail"]


@module_loop
async def test_event_cursor_at_the_bound_replays_nothing(agent: tuple[httpx.AsyncClient, str]) -> None:
    client, url = agent
    assert (await client.get(url, params={"after": str(MAX_SAFE_INTEGER)})).status_code == 204
    assert (await client.get(url, headers={"Last-Event-ID": str(MAX_SAFE_INTEGER)})).status_code == 204
    replay = await client.get(url, headers={"Last-Event-ID": "0"})
    assert replay.status_code == 200 and b"event: message_complete" in replay.content


@module_loop
async def test_prune_numbers_are_range_checked(agent: tuple[httpx.AsyncClient, str]) -> None:
    client, _ = agent
    bad_days: list[Any] = [2**63, -1, 10**30, 1e300, "1e3", True, None]
    for name, values in [("min_usage", BAD_INT_JSON), ("older_than_days", bad_days)]:
        for value in values:
            body = {"min_usage": 1, "older_than_days": 1, name: value}
            resp = await client.post("/v1/admin/keywords/prune", json=body)
            # 2**63 is refused while the body is read (no integer of ours goes past int64).
            error = "number_out_of_range" if value == 2**63 else "invalid_field"
            assert name in assert_problem(resp, 400, error)["detail"]
    ok = await client.post("/v1/admin/keywords/prune", json={"min_usage": 2**31 - 1, "older_than_days": 0.5})
    assert ok.status_code == 200 and ok.json() == {"removed": 0}


@module_loop
async def test_deep_or_oversized_json_is_a_400_before_any_encoder(agent: tuple[httpx.AsyncClient, str]) -> None:
    client, _ = agent
    deep_doc = {"documents": [{"id": "d", "title": "Deep", "text": "deep text", "metadata": nested(300)}]}
    assert_problem(await client.post("/v1/kb/documents", json=deep_doc), 400, "too_deep")
    deep_chat = {"message": "hi", "context_type": "workflow", "context": nested(300)}
    assert_problem(await client.post("/v1/agent/chat", json=deep_chat), 400, "too_deep")
    assert_problem(await client.post("/v1/agent/runs", json=deep_chat), 400, "too_deep")
    big = {"documents": [{"id": "b", "title": "Big", "text": "big number", "metadata": {"n": 2**63}}]}
    assert_problem(await client.post("/v1/kb/documents", json=big), 400, "number_out_of_range")
    # Very deep raw text is refused the same way, though orjson itself stops it (at 1024
    # levels): it was `invalid_json` "depth limit exceeded", not the documented `too_deep`.
    raw = b'{"documents": [{"text": "x", "metadata": ' + b'{"a":' * 2000 + b"1" + b"}" * 2000 + b"}]}"
    resp = await client.post("/v1/kb/documents", content=raw, headers={"content-type": "application/json"})
    assert assert_problem(resp, 400, "too_deep")["detail"] == "the body is nested deeper than 64 levels"


@module_loop
async def test_405_names_the_allowed_methods(agent: tuple[httpx.AsyncClient, str]) -> None:
    client, url = agent
    resp = await client.get("/v1/agent/chat")
    assert_problem(resp, 405, "method_not_allowed")
    assert resp.headers["allow"] == "POST"
    resp = await client.post("/healthz")
    assert_problem(resp, 405, "method_not_allowed")
    assert set(resp.headers["allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
    resp = await client.delete(url)
    assert_problem(resp, 405, "method_not_allowed")
    assert "GET" in resp.headers["allow"]
    # A path served by several routes (one per method) names them all, not the first
    # route's: the conversation's was "GET, HEAD" (found by schemathesis' Allow check).
    for method, path, allowed in [
        ("OPTIONS", "/v1/agent/conversations/conv_1", {"GET", "HEAD", "PATCH", "DELETE"}),
        ("PUT", "/v1/agent/runs", {"GET", "HEAD", "POST"}),
        ("OPTIONS", "/v1/agent/conversations/conv_1/attachments", {"GET", "HEAD", "POST"}),
        ("PUT", "/v1/kb/documents", {"GET", "HEAD", "POST"}),
    ]:
        resp = await client.request(method, path)
        body = assert_problem(resp, 405, "method_not_allowed")
        assert set(resp.headers["allow"].replace(" ", "").split(",")) == allowed, (path, resp.headers["allow"])
        assert body["detail"].endswith(resp.headers["allow"])


# --- the reference backend -------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[httpx.AsyncClient]:
    db: Path = tmp_path_factory.mktemp("bounds-backend") / "backend.db"
    async with (
        serve_app(create_backend_app(db)) as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer demo-admin"}) as client,
    ):
        yield client


def assert_backend_error(resp: httpx.Response, status: int, *needles: str) -> None:
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    assert body["code"] == {400: "invalid_argument", 405: "method_not_allowed"}[status], body
    for needle in needles:
        assert needle in body["message"], body


def workflow(edges: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "Bounded",
        "description": "",
        "is_active": True,
        "entity_id": ENTITIES["inventory.inventory_items"],
        "trigger_type_id": TRIGGER_TYPES["on_update"],
        "actions": [{"name": "Log", "action_type": "log_audit_entry", "action_config": {"message": "ok"}}],
        "edges": edges,
    }


@module_loop
@pytest.mark.parametrize("route", ["/v1/workflow/rules", "/v1/workflow/alerts/mine", "/v1/workflow/alerts"])
async def test_backend_paging_numbers_are_range_checked(backend: httpx.AsyncClient, route: str) -> None:
    for name in ("page", "rows"):
        for raw in BAD_INT_TEXT:
            assert_backend_error(await backend.get(route, params={name: raw}), 400, name)
    last = await backend.get(route, params={"page": str(2**31 - 1), "rows": "1000"})
    assert last.status_code == 200 and last.json()["items"] == []
    assert_backend_error(await backend.get(route, params={"page": str(2**31)}), 400, "page")


@module_loop
async def test_backend_body_integers_depth_and_references_are_bounded(backend: httpx.AsyncClient) -> None:
    start = {"target_action_id": "temp:0", "edge_type": "start"}
    for order, needle in ((2**63, "integers must lie between"), (2**31, "edge_order"), (-1, "edge_order")):
        resp = await backend.post("/v1/workflow/rules/full", json=workflow([{**start, "edge_order": order}]))
        assert_backend_error(resp, 400, needle)
    ok = await backend.post("/v1/workflow/rules/full?dry_run=true", json=workflow([{**start, "edge_order": 2**31 - 1}]))
    assert ok.status_code == 200 and ok.json()["valid"] is True
    for ref in ("temp:\u00b2", "temp:" + "9" * 5000, "temp:\u0661"):  # superscript two, Arabic-Indic one
        edges = [start, {"source_action_id": ref, "target_action_id": "temp:0", "edge_type": "sequence"}]
        resp = await backend.post("/v1/workflow/rules/full?dry_run=true", json=workflow(edges))
        assert resp.status_code == 200 and resp.json()["valid"] is False, resp.text
        assert "not a valid temp reference" in " ".join(resp.json()["errors"])
    deep = {"name": "Deep config", "config": nested(300)}
    assert_backend_error(await backend.post("/v1/data/validate", json=deep), 400, "nested")
    big = {"name": "Big number", "config": {"n": 2**63}}
    assert_backend_error(await backend.post("/v1/data/validate", json=big), 400, "integers")


@module_loop
async def test_backend_405_names_the_allowed_methods(backend: httpx.AsyncClient) -> None:
    resp = await backend.get("/v1/data/validate")
    assert_backend_error(resp, 405)
    assert resp.headers["allow"] == "POST"
