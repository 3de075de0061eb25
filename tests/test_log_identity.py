"""Every JSON log line says which process wrote it: ``pid`` always, and ``replica`` (the
id its run leases are stored under, ``/readyz``'s ``load.replica``) in a serving process.
Under ``serve --workers 2`` an ERROR could not be traced to a worker, nor a run's lease
owner to its lines."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.support.procs import DEMO_AUTH, AgentServer, until

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
        # A run's lease owner, as stored, is the replica its admission's lines name.
        async with httpx.AsyncClient(timeout=30) as http:
            body = {"message": "What is in the knowledge base?", "context_type": "knowledge"}
            answer = await http.post(f"{server.base}/v1/agent/runs", json=body, headers=DEMO_AUTH)
        assert answer.status_code == 201, answer.text
        run_id = answer.json()["run_id"]
        with sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True) as db:
            [(owner,)] = db.execute("SELECT lease_owner FROM runs WHERE id = ?", (run_id,)).fetchall()
        assert owner in replicas, (owner, replicas)

        def logged() -> bool:  # each worker's access line for its /readyz, and the run's admission's
            access = [line for line in json_lines(server) if line.get("logger") == "agentchat.access"]
            named = {line.get("replica") for line in access if line.get("path") == "/readyz"}
            return replicas <= named and any(line.get("run_id") == run_id for line in access)

        await until(logged, "the access lines of both workers' /readyz and of the run's start", 30)
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
        admitted = [line for line in lines if line.get("run_id") == run_id and line["logger"] == "agentchat.access"]
        assert admitted and all(line["replica"] == owner for line in admitted), admitted
        # The supervisor's lines: its own pid, no replica (it serves nothing); each worker it
        # started is named by the pid its lines carry.
        started = [line for line in lines if line["message"] == "worker started"]
        assert {line["worker_pid"] for line in started} == pids, started
        assert {line["pid"] for line in started} == {server.pid} and not any("replica" in s for s in started)
    finally:
        server.close()
