"""Every 401 of every face carries ``WWW-Authenticate: Bearer`` (RFC 6750 §3, RFC 9110
§15.5.2: a 401 "MUST" send the challenge).

Operator review: one 401 came without it. Under ``AGENT_AUTH=jwt`` every route of the
app — the agent's, the OpenAI-compatible and the AI SDK faces, the knowledge base, the
admin routes — is asked without a token, with a malformed one, with another scheme and,
on the run's events, with a bad stream token (``?token=``: that refusal had none); each
401 must carry the challenge, in whichever shape its face words the error.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from starlette.routing import Mount, Route

from app.config import Settings
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app

SECRET = "a-jwt-secret-for-the-challenge-test-0123456789"
ASKED = ({}, {"Authorization": "Bearer not.a.token"}, {"Authorization": "Basic YWxpY2U6c2VjcmV0"})


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_AUTH": "jwt",
        "AGENT_JWT_SECRET": SECRET,
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_EMBEDDER": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
        "OLLAMA_HOST": "http://127.0.0.1:9",
    })  # fmt: skip


def _concrete(path: str) -> str:
    """A route's template with each ``{param}`` filled (``run_`` ids look like run ids)."""
    return re.sub(r"\{([a-z_]+)(:[a-z]+)?\}", lambda m: "run_0" if m.group(1) == "run_id" else "x", path)


@pytest.mark.asyncio
async def test_every_401_of_every_face_carries_the_bearer_challenge(tmp_path: Path) -> None:
    async with running_app(_settings(tmp_path), provider=ExtractiveProvider()) as (base, app):
        routes = [(m, r.path) for r in app.routes if isinstance(r, Route) and not isinstance(r, Mount)
                  for m in sorted(r.methods or ()) if m not in ("HEAD", "OPTIONS")]  # fmt: skip
        assert len(routes) > 20, routes
        refusals: list[tuple[str, str, str, str | None]] = []
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            asked = [(m, _concrete(p), h) for m, p in routes for h in ASKED]
            asked.append(("GET", "/v1/agent/runs/run_0/events?token=not-a-stream-token", {}))
            for method, path, headers in asked:
                response = await http.request(method, path, headers=headers, json={} if method != "GET" else None)
                if response.status_code == 401:
                    said = headers.get("Authorization", "none").split(" ")[0]
                    refusals.append((method, path, said, response.headers.get("www-authenticate")))
    faces = {path.split("/")[2] for _, path, _, _ in refusals if path.startswith("/v1/")}
    assert {"agent", "chat", "models", "kb"} <= faces, faces  # the sweep reached every face
    assert any(path.endswith("token=not-a-stream-token") for _, path, _, _ in refusals), refusals
    missing = [r for r in refusals if r[3] != "Bearer"]
    assert missing == [], missing
