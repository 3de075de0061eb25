"""What the CLI changes while ``agentchat serve`` runs reaches the server's searches, with
no restart (a newcomer's walkthrough, reproduced: ``make run`` up, ``agentchat ingest``
of a one-chunk file into a new bucket and ``agentchat docs rm`` from another shell;
``/readyz`` then counted the removed document's vectors and none of the new one, and a
question in the new bucket said ``"dropped_sides": {"semantic": "no_candidates"}``).

A real ``agentchat serve`` on a fresh file with the default configuration (provider and
embedder ``auto``: offline here, the extractive answerer and the embedder the
installation has), the sample knowledge base ingested on its first start; the CLI runs
as processes of its own on the same file, as a person runs it from another shell.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client import AgentClient
from tests.support.procs import AgentServer, child_env, run_cli
from tests.test_default_configs import UNREACHABLE, answered_from_the_kb

pytestmark = pytest.mark.slow  # a real server and four CLI processes

OFFLINE = {"OLLAMA_HOST": UNREACHABLE}
NOTE = """# Moraine survey of the Nigard glacier

The moraine survey measured how far the Nigard glacier retreated each summer: surveyors
walked the terminal moraine with poles and counted the crevasses on the glacier tongue.
"""
QUESTION = "How far did the Nigard glacier retreat in the moraine survey?"
REMOVED = "agentchat-overview"
REMOVED_QUESTION = "What is the agent chat service and which parts is it made of?"


async def agentchat(db: Path, *args: str) -> str:
    """One CLI command on the server's file, as from another shell; its output."""
    returncode, text = await run_cli(args, child_env({"AGENT_DB_PATH": str(db), **OFFLINE}))
    assert returncode == 0, f"agentchat {' '.join(args)} exited {returncode}:\n{text}"
    return text


def stored(db: Path) -> dict[str, Any]:
    """What the file holds, read by the test itself."""
    with sqlite3.connect(db) as conn:
        documents, chunks = conn.execute("SELECT count(*), coalesce(sum(chunk_count), 0) FROM kb_documents").fetchone()
        (vectors,) = conn.execute("SELECT count(*) FROM kb_chunks WHERE vector IS NOT NULL").fetchone()
        new = [r[0] for r in conn.execute("SELECT id FROM kb_documents WHERE bucket = 't1'")]
    return {"documents": documents, "chunks": chunks, "vectors": vectors, "t1": new}


def last_search(db: Path) -> str:
    """The last ``knowledge_base_search`` result as the model got it, as the tool-call log
    keeps it (its first 4,000 characters: the warnings, sides and best chunks come first)."""
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT result FROM tool_calls WHERE tool_name = 'knowledge_base_search' ORDER BY id DESC LIMIT 1"
        ).fetchone()
    assert row and row[0], "no knowledge_base_search was logged"
    return str(row[0])


async def chat(base: str, question: str, context: dict[str, Any] | None = None) -> list[tuple[str, dict[str, Any]]]:
    async with AgentClient(base) as agent:
        return [(event.name, event.to_dict()) async for event in agent.chat(question, "knowledge", context)]


async def readyz_counts(server: AgentServer) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        status, body = await server.readyz(http)
    knowledge = ((body or {}).get("checks") or {}).get("knowledge") or {}
    return {k: knowledge.get(k) for k in ("documents", "chunks", "vectors")} | {"status": status}


async def test_an_ingest_and_a_removal_by_the_cli_reach_the_running_server(tmp_path: Path) -> None:
    server = AgentServer(tmp_path, OFFLINE, name="kb-fresh")
    server.start()
    try:
        ready = await server.wait_ready(timeout=180)
        assert str(ready["checks"]["knowledge"]["sample_kb"]).startswith("ingested"), ready["checks"]["knowledge"]
        db = server.db_path
        notes = tmp_path / "notes"
        notes.mkdir()
        (notes / "moraine.md").write_text(NOTE)

        await agentchat(db, "ingest", str(notes / "moraine.md"), "--bucket", "t1")
        await agentchat(db, "docs", "rm", REMOVED)
        want = await asyncio.to_thread(stored, db)
        assert len(want["t1"]) == 1, want

        # /readyz counts what the file holds (it counted the removed document's vectors
        # and none of the new one's): at once, or within the reload's short wait.
        deadline = asyncio.get_running_loop().time() + 30
        while (seen := await readyz_counts(server)) != {**{k: want[k] for k in ("documents", "chunks", "vectors")},
                                                           "status": 200}:  # fmt: skip
            assert asyncio.get_running_loop().time() < deadline, (seen, want)
            await asyncio.sleep(0.05)

        # A question in the new bucket: its document is found, by meaning too.
        events = await chat(server.base, QUESTION, {"bucket": "t1"})
        response = answered_from_the_kb(events)
        result = last_search(db)
        assert re.findall(r'"doc_id":\s*"([^"]+)"', result)[:1] == want["t1"], result[:1000]
        assert "no_candidates" not in result, result[:1000]
        assert want["t1"][0] in orjson.dumps(response).decode(), response

        # The removed document is in no result, whatever is asked.
        events = await chat(server.base, REMOVED_QUESTION)
        assert REMOVED not in last_search(db)
        assert all(REMOVED not in orjson.dumps(data).decode() for _, data in events)

        async with httpx.AsyncClient() as http:
            metrics = (await http.get(f"{server.base}/metrics")).text
        reloads = re.search(r"^agentchat_kb_reloads_total (\S+)$", metrics, re.M)
        assert reloads and float(reloads.group(1)) >= 1, metrics[-2000:]
        assert server.running  # never restarted
    finally:
        await server.kill()
        server.close()
