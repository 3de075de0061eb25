"""Every metric name the docs quote is a series ``/metrics`` really exposes.

``docs/configuration.md`` named ``agentchat_runs_refused_replica_full``; the series is
``agentchat_runs_refused_replica_full_total`` (a counter's ``_total``), so a dashboard or
an alert copied from the docs matched nothing. The names are read from a real app's
``/metrics`` on PostgreSQL with a backend configured, which turns on the conditional
families (the leader's, the shared rate limit's, the resolution cache's), plus the
``--workers`` merge of that answer (its ``agentchat_metrics_workers*``), plus a SQLite
app's (its live log's ``agentchat_run_log_*``) with an MCP server and a model (the MCP
servers' and the query planner's families).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from app.config import Settings
from app.ops.worker_metrics import merge
from llm.ollama import OllamaProvider
from tests.conftest import running_app
from tests.support.postgres import TestPostgres

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NAME = re.compile(r"agentchat_[a-z0-9_]+")
#: Names the docs quote that are not metrics, each with where it is defined (checked).
NOT_METRICS = {
    "agentchat_hold_lease_epoch": "storage/postgres",  # the SQL function fencing a run's steps
    "agentchat_migrate_db": "storage/migrate_copy",  # migrate-db's progress table
}


def _quoted() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for name in NAME.findall(doc.read_text()):
            found.setdefault(name.rstrip("_"), []).append(doc.name)
    return found


def _exposed(text: str) -> set[str]:
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            names.add(line.split()[2])
        elif line.startswith("agentchat_"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


async def test_every_metric_name_in_the_docs_is_exposed(tmp_path: Path, pg_server: TestPostgres) -> None:
    with pg_server.database() as url:
        settings = Settings.from_env({
            "AGENT_DATABASE_URL": url,
            "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",
            "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
            "AGENT_LLM_PROVIDER": "extractive",
            "AGENT_EMBEDDER": "hashing",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_BACKEND_URL": "http://127.0.0.1:9",
            "OLLAMA_HOST": "http://127.0.0.1:9",
        })
        async with running_app(settings) as (base, _app), httpx.AsyncClient() as http:
            response = await http.get(f"{base}/metrics")
    assert response.status_code == 200
    exposed = _exposed(response.text) | _exposed(merge([("worker-1", response.content)]).decode())
    # SQLite's own family: its live log of run events (``agentchat_run_log_*``); and the
    # families of an MCP server configured (``agentchat_mcp_servers*``: this one never
    # starts) and of a model that plans queries (``agentchat_query_plans_total``: any
    # provider but the extractive answerer; this one is never asked).
    mcp = tmp_path / "mcp.toml"
    mcp.write_text('[servers.absent]\ncommand = "/nonexistent/mcp-server"\n')
    lite = Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_EMBEDDER": "hashing",
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_MCP_SERVERS": str(mcp),
        "OLLAMA_HOST": "http://127.0.0.1:9",
    })
    model = OllamaProvider("http://127.0.0.1:9", "llama3.2", timeout=5)
    try:
        async with running_app(lite, provider=model) as (base, _app), httpx.AsyncClient() as http:
            sqlite_metrics = await http.get(f"{base}/metrics")
    finally:
        await model.aclose()  # a provider given to the app is the caller's to close
    assert sqlite_metrics.status_code == 200
    exposed |= _exposed(sqlite_metrics.text)
    for name, where in NOT_METRICS.items():
        sources = "".join(p.read_text() for p in (ROOT / where).rglob("*.py"))
        assert name in sources, f"{name} is no longer defined under {where}: drop it from NOT_METRICS"
    missing = {
        name: sorted(set(docs)) for name, docs in _quoted().items() if name not in exposed and name not in NOT_METRICS
    }
    assert not missing, f"metric names in the docs that /metrics does not expose: {missing}"
