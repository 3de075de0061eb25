"""A host name is listened on at every address it resolves to (``app.cli.serving.bind_sockets``).

``agentchat backend --host localhost`` bound only the first address the resolver gave: on
a machine whose /etc/hosts lists ``::1 localhost`` beside ``127.0.0.1 localhost`` glibc
returns ::1 first, and ``AGENT_BACKEND_URL=http://127.0.0.1:P`` was refused (uvicorn,
given the name before, bound both); ``agentchat serve --host localhost`` had bound the
first address alone from the start. The resolver is replaced here for one made-up name
(the machine's own ``localhost`` resolves to 127.0.0.1 alone); the real-process tests put
the same replacement for ``localhost`` in the CLI process before it binds (and execs
``python -m backend``, or starts the app or the workers of ``--workers``).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli import serving
from app.cli.serving import PROJECT_ROOT
from tests.support.deadline import reap, within
from tests.support.server import free_port
from tests.test_cli import wait_for
from tests.test_serving import offline_env

NAME = "dual.invalid"


def resolving(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> None:
    """``NAME`` resolves to ``addresses``, in that order; other names as before."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host != NAME:
            return real(host, port, *args, **kwargs)
        out: list[Any] = []
        for address in addresses:
            if ":" in address:
                out.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
            else:
                out.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
        return out

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def closing() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for sock in held:
        sock.close()


def accepts(address: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        return client.connect_ex((address, port)) == 0


@pytest.mark.parametrize("port", ["free", "any"])
def test_every_address_of_a_name_is_bound_on_one_port(
    monkeypatch: pytest.MonkeyPatch, closing: list[socket.socket], port: str
) -> None:
    resolving(monkeypatch, "127.0.0.2", "127.0.0.1")
    asked = free_port() if port == "free" else 0  # 0: one free port, the same on each address
    sockets = serving.bind_sockets(NAME, asked)
    closing.extend(sockets)
    got = serving.bound_port(sockets[0])
    assert [s.getsockname() for s in sockets] == [("127.0.0.2", got), ("127.0.0.1", got)]
    assert asked in (0, got)
    for sock in sockets:
        sock.listen()
    assert accepts("127.0.0.1", got) and accepts("127.0.0.2", got)
    assert not any(s.get_inheritable() for s in sockets)  # handed on explicitly, never leaked


def test_an_address_this_machine_lacks_is_left_out_while_another_binds(
    monkeypatch: pytest.MonkeyPatch, closing: list[socket.socket]
) -> None:
    """As asyncio's ``create_server`` does for a family not enabled (``EADDRNOTAVAIL``)."""
    resolving(monkeypatch, "192.0.2.1", "127.0.0.1")  # TEST-NET-1: no interface has it
    sockets = serving.bind_sockets(NAME, 0)
    closing.extend(sockets)
    assert [s.getsockname()[0] for s in sockets] == ["127.0.0.1"]
    resolving(monkeypatch, "192.0.2.1")
    with pytest.raises(serving.BindError, match="this machine has no such address"):
        serving.bind_sockets(NAME, 0)


def test_a_port_taken_on_any_one_address_is_the_one_line_and_nothing_stays_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolving(monkeypatch, "127.0.0.2", "127.0.0.1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(serving.BindError) as refused:
            serving.bind_sockets(NAME, port, what="agentchat backend", hint="--port")
        assert str(refused.value) == (
            f"agentchat backend: cannot listen on {NAME}:{port}: the port is already in use "
            "(another agentchat? pick another with --port)"
        )
        with socket.socket() as again:  # the first address's socket was closed with the refusal
            again.bind(("127.0.0.2", port))


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as exc:
        return exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)
    return True


def ipv6_first_cli(*argv: str) -> str:
    """``python -c`` text: the CLI with ``argv``, ``localhost`` resolving to ::1, then 127.0.0.1."""
    return textwrap.dedent(f"""
        import socket, sys
        real = socket.getaddrinfo
        def getaddrinfo(host, port, *args, **kwargs):
            if host == "localhost":
                return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
                        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
            return real(host, port, *args, **kwargs)
        socket.getaddrinfo = getaddrinfo
        from app.cli.commands import main
        sys.exit(main({list(argv)!r}))
    """)


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_agentchat_backend_on_localhost_answers_on_both_loopbacks_when_the_resolver_lists_ipv6_first(
    tmp_path: Path,
) -> None:
    """The CLI process resolves ``localhost`` to ::1 then 127.0.0.1 (what glibc gives with
    ``::1 localhost`` in /etc/hosts), binds, and execs ``python -m backend`` with the
    sockets: the backend answers at http://127.0.0.1:P, where AGENT_BACKEND_URL points,
    and at http://[::1]:P."""
    port = free_port()
    db = tmp_path / "solo.sqlite3"
    script = ipv6_first_cli("backend", "--host", "localhost", "--port", str(port), "--db", str(db))
    env = {**os.environ, "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")}
    log = tmp_path / "backend.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        for base in (f"http://127.0.0.1:{port}", f"http://[::1]:{port}"):
            resp = wait_for(f"{base}/v1/workflow/trigger-types", proc)
            assert resp.status_code == 200 and resp.json(), (base, resp.text, log.read_text())
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)


@pytest.mark.slow  # real `agentchat serve` processes
@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback on this machine")
@pytest.mark.parametrize("workers", [1, 2])
async def test_agentchat_serve_on_localhost_answers_on_both_loopbacks(tmp_path: Path, workers: int) -> None:
    """``serve --host localhost`` bound the first address alone (since its first release):
    with ::1 listed first, http://127.0.0.1:P was refused. Each address is bound now, in
    one process and in each worker of ``--workers`` (``--listen-fd`` once per socket)."""
    port = free_port()
    script = ipv6_first_cli("serve", "--host", "localhost", "--port", str(port), "--no-backend",
                            "--workers", str(workers))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, env=offline_env(tmp_path), cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    lines: list[str] = []

    async def pump() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            lines.append(raw.decode(errors="replace"))

    reading = asyncio.create_task(pump())
    try:
        async with asyncio.timeout(90):
            while "".join(lines).count("agentchat: serving on http://") < workers:  # each worker says it
                assert proc.returncode is None and not reading.done(), "".join(lines)
                await asyncio.sleep(0.05)
        async with httpx.AsyncClient(timeout=5) as client:
            for base in (f"http://127.0.0.1:{port}", f"http://[::1]:{port}"):
                health = await client.get(f"{base}/healthz")
                assert health.status_code == 200, (base, health.text)
    finally:
        await reap(proc, "agentchat serve", grace=30)
        await within(reading, "the end of agentchat serve's output", 10)
    assert "Traceback" not in "".join(lines)
