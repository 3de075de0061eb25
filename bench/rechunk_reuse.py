"""The first ``agentchat ingest`` after a chunking-rules upgrade, in two source trees side
by side: how many texts it embeds and how long it takes (``knowledge.ingest_reuse``).

Run: ``flock /tmp/s48/bench.lock .venv/bin/python bench/rechunk_reuse.py --trees OLD,NEW
[--corpus PATH] [--runs 3] [--ms-per-text 5]``. Each tree is a checkout (``git worktree
add``) run with this virtualenv's Python and its own code first on the path.

Per tree, embedder and run: a fresh SQLite file, a first ingest of the corpus, then every
document marked as stored before the rules were recorded (``chunk_rules`` NULL: what
migration 32 leaves), then the timed re-ingest - which re-chunks every document. Two
embedders: ``hashing`` (in process), and ``ollama``: the real ``OllamaEmbedder`` against
a loopback fake of ``/api/embed`` that counts the texts it is sent and answers them one
request at a time, ``--ms-per-text`` each (a remote model's cost; a real server on CPU
spends ~10-30 ms per text). Writes ``bench/results/rechunk_reuse.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from starlette.types import Message, Receive, Scope, Send  # noqa: E402

from bench._common import write_results  # noqa: E402
from tests.fakes import FakeOllama, running_fake  # noqa: E402


class SlowEmbeds:
    """``FakeOllama``'s app with each ``/api/embed`` request served one at a time, after
    ``ms_per_text`` per text it carries (a model's cost, not the network's)."""

    def __init__(self, fake: FakeOllama, ms_per_text: float) -> None:
        self.fake = fake
        self.ms_per_text = ms_per_text
        self._one_at_a_time = asyncio.Lock()

    def texts(self) -> int:
        return sum(len(body["input"]) for body in self.fake.embed_requests)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("path") != "/api/embed":
            await self.fake.app(scope, receive, send)
            return
        async with self._one_at_a_time:
            before = len(self.fake.embed_requests)

            async def answer_after_the_model(message: Message) -> None:
                if message["type"] == "http.response.start":  # the request is read and recorded by now
                    added = sum(len(b["input"]) for b in self.fake.embed_requests[before:])
                    await asyncio.sleep(added * self.ms_per_text / 1000)
                await send(message)

            await self.fake.app(scope, receive, answer_after_the_model)


async def ingest(tree: Path, corpus: Path, env: dict[str, str]) -> tuple[float, str]:
    """``agentchat ingest CORPUS`` run from ``tree``: wall seconds and its report."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "ingest", "--quiet", str(corpus),
        cwd=tree, env={**os.environ, **env, "PYTHONPATH": str(tree)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    wall = time.perf_counter() - started
    text = out.decode()
    if proc.returncode != 0:
        raise RuntimeError(f"ingest in {tree} failed ({proc.returncode}):\n{text}")
    return wall, text


def mark_older_rules(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE kb_documents SET chunk_rules = NULL")


async def one_run(tree: Path, corpus: Path, embedder: str, slow: SlowEmbeds, base_url: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "kb.sqlite3"
        env = {"AGENT_DB_PATH": str(db), "AGENT_EMBEDDER": embedder, "OLLAMA_HOST": base_url}
        await ingest(tree, corpus, env)
        mark_older_rules(db)
        before = slow.texts()
        wall, report = await ingest(tree, corpus, env)
        chunks = int(m.group(1)) if (m := re.search(r"(\d+) chunks", report)) else -1
        kept = int(m.group(1)) if (m := re.search(r"(\d+) kept their stored vectors", report)) else 0
        rechunked = int(m.group(1)) if (m := re.search(r"(\d+) re-chunked", report)) else 0
        sent = slow.texts() - before
        return {
            "wall_s": round(wall, 3),
            "chunks": chunks,
            "rechunked_documents": rechunked,
            "texts_embedded": sent if embedder == "ollama" else chunks - kept,
        }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    slow = SlowEmbeds(FakeOllama(embed_dim=args.dim, models=("nomic-embed-text:latest",)), args.ms_per_text)
    results: dict[str, Any] = {}
    async with running_fake(slow) as base_url:  # type: ignore[arg-type]
        for embedder in ("hashing", "ollama"):
            runs: dict[str, list[dict[str, Any]]] = {str(t): [] for t in trees}
            for _ in range(args.runs):
                for tree in trees:  # alternated, so a change of load touches both alike
                    runs[str(tree)].append(await one_run(tree, Path(args.corpus), embedder, slow, base_url))
            results[embedder] = {
                tree: {
                    "median_wall_s": round(statistics.median(r["wall_s"] for r in rs), 3),
                    "texts_embedded": sorted({r["texts_embedded"] for r in rs}),
                    "chunks": sorted({r["chunks"] for r in rs}),
                    "rechunked_documents": sorted({r["rechunked_documents"] for r in rs}),
                    "runs": rs,
                }
                for tree, rs in runs.items()
            }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", required=True, help="OLD,NEW: source trees to compare")
    parser.add_argument("--corpus", default="/usr/lib/node_modules/npm/docs")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ms-per-text", type=float, default=5.0)
    parser.add_argument("--dim", type=int, default=768)
    args = parser.parse_args()
    loadavg = Path("/proc/loadavg").read_text().split()[:3]
    results = asyncio.run(main_async(args))
    payload = {
        "corpus": args.corpus,
        "ms_per_text": args.ms_per_text,
        "load_before": loadavg,
        "load_after": Path("/proc/loadavg").read_text().split()[:3],
        "results": results,
    }
    path = write_results("rechunk_reuse", payload)
    for embedder, per_tree in results.items():
        for tree, r in per_tree.items():
            print(
                f"{embedder:8} {tree}: texts embedded {r['texts_embedded']} of chunks {r['chunks']},"
                f" median wall {r['median_wall_s']} s"
            )
    print(f"load {payload['load_before']} -> {payload['load_after']}; written {path}")


if __name__ == "__main__":
    main()
