"""Knowledge-base ingestion over HTTP and the keyword-prune route."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.server.auth import sign_hs256
from llm.scripted import ScriptedProvider
from tests.conftest import running_app

SECRET = "admin-route-secret-0123456789"


def settings(tmp_path: Path, **env: str) -> Settings:
    # AGENT_ADMIN_OPEN: these routes are refused in `none` mode otherwise (tests/test_safe_defaults.py).
    return Settings.from_env(
        {"AGENT_DB_PATH": str(tmp_path / "a.db"), "AGENT_INGEST_SAMPLE_KB": "false", "AGENT_ADMIN_OPEN": "true", **env}
    )


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"docs": []}, 400, "unknown_field"),  # a member the body does not have (tests/test_unknown_fields.py)
        ({"bucket": "default"}, 400, "invalid_request"),
        ([{"text": "x"}], 400, "invalid_request"),
        ({"documents": []}, 400, "invalid_field"),
        ({"documents": [{"text": "x"}], "bucket": 3}, 400, "invalid_field"),
        ({"documents": [{"text": "x"}], "bucket": "Bad Name; DROP"}, 400, "invalid_field"),
    ],
)
async def test_ingest_route_rejects_bad_input(tmp_path: Path, body: dict[str, Any], status: int, error: str) -> None:
    async with running_app(settings(tmp_path), provider=ScriptedProvider([]), embedder=None) as (base, _):
        async with httpx.AsyncClient() as client:
            r = await client.post(f"{base}/v1/kb/documents", json=body)
    assert r.status_code == status and r.json()["error"] == error


async def test_ingest_reports_rejected_records_and_skips_unchanged(tmp_path: Path) -> None:
    docs = [{"id": "a", "title": "A", "text": "alpha text"}, {"title": "no text"}]
    async with running_app(settings(tmp_path), provider=ScriptedProvider([]), embedder=None) as (base, _):
        async with httpx.AsyncClient() as client:
            first = (await client.post(f"{base}/v1/kb/documents", json={"documents": docs})).json()
            again = (await client.post(f"{base}/v1/kb/documents", json={"documents": docs[:1]})).json()
            only_bad = await client.post(f"{base}/v1/kb/documents", json={"documents": docs[1:]})
    assert first["added"] == 1 and first["rejected"][0]["line"] == 2
    assert again["skipped"] == 1 and again["added"] == 0
    assert only_bad.status_code == 422


async def test_prune_route_validates_and_prunes(tmp_path: Path) -> None:
    async with running_app(settings(tmp_path), provider=ScriptedProvider([]), embedder=None) as (base, app):
        keywords = app.state.services.rooms.keywords
        async with httpx.AsyncClient() as client:
            bad = await client.post(f"{base}/v1/admin/keywords/prune", json={"min_usage": 0, "older_than_days": 1})
            assert bad.status_code == 400 and bad.json()["error"] == "invalid_field"
            before = await keywords.count()
            ok = await client.post(f"{base}/v1/admin/keywords/prune", json={"min_usage": 1, "older_than_days": 0})
    assert ok.status_code == 200 and ok.json() == {"removed": 0} and before == 0


async def test_admin_routes_need_an_admin_in_jwt_mode(tmp_path: Path) -> None:
    s = settings(tmp_path, AGENT_AUTH="jwt", AGENT_JWT_SECRET=SECRET, AGENT_ADMIN_USERS="root")
    user = sign_hs256({"sub": "alice", "exp": time.time() + 60}, SECRET)
    admin = sign_hs256({"sub": "root", "exp": time.time() + 60}, SECRET)
    body = {"documents": [{"title": "T", "text": "some text"}]}
    async with running_app(s, provider=ScriptedProvider([]), embedder=None) as (base, _):
        async with httpx.AsyncClient() as client:
            anonymous = await client.post(f"{base}/v1/kb/documents", json=body)
            forbidden = await client.post(f"{base}/v1/kb/documents", json=body,
                                          headers={"Authorization": f"Bearer {user}"})
            allowed = await client.post(f"{base}/v1/kb/documents", json=body,
                                        headers={"Authorization": f"Bearer {admin}"})
    assert anonymous.status_code == 401
    assert forbidden.status_code == 403 and forbidden.json()["error"] == "forbidden"
    assert allowed.status_code == 200 and allowed.json()["added"] == 1
