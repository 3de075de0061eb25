"""CORS as a browser client meets it (``AGENT_CORS_ORIGINS``), over a real server.

Browser SDKs send headers of their own (the openai JS SDK's ``x-stainless-*``, an app's
``x-`` headers): the preflight must allow them, not answer 400 "Disallowed CORS headers".
And cross-origin JavaScript reads only the response headers the server exposes, so the
ones the docs tell clients to read (``X-Conversation-Id``, ``X-Run-Id``, ``Retry-After``)
must be listed in ``Access-Control-Expose-Headers``.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from app.config import Settings
from llm.scripted import ScriptedProvider, ScriptedTurn
from tests.conftest import running_app

APP = "https://app.example.com"


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "a.db"),
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_CORS_ORIGINS": APP,
            "OLLAMA_HOST": "http://127.0.0.1:9",
        }
    )


def _exposed(response: httpx.Response) -> set[str]:
    return {h.strip().lower() for h in response.headers.get("access-control-expose-headers", "").split(",")}


async def test_a_preflight_with_sdk_headers_is_allowed(tmp_path: Path) -> None:
    requested = "authorization,content-type,x-stainless-os,x-stainless-lang,x-my-app-trace"
    async with (
        running_app(_settings(tmp_path), provider=ScriptedProvider([])) as (base, _),
        httpx.AsyncClient(timeout=30) as client,
    ):
        pre = await client.options(
            f"{base}/v1/chat/completions",
            headers={
                "Origin": APP,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": requested,
            },
        )
        other = await client.options(
            f"{base}/v1/chat/completions",
            headers={
                "Origin": "https://evil.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "x-stainless-os",
            },
        )
    assert pre.status_code == 200, pre.text
    assert pre.headers.get_list("access-control-allow-origin") == [APP]
    allowed = {h.strip().lower() for h in pre.headers["access-control-allow-headers"].split(",")}
    assert set(requested.split(",")) <= allowed
    # Any header, for the configured origins only.
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers


async def test_cross_origin_js_can_read_the_ids_and_retry_after(tmp_path: Path) -> None:
    provider = ScriptedProvider([ScriptedTurn(chunks=["hi"])])
    async with (
        running_app(_settings(tmp_path), provider=provider) as (base, _),
        httpx.AsyncClient(timeout=30) as client,
    ):
        done = await client.post(
            f"{base}/v1/chat/completions",
            json={"model": "agentchat-knowledge", "messages": [{"role": "user", "content": "hello"}]},
            headers={"Origin": APP},
        )
    assert done.status_code == 200, done.text
    assert done.headers["x-conversation-id"] and done.headers["x-run-id"]
    assert done.headers.get_list("access-control-allow-origin") == [APP]
    assert {"x-conversation-id", "x-run-id", "retry-after"} <= _exposed(done)
