"""Which model and which embedder a process uses is on ``/metrics`` too
(``agentchat_model_chosen{role,name,configured}``), not only in ``/readyz``: under
``auto`` the offline extractive answerer (or the hashing embedder) means nothing better
was reachable at start-up — a fallback an operator alerts on when they expected a model."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.config import Settings
from tests.conftest import running_app
from tests.test_default_configs import UNREACHABLE
from tests.test_metrics import get_metrics

FAMILY = "agentchat_model_chosen"


async def test_the_auto_choice_of_model_and_embedder_is_on_metrics(tmp_path: Path) -> None:
    settings = Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "m.db"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "OLLAMA_HOST": UNREACHABLE,  # auto: no model reachable
    })
    async with running_app(settings) as (base, _app), httpx.AsyncClient(timeout=30) as client:
        checks = (await client.get(f"{base}/readyz")).json()["checks"]
        metrics = await get_metrics(client, base)
    assert checks["provider"]["name"] == "extractive" and "no model reachable" in checks["provider"]["chosen_because"]
    kind, samples = metrics[FAMILY]
    assert kind == "gauge"
    embedder = checks["embedder"]["name"] or "none"
    assert samples == {
        (FAMILY, (("configured", "auto"), ("name", "extractive"), ("role", "provider"))): 1.0,
        (FAMILY, (("configured", "auto"), ("name", embedder), ("role", "embedder"))): 1.0,
    }
