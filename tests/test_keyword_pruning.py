"""FR-008: keywords are pruned automatically, by usage and age, on a timer; logged."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import httpx
import pytest

from agenttools.rag.keyword_rules import Candidate
from agenttools.rag.keywords import KeywordIndex
from app.config import ConfigError, Settings
from app.keyword_pruning import KeywordPrunePolicy, PruneStats, prune_keywords_periodically
from tests.conftest import running_app
from tests.support.storage import opened_storage

DAY = 86_400.0


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _kw(text: str) -> Candidate:
    return Candidate(key=text.casefold(), display=text)


async def test_the_periodic_task_prunes_rare_idle_keywords_and_logs_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    async with opened_storage(tmp_path / "k.db") as storage:
        index = KeywordIndex(storage.keywords, storage.external_results, clock=clock)
        await index.index([_kw("quantum annealing")], query_id="q1")  # used once
        for n in range(3):  # used three times: kept however old
            await index.index([_kw("post-quantum cryptography")], query_id=f"q{n + 2}")

        policy = KeywordPrunePolicy(max_age_days=90, min_usage=2, interval_s=0.01)
        stats = PruneStats()
        rounds: list[float] = []

        async def sleep(seconds: float) -> None:
            # Each "interval" moves the injected clock on by 60 days, then yields briefly.
            rounds.append(seconds)
            clock.now += 60 * DAY
            await asyncio.sleep(seconds)

        caplog.set_level(logging.INFO, logger="agentchat.keywords")
        task = asyncio.create_task(prune_keywords_periodically(index, policy, stats=stats, sleep=sleep))
        try:
            async with asyncio.timeout(10):
                while stats.removed == 0:
                    await asyncio.sleep(0.005)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

        # Round 1 at day 0 and round 2 at day 60 keep it; round 3 (day 120) removes it.
        assert stats.rounds >= 3 and stats.removed == 1 and stats.failures == 0
        assert rounds and all(r == 0.01 for r in rounds)
        assert await index.get("quantum annealing") is None
        assert (await index.get("post-quantum cryptography")).usage_count == 3  # type: ignore[union-attr]
        assocs = await index.associations("quantum annealing")
        assert assocs and all(a.archived for a in assocs)  # kept for audit, archived
    removed_logs = [r for r in caplog.records if r.getMessage().startswith("keywords pruned: 1 removed")]
    assert removed_logs and "fewer than 2 times" in removed_logs[0].getMessage()
    assert removed_logs[0].removed == 1  # type: ignore[attr-defined]


async def test_a_failed_round_is_logged_and_the_next_round_runs() -> None:
    calls: list[tuple[int, float]] = []

    class Flaky:
        async def prune(self, min_usage: int, older_than_days: float) -> int:
            calls.append((min_usage, older_than_days))
            if len(calls) == 1:
                raise RuntimeError("database is locked")
            return 2

    stats = PruneStats()
    task = asyncio.create_task(
        prune_keywords_periodically(Flaky(), KeywordPrunePolicy(30, 3, 0.01), stats=stats)
    )
    try:
        async with asyncio.timeout(10):
            while stats.removed < 2:
                await asyncio.sleep(0.005)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert stats.failures == 1 and calls[0] == (3, 30)


async def test_max_age_zero_turns_pruning_off() -> None:
    class Never:
        async def prune(self, min_usage: int, older_than_days: float) -> int:
            raise AssertionError("must not prune")

    # Returns at once instead of looping.
    await asyncio.wait_for(prune_keywords_periodically(Never(), KeywordPrunePolicy(max_age_days=0)), 5)


def test_settings_defaults_and_range_checks() -> None:
    s = Settings.from_env({})
    assert (s.keyword_max_age_days, s.keyword_min_usage, s.keyword_prune_interval_s) == (90.0, 2, 3600.0)
    s = Settings.from_env(
        {"AGENT_KEYWORD_MAX_AGE_DAYS": "0", "AGENT_KEYWORD_MIN_USAGE": "5", "AGENT_KEYWORD_PRUNE_INTERVAL_S": "60"}
    )
    assert (s.keyword_max_age_days, s.keyword_min_usage, s.keyword_prune_interval_s) == (0.0, 5, 60.0)
    with pytest.raises(ConfigError) as err:
        Settings.from_env(
            {
                "AGENT_KEYWORD_MAX_AGE_DAYS": "-1",
                "AGENT_KEYWORD_MIN_USAGE": "0",
                "AGENT_KEYWORD_PRUNE_INTERVAL_S": "soon",
            }
        )
    text = str(err.value)
    for name in ("AGENT_KEYWORD_MAX_AGE_DAYS", "AGENT_KEYWORD_MIN_USAGE", "AGENT_KEYWORD_PRUNE_INTERVAL_S"):
        assert name in text


async def test_the_app_prunes_on_its_own(tmp_path: Path) -> None:
    """The app's background task, wired from settings, removes an old rarely used keyword."""
    settings = Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "a.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "OLLAMA_HOST": "http://127.0.0.1:9",
            "AGENT_KEYWORD_MAX_AGE_DAYS": "30",
            "AGENT_KEYWORD_MIN_USAGE": "2",
            "AGENT_KEYWORD_PRUNE_INTERVAL_S": "0.05",
        }
    )
    async with running_app(settings) as (base, app):
        svc = app.state.services
        assert any(t.get_name() == "keyword-prune" for t in svc.background)
        now = time.time()
        await svc.storage.keywords.upsert({"stale topic": "stale topic"}, query_id="q-old", owner="",
                                          now=now - 45 * DAY)
        await svc.storage.keywords.upsert({"fresh topic": "fresh topic"}, query_id="q-new", owner="", now=now)
        keywords = svc.rooms.keywords
        async with asyncio.timeout(10):
            while await keywords.get("stale topic") is not None:
                await asyncio.sleep(0.02)
        assert await keywords.get("fresh topic") is not None
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{base}/healthz")).status_code == 200
