"""The Host guard against DNS rebinding (``AGENT_ALLOWED_HOSTS``, ``app/server/host_check.py``
and the reference backend's ``backend/host_check.py``).

A hostile page whose name resolves to 127.0.0.1 reads whatever a local server answers it;
its requests carry its own name in ``Host``. With ``auto`` a server bound to loopback only
answers this machine's names (``localhost``, IP addresses) and the names listed; one bound
to another address (``--host 0.0.0.0``: a container, a proxy's upstream) answers any.
Over real servers: the uvicorn fixture, ``python -m backend``'s coroutine, and
``agentchat serve`` processes (``--workers``, whose workers inherit the socket and not
``--host``; ``--reload``, whose child reads ``AGENT_HOST``)."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from app.cli.reference_backend import backend_argv
from app.config import ConfigError, Settings
from app.config_checks import hosts_answered
from app.server.host_check import host_rule as agent_rule
from backend.app import serve_backend
from backend.host_check import host_rule as backend_rule
from backend.host_check import parse_allowed_hosts
from llm.scripted import ScriptedProvider, ScriptedTurn
from tests.conftest import running_app
from tests.support.deadline import until, within
from tests.support.procs import ManagedProcess, child_env
from tests.support.server import free_port

EVIL = "evil.example:8000"
CHAT = {"message": "hello there", "context_type": "workflow"}

#: (AGENT_ALLOWED_HOSTS, bound to, Host header, answered?)
CASES = [
    (("auto",), "127.0.0.1", "evil.example:8000", False),
    (("auto",), "127.0.0.1", "evil.example", False),
    (("auto",), "127.0.0.1", "EVIL.example.:8000", False),
    (("auto",), "127.0.0.1", "127.0.0.1.evil.example", False),
    (("auto",), "127.0.0.1", "localhost.evil.example", False),
    (("auto",), "127.0.0.1", "localhost:8000", True),
    (("auto",), "127.0.0.1", "LocalHost", True),
    (("auto",), "127.0.0.1", "app.localhost:5173", True),
    (("auto",), "127.0.0.1", "127.0.0.1:8000", True),
    (("auto",), "127.0.0.1", "[::1]:8000", True),
    (("auto",), "127.0.0.1", "192.168.1.20:8000", True),  # an address cannot be rebound
    (("auto",), "127.0.0.1", "", False),
    (("auto",), "127.0.0.1", "a:b:c", False),
    (("auto",), "::1", EVIL, False),
    (("auto",), "localhost", EVIL, False),
    (("auto",), "0.0.0.0", EVIL, True),
    (("auto",), "::", EVIL, True),
    (("auto",), "192.168.1.20", EVIL, True),
    (("evil.example",), "127.0.0.1", EVIL, True),
    (("evil.example",), "127.0.0.1", "other.example", False),
    (("evil.example",), "0.0.0.0", "other.example", False),  # a list holds wherever it listens
    (("evil.example",), "0.0.0.0", "localhost:8000", True),
    (("*.example",), "127.0.0.1", EVIL, True),
    (("*.example",), "127.0.0.1", "example", False),
    (("*.example",), "127.0.0.1", "evilexample", False),
    (("*",), "127.0.0.1", EVIL, True),
]


@pytest.mark.parametrize(("allowed", "bound", "host", "answered"), CASES)
def test_the_agent_and_the_backend_apply_one_rule(allowed: tuple[str, ...], bound: str, host: str,
                                                  answered: bool) -> None:
    """The backend imports nothing of the agent's, so the rule is written twice: one table."""
    for rule in (agent_rule(allowed, bound), backend_rule(allowed, bound)):
        assert (rule is None or rule.allows(host)) is answered, (allowed, bound, host, rule)


def test_the_setting_takes_names_and_refuses_ports_schemes_and_auto_among_names() -> None:
    assert Settings.from_env({}).allowed_hosts == ("auto",)
    assert Settings.from_env({"AGENT_ALLOWED_HOSTS": " Dev.Box. , *.lan,[::1]"}).allowed_hosts == (
        "dev.box", "*.lan", "[::1]")
    for bad in ("dev.box:8000", "http://dev.box", "auto,dev.box", "a:8000", "*.*.lan"):
        with pytest.raises(ConfigError, match="AGENT_ALLOWED_HOSTS"):
            Settings.from_env({"AGENT_ALLOWED_HOSTS": bad})
    assert parse_allowed_hosts("Dev.Box,*.lan") == ("dev.box", "*.lan")
    for bad in ("dev.box:8000", "http://dev.box", "auto,dev.box"):
        with pytest.raises(ValueError):
            parse_allowed_hosts(bad)
    settings = Settings.from_env({"AGENT_ALLOWED_HOSTS": "dev.box,*.lan"})
    argv = backend_argv("127.0.0.1", 8001, Path("b.db"), allowed_hosts=settings.allowed_hosts)
    assert argv[argv.index("--allowed-hosts") + 1] == "dev.box,*.lan"  # what serve starts the backend with


