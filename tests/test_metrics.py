"""``GET /metrics``: a per-app prometheus_client registry, read with prometheus_client's own parser.

The success criteria of seed 002 (SC-001/002/003/005/007) are derived from the facts the
agent loop reports (``RunMetrics``); ``assess`` is checked on its own, then the counters
are read over a real server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.ops.metrics import AppMetrics
from app.ops.run_metrics import FinishedRun, ToolCallFact, assess
from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app

DOCS = [
    {
        "id": "doc-resume",
        "title": "Resuming a run",
        "text": "Runs outlive their connections. To resume a stream after a disconnect, reconnect to "
        "GET /v1/agent/runs/{run_id}/events with the Last-Event-ID header and the server replays "
        "every event you missed, then follows the run live.",
    }
]


def calls(*spec: str) -> tuple[ToolCallFact, ...]:
    """``"name"`` succeeded, ``"name!"`` failed."""
    return tuple(ToolCallFact(s.rstrip("!"), not s.endswith("!")) for s in spec)


# --------------------------------------------------------------------------- assess


def test_sc001_any_knowledge_search_counts_even_a_failed_one() -> None:
    assert assess(FinishedRun("completed", 1.0, calls("search_text", "generate_response"))).kb_searched is True
    assert assess(FinishedRun("completed", 1.0, calls("knowledge_base_search!", "generate_response"))).kb_searched
    assert assess(FinishedRun("failed", 1.0, calls("generate_response!"))).kb_searched is False
    # Not counted: a cancelled run, or a context without the mandatory flow.
    assert assess(FinishedRun("cancelled", 1.0, ())).kb_searched is None
    assert assess(FinishedRun("completed", 1.0, (), mandatory=False)).kb_searched is None


def test_sc002_generate_response_first_try_retried_failed() -> None:
    ok = calls("knowledge_base_search", "generate_response")
    assert assess(FinishedRun("completed", 1, ok)).response == "first_try"
    assert assess(FinishedRun("completed", 1, ok, response_reminders=1)).response == "retried"
    retried = calls("knowledge_base_search", "generate_response!", "generate_response")
    assert assess(FinishedRun("completed", 1, retried)).response == "retried"
    failed = calls("knowledge_base_search", "generate_response!", "generate_response!")
    assert assess(FinishedRun("failed", 1, failed)).response == "failed"
    assert assess(FinishedRun("failed", 1, calls("knowledge_base_search"))).response == "failed"  # never called
    assert assess(FinishedRun("completed", 1, (), mandatory=False)).response is None
    assert assess(FinishedRun("cancelled", 1, calls("knowledge_base_search"))).response is None


def test_sc003_keywords_after_a_successful_perplexity_search() -> None:
    with_keywords = calls("knowledge_base_search", "perplexity_search", "index_keywords", "generate_response")
    out = assess(FinishedRun("completed", 1, with_keywords))
    assert out.perplexity and out.keywords_indexed
    out = assess(FinishedRun("completed", 1, calls("knowledge_base_search", "perplexity_search", "generate_response")))
    assert out.perplexity and not out.keywords_indexed
    out = assess(FinishedRun("completed", 1, calls("knowledge_base_search", "perplexity_search!", "generate_response")))
    assert not out.perplexity
    out = assess(FinishedRun("completed", 1, calls("index_keywords", "perplexity_search", "generate_response")))
    assert out.perplexity and not out.keywords_indexed  # indexing before the search is not "after"


def test_sc007_retries_that_recovered() -> None:
    run = calls(
        "knowledge_base_search!",  # retried twice, then recovered: one recovered episode
        "knowledge_base_search!",
        "knowledge_base_search",
        "index_keywords!",  # never retried: not an attempt
        "preview_workflow!",  # retried, never recovered
        "preview_workflow!",
        "generate_response",
    )
    assert sorted(assess(FinishedRun("completed", 1, run)).retries) == [
        ("knowledge_base_search", True),
        ("preview_workflow", False),
    ]


def test_two_apps_do_not_share_metrics() -> None:
    a, b = AppMetrics(), AppMetrics()
    # Plain (name, ok) tuples work as well as ToolCallFact.
    a.runs.run_finished(FinishedRun("completed", 1.0, [("knowledge_base_search", True), ("generate_response", True)]))
    assert a.registry.get_sample_value("agentchat_generate_response_runs_total", {"outcome": "first_try"}) == 1
    assert b.registry.get_sample_value("agentchat_generate_response_runs_total", {"outcome": "first_try"}) == 0


def test_invented_tool_names_do_not_grow_the_series() -> None:
    m = AppMetrics(tool_names={"knowledge_base_search"})
    m.runs.tool_finished("knowledge_base_search", True, 0.01)
    m.runs.tool_finished("made_up_tool_123", False, 0.01)
    reg = m.registry
    assert reg.get_sample_value(
        "agentchat_tool_call_duration_seconds_count", {"tool": "knowledge_base_search", "outcome": "ok"}
    ) == 1
    other = {"tool": "other", "outcome": "error"}
    assert reg.get_sample_value("agentchat_tool_call_duration_seconds_count", other) == 1


# --------------------------------------------------------------------------- over a real server


def scrape(text: str) -> dict[str, Any]:
    """family name -> {(sample name, sorted labels): value}, via prometheus_client's parser."""
    out: dict[str, Any] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = (family.type, {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples})
    return out


