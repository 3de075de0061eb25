"""A replica started with another key than the others says so as it starts.

Walking two replicas on PostgreSQL, a third started with a different
``AGENT_SECRET_KEY`` answered ``/readyz`` 200 and logged nothing, while the stream links
it issued were refused by the others (401 ``invalid stream token``) and a run it handed
over ended ``run_interrupted``. Each start now compares its keys' fingerprint with the
one the previous start recorded (``app/key_check.py``) and logs an ERROR naming the
settings when they differ. Served apps on one database of each engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.server.jwt_tokens import sign_hs256
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app
from tests.support.pg_table_lock import writes_held
from tests.support.postgres import TestPostgres

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


async def test_two_replicas_with_different_keys_starting_together_are_told(
    pg_server: TestPostgres, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two replicas with different keys starting at the same moment on a fresh
    PostgreSQL database: the later of the two says so. Before, each start's read of the
    recorded fingerprint did not lock, so both read nothing and neither said a word.
    The fingerprint table's writes are held until both starts wait on them (their reads,
    before the fix, went first)."""
    caplog.set_level(logging.INFO, logger="agentchat.keyring")
    with pg_server.database() as url:
        db = {"AGENT_DATABASE_URL": url, "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3")}
        serving = [asyncio.Event(), asyncio.Event()]
        stop = asyncio.Event()

        async def serve(key: str, up: asyncio.Event) -> None:
            async with running_app(replica(db, key), provider=ExtractiveProvider()):
                up.set()
                await stop.wait()

        async with writes_held(url, "app_secrets") as held:
            starts = [asyncio.create_task(serve(key, up)) for key, up in zip((KEY_A, KEY_B), serving, strict=True)]
            try:
                await held.until_waiting(2, "both starts to wait to record their keys")
                await held.release()
                await asyncio.wait_for(asyncio.gather(*(up.wait() for up in serving)), 60)
                said = mismatches(caplog)
            finally:
                stop.set()
                await asyncio.gather(*starts)
    assert len(said) == 1, said
