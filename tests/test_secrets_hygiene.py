"""Secrets treated as secrets (issue 21 item 6): planted credentials never reach the log
or ``/readyz``; the stream key is not in the database; a caller's ``Authorization`` is
stored encrypted and only while its run may be carried on; stored tool calls are
redacted; bearer tokens without ``exp`` are refused."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.keyring import KeyringError, RunInputSealer, derive, key_file_for, resolve_keyring
from app.ops.masking import SecretScrubber, is_credential_param, mask_query, mask_url
from app.runs.records import Caller, ChatInput, decode_run_input, encode_run_input
from app.runs.state import RunState, stored_copy
from app.server.auth import Authenticator, AuthError, sign_hs256
from llm.scripted import ScriptedCall
from llm.types import Message, ToolCall
from storage.open import open_storage
from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.procs import AgentServer

JWT_SECRET = "jwt-secret-for-the-hygiene-tests"
BODY = {"message": "hi", "context_type": "knowledge"}

# --- masking rules ---------------------------------------------------------------------------


def test_credential_query_names_are_recognised() -> None:
    for name in ("token", "jwt", "access-token", "access_token", "client_secret", "auth", "Authorization",
                 "api_key", "apikey", "key", "sig", "signature", "password", "X-Amz-Security-Token", "id_token"):
        assert is_credential_param(name), name
    for name in ("after", "q", "limit", "run_id", "context_type"):
        assert not is_credential_param(name), name
    masked = mask_query(b"after=3&jwt=J1&access-token=A1&client_secret=C1&auth=U1&q=ok")
    assert masked is not None
    assert all(v not in masked for v in ("J1", "A1", "C1", "U1")) and "after=3" in masked and "q=ok" in masked


def test_urls_are_shown_without_userinfo() -> None:
    assert mask_url("http://user:pa55@127.0.0.1:9/x") == "http://***@127.0.0.1:9/x"
    assert mask_url("https://k3y@api.example/v1?api_key=zz&q=1") == "https://***@api.example/v1?api_key=***&q=1"
    assert mask_url("http://127.0.0.1:11434") == "http://127.0.0.1:11434"
    settings = Settings.from_env({"OLLAMA_HOST": "http://u:pa55-word@127.0.0.1:9",
                                  "AGENT_BACKEND_DEMO_TOKEN": "demo-planted-token"})
    shown = str(settings.redacted())
    assert "pa55-word" not in shown and "demo-planted-token" not in shown and "127.0.0.1:9" in shown
    assert {"pa55-word", "demo-planted-token"} <= set(settings.secret_values())
    # A user name and a short password are not scrubbed by value (the log would lose every
    # "agentchat" and "postgres"); in a URL they are still masked.
    plain = Settings.from_env({"AGENT_DATABASE_URL": "postgresql://postgres:agent@db/agent"})
    scrubber = SecretScrubber(plain.secret_values())
    assert scrubber.text("agentchat on postgres at postgresql://postgres:agent@db/agent") == (
        "agentchat on postgres at postgresql://***@db/agent"
    )


# --- JWT without exp -------------------------------------------------------------------------


def test_a_token_without_exp_is_refused_unless_allowed() -> None:
    forever = "Bearer " + sign_hs256({"sub": "alice"}, JWT_SECRET)
    with pytest.raises(AuthError, match="no exp claim") as refused:
        Authenticator("jwt", JWT_SECRET).identify(forever)
    assert refused.value.status == 401
    assert Authenticator("jwt", JWT_SECRET, allow_no_exp=True).identify(forever).user_id == "alice"
    expiring = "Bearer " + sign_hs256({"sub": "alice", "exp": int(time.time()) + 60}, JWT_SECRET)
    assert Authenticator("jwt", JWT_SECRET).identify(expiring).user_id == "alice"
    assert Settings.from_env({"AGENT_JWT_ALLOW_NO_EXP": "true"}).jwt_allow_no_exp is True


async def test_the_server_answers_401_with_the_reason(tmp_path: Path) -> None:
    settings = _settings(tmp_path, AGENT_AUTH="jwt", AGENT_JWT_SECRET=JWT_SECRET)
    forever = sign_hs256({"sub": "alice"}, JWT_SECRET)
    app_ctx = running_app(settings, provider=GatedProvider([]), registry=ToolRegistry(), embedder=None)
    async with app_ctx as (base, _), httpx.AsyncClient(timeout=10) as client:
        refused = await client.post(f"{base}/v1/agent/runs", json=BODY,
                                    headers={"Authorization": f"Bearer {forever}"})
    assert refused.status_code == 401 and "exp" in refused.text


# --- stored tool calls -----------------------------------------------------------------------


def test_stored_tool_calls_lose_their_credentials_and_keep_the_rest() -> None:
    args = {"query": "alerts", "password": "pw-planted", "nested": {"api_key": "k-planted"},
            "note": "use Bearer tok-planted please"}
    call = ToolCall("c1", "lookup", args, raw_arguments=orjson.dumps(args).decode())
    replay = {"gemini": {"parts": [{"function_call": {"name": "lookup", "args": args}, "thought_signature": "c2ln"}]}}
    state = RunState(system="s", tool_names=[], budget=0, messages=[])
    state.add(Message("assistant", "", tool_calls=[call], replay=replay))
    stored = state.take_unsaved()[0]
    text = orjson.dumps(stored.to_dict()).decode()
    assert all(p not in text for p in ("pw-planted", "k-planted", "tok-planted")), text
    assert stored.tool_calls[0].arguments["query"] == "alerts"
    assert stored.replay is not None and stored.replay["gemini"]["parts"][0]["thought_signature"] == "c2ln"
    # The run itself goes on with the arguments whole.
    assert state.messages[0].tool_calls[0].arguments["password"] == "pw-planted"
    user = Message("user", "my password is in here")
    assert stored_copy(user) is user


async def test_a_conversation_keeps_no_credential_a_tool_was_called_with(tmp_path: Path) -> None:
    turns = [
        GatedTurn(calls=(ScriptedCall("lookup", {"query": "x", "password": "pw-planted-9",
                                                 "header": "Bearer tok-planted-9"}),)),
        GatedTurn(steps=("done",)),
    ]
    settings = _settings(tmp_path)
    async with running_app(settings, provider=GatedProvider(turns), registry=ToolRegistry(), embedder=None) as (
        base, app,
    ), httpx.AsyncClient(timeout=20) as client:
        created = (await client.post(f"{base}/v1/agent/runs", json=BODY)).json()
        events = await collect_sse(client, "GET", base + created["stream_url"])
        assert events[-1].event == "message_complete"
        await app.state.services.storage.db.flush()
        conversation = (await client.get(f"{base}/v1/agent/conversations/{created['conversation_id']}")).text
    assert "lookup" in conversation and "pw-planted-9" not in conversation and "tok-planted-9" not in conversation


# --- run input: encrypted, and forgotten when the run ends -------------------------------------


def test_a_sealed_run_input_reads_back_and_hides_the_authorization() -> None:
    sealer = RunInputSealer(derive("a-key-for-the-test-0123", b"run input"))
    chat = ChatInput("a question-sealed-7", "knowledge", {})  # long enough never to occur by chance
    stored = encode_run_input(chat, Caller("alice", "Bearer tok-sealed-1"), sealer)
    assert b"tok-sealed-1" not in stored and b"question-sealed-7" not in stored
    _, caller = decode_run_input(stored, conversation_id="c", user_id="alice", sealer=sealer)
    assert caller.authorization == "Bearer tok-sealed-1"
    other = RunInputSealer(derive("another-key-0123456789", b"run input"))
    with pytest.raises(ValueError, match="another key"):
        decode_run_input(stored, conversation_id="c", user_id="alice", sealer=other)
    with pytest.raises(ValueError, match="no key"):
        decode_run_input(stored, conversation_id="c", user_id="alice")
    plain = encode_run_input(chat, Caller("alice", None))  # an input stored before a key was set
    assert decode_run_input(plain, conversation_id="c", user_id="alice", sealer=sealer)[0].message == chat.message


async def test_the_stored_authorization_is_encrypted_while_live_and_gone_after(tmp_path: Path) -> None:
    gate = Gate()
    settings = _settings(tmp_path, AGENT_AUTH="jwt", AGENT_JWT_SECRET=JWT_SECRET)
    token = sign_hs256({"sub": "alice", "exp": int(time.time()) + 600}, JWT_SECRET)
    provider = GatedProvider([GatedTurn(steps=("a", gate, "b"))])
    app_ctx = running_app(settings, provider=provider, registry=ToolRegistry(), embedder=None)
    async with app_ctx as (base, app), httpx.AsyncClient(timeout=20) as client:
        created = (await client.post(f"{base}/v1/agent/runs", json=BODY,
                                     headers={"Authorization": f"Bearer {token}"})).json()
        await asyncio.wait_for(gate.reached.wait(), 10)
        await app.state.services.storage.db.flush()
        live = _run_input(settings.db_path, created["run_id"])
        assert live is not None and token.encode() not in live and live.startswith(b"F1:")
        gate.open()
        events = await collect_sse(client, "GET", base + created["stream_url"])
        assert events[-1].event == "message_complete"
        await app.state.services.storage.db.flush()
        assert _run_input(settings.db_path, created["run_id"]) is None


# --- the stream key is not in the database ---------------------------------------------------


async def test_sqlite_keeps_its_generated_key_in_a_private_file(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    storage = await open_storage(settings.db_path)
    try:
        first = await resolve_keyring(settings, storage.secrets, engine="sqlite")
        again = await resolve_keyring(settings, storage.secrets, engine="sqlite")
    finally:
        await storage.close()
    path = key_file_for(settings.db_path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert first.stream_secret == again.stream_secret and first.sealer is not None
    assert _app_secrets(settings.db_path) == []
    assert first.stream_secret.encode() not in settings.db_path.read_bytes()


async def test_a_new_sqlite_database_is_readable_by_its_user_only(tmp_path: Path) -> None:
    """The database beside the key holds every user's conversations, runs and attachments:
    a served app creates it, and SQLite its ``-wal`` and ``-shm``, ``0600`` like the key
    file, whatever the umask lets through (022, the usual one: before, all three were
    ``0644``, readable by every local account)."""
    settings = _settings(tmp_path, AGENT_AUTH="jwt", AGENT_JWT_SECRET=JWT_SECRET)
    previous = os.umask(0o022)
    try:
        app_ctx = running_app(settings, provider=GatedProvider([]), registry=ToolRegistry(), embedder=None)
        async with app_ctx as (base, _), httpx.AsyncClient(timeout=10) as client:
            token = sign_hs256({"sub": "alice", "exp": int(time.time()) + 300}, JWT_SECRET)
            listed = await client.get(f"{base}/v1/agent/conversations", headers={"Authorization": f"Bearer {token}"})
            assert listed.status_code == 200, listed.text
            db = settings.db_path
            files = [db, *(db.with_name(db.name + suffix) for suffix in ("-wal", "-shm"))]
            modes = {f.name: stat.S_IMODE(os.stat(f).st_mode) for f in files}
    finally:
        os.umask(previous)
    assert modes == {f.name: 0o600 for f in files}, {k: oct(v) for k, v in modes.items()}


async def test_postgresql_without_a_key_refuses_to_start_unless_accepted(tmp_path: Path) -> None:
    class Store:
        def __init__(self) -> None:
            self.asked: list[str] = []

        async def get_or_create(self, name: str, value: str) -> str:
            self.asked.append(name)
            return "kept-in-the-database"

    store = Store()
    with pytest.raises(KeyringError, match="AGENT_STREAM_TOKEN_SECRET or AGENT_SECRET_KEY"):
        await resolve_keyring(_settings(tmp_path), store, engine="postgres")
    assert store.asked == []
    accepted = await resolve_keyring(_settings(tmp_path, AGENT_STREAM_KEY_IN_DATABASE="1"), store, engine="postgres")
    assert accepted.stream_secret == "kept-in-the-database" and accepted.sealer is None
    configured = await resolve_keyring(_settings(tmp_path, AGENT_SECRET_KEY="k" * 32), store, engine="postgres")
    assert configured.sealer is not None and store.asked == ["stream_token"]


@pytest.mark.parametrize("env", [{}, {"AGENT_STREAM_TOKEN_SECRET": "configured-stream-secret-0123"}],
                         ids=["generated", "configured"])
async def test_a_copy_of_the_database_cannot_forge_a_stream_url(tmp_path: Path, env: dict[str, str]) -> None:
    settings = _settings(tmp_path, AGENT_AUTH="jwt", AGENT_JWT_SECRET=JWT_SECRET, **env)
    token = sign_hs256({"sub": "alice", "exp": int(time.time()) + 600}, JWT_SECRET)
    provider = GatedProvider([GatedTurn(steps=("secret answer",))])
    app_ctx = running_app(settings, provider=provider, registry=ToolRegistry(), embedder=None)
    async with app_ctx as (base, app), httpx.AsyncClient(timeout=20) as client:
        created = (await client.post(f"{base}/v1/agent/runs", json=BODY,
                                     headers={"Authorization": f"Bearer {token}"})).json()
        run_id = created["run_id"]
        genuine = await collect_sse(client, "GET", base + created["stream_url"])
        assert genuine[-1].event == "message_complete"
        await app.state.services.storage.db.flush()
        # Everything the database holds that could be a key, tried as one.
        candidates = [v for _, v in _app_secrets(settings.db_path)] + [JWT_SECRET]
        for candidate in candidates:
            forged = Authenticator("jwt", None, stream_secret=candidate).stream_token(run_id, "alice")
            answer = await client.get(f"{base}/v1/agent/runs/{run_id}/events?token={forged}")
            assert answer.status_code == 401, candidate
        # The control: the real key (from outside the database) does sign a working link.
        real = await resolve_keyring(settings, app.state.services.storage.secrets, engine="sqlite")
        signed = Authenticator("jwt", None, stream_secret=real.stream_secret).stream_token(run_id, "alice")
        replayed = await collect_sse(client, "GET", f"{base}/v1/agent/runs/{run_id}/events?token={signed}")
        assert replayed[-1].event == "message_complete"
    assert b"configured-stream-secret-0123" not in settings.db_path.read_bytes()


# --- a served process: log and /readyz scraped for planted secrets ------------------------------

PLANTED = {
    "OLLAMA_HOST": ("http://ollama-user:pa55-ollama-planted@127.0.0.1:9", "pa55-ollama-planted"),
    "PERPLEXITY_BASE_URL": ("http://pplx-user:pa55-pplx-planted@127.0.0.1:9", "pa55-pplx-planted"),
    "AGENT_BACKEND_DEMO_TOKEN": ("demo-token-planted-42", "demo-token-planted-42"),
    "PERPLEXITY_API_KEY": ("pplx-key-planted-42", "pplx-key-planted-42"),
}
QUERY_SECRETS = {"jwt": "jwt-planted-1", "client_secret": "cs-planted-2", "access-token": "at-planted-3",
                 "auth": "auth-planted-4", "signature": "sig-planted-5"}


@pytest.mark.slow  # a real server process
async def test_planted_secrets_never_reach_the_log_or_readyz(tmp_path: Path) -> None:
    env = {name: value for name, (value, _) in PLANTED.items()}
    env |= {"AGENT_LLM_PROVIDER": "auto", "AGENT_EMBEDDER": "none", "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_LOG_LEVEL": "DEBUG", "AGENT_BACKEND_URL": "http://backend-user:pa55-backend-planted@127.0.0.1:9"}
    planted = [secret for _, secret in PLANTED.values()] + ["pa55-backend-planted", *QUERY_SECRETS.values()]
    async with AsyncExitStack() as stack:
        server = AgentServer(tmp_path, env)
        stack.callback(server.close)
        server.start()
        await server.wait_healthy()
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=10))
        readyz = await client.get(f"{server.base}/readyz")
        query = "&".join(f"{k}={v}" for k, v in QUERY_SECRETS.items())
        probe = await client.get(f"{server.base}/v1/agent/runs/run_x/events?after=0&{query}")
        assert probe.status_code in (401, 404)
        # The access line of the probe is written when its response ends: wait for it.
        await _wait_for(lambda: bool(server.grep("/v1/agent/runs/run_x/events")))
        await server.kill()
        log = server.text()
    body = readyz.text
    # What is shown is still useful: the hosts are there, the credentials are not.
    assert "127.0.0.1:9" in body and "AGENT_BACKEND_DEMO_TOKEN" in body
    assert "jwt=" in log and "client_secret=" in log and "after=0" in log
    for secret in planted:
        assert secret not in body, f"{secret} served on /readyz"
        assert secret not in log, f"{secret} in the log"


# --- helpers ---------------------------------------------------------------------------------


def _settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_MANDATORY_CONTEXTS": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        **env,
    })


def _run_input(db: Path, run_id: str) -> bytes | None:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT input FROM runs WHERE id = ?", (run_id,)).fetchone()
    assert row is not None
    return None if row[0] is None else bytes(row[0])


def _app_secrets(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return [(str(n), str(v)) for n, v in conn.execute("SELECT name, value FROM app_secrets")]


async def _wait_for(condition: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.05)
