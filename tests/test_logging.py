"""JSON-lines logs of a real ``agentchat serve`` (a subprocess, JSON by default): every
line it writes parses as JSON; the lines of a run carry ``run_id``, ``conversation_id``
and ``user`` — also a run carried on after a restart — and each HTTP request has one
access-log line (a stream's when it ends) with its status, size and duration and no
token. ``AGENT_LOG_FORMAT=text`` keeps the readable form."""

from __future__ import annotations

import io
import logging
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from app.ops.log_context import safe_query
from app.ops.logs import configure_logging, log_format, make_handler, replica_logs
from app.runs.records import Caller, ChatInput, encode_run_input
from events import ContentChunk, RunStarted
from storage.records import NewRun, RunEvent, RunWrite
from tests.conftest import running_app
from tests.support.procs import AgentServer
from tests.support.storage import opened_storage

OFFLINE = {
    "AGENT_LLM_PROVIDER": "extractive",
    "AGENT_EMBEDDER": "none",
    "AGENT_INGEST_SAMPLE_KB": "false",
    "OLLAMA_HOST": "http://127.0.0.1:9",
}
QUESTION = {"message": "How do I resume a stream?", "context_type": "knowledge"}


async def read_stream(client: httpx.AsyncClient, url: str) -> tuple[int, bytes]:
    """Status and every body byte of an SSE response, read to its end."""
    async with client.stream("GET", url) as response:
        body = b"".join([chunk async for chunk in response.aiter_raw()])
        return response.status_code, body


def json_lines(server: AgentServer) -> list[dict[str, Any]]:
    """Every line the server wrote (the harness's own ``===`` lines aside), parsed."""
    records = []
    for line in server.lines():
        if line.startswith("=== harness:") or not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
        assert isinstance(record, dict), line
        records.append(record)
    return records


