"""A run whose conversation's earlier messages cannot be loaded goes on without them — and
says so (no silent degradation): its ``tool_selection`` event carries ``history_error``
and ``agentchat_history_load_failures_total`` counts it. Before, a follow-up question
was answered as if it were the first, with a log line only."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import httpx

from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.support.offline_app import offline_settings
from tests.test_metrics import get_metrics

FAMILY = "agentchat_history_load_failures"


def spoil_a_message(db: Path, conversation_id: str) -> None:
    """One stored message of the conversation in a shape this version cannot read (a role
    it does not know, as a newer version might write)."""
    with sqlite3.connect(db) as conn:
        seq = conn.execute(
            "SELECT MIN(seq) FROM messages WHERE conversation_id = ?", (conversation_id,)
        ).fetchone()[0]
        assert seq is not None
        conn.execute(
            "UPDATE messages SET payload = ? WHERE conversation_id = ? AND seq = ?",
            ('{"role": "system", "content": "x"}', conversation_id, seq),
        )


async def test_a_run_without_its_history_says_so_in_its_event_and_a_metric(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    settings = offline_settings(db)
    async with (
        running_app(settings, provider=ExtractiveProvider(), embedder=None) as (base, _app),
        httpx.AsyncClient(timeout=60) as client,
    ):

        async def ask(conversation_id: str | None) -> tuple[str, dict[str, object]]:
            body: dict[str, object] = {"message": "How do I resume a stream?", "context_type": "knowledge"}
            if conversation_id is not None:
                body["conversation_id"] = conversation_id
            events = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)
            assert events[-1].json()["status"] == "completed"
            started = next(e.json() for e in events if e.event == "run_started")
            return str(started["conversation_id"]), next(e.json() for e in events if e.event == "tool_selection")

        conversation, first = await ask(None)
        assert "history_error" not in first  # absent on the wire when there is nothing to say
        _, healthy = await ask(conversation)
        assert "history_error" not in healthy
        assert (await get_metrics(client, base))[FAMILY][1] == {(f"{FAMILY}_total", ()): 0.0}

        await asyncio.to_thread(spoil_a_message, db, conversation)
        _, degraded = await ask(conversation)
        assert "unknown message role 'system'" in str(degraded.get("history_error")), degraded
        after = await get_metrics(client, base)
    assert after[FAMILY][1] == {(f"{FAMILY}_total", ()): 1.0}
