"""Every JSON log line says which process wrote it: ``pid`` always, and ``replica`` (the
id its run leases are stored under, ``/readyz``'s ``load.replica``) in a serving process.
Under ``serve --workers 2`` an ERROR could not be traced to a worker, nor a run's lease
owner to its lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.procs import AgentServer, until

pytestmark = pytest.mark.slow

WORKERS = 2


def json_lines(server: AgentServer) -> list[dict[str, Any]]:
    found = []
    for line in server.lines():
        if line.startswith("{"):
            found.append(orjson.loads(line))
    return found


async def test_each_workers_lines_name_its_pid_and_replica(tmp_path: Path) -> None:
    env = {
        "AGENT_WORKERS": str(WORKERS),
        "AGENT_LOG_FORMAT": "json",
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_EMBEDDER": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
    }
    server = AgentServer(tmp_path, env, name="workers-logs")
    server.start()
    try:
        await server.wait_healthy()
        replicas: set[str] = set()
        for _ in range(400):  # a new connection each time: the kernel picks the worker
            async with httpx.AsyncClient(timeout=10) as http:
                answer = await http.get(f"{server.base}/readyz")
            replicas.add(answer.json()["load"]["replica"])
            if len(replicas) == WORKERS:
                break
        assert len(replicas) == WORKERS, replicas
        # Each worker's access line for its /readyz names the worker.
        def logged() -> set[str]:
            return {str(line.get("replica")) for line in json_lines(server) if line.get("logger") == "agentchat.access"}

        await until(lambda: replicas <= logged(), "the access lines of both workers' /readyz", 30)
        lines = json_lines(server)
        assert all(isinstance(line.get("pid"), int) for line in lines), [x for x in lines if "pid" not in x][:3]
        pids = set()
        for replica in replicas:
            pid = int(replica.split(":")[1])  # host:pid:id, the id the worker's leases are stored under
            own = [line for line in lines if line.get("replica") == replica]
            assert own and all(line["pid"] == pid for line in own), own[:3]
            assert [line for line in own if line["message"] == "agentchat ready"], own[:5]
            assert all(line.get("replica") in (None, replica) for line in lines if line["pid"] == pid)
            pids.add(pid)
        assert len(pids) == WORKERS
        # The supervisor's lines: its own pid, no replica (it serves nothing); each worker it
        # started is named by the pid its lines carry.
        started = [line for line in lines if line["message"] == "worker started"]
        assert {line["worker_pid"] for line in started} == pids, started
        assert {line["pid"] for line in started} == {server.pid} and not any("replica" in s for s in started)
    finally:
        server.close()
