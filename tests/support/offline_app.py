"""Settings of a service that reaches no model: the offline extractive answerer, no
sample knowledge base, an Ollama address nothing listens on (so ``auto`` never probes a
real one). Tests that start an app in-process with ``running_app`` and need nothing else
of the environment spell only what they add."""

from __future__ import annotations

from pathlib import Path

from app.config import Settings


def offline_settings(db: Path, **env: str) -> Settings:
    """``Settings`` on the SQLite file ``db``, offline, with ``env`` on top."""
    return Settings.from_env({
        "AGENT_DB_PATH": str(db),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        **env,
    })
