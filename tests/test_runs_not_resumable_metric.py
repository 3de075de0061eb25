"""An unfinished run that a start cannot carry on (here: restarted from its request
``MAX_RESUMES_WITHOUT_PROGRESS`` times without getting further, a crash loop) ends
``run_interrupted`` — and is counted as such (``agentchat_runs_not_resumable_total``),
no longer among the runs carried on (``agentchat_runs_resumed_total``), which hid it."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.runs.records import Caller, ChatInput, encode_run_input
from app.runs.recovery import MAX_RESUMES_WITHOUT_PROGRESS
from events import MessageComplete, TokenUsage
from llm.extractive import ExtractiveProvider
from storage.records import NewRun, RunWrite
from storage.sqlite import open_sqlite_storage
from tests.conftest import running_app
from tests.support.offline_app import offline_settings
from tests.support.procs import until
from tests.test_metrics import get_metrics, value
from tests.test_review_run_restart import CONV, RUN, STARTED, logged, resumed_from


async def test_a_run_that_cannot_be_carried_on_is_counted_apart(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite3"
    storage = await open_sqlite_storage(db)  # what the crashed process left
    try:
        await storage.runs.create(NewRun(
            id=RUN, conversation_id=CONV, user_id="local", context_type="knowledge",
            input=encode_run_input(ChatInput("crash me", "knowledge", {}), Caller("local")),
        ))
        await storage.runs.commit(RunWrite(
            RUN, CONV, "local", events=logged(STARTED, *[resumed_from(0)] * MAX_RESUMES_WITHOUT_PROGRESS),
            status="running",
        ))
    finally:
        await storage.close()
    settings = offline_settings(db)
    async with (
        running_app(settings, provider=ExtractiveProvider(), embedder=None) as (base, app),
        httpx.AsyncClient(timeout=30) as client,
    ):
        run = app.state.services.runs._runs[RUN]
        await until(lambda: run.finished and run.durable == len(run.events), "the run's ending stored", 20)
        metrics = await get_metrics(client, base)
    assert value(metrics, "agentchat_runs_not_resumable", "agentchat_runs_not_resumable_total") == 1
    assert value(metrics, "agentchat_runs_resumed", "agentchat_runs_resumed_total") == 0


async def test_a_run_found_already_ended_is_not_counted_as_resumed(tmp_path: Path) -> None:
    """A run whose ``message_complete`` is logged but whose status was never written (the
    process died in between): the start writes its status and nothing runs. It was counted
    in ``agentchat_runs_resumed_total`` all the same, which promises runs carried on."""
    db = tmp_path / "agent.sqlite3"
    ended = MessageComplete(status="completed", run_id=RUN, conversation_id=CONV, turns=1,
                            usage=TokenUsage(input_tokens=0, output_tokens=0))
    storage = await open_sqlite_storage(db)  # what the crashed process left
    try:
        await storage.runs.create(NewRun(
            id=RUN, conversation_id=CONV, user_id="local", context_type="knowledge",
            input=encode_run_input(ChatInput("ended", "knowledge", {}), Caller("local")),
        ))
        await storage.runs.commit(RunWrite(RUN, CONV, "local", events=logged(STARTED, ended), status="running"))
    finally:
        await storage.close()
    async with (
        running_app(offline_settings(db), provider=ExtractiveProvider(), embedder=None) as (base, app),
        httpx.AsyncClient(timeout=30) as client,
    ):
        run = app.state.services.runs._runs[RUN]
        await until(lambda: run.finished and run.status == "completed", "the run's stored ending read", 20)
        metrics = await get_metrics(client, base)
    assert value(metrics, "agentchat_runs_resumed", "agentchat_runs_resumed_total") == 0
    assert value(metrics, "agentchat_runs_not_resumable", "agentchat_runs_not_resumable_total") == 0
