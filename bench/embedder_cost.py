"""What the offline embedder costs a newcomer: ``agentchat serve`` (``make run``'s command)
on a fresh database, hashing against the local MiniLM model, alternating (issue 20).

Why: making MiniLM the default of ``make run`` is decided on what it costs at first
contact, measured the way a newcomer meets it, not on the embedder's own throughput.
Per start: seconds until ``/healthz`` answers (listening) and until ``/readyz`` is 200
(the sample knowledge base ingested: its 20 pages chunked and embedded), the server's
resident memory once ready and after the questions (``VmRSS``, peak ``VmHWM``; the
reference backend is a separate child and not counted), ``/readyz``'s embedder check,
and the end-to-end time of knowledge questions (bench/data/newcomer_questions.json, the
first ``--questions``) to ``message_complete``. Then, in process on the database that
start filled, per-query search latency over every newcomer question (distinct queries:
the query-vector cache never hits) and the embedding alone.

Needs ``make local`` for the ``local`` rows. Writes bench/results/embedder_cost.json
(``--out FILE`` elsewhere).

    .venv/bin/python bench/embedder_cost.py [--rounds 3] [--questions 5] [--kinds hashing,local] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.procs import child_env
from tests.support.server import free_port

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = REPO / "bench" / "data" / "newcomer_questions.json"
RESULTS = REPO / "bench" / "results" / "embedder_cost.json"
START_DEADLINE_S = 300.0
ANSWER_DEADLINE_S = 120.0


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


async def wait_until(client: httpx.AsyncClient, url: str, proc: subprocess.Popen[bytes], t0: float) -> float:
    """Seconds from ``t0`` until ``url`` answers 200; fails past the deadline or if the server exits."""
    while time.perf_counter() - t0 < START_DEADLINE_S:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}) before {url} answered")
        try:
            if (await client.get(url, timeout=2.0)).status_code == 200:
                return time.perf_counter() - t0
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{url} not ready within {START_DEADLINE_S} s")


async def ask(client: httpx.AsyncClient, base: str, question: str) -> float:
    """Seconds from the request to the ``message_complete`` event."""
    t0 = time.perf_counter()
    body = {"message": question, "context_type": "knowledge"}
    async with asyncio.timeout(ANSWER_DEADLINE_S):
        async with client.stream("POST", f"{base}/v1/agent/chat", json=body, timeout=ANSWER_DEADLINE_S) as response:
            assert response.status_code == 200, await response.aread()
            async for line in response.aiter_lines():
                if line == "event: message_complete":
                    return time.perf_counter() - t0
    raise RuntimeError(f"no message_complete for {question!r}")


async def one_start(kind: str, questions: list[str], workdir: Path) -> dict[str, Any]:
    db = workdir / "agent.sqlite3"
    port, backend_port = free_port(), free_port()
    env = child_env({"AGENT_DB_PATH": str(db), "OLLAMA_HOST": "http://127.0.0.1:9", "AGENT_LOG_FORMAT": "text"})
    if kind != "auto":
        env["AGENT_EMBEDDER"] = kind
    env.pop("OPENBLAS_NUM_THREADS", None)  # as a newcomer's shell: `agentchat serve` sets it itself
    argv = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--backend-port", str(backend_port)]
    base = f"http://127.0.0.1:{port}"
    log = (workdir / "serve.log").open("wb")
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        async with httpx.AsyncClient() as client:
            listening = await wait_until(client, f"{base}/healthz", proc, t0)
            ready = await wait_until(client, f"{base}/readyz", proc, t0)
            checks = (await client.get(f"{base}/readyz")).json().get("checks", {})
            rss_ready = memory_kib(proc.pid)
            times = [await ask(client, base, q) for q in questions]
            rss_after = memory_kib(proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
    return {
        "kind": kind,
        "listening_s": round(listening, 2),
        "ready_s": round(ready, 2),
        "sample_kb": checks.get("knowledge", {}).get("sample_kb"),
        "embedder": checks.get("embedder"),
        "rss_ready_mib": round(rss_ready["VmRSS"] / 1024, 1),
        "rss_after_questions_mib": round(rss_after["VmRSS"] / 1024, 1),
        "rss_peak_mib": round(rss_after["VmHWM"] / 1024, 1),
        "answer_s": [round(t, 3) for t in times],
        "answer_median_s": round(statistics.median(times), 3) if times else None,
    }


async def search_latency(kind: str, db: Path, questions: list[str]) -> dict[str, Any]:
    """Per-query search and embedding latency, in process, on the database a start filled."""
    from app.cli.kb_file import open_kb_file
    from toolindex.hashing import HashingEmbedder
    from toolindex.minilm import MiniLMEmbedder

    embedder: Any = MiniLMEmbedder() if kind == "local" else HashingEmbedder(dim=384)
    t0 = time.perf_counter()
    await embedder.embed("warm up: load the weights")
    load_s = time.perf_counter() - t0
    kb = await open_kb_file(db, embedder)
    try:
        await kb.search("warm up the index")
        searches, embeds = [], []
        for q in questions:
            t = time.perf_counter()
            await kb.search(q)
            searches.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            await embedder.embed(q + " ")  # a different text: not the KB's cached vector
            embeds.append((time.perf_counter() - t) * 1000)
    finally:
        await kb.aclose()
        await embedder.aclose()
    return {
        "first_embed_s": round(load_s, 3),
        "search_ms_median": round(statistics.median(searches), 2),
        "search_ms_max": round(max(searches), 2),
        "embed_ms_median": round(statistics.median(embeds), 2),
    }


async def main(rounds: int, n_questions: int, kinds: list[str], out: Path) -> None:
    questions = [q["question"] for q in orjson.loads(QUESTIONS.read_bytes())["questions"]]
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        for kind in kinds:
            with tempfile.TemporaryDirectory() as tmp:
                row = await one_start(kind, questions[:n_questions], Path(tmp))
                if kind in ("hashing", "local"):
                    row.update(await search_latency(kind, Path(tmp) / "agent.sqlite3", questions))
                row["round"] = r
                rows.append(row)
                print(orjson.dumps(row).decode(), flush=True)
    summary: dict[str, Any] = {}
    for kind in kinds:
        mine = [row for row in rows if row["kind"] == kind]
        summary[kind] = {
            key: statistics.median(row[key] for row in mine)
            for key in ("listening_s", "ready_s", "rss_ready_mib", "rss_after_questions_mib", "answer_median_s")
        }
        for key in ("search_ms_median", "embed_ms_median", "first_embed_s"):
            if all(key in row for row in mine):
                summary[kind][key] = statistics.median(row[key] for row in mine)
    result = {"rows": rows, "median": summary, "loadavg": os.getloadavg(), "cores": os.cpu_count()}
    print(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    print(f"load average {os.getloadavg()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="starts per embedder, alternating")
    parser.add_argument("--questions", type=int, default=5, help="knowledge questions asked per start")
    parser.add_argument("--kinds", default="hashing,local", help="AGENT_EMBEDDER values, comma separated (auto too)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.questions, args.kinds.split(","), args.out))
