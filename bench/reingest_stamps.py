"""Re-ingest of an unchanged folder: skipped by file stamp (size, modification time) before
reading, against reading every file and comparing content hashes (issue 24 item 4).

Run: ``.venv/bin/python bench/reingest_stamps.py [--files 2000] [--rounds 3] [--engine sqlite|pg]``.
Writes ``bench/results/reingest_stamps_<engine>.json`` and prints a summary.

Trees: npm's documentation (when installed) and a generated tree of ``--files`` files
(``bench/ingest.py``'s ``make_synthetic``). Each tree is ingested once into a fresh
database; then, in one process and alternating (``before`` first in even rounds, second in
odd ones, so a warming cache or a load change does not favour one side), the unchanged
tree is re-ingested with ``rehash=True`` — today's ``agentchat ingest --rehash``, which
is what every re-ingest did before the stamps: open, load, chunk-free content hash of
every file — and without (``after``: the stamp decides). Per side: wall time of each
round and the files the loader opened (counted by wrapping ``load_file``, including the
same-page check's reads), and what the report says (unread files, unchanged documents,
anything rewritten, which must be nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import write_results
from bench.ingest import make_synthetic

NPM_DOCS = [Path("/usr/lib/node_modules/npm/docs"), Path("/usr/local/lib/node_modules/npm/docs")]


async def measure(tree: Path, target: str, rounds: int) -> dict[str, Any]:
    from app.cli.kb_file import open_kb_file
    from knowledge import ingest as ingest_module
    from knowledge import loaders, samepage
    from toolindex.hashing import HashingEmbedder

    opened: list[Path] = []

    def counting(path: Path, *args: Any, **kwargs: Any) -> Any:
        opened.append(path)
        return loaders.load_file(path, *args, **kwargs)

    ingest_module.load_file = counting  # type: ignore[assignment]
    samepage.load_file = counting  # type: ignore[assignment]
    kb = await open_kb_file(target, HashingEmbedder())
    sides: dict[str, dict[str, Any]] = {
        "before (--rehash: read and hash every file)": {"rehash": True, "s": [], "opened": [], "reports": []},
        "after (stamp: size + mtime before reading)": {"rehash": False, "s": [], "opened": [], "reports": []},
    }
    try:
        started = time.perf_counter()
        first = await kb.ingest_paths([tree], bucket="bench")
        first_s = time.perf_counter() - started
        names = list(sides)
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                side = sides[name]
                opened.clear()
                started = time.perf_counter()
                report = await kb.ingest_paths([tree], bucket="bench", rehash=side["rehash"])
                side["s"].append(round(time.perf_counter() - started, 4))
                side["opened"].append(len(opened))
                side["reports"].append(
                    {
                        "unread_files": report.unread_files,
                        "unchanged_documents": report.skipped,
                        "rewritten": report.added + report.updated + report.deleted,
                    }
                )
    finally:
        await kb.aclose()
    out: dict[str, Any] = {
        "files": first.files,
        "documents": first.added,
        "chunks": first.chunks,
        "first_ingest_s": round(first_s, 3),
    }
    for name, side in sides.items():
        out[name] = {
            "wall_s": side["s"],
            "median_s": round(statistics.median(side["s"]), 4),
            "files_opened": side["opened"],
            "report": side["reports"][-1],
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000, help="generated files (default 2000)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engine", choices=("sqlite", "pg"), default="sqlite")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="agentchat-reingest-"))
    trees: list[tuple[str, Path]] = [(f"npm docs ({p})", p) for p in NPM_DOCS if p.is_dir()][:1]
    synthetic = work / "generated"
    make_synthetic(synthetic, args.files)
    trees.append((f"generated, {args.files} files", synthetic))
    server = None
    if args.engine == "pg":
        from tests.support.postgres import TestPostgres

        server = TestPostgres().start()
    results: dict[str, Any] = {"engine": args.engine, "rounds": args.rounds, "trees": {}}
    load = [os.getloadavg()[0]]
    try:
        for k, (name, tree) in enumerate(trees):
            if server is not None:
                server.admin(f'CREATE DATABASE "reingest_{k}"')
                target = server.url(f"reingest_{k}")
            else:
                target = str(work / f"kb_{k}.db")
            results["trees"][name] = asyncio.run(measure(tree, target, args.rounds))
            load.append(os.getloadavg()[0])
    finally:
        if server is not None:
            server.stop()
    results["load_average_1min"] = [round(x, 2) for x in load]
    write_results(f"reingest_stamps_{args.engine}", results)
    for name, r in results["trees"].items():
        print(f"{name}: {r['files']} files, {r['documents']} documents, {r['chunks']} chunks")
        for side in [k for k in r if k.startswith(("before", "after"))]:
            s = r[side]
            print(f"  {side}: median {s['median_s']:.3f} s {s['wall_s']}, files opened {s['files_opened']},")
            print(f"    {s['report']}")
    print(f"load average (1 min) during the run: {results['load_average_1min']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