async def test_every_line_is_json_and_names_its_run_and_request(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite3"
    # A run a process admitted and died before starting: the next one carries it on.
    async with opened_storage(db) as storage:
        await storage.runs.create(NewRun(
            id="run_left", conversation_id="conv_left", user_id="local", context_type="knowledge",
            input=encode_run_input(ChatInput("What is a stream?", "knowledge", {}), Caller("local")),
            lease_owner="a-dead-process", lease_s=0.01))
        # One that died mid-answer before its first checkpoint: the next process discards
        # its partial turn and runs it again from its request (lines logged before its task).
        await storage.runs.create(NewRun(
            id="run_cut", conversation_id="conv_cut", user_id="local", context_type="knowledge",
            input=encode_run_input(ChatInput("What is a lease?", "knowledge", {}), Caller("local")),
            lease_owner="a-dead-process", lease_s=0.01))
        started = RunStarted(run_id="run_cut", conversation_id="conv_cut")
        partial = ContentChunk(chunk="A lease is")
        await storage.runs.commit(RunWrite(
            run_id="run_cut", conversation_id="conv_cut", user_id="local", status="running",
            events=[RunEvent(seq, ev.name, ev.to_json().decode()) for seq, ev in enumerate((started, partial), 1)]))
    server = AgentServer(tmp_path, {**OFFLINE, "AGENT_DB_PATH": str(db)})
    server.start()
    try:
        await server.wait_healthy()
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as client:
            status, left_body = await read_stream(client, "/v1/agent/runs/run_left/events")
            assert status == 200 and b"message_complete" in left_body
            status, cut_body = await read_stream(client, "/v1/agent/runs/run_cut/events")
            assert status == 200 and b"message_complete" in cut_body
            created = await client.post("/v1/agent/runs", json=QUESTION)
            assert created.status_code == 201
            run_id, conversation_id = created.json()["run_id"], created.json()["conversation_id"]
            stream_url = created.json()["stream_url"]
            token = stream_url.split("token=", 1)[1]
            status, body = await read_stream(client, stream_url)
            assert status == 200 and b"message_complete" in body
            assert (await client.get("/healthz")).status_code == 200
        server.send(signal.SIGTERM)
        assert await server.wait_exit(30) is not None
    finally:
        server.close()

    records = json_lines(server)
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert token not in server.text()

    # Lines logged inside each run (the tool selection logs no ids of its own) carry them.
    for rid, cid in [(run_id, conversation_id), ("run_left", "conv_left"), ("run_cut", "conv_cut")]:
        mine = [r for r in records if r.get("run_id") == rid and r["logger"] != "agentchat.access"]
        assert any(r["message"] == "tool selection: final" for r in mine), (rid, mine)
        assert all(r.get("conversation_id") == cid and r.get("user") == "local" for r in mine), mine
    selections = [r for r in records if r["message"] == "tool selection: final"]
    assert sorted(r["run_id"] for r in selections) == sorted([run_id, "run_left", "run_cut"])
    # The lines about carrying run_cut on, logged before its task names it, name it too.
    carrying = ("discarding a partial model turn", "restarting a run from its request")
    carried = [r for r in records if r["message"] in carrying]
    assert len(carried) == 2, carried
    assert all((r.get("run_id"), r.get("conversation_id"), r.get("user")) == ("run_cut", "conv_cut", "local")
               for r in carried), carried

    access = [r for r in records if r["logger"] == "agentchat.access"]
    (post,) = [r for r in access if r["method"] == "POST"]
    assert post["path"] == "/v1/agent/runs" and post["route"] == "/v1/agent/runs" and post["status"] == 201
    assert post["run_id"] == run_id and post["conversation_id"] == conversation_id and post["user"] == "local"
    assert post["bytes"] == len(created.content) and post["client_ip"] == "127.0.0.1" and post["query"] is None
    (stream,) = [r for r in access if r["path"] == f"/v1/agent/runs/{run_id}/events"]
    assert stream["route"] == "/v1/agent/runs/{run_id}/events" and stream["status"] == 200
    assert stream["query"] == "token=***" and stream["user"] == "local" and stream["run_id"] == run_id
    assert stream["bytes"] == len(body) and stream["duration_ms"] >= 0  # logged when the stream ended
    assert {r["status"] for r in access if r["path"] == "/healthz"} == {200}  # (the harness polls it too)
    # uvicorn's own lines come through the same handler; its access log is off.
    assert any(r["logger"].startswith("uvicorn") and "startup complete" in r["message"] for r in records)
    assert not any(r["logger"] == "uvicorn.access" for r in records)
    assert any(r["message"].startswith("agentchat: serving on") for r in records)


async def test_a_request_that_crashes_is_logged_as_500(settings: Settings) -> None:
    """In-process, with the JSON handler on the root logger: an unexpected error still
    gets its access line (status 500) and its traceback line, both with the route."""
    stream = io.StringIO()
    root = logging.getLogger()
    handler = make_handler("json", stream)
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        async with running_app(settings) as (base, app), httpx.AsyncClient(timeout=30) as client:
            app.state.services.index_state = None  # /readyz now fails with an AttributeError
            response = await client.get(f"{base}/readyz?token=abc&after=3")
            assert response.status_code == 500
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    records = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    (line,) = [r for r in records if r["logger"] == "agentchat.access" and r["path"] == "/readyz"]
    assert line["status"] == 500 and line["route"] == "/readyz" and line["query"] == "token=***&after=3"
    assert line["error"] == "AttributeError"
    (crash,) = [r for r in records if r["logger"] == "agentchat.http" and r["level"] == "ERROR"]
    assert crash["route"] == "/readyz" and "AttributeError" in crash["exc_info"]
    # (the test's own client, httpx, logs its URLs; only the server's lines count)
    assert not any("abc" in orjson.dumps(r).decode() for r in records if not r["logger"].startswith("httpx"))


def test_query_secrets_are_masked() -> None:
    assert safe_query(b"") is None
    assert safe_query(b"after=4&token=eyJ.x.y&api_key=k&note=a%20b") == "after=4&token=***&api_key=***&note=a+b"


def test_the_ready_lines_settings_are_summarised_in_text_and_whole_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    """The ready line carries every setting (~2,500 characters): a terminal (text, as
    ``make run`` logs) gets their count and where to find them, a log shipper all of them."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    settings = {"AGENT_PORT": 8000, "AGENT_DB_PATH": "data/agentchat.sqlite3", "AGENT_AUTH": "none"}
    try:
        configure_logging(fmt="text")
        logging.getLogger("agentchat.test").warning("agentchat ready", extra={"settings": settings})
        configure_logging(fmt="json")
        logging.getLogger("agentchat.test").warning("agentchat ready", extra={"settings": settings})
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    text_line, json_line = capsys.readouterr().err.splitlines()[-2:]
    assert text_line.endswith(
        'agentchat ready {"settings":"3 values, listed in the JSON log format (AGENT_LOG_FORMAT=json)"}'
    ), text_line
    assert orjson.loads(json_line)["settings"] == settings


def test_the_format_is_a_setting(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AGENT_LOG_FORMAT", "text")
    assert log_format(default="json") == "text"
    monkeypatch.setenv("AGENT_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="AGENT_LOG_FORMAT must be one of json, text"):
        log_format()
    monkeypatch.delenv("AGENT_LOG_FORMAT")
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        assert configure_logging(default_format="text") == "text"
        logging.getLogger("agentchat.test").warning("readable", extra={"tool": "x"})
        assert configure_logging(fmt="json") == "json"
        logging.getLogger("agentchat.test").warning("parsable", extra={"tool": "x"})
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    text_line, json_line = capsys.readouterr().err.splitlines()[-2:]
    assert text_line.endswith('WARNING agentchat.test: readable {"tool":"x"}')
    assert orjson.loads(json_line) | {"time": None} == {
        "time": None, "level": "WARNING", "logger": "agentchat.test", "message": "parsable", "tool": "x",
        "pid": os.getpid()}  # fmt: skip


def test_a_replicas_lines_name_it_in_json_not_in_text() -> None:
    """Inside ``replica_logs`` every JSON line names the replica (a call's own ``replica``
    field stands), after the pid; the text form for a terminal stays as short as before;
    after the block no line names it."""
    json_out, text_out = io.StringIO(), io.StringIO()
    handlers = [make_handler("json", json_out), make_handler("text", text_out)]
    log = logging.getLogger("agentchat.test.replica")
    log.propagate, log.level = False, logging.INFO
    for handler in handlers:
        log.addHandler(handler)
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[:] = handlers  # replica_logs names the lines of the root logger's handlers
    try:
        with replica_logs("host:1:abc"):
            log.info("inside", extra={"tool": "x"})
            log.info("named", extra={"replica": "elsewhere"})
        log.info("after")
    finally:
        root.handlers[:] = saved
        for handler in handlers:
            log.removeHandler(handler)
    inside, named, after = (orjson.loads(line) for line in json_out.getvalue().splitlines())
    assert list(inside)[-3:] == ["tool", "pid", "replica"] and inside["replica"] == "host:1:abc", inside
    assert named["replica"] == "elsewhere" and inside["pid"] == os.getpid()
    assert "replica" not in after and after["pid"] == os.getpid()
    assert text_out.getvalue().splitlines()[0].endswith('agentchat.test.replica: inside {"tool":"x"}')