def value(families: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    return families[family][1][(sample, tuple(sorted(labels.items())))]


async def get_metrics(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    response = await client.get(f"{base}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return scrape(response.text)


LIVE = {
    "agentchat_runs_started": "counter",
    "agentchat_runs": "gauge",
    "agentchat_runs_resumed": "counter",
    "agentchat_runs_interrupted": "counter",
    "agentchat_runs_storage_failed": "counter",
    "agentchat_storage_write_retries": "counter",
    "agentchat_storage_write_failures": "counter",
    "agentchat_storage_write_batches": "counter",
    "agentchat_run_log_settles": "counter",
    "agentchat_run_log_settle_failures": "counter",
    "agentchat_run_log_reconciled_runs": "counter",
    "agentchat_run_log_dropped_rows": "counter",
    "agentchat_tool_index_ready": "gauge",
}
RECORDED = {
    "agentchat_tool_call_duration_seconds": "histogram",
    "agentchat_run_duration_seconds": "histogram",
    "agentchat_response_latency_seconds": "histogram",
    "agentchat_kb_search_runs": "counter",
    "agentchat_generate_response_runs": "counter",
    "agentchat_perplexity_runs": "counter",
    "agentchat_perplexity_runs_keywords_indexed": "counter",
    "agentchat_tool_retries": "counter",
    "agentchat_time_to_first_token_seconds": "histogram",
    "agentchat_provider_errors": "counter",
    "agentchat_tokens": "counter",
    "agentchat_open_streams": "gauge",
}


@pytest.fixture
def mandatory_settings(tmp_path: Path) -> Settings:
    """The default mandatory flow, offline, no sample KB."""
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "m.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_ADMIN_OPEN": "true",  # POST /v1/kb/documents in `none` mode
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "OLLAMA_HOST": "http://127.0.0.1:9",
        }
    )


async def test_metrics_families_and_counts_after_a_run(mandatory_settings: Settings) -> None:
    async with (
        running_app(mandatory_settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(timeout=30) as client,
    ):
        before = await get_metrics(client, base)
        for name, kind in {**LIVE, **RECORDED}.items():
            assert before[name][0] == kind, name
        assert "process_cpu_seconds" in before and "process_resident_memory_bytes" in before
        assert value(before, "agentchat_runs_started", "agentchat_runs_started_total") == 0
        assert value(before, "agentchat_runs", "agentchat_runs", status="completed") == 0
        assert value(before, "agentchat_tool_index_ready", "agentchat_tool_index_ready") == 0

        assert (await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        events = await collect_sse(
            client,
            "POST",
            f"{base}/v1/agent/chat",
            json={"message": "How do I resume a stream after a disconnect?", "context_type": "knowledge"},
        )
        assert events[-1].json()["status"] == "completed"

        # The recorder the agent loop calls, fed here with the facts of that run.
        recorder = app.state.services.metrics.runs
        recorder.tool_finished("knowledge_base_search", True, 0.02)
        recorder.tool_finished("generate_response", True, 0.001)
        recorder.run_finished(
            FinishedRun("completed", 1.5, calls("knowledge_base_search", "generate_response"), "knowledge")
        )
        recorder.run_finished(
            FinishedRun(
                "completed",
                12.0,
                calls(
                    "knowledge_base_search!", "knowledge_base_search", "perplexity_search", "index_keywords",
                    "generate_response!", "generate_response",
                ),
                "tables",
            )
        )
        after = await get_metrics(client, base)

    assert value(after, "agentchat_runs_started", "agentchat_runs_started_total") == 1
    # The run's steps were committed by the background writer: its transactions count.
    sc = "agentchat_storage_write_batches"
    assert value(after, sc, f"{sc}_total") > value(before, sc, f"{sc}_total")
    assert value(after, "agentchat_runs", "agentchat_runs", status="completed") == 1
    sc = "agentchat_kb_search_runs"
    assert value(after, sc, f"{sc}_total", context="knowledge", kb_searched="true") >= 1
    assert value(after, sc, f"{sc}_total", context="tables", kb_searched="true") == 1
    sc = "agentchat_generate_response_runs"
    assert value(after, sc, f"{sc}_total", outcome="first_try") >= 1
    assert value(after, sc, f"{sc}_total", outcome="retried") == 1
    assert value(after, "agentchat_perplexity_runs", "agentchat_perplexity_runs_total") == 1
    sc = "agentchat_perplexity_runs_keywords_indexed"
    assert value(after, sc, f"{sc}_total") == 1
    sc = "agentchat_tool_retries"
    assert value(after, sc, f"{sc}_total", tool="knowledge_base_search", outcome="recovered") == 1
    assert value(after, sc, f"{sc}_total", tool="generate_response", outcome="recovered") == 1
    sc = "agentchat_response_latency_seconds"
    assert value(after, sc, f"{sc}_count") >= 2
    assert value(after, sc, f"{sc}_bucket", le="10.0") == value(after, sc, f"{sc}_count") - 1  # 12 s is over SC-005
    sc = "agentchat_tool_call_duration_seconds"
    assert value(after, sc, f"{sc}_count", tool="knowledge_base_search", outcome="ok") >= 1
    sc = "agentchat_run_duration_seconds"
    assert value(after, sc, f"{sc}_count", status="completed") >= 2


async def test_a_run_through_the_loop_moves_the_sc_counters(mandatory_settings: Settings) -> None:
    async with (
        running_app(mandatory_settings, provider=ExtractiveProvider()) as (base, _app),
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert (await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        events = await collect_sse(
            client,
            "POST",
            f"{base}/v1/agent/chat",
            json={"message": "How do I resume a stream after a disconnect?", "context_type": "knowledge"},
        )
        assert events[-1].json()["status"] == "completed"
        after = await get_metrics(client, base)
    sc = "agentchat_kb_search_runs"
    assert value(after, sc, f"{sc}_total", context="knowledge", kb_searched="true") == 1
    sc = "agentchat_generate_response_runs"
    assert value(after, sc, f"{sc}_total", outcome="first_try") == 1
    sc = "agentchat_tool_call_duration_seconds"
    assert value(after, sc, f"{sc}_count", tool="knowledge_base_search", outcome="ok") == 1
    assert value(after, sc, f"{sc}_count", tool="generate_response", outcome="ok") == 1
    sc = "agentchat_run_duration_seconds"
    assert value(after, sc, f"{sc}_count", status="completed") == 1
    assert value(after, "agentchat_response_latency_seconds", "agentchat_response_latency_seconds_count") == 1
