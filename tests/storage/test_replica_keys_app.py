"""A replica started with another key than the others says so as it starts.

Walking two replicas on PostgreSQL, a third started with a different
``AGENT_SECRET_KEY`` answered ``/readyz`` 200 and logged nothing, while the stream links
it issued were refused by the others (401 ``invalid stream token``) and a run it handed
over ended ``run_interrupted``. Each start now compares its keys' fingerprint with the
one the previous start recorded (``app/key_check.py``) and logs an ERROR naming the
settings when they differ. Served apps on one database of each engine.
"""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from app.config import Settings
from app.server.jwt_tokens import sign_hs256
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app

JWT_SECRET = "team-jwt-secret-0123456789abcdef"
KEY_A = "replicas-share-this-key-0123456789"
KEY_B = "another-key-set-on-one-replica-987654"


def replica(shared_db: dict[str, str], key: str) -> Settings:
    return Settings.from_env({
        **shared_db,
        "AGENT_SECRET_KEY": key,
        "AGENT_AUTH": "jwt",
        "AGENT_JWT_SECRET": JWT_SECRET,
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "hashing",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
    })


def mismatches(caplog: pytest.LogCaptureFixture) -> list[str]:
    said = [r.getMessage() for r in caplog.records if r.name == "agentchat.keyring" and r.levelno == logging.ERROR]
    caplog.clear()
    return said


async def test_a_replica_with_another_key_logs_an_error_at_start(
    shared_db: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    token = sign_hs256({"sub": "alice", "exp": int(time.time()) + 600}, JWT_SECRET)
    caplog.set_level(logging.INFO, logger="agentchat.keyring")
    async with running_app(replica(shared_db, KEY_A), provider=ExtractiveProvider()) as (base_a, _):
        assert mismatches(caplog) == []  # the first start: nothing to compare with
        async with (
            running_app(replica(shared_db, KEY_B), provider=ExtractiveProvider()) as (base_b, _),
            httpx.AsyncClient(timeout=30, headers={"authorization": f"Bearer {token}"}) as client,
        ):
            [said] = mismatches(caplog)
            assert "AGENT_SECRET_KEY" in said and "invalid stream token" in said and "run_interrupted" in said
            # What it warns of: a link replica A issued is refused by replica B.
            body = {"message": "hello", "context_type": "knowledge"}
            started = await client.post(f"{base_a}/v1/agent/runs", json=body)
            assert started.status_code == 201, started.text
            link = started.json()["stream_url"]
            refused = await client.get(f"{base_b}{link}")  # the link's token decides, not the header
            assert refused.status_code == 401 and refused.json()["detail"] == "invalid stream token"
    # The same key as the last start: nothing to say; the first key again: said again.
    async with running_app(replica(shared_db, KEY_B), provider=ExtractiveProvider()):
        assert mismatches(caplog) == []
    async with running_app(replica(shared_db, KEY_A), provider=ExtractiveProvider()):
        assert len(mismatches(caplog)) == 1
