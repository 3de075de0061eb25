"""Retention (issue 25 item 6) through the app and the CLI: the background pass compacts
a finished run's event log; its replay (from the store) keeps the text; a client
resuming from an id that was folded away gets the rest of the text, one resuming from a
kept id what it got before; ``agentchat compact`` runs the pass by hand, and deletes
idle conversations when asked."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.cli.commands import main
from app.config import Settings
from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import GatedProvider, GatedTurn
from tests.test_compat_faces_owners import bearer, env

ALICE = bearer("alice")
PIECES = ["The ", "answer ", "comes ", "in ", "many ", "small ", "pieces", "."]


def text_of(events: list[Any]) -> str:
    return "".join(orjson.loads(e.data)["chunk"] for e in events if e.event == "content_chunk")


def others(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.event, e.data) for e in events if e.event != "content_chunk"]


async def wait_for(check: Any, what: str) -> None:
    for _ in range(1000):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_background_compaction_keeps_replay_and_resume(tmp_path: Path) -> None:
    settings = Settings.from_env(
        env(tmp_path, AGENT_RUN_EVENTS_RETENTION_DAYS="0.000001", AGENT_RETENTION_INTERVAL_S="0.05")
    )
    provider = GatedProvider([GatedTurn(steps=tuple(PIECES))])
    async with (
        running_app(settings, provider=provider) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        svc = app.state.services
        body = {"message": "tell me", "context_type": "workflow", "conversation_id": "kept"}
        live = await collect_sse(http, "POST", "/v1/agent/chat", json=body, headers=ALICE)
        run_id = orjson.loads(live[0].data)["run_id"]
        chunks = [e for e in live if e.event == "content_chunk"]
        assert text_of(live) == "".join(PIECES) and len(chunks) > 1

        async def compacted() -> bool:
            got = await http.get(f"/v1/agent/runs/{run_id}", headers=ALICE)
            return bool(got.json()["events_compacted"])

        await wait_for(compacted, "the run's compaction")
        svc.runs.sweep(now=time.time() + 3600)  # its replay now comes from the store
        assert svc.runs.get(run_id) is None

        replay = await collect_sse(http, "GET", f"/v1/agent/runs/{run_id}/events", headers=ALICE)
        assert text_of(replay) == text_of(live) and others(replay) == others(live)
        assert len([e for e in replay if e.event == "content_chunk"]) == 1
        # A client that saw the first two chunks (an id that was folded away) gets the rest.
        seen = chunks[1].id
        rest = await collect_sse(
            http, "GET", f"/v1/agent/runs/{run_id}/events", headers={**ALICE, "Last-Event-ID": seen}
        )
        assert text_of(live[: live.index(chunks[1]) + 1]) + text_of(rest) == text_of(live)
        after_seen = [e for e in live if int(e.id or 0) > int(seen) and e.event != "content_chunk"]
        assert others(rest) == others(after_seen)
        # A client holding a kept id (the last chunk's) gets exactly what it got before.
        kept = chunks[-1].id
        tail = await collect_sse(
            http, "GET", f"/v1/agent/runs/{run_id}/events", headers={**ALICE, "Last-Event-ID": kept}
        )
        expected = [e for e in live if e.id is not None and int(e.id) > int(kept)]
        assert [(e.id, e.event, e.data) for e in tail] == [(e.id, e.event, e.data) for e in expected]
        metrics = (await http.get("/metrics")).text
        assert "agentchat_retention_runs_compacted_total 1.0" in metrics
        assert 'agentchat_retention_passes_total{outcome="done"}' in metrics


def test_compact_command_compacts_and_deletes_idle_conversations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value in env(tmp_path).items():
        monkeypatch.setenv(key, value)

    async def serve_one_run() -> str:
        settings = Settings.from_env(env(tmp_path))
        async with (
            running_app(settings, provider=GatedProvider([GatedTurn(steps=tuple(PIECES))])) as (base, _),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            body = {"message": "tell me", "context_type": "workflow", "conversation_id": "old"}
            events = await collect_sse(http, "POST", "/v1/agent/chat", json=body, headers=ALICE)
            return str(orjson.loads(events[0].data)["run_id"])

    asyncio.run(serve_one_run())
    ended = time.time()  # the run's stored end and its conversation's last word are earlier
    assert main(["compact", "--run-events-days", "0"]) == 0
    assert "compacted 0 runs" in capsys.readouterr().out
    # 0.000001 days is 86.4 ms: the run is older than that only once 86.4 ms have passed
    # since it ended (with a fast open, the commands above can take less).
    older = 0.000001 * 86_400
    deadline = ended + older + 30
    while time.time() - ended <= older:
        assert time.time() < deadline, "the clock did not move past the run's end"
        time.sleep(0.01)
    assert main(["compact", "--run-events-days", "0.000001"]) == 0
    assert "compacted 1 run (" in capsys.readouterr().out
    assert main(["compact", "--run-events-days", "0.000001", "--conversation-days", "0.000001"]) == 0
    out = capsys.readouterr().out
    assert "compacted 0 runs" in out and "deleted 1 idle conversation (0 attachments removed)" in out
    with pytest.raises(SystemExit) as refused:  # argparse's range check (app/cli/ranges.py): one line, exit 2
        main(["compact", "--run-events-days", "-1"])
    assert refused.value.code == 2
    assert "argument --run-events-days: must be between 0 and 36500" in capsys.readouterr().err