def _settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_MANDATORY_CONTEXTS": "none", "OLLAMA_HOST": "http://127.0.0.1:9", **env,
    })


async def test_on_loopback_a_foreign_host_is_403_and_starts_no_run(tmp_path: Path) -> None:
    provider = ScriptedProvider([ScriptedTurn(chunks=["hi"])] * 2)
    async with running_app(_settings(tmp_path), provider=provider, embedder=None) as (base, _), \
            httpx.AsyncClient(base_url=base, timeout=30) as client:
        evil = {"Host": EVIL}
        chat = await client.post("/v1/agent/chat", json=CHAT, headers=evil)
        assert chat.status_code == 403
        problem = chat.json()
        assert problem["error"] == "host_not_allowed"
        assert "AGENT_ALLOWED_HOSTS" in problem["detail"] and "\n" not in problem["detail"]
        assert "host name 'evil.example' " in problem["detail"]  # the name to list, without its port
        for path in ("/healthz", "/v1/agent/conversations", "/openapi.json", "/"):
            assert (await client.get(path, headers=evil)).status_code == 403, path
        # The OpenAI-compatible face answers in OpenAI's error shape.
        models = await client.get("/v1/models", headers=evil)
        assert models.status_code == 403
        assert models.json()["error"]["code"] == "host_not_allowed"
        assert models.json()["error"]["type"] == "permission_error"
        assert provider.requests == []
        # This machine's names are served.
        for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
            assert (await client.get("/healthz", headers={"Host": host})).status_code == 200, host
        ok = await client.post("/v1/agent/chat", json=CHAT, headers={"Host": "localhost:8000"})
        assert ok.status_code == 200 and "event: message_complete" in ok.text
    assert len(provider.requests) == 1


@pytest.mark.parametrize("allowed", ["evil.example", "*.example", "*"])
async def test_a_listed_name_or_any_is_served_on_loopback(tmp_path: Path, allowed: str) -> None:
    settings = _settings(tmp_path, AGENT_ALLOWED_HOSTS=allowed)
    provider = ScriptedProvider([ScriptedTurn(chunks=["hi"])])
    async with running_app(settings, provider=provider, embedder=None) as (base, _), \
            httpx.AsyncClient(base_url=base, timeout=30) as client:
        ok = await client.post("/v1/agent/chat", json=CHAT, headers={"Host": EVIL})
        assert ok.status_code == 200 and "event: message_complete" in ok.text
        other = await client.get("/healthz", headers={"Host": "other.test"})
        assert other.status_code == (200 if allowed == "*" else 403)


async def test_the_reference_backend_on_loopback_refuses_a_foreign_host(tmp_path: Path) -> None:
    """Its demo tokens are public: a rebound page could call it with one."""
    port = free_port()
    for allowed, expected in ((("auto",), 403), (("evil.example",), 200)):
        task = asyncio.create_task(serve_backend("127.0.0.1", port, tmp_path / "backend.sqlite3",
                                                 log_level="warning", allowed_hosts=allowed))
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
                async def up() -> bool:
                    try:
                        return (await client.get("/healthz")).status_code == 200
                    except httpx.TransportError:
                        return False

                await until(up, "the reference backend's /healthz", 60)
                evil = await client.get("/v1/workflow/trigger-types",
                                        headers={"Host": EVIL, "Authorization": "Bearer demo-alice"})
                assert evil.status_code == expected, evil.text
                if expected == 403:
                    assert evil.json()["code"] == "host_not_allowed"
                    assert "AGENT_ALLOWED_HOSTS" in evil.json()["message"]
                    assert "host name 'evil.example' " in evil.json()["message"]
                mine = await client.get("/v1/workflow/trigger-types",
                                        headers={"Host": f"localhost:{port}", "Authorization": "Bearer demo-alice"})
                assert mine.status_code == 200
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await within(task, "the reference backend's stop", 30)


def _serve(tmp_path: Path, name: str, *args: str, **env: str) -> ManagedProcess:
    full = child_env({"AGENT_DB_PATH": str(tmp_path / f"{name}.sqlite3"), "AGENT_INGEST_SAMPLE_KB": "false",
                      "AGENT_EMBEDDER": "none", "AGENT_LLM_PROVIDER": "extractive",
                      "OLLAMA_HOST": "http://127.0.0.1:9", **env})
    argv = [sys.executable, "-m", "app.cli", "serve", "--port", "0", "--no-backend", *args]
    return ManagedProcess(name, argv, full, tmp_path / f"{name}.log")


async def _serving_port(proc: ManagedProcess, lines: int = 1) -> int:
    """The port once ``lines`` "serving on" lines are out (one per worker)."""
    await until(lambda: len(re.findall(r"agentchat: serving on", proc.text())) >= lines or not proc.running,
                f"{proc.name} serving", 120)
    found = re.search(r"agentchat: serving on http://[^ ]*:(\d+) ", proc.text())
    assert proc.running and found, proc.tail()
    return int(found.group(1))


