"""Ingestion benchmark: real documentation trees found on this machine and a synthetic
tree of 10,000 files, through ``KnowledgeBase.ingest_paths`` (what ``agentchat ingest``
runs) with the offline hashing embedder.

Run: ``.venv/bin/python bench/ingest.py [--files 10000] [--trees auto|PATH,PATH]``.
Writes ``bench/results/ingest.json`` and prints a summary.

Per tree: files seen / read / skipped (by reason) / rejected (by kind), documents and
chunks stored, files/s and chunks/s of the first ingest (and the share spent in the
embedder), the time to re-ingest the unchanged tree (every document skipped by its
content hash), and the peak RSS of the process that did it: each tree runs in its own
child process, so the peak is that ingestion's alone.

Real trees, the first ones present: npm's documentation (Markdown and HTML, with
navigation — HTML goes through the main-content extractor) and ``/usr/share/doc``
(READMEs and changelogs, and many files of other types that are skipped and counted).
Others with ``--trees`` (e.g. the Python standard library's directory, printed by
``python -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])"``: 70 MB of
text files among its ``.py``, several minutes with the hashing embedder).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import ROOT, write_results

CANDIDATE_TREES = [
    ("npm docs", ["/usr/lib/node_modules/npm/docs", "/usr/local/lib/node_modules/npm/docs"]),
    ("/usr/share/doc", ["/usr/share/doc"]),
]
WORDS = (
    "agent stream event run bucket chunk ingest search vector token query answer source page title heading "
    "install configure deploy server client cache index schema field filter rank score embed model provider "
    "retry timeout resume cancel lease worker queue backend workflow table column report invoice vendor amount"
).split()


def real_trees(spec: str) -> list[tuple[str, Path]]:
    if spec != "auto":
        return [(p, Path(p)) for p in spec.split(",") if p]
    found = []
    for name, candidates in CANDIDATE_TREES:
        for c in candidates:
            if Path(c).is_dir():
                found.append((name, Path(c)))
                break
    return found


def make_synthetic(root: Path, n: int, seed: int = 14) -> None:
    """``n`` files of 0.5–6 KB: Markdown with headings (60%), plain text (25%), HTML pages
    with a navigation sidebar (15%); plus a few files a real tree has: hidden, unsupported,
    binary, a symbolic link."""
    rng = random.Random(seed)

    def para(k: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(k)).capitalize() + "."

    for i in range(n):
        d = root / f"section{i % 50:02d}" / f"part{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        kind = rng.random()
        sections = rng.randint(1, 6)
        if kind < 0.6:
            body = f"# Page {i}\n\n" + "\n\n".join(
                f"## Topic {j}\n\n{para(rng.randint(30, 120))}" for j in range(sections)
            )
            (d / f"page{i}.md").write_text(body)
        elif kind < 0.85:
            (d / f"notes{i}.txt").write_text("\n\n".join(para(rng.randint(30, 120)) for _ in range(sections)))
        else:
            nav = "".join(f'<li><a href="/p{k}">Link {k}</a></li>' for k in range(30))
            main = "".join(f"<h2>Topic {j}</h2><p>{para(rng.randint(30, 120))}</p>" for j in range(sections))
            (d / f"page{i}.html").write_text(
                f"<html><head><title>Page {i}</title></head><body><nav><ul>{nav}</ul></nav>"
                f"<main><article><h1>Page {i}</h1>{main}</article></main><footer>Footer text</footer></body></html>"
            )
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(512))
    (root / "blob.md").write_bytes(os.urandom(4096))
    (root / "link.md").symlink_to(root / "section00" / "part0" / "page0.md")


def run_child(tree: Path, db: Path) -> dict[str, Any]:
    """One tree in a child process (clean peak RSS); returns its measurements."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(tree), "--db", str(db)],
        capture_output=True, cwd=ROOT, check=False, timeout=3600,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    if out.returncode != 0:
        raise SystemExit(f"child failed for {tree}:\n{out.stderr.decode()[-3000:]}")
    return orjson.loads(out.stdout.strip().splitlines()[-1])


def child(tree: Path, db: Path) -> None:
    import asyncio
    import logging

    logging.disable(logging.WARNING)
    from app.cli.kb_file import open_kb_file
    from knowledge.html_text import extractor_available
    from toolindex.hashing import HashingEmbedder

    async def go() -> dict[str, Any]:
        kb = await open_kb_file(db, HashingEmbedder())
        try:
            started = time.perf_counter()
            first = await kb.ingest_paths([tree], bucket="bench")
            first_s = time.perf_counter() - started
            started = time.perf_counter()
            again = await kb.ingest_paths([tree], bucket="bench")
            again_s = time.perf_counter() - started
        finally:
            await kb.aclose()
        seen = first.files + sum(first.skipped_files.values())
        return {
            "files_seen": seen,
            "files_read": first.files,
            "skipped_by_reason": dict(sorted(first.skipped_files.items(), key=lambda kv: -kv[1])[:15]),
            "skipped_total": sum(first.skipped_files.values()),
            "rejected_by_kind": first.rejected_by_kind(),
            "documents": first.added + first.updated,
            "chunks": first.chunks,
            "ingest_s": round(first_s, 3),
            "files_per_s": round(first.files / first_s, 1) if first_s else None,
            "chunks_per_s": round(first.chunks / first_s, 1) if first_s else None,
            "embed_share": round(first.embed_seconds / first_s, 3) if first_s else None,
            "reingest_unchanged_s": round(again_s, 3),
            "reingest_files_per_s": round(again.files / again_s, 1) if again_s else None,
            "reingest_unchanged_documents": again.skipped,
            "reingest_rewritten": again.added + again.updated,
            "html_extractor": "trafilatura" if extractor_available() else "stdlib",
        }

    result = asyncio.run(go())
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(orjson.dumps(result).decode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000, help="files in the synthetic tree")
    parser.add_argument("--trees", default="auto", help="auto, or comma-separated directories")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child), Path(args.db))
        return
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        for name, path in real_trees(args.trees):
            print(f"== {name}: {path}", flush=True)
            results[name] = {"path": str(path), **run_child(path, Path(tmp) / f"{len(results)}.db")}
            print(_line(results[name]), flush=True)
        synthetic = Path(tmp) / "synthetic"
        started = time.perf_counter()
        make_synthetic(synthetic, args.files)
        made = time.perf_counter() - started
        print(f"== synthetic: {args.files} files (made in {made:.1f} s)", flush=True)
        results["synthetic"] = {"path": f"<{args.files} generated files>", **run_child(synthetic, Path(tmp) / "s.db")}
        print(_line(results["synthetic"]), flush=True)
    path = write_results("ingest", {
        "embedder": "hashing (384 dims)",
        "note": "first ingest and re-ingest of the unchanged tree through KnowledgeBase.ingest_paths; "
                "each tree in its own process (peak RSS is that process's)",
        "trees": results,
    })
    print(f"wrote {path.relative_to(ROOT)}")


def _line(r: dict[str, Any]) -> str:
    return (
        f"   {r['files_seen']} seen, {r['files_read']} read, {r['skipped_total']} skipped, "
        f"{sum(r['rejected_by_kind'].values())} rejected -> {r['documents']} documents, {r['chunks']} chunks | "
        f"{r['files_per_s']} files/s, {r['chunks_per_s']} chunks/s (embedder {100 * (r['embed_share'] or 0):.0f}%) | "
        f"re-ingest unchanged {r['reingest_unchanged_s']} s ({r['reingest_files_per_s']} files/s) | "
        f"peak RSS {r['peak_rss_mb']} MB"
    )


if __name__ == "__main__":
    main()
