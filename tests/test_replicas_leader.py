"""One process per PostgreSQL database runs the background jobs, replicas alike
(``app/ops/leader.py``, ``storage/postgres/leader_lock.py``): two ``agentchat serve``
replicas on their own ports, one database. Exactly one says ``background_jobs: here``
(``/readyz``) and shows ``agentchat_background_jobs_leader 1`` (``/metrics``); after a
SIGKILL of that one the other takes the jobs over, and the killed one, started again,
follows. Workers of one ``serve --workers`` are the same on a machine
(``tests/test_workers_feed.py``).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.postgres import TestPostgres
from tests.support.procs import OFFLINE_SERVE_ENV, AgentServer

pytestmark = pytest.mark.slow

ENV = {**OFFLINE_SERVE_ENV, "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789"}


@pytest.fixture
def pg(pg_server: TestPostgres) -> TestPostgres:
    """The session's PostgreSQL (``pg_server``, tests/conftest.py): each test takes a fresh
    database of it, so a server of this module's own would only add a start."""
    return pg_server


async def where_jobs_run(server: AgentServer) -> str | None:
    async with httpx.AsyncClient(timeout=5) as http:
        _, body = await server.readyz(http)
    return None if body is None else str(body["workers"]["background_jobs"])


async def leader_gauge(server: AgentServer) -> float:
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"{server.base}/metrics")).text
    (value,) = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "agentchat_background_jobs_leader"
    ]
    return value


async def until(condition: object, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)


async def test_one_replica_of_the_database_runs_the_jobs_and_another_takes_them_over(
    tmp_path: Path, pg: TestPostgres
) -> None:
    with pg.database() as url:
        env = {**ENV, "AGENT_DATABASE_URL": url}
        servers = [AgentServer(tmp_path, env, name=name) for name in ("a", "b")]
        a, b = servers
        try:
            for server in servers:
                server.start()
            await asyncio.gather(*(s.wait_healthy() for s in servers))

            async def one_leads() -> bool:
                places = [await where_jobs_run(s) for s in servers]
                return sorted(str(p) for p in places) == ["another worker or replica", "here"]

            await until(one_leads, "one replica leading, the other following")
            leader, other = (a, b) if await where_jobs_run(a) == "here" else (b, a)
            assert await leader_gauge(leader) == 1.0 and await leader_gauge(other) == 0.0

            leader.send(signal.SIGKILL)
            assert await leader.wait_exit(30) is not None

            async def other_leads() -> bool:
                return await where_jobs_run(other) == "here"

            await until(other_leads, f"the surviving replica leading:\n{other.tail(30)}")
            assert await leader_gauge(other) == 1.0

            await leader.restart()  # the killed replica comes back: it follows

            async def follows() -> bool:
                return await where_jobs_run(leader) == "another worker or replica"

            await until(follows, "the restarted replica following")
            assert await where_jobs_run(other) == "here"
        finally:
            for server in servers:
                server.close()