@pytest.mark.slow  # real `agentchat serve --workers 2` processes
async def test_serve_bound_to_every_address_answers_any_host_in_every_worker(tmp_path: Path) -> None:
    """``--host 0.0.0.0``: the operator exposed it (a container, a proxy's upstream); the
    workers know it from the socket they inherit, not from ``--host`` (AGENT_HOST is unset)."""
    served = _serve(tmp_path, "wide", "--host", "0.0.0.0", "--workers", "2")
    served.start()
    try:
        port = await _serving_port(served, lines=2)
        for _ in range(8):  # a new connection each: either worker accepts it
            async with httpx.AsyncClient(timeout=10) as client:
                answer = await client.get(f"http://127.0.0.1:{port}/healthz", headers={"Host": EVIL})
                assert answer.status_code == 200, answer.text
    finally:
        served.close()


@pytest.mark.slow  # real `agentchat serve --reload` processes
async def test_serve_bound_to_loopback_refuses_a_foreign_host_whatever_agent_host_says(tmp_path: Path) -> None:
    """``--host 127.0.0.1`` wins over ``AGENT_HOST=0.0.0.0``: the guard follows the address
    the socket is bound to, in the reloader's child too (it builds the app from the
    environment)."""
    served = _serve(tmp_path, "narrow", "--host", "127.0.0.1", "--reload", AGENT_HOST="0.0.0.0")
    served.start()
    try:
        port = await _serving_port(served)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            evil = await client.post("/v1/agent/runs", content=orjson.dumps(CHAT),
                                     headers={"Host": EVIL, "Content-Type": "application/json"})
            assert evil.status_code == 403 and evil.json()["error"] == "host_not_allowed"
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/v1/agent/runs")).json()["runs"] == []
        assert "refused a request for a host name not allowed" in served.text()
    finally:
        served.close()


def test_a_name_of_this_machine_given_as_host_is_answered_under_auto() -> None:
    """``--host devbox`` (``/etc/hosts``: ``127.0.1.1 devbox``) binds loopback; the name the
    operator gave is answered besides this machine's, and nothing else changes."""
    assert hosts_answered(("auto",), "DevBox.", "127.0.1.1") == ("devbox",)
    assert hosts_answered(("auto",), "devbox", "::1") == ("devbox",)
    for allowed, asked, bound in [
        (("auto",), "localhost", "127.0.0.1"),  # answered anyway
        (("auto",), "app.localhost", "127.0.0.1"),
        (("auto",), "127.0.0.1", "127.0.0.1"),  # an address: answered anyway
        (("auto",), "devbox", "192.168.1.20"),  # bound elsewhere: any name
        (("auto",), "0.0.0.0", "0.0.0.0"),
        (("other.example",), "devbox", "127.0.1.1"),  # the operator's list stands
        (("*",), "devbox", "127.0.1.1"),
        (("auto",), "", "127.0.0.1"),
    ]:
        assert hosts_answered(allowed, asked, bound) == allowed, (allowed, asked, bound)
    rule = agent_rule(hosts_answered(("auto",), "devbox", "127.0.1.1"), "127.0.1.1")
    assert rule is not None and rule.allows("devbox:8000") and rule.allows("localhost") and not rule.allows(EVIL)


def _loopback_name() -> str | None:
    """A name of this machine other than ``localhost`` that resolves to loopback only."""
    for name in (socket.gethostname(), "localhost.localdomain", "ip6-localhost", "ip6-loopback"):
        try:
            found = {info[4][0] for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)}
        except (socket.gaierror, UnicodeError):
            continue
        if found and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found) \
                and name.lower() != "localhost" and not name.lower().endswith(".localhost"):
            return name
    return None


@pytest.mark.slow  # real `agentchat serve --reload` processes
async def test_serve_answers_the_name_it_was_told_to_listen_on(tmp_path: Path) -> None:
    """``serve --reload --host <a name of this machine>``: the "serving on" line names it and
    the reloader's readiness probe asks by it — before, both met the 403 (the line never
    came); a foreign name is still refused."""
    name = _loopback_name()
    if name is None:
        pytest.skip("no name of this machine besides localhost resolves to loopback here")
    served = _serve(tmp_path, "named", "--host", name, "--reload")
    served.start()
    try:
        port = await _serving_port(served)
        assert f"serving on http://{name}:{port}" in served.text()
        # By the name itself (it may be 127.0.1.1, ::1): the Host it sends is the name's.
        async with httpx.AsyncClient(base_url=f"http://{name}:{port}", timeout=10, trust_env=False) as client:
            named = await client.get("/healthz")
            assert named.request.headers["host"] == f"{name}:{port}" and named.status_code == 200, named.text
            evil = await client.get("/healthz", headers={"Host": EVIL})
            assert evil.status_code == 403 and evil.json()["error"] == "host_not_allowed"
    finally:
        served.close()
