"""Retrieval quality on real text nobody here wrote: BM25 alone, vectors alone, fused.

Two sets, each a corpus and hand-labelled queries naming the documents that answer them:

* ``stdlib``: the module docstrings of the running interpreter's standard library (read
  from the source with ``ast`` where there is source, so nothing is executed; C modules
  are imported for their ``__doc__``) plus every topic of ``pydoc_data.topics`` (the
  language reference sections ``help()`` shows); queries in
  ``bench/data/corpus_queries.json`` (``module:<name>`` / ``topic:<name>``).
* ``node``: the Node.js API documentation installed with the ``nodejs`` package, one
  document per ``##``/``###`` section (``bench/node_docs.py``); queries in
  ``bench/data/node_queries.json``. Skipped, with a note, where the docs are not installed.

Documents are ingested into a real ``KnowledgeBase`` and chunked as usual. For each
query the three modes of ``KnowledgeBase.search`` — ``text`` (BM25 + re-ranking),
``semantic`` (vectors + re-ranking) and ``hybrid`` (both fused by ``knowledge.fusion`` +
re-ranking) — give a ranked list of documents (chunks de-duplicated by document), scored
with nDCG@10 and Recall@10, over all queries and over two fixed halves of each set (even
positions: ``tune``, odd: ``held_out``). Every fusion choice was fitted on the ``tune``
halves only — see ``FUSION_NOTE``. The same knowledge base also answers each query in
hybrid mode with the fusion rules before issue 24's second pass (``fused_before``:
``knowledge.fusion.NO_RULES``), so before and after come from one run, one ingest.

Embedders: the hashing embedder always; a real one too (``AGENT_EMBEDDER=local`` for the
MiniLM of ``make local``, or Gemini / Ollama when configured and reachable). The real
embedder's vectors are cached per set under ``AGENT_BENCH_CACHE`` (default
``$TMPDIR/agentchat-bench-cache``, ``bench/embed_cache.py``): the second engine and the
next run reuse them instead of spending minutes re-embedding the same text.

Run from the repository root:  .venv/bin/python bench/corpus_quality.py [--help]
Writes bench/results/corpus_quality.json.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import importlib
import importlib.util
import math
import os
import pkgutil
import sys
import tempfile
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from bench._common import write_results  # noqa: E402
from bench.embed_cache import CachedEmbedder  # noqa: E402
from bench.node_docs import node_documents  # noqa: E402
from knowledge import fusion  # noqa: E402
from knowledge.fusion import DENSE_WEIGHTS, NO_RULES, RULES, FusionRules  # noqa: E402

QUERIES = ROOT / "bench" / "data" / "corpus_queries.json"
NODE_QUERIES = ROOT / "bench" / "data" / "node_queries.json"
K = 10
#: What each query is scored with: (label, search mode, fusion rules or None for the
#: shipped ones). Only hybrid mode fuses two sides, so only it runs twice.
RUNS: tuple[tuple[str, str, FusionRules | None], ...] = (
    ("bm25", "text", None),
    ("vectors", "semantic", None),
    ("fused", "hybrid", None),
    ("fused_before", "hybrid", NO_RULES),
)
# Never read: packages of tests and tools, and modules whose import has side effects
# (only relevant for modules without source, which are imported).
SKIP = {"test", "idlelib", "lib2to3", "turtledemo", "ensurepip", "pydoc_data", "antigravity", "this"}
MIN_DOC_CHARS = 60


def _docstring(path: str) -> str:
    """The module's docstring, parsed from the file's lines up to the end of its first
    statement (the docstring is that statement or there is none): parsing each whole
    module was nearly all of ``stdlib_documents``' ~1-3 s, once in every test process
    that reads the corpus."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            source = f.read()
        lines = source.splitlines(keepends=True)
        started = False
        for tok in tokenize.generate_tokens(iter(lines).__next__):
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                return ast.get_docstring(ast.parse("".join(lines[: tok.end[0]]))) or ""
            if not started and tok.type not in (tokenize.COMMENT, tokenize.NL):
                if tok.type != tokenize.STRING:  # the first statement is no string
                    return ""
                started = True
        return ""
    except (SyntaxError, ValueError, OSError, tokenize.TokenError, StopIteration):
        return ""


def stdlib_documents() -> list[dict[str, Any]]:
    """Module docstrings (top-level modules and one level of submodules) and doc topics."""
    docs: dict[str, tuple[str, str]] = {}
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in SKIP:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        origin = spec.origin or ""
        if origin.endswith(".py"):
            docs[name] = (name, _docstring(origin))
            for sub in pkgutil.iter_modules(spec.submodule_search_locations or []):
                if sub.name.startswith("_") or sub.name in ("test", "tests"):
                    continue
                base = os.path.join(getattr(sub.module_finder, "path", ""), sub.name)
                path = os.path.join(base, "__init__.py") if sub.ispkg else base + ".py"
                if os.path.exists(path):
                    docs[f"{name}.{sub.name}"] = (f"{name}.{sub.name}", _docstring(path))
        else:  # built-in or extension module: importing it has no side effects
            try:
                docs[name] = (name, importlib.import_module(name).__doc__ or "")
            except Exception:
                continue
    out = [
        {"id": f"module:{key}", "title": f"{title} module", "text": text, "metadata": {"kind": "module"}}
        for key, (title, text) in docs.items()
        if len(text.strip()) >= MIN_DOC_CHARS
    ]
    from pydoc_data.topics import topics

    out += [
        {"id": f"topic:{name}", "title": f"{name} (language reference)", "text": text, "metadata": {"kind": "topic"}}
        for name, text in sorted(topics.items())
        if len(text.strip()) >= MIN_DOC_CHARS
    ]
    return out


#: Each set: its labelled queries and the loader of its documents.
SETS: dict[str, tuple[Path, Callable[[], list[dict[str, Any]]]]] = {
    "stdlib": (QUERIES, stdlib_documents),
    "node": (NODE_QUERIES, node_documents),
}


def cache_dir() -> Path:
    return Path(os.environ.get("AGENT_BENCH_CACHE", str(Path(tempfile.gettempdir()) / "agentchat-bench-cache")))


def ndcg(ranked: list[str], relevant: set[str], k: int = K) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal if ideal else 0.0


def recall(ranked: list[str], relevant: set[str], k: int = K) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant) if relevant else 0.0


FUSION_NOTE = (
    "knowledge.fusion.fuse: weighted CombSUM of per-query min-max normalised BM25 (weight 1.0, "
    "whole list) and cosine (knowledge.fusion.dense_weight(embedder): weight, trusted depth and "
    "confidence floor; a dense side whose best cosine is below its floor sits the query out). "
    "hashing (hashing-v2): weight 0.25, normalisation floor at its 10th-best cosine (chosen "
    "earlier on the stdlib tune half from depth {5, 10, 20, whole list} x weight {0.15, 0.25, "
    "0.35, 0.5}); confidence floor 0.40 (issue 24), chosen on the tune halves of BOTH sets "
    "(stdlib and node, even query positions) from {none, 0.35, 0.40, 0.45, a 0.30..0.50 ramp} "
    "x weight {0.25, 0.5}, as the choice with the largest worst-case margin of fused nDCG@10 "
    "over the better single side across the two tune halves (the node set's queries were "
    "written before any fusion choice was measured on them). Also tried on the tune halves "
    "and rejected: per-query weights from each side's score spread (top-1 vs top-10 gap, "
    "normalised query commitment) and from the dense side's best cosine as a continuous "
    "factor, fusing only over BM25's own candidates, smaller weights. minilm: whole list, "
    "weight 2.0 (from {1.0, 1.5, 2.0, 3.0} by stdlib tune nDCG@10; {2, 3, 4, 6} re-checked on "
    "both tune halves in the second pass), no floor. Second pass (knowledge.fusion.RULES, "
    "issue 24): of two sides of unequal weight the lighter counts only at its top 10 "
    "(light_depth) and its weight scales with how many of the two top-10 heads' members "
    "both share, full from 2 of 10 (agreement_full 0.2), to nothing when they share none; "
    "chosen by the same worst-case tune criterion from light_depth {none, 10, 20} x "
    "agreement {off; step at 0.1, 0.2, 0.3; linear ramp full at 0.2, 0.3, 0.5} x minilm "
    "weight {2, 3}, after a per-query look at the node set's MiniLM losses (questions "
    "whose two heads share nothing: BM25 0.14, vectors 0.47, fused 0.37); also tried "
    "there and not kept: distribution-based normalisation (mean +- 2 or 3 sd), weighted "
    "RRF (k 20, 60), top-1 vs top-10 gap weights. fused_before: the same run with "
    "knowledge.fusion.NO_RULES. The hashing "
    "n-gram mass (1.0) was picked earlier as the largest that kept tool-selection recall with "
    "core merge >= 0.97 (bench/retrieval_quality.py) and compared on the stdlib queries too, "
    "so it is not clean of them. held_out is the half of each set no choice was fitted to. "
    "Third pass (issue 24 item 5, bench/results/corpus_quality_s30*.txt): tried on the tune "
    "halves with both embedders and not kept, none beating the shipped rules' worst tune "
    "margin on both embedders: hashing weight {0.15, 0.2, 0.25, 0.35} x floor {0.35, 0.40, "
    "0.45} again under the rules; the lighter side only lifting (heavier score + its share of "
    "max(0, lighter - heavier)); the heavier side's scores kept whole and the lighter's share "
    "added on top (divided by the best when over 1); the lighter side's weight cut (to 0 or "
    "half) when its best candidate is not in the heavier side's top 10 (or 20); light_depth "
    "5 and 20; agreement over top 5 full at 2; agreement full at 3 of 10"
)


def split_of(index: int) -> str:
    """Fixed split of the labelled queries: even positions tune, odd ones are held out.

    The fusion knobs in ``knowledge.fusion.DENSE_WEIGHTS`` (each embedder's dense weight,
    the hashing embedder's trusted depth and confidence floor; grids in ``FUSION_NOTE``)
    were chosen on the ``tune`` halves only; ``held_out`` is what they were never fitted to.
    """
    return "tune" if index % 2 == 0 else "held_out"


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, _, _ in RUNS:
        out[label] = {
            f"ndcg@{K}": round(sum(r[label]["ndcg"] for r in rows) / len(rows), 4),
            f"recall@{K}": round(sum(r[label]["recall"] for r in rows) / len(rows), 4),
        }
    fused, single = out["fused"], (out["bm25"], out["vectors"])
    out["fused_beats_both"] = {
        metric: fused[f"{metric}@{K}"] > max(s[f"{metric}@{K}"] for s in single) for metric in ("ndcg", "recall")
    }
    return out


@contextlib.contextmanager
def fusion_rules(rules: FusionRules | None) -> Iterator[None]:
    """``knowledge.fusion.RULES`` replaced for the block (``None``: left as shipped): the
    search path calls ``fuse`` without rules, so this is how a run compares two."""
    if rules is None:
        yield
        return
    shipped = fusion.RULES
    fusion.RULES = rules
    try:
        yield
    finally:
        fusion.RULES = shipped


async def open_engine_kb(engine: str, tmp: str, embedder: Any, pg: Any) -> Any:
    """The KB on a fresh SQLite file, or on a fresh database of the bench's PostgreSQL."""
    if engine == "sqlite":
        from app.cli.kb_file import open_kb_file

        return await open_kb_file(Path(tmp) / "kb.sqlite3", embedder)
    from knowledge.kb import KnowledgeBase
    from storage.postgres import open_postgres_storage

    storage = await open_postgres_storage(pg.url(pg.new_database(empty=True)))
    return await KnowledgeBase.create(
        storage.kb_index, embedder, schema_version=storage.schema_version, on_close=storage.close
    )


async def evaluate(
    embedder: Any,
    docs: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    engine: str = "sqlite",
    pg: Any = None,
    set_name: str = "stdlib",
) -> dict[str, Any]:
    bucket = f"{set_name}docs"
    with tempfile.TemporaryDirectory(prefix="agentchat-quality-") as tmp:
        kb = await open_engine_kb(engine, tmp, embedder, pg)
        try:
            report = await kb.ingest_documents(docs, bucket=bucket)
            rows: list[dict[str, Any]] = []
            for i, q in enumerate(queries):
                rel = set(q["relevant"])
                row: dict[str, Any] = {"query": q["query"], "split": split_of(i)}
                for label, mode, rules in RUNS:
                    # Identical for all: same depth, same per-document cap and the same
                    # re-ranking; only the retrievers that feed the fusion (and, for
                    # fused_before, the fusion's rules) differ.
                    with fusion_rules(rules):
                        res = await kb.search(q["query"], bucket=bucket, mode=mode, top_k=40)
                    ranked = list(dict.fromkeys(h.doc_id for h in res.hits))
                    row[label] = {"ndcg": ndcg(ranked, rel), "recall": recall(ranked, rel)}
                rows.append(row)
        finally:
            await kb.aclose()
    return {
        "set": set_name,
        "engine": engine,
        "embedder": f"{embedder.name}:{embedder.model}",
        "documents": len(docs),
        "chunks": report.chunks,
        "summary": _summary(rows),
        "by_split": {name: _summary([r for r in rows if r["split"] == name]) for name in ("tune", "held_out")},
        "per_query": [
            {"query": r["query"], "split": r["split"], **{label: round(r[label]["ndcg"], 3) for label, _, _ in RUNS}}
            for r in rows
        ],
    }


async def real_embedder() -> tuple[Any | None, str]:
    """The configured non-hashing embedder, if one is reachable."""
    import httpx

    from toolindex.factory import choose_embedder

    kind = os.environ.get("AGENT_EMBEDDER", "auto")
    if kind in ("hashing", "none"):
        return None, f"AGENT_EMBEDDER={kind}"
    async with httpx.AsyncClient() as http:
        embedder, why = await choose_embedder(
            kind,
            gemini_api_key=os.environ.get("GEMINI_API_KEY"),
            ollama_host=os.environ.get("OLLAMA_HOST", "http://127.0.0.1:11434"),
            ollama_model=os.environ.get("OLLAMA_EMBED_MODEL", "nomic-embed-text"),
            http_client=http,
        )
    if embedder is None or embedder.name == "hashing":
        if embedder is not None:
            await embedder.aclose()
        return None, why
    return embedder, why


def load_set(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """A set's documents and its labelled queries (labels naming a document this machine's
    corpus lacks are dropped, and returned, so a different interpreter or Node.js still
    runs)."""
    path, loader = SETS[name]
    queries = orjson.loads(path.read_bytes())["queries"]
    docs = loader()
    ids = {d["id"] for d in docs}
    missing = sorted({r for q in queries for r in q["relevant"]} - ids)
    if missing:
        for q in queries:
            q["relevant"] = [r for r in q["relevant"] if r in ids]
        queries = [q for q in queries if q["relevant"]]
    return docs, queries, missing


def _print(results: list[dict[str, Any]]) -> None:
    head = f"{'set':7s} {'engine':9s} {'embedder':28s} {'split':9s}"
    print(f"\n{head} {'bm25':>7s} {'vectors':>8s} {'before':>7s} {'fused':>7s}  fused>=best")
    for r in results:
        for part, summary in (("all", r["summary"]), *r["by_split"].items()):
            n = f"ndcg@{K}"
            b, v, f = summary["bm25"][n], summary["vectors"][n], summary["fused"][n]
            was = summary["fused_before"][n]
            print(
                f"{r['set']:7s} {r['engine']:9s} {r['embedder']:28s} {part:9s} {b:7.4f} {v:8.4f} {was:7.4f} {f:7.4f}  "
                f"{'yes' if f >= max(b, v) else 'NO'}"
            )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--sets",
        default=os.environ.get("AGENT_BENCH_SETS", ",".join(SETS)),
        help=f"comma-separated sets out of {', '.join(SETS)} (default: all; env AGENT_BENCH_SETS)",
    )
    p.add_argument(
        "--engines",
        default=os.environ.get("AGENT_BENCH_ENGINES", "sqlite,postgres"),
        help="comma-separated engines: sqlite, postgres (default both when a PostgreSQL can be started: "
        "the pgserver wheel of the dev dependencies; env AGENT_BENCH_ENGINES)",
    )
    p.add_argument(
        "--out", default="corpus_quality", help="name under bench/results, or a .json path (default: %(default)s)"
    )
    return p.parse_args(argv)


async def main_async(argv: list[str] | None = None) -> int:
    from toolindex.hashing import HashingEmbedder

    args = parse_args(argv)
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = [s for s in sets if s not in SETS]
    if unknown:
        print(f"unknown set(s): {unknown}; known: {list(SETS)}", file=sys.stderr)
        return 2
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    pg = None
    if "postgres" in engines:
        try:
            from tests.support.postgres import TestPostgres

            pg = TestPostgres().start()
        except Exception as exc:  # the SQLite figures still stand on their own
            print(f"postgres engine skipped: {exc}")
            engines.remove("postgres")
    results: list[dict[str, Any]] = []
    corpora: dict[str, Any] = {}
    real_name: str | None = None
    why = ""
    try:
        for set_name in sets:
            docs, queries, missing = load_set(set_name)
            if not docs:
                print(f"set {set_name}: no documents on this machine (not installed?): skipped")
                corpora[set_name] = {"skipped": "no documents on this machine"}
                continue
            corpora[set_name] = {"documents": len(docs), "queries": len(queries), "missing_labels": missing}
            print(
                f"set {set_name}: {len(docs)} documents, {len(queries)} labelled queries"
                + (f" (labels not in this corpus, ignored: {missing})" if missing else "")
            )
            hashing = HashingEmbedder(dim=384)
            for engine in engines:
                results.append(await evaluate(hashing, docs, queries, engine, pg, set_name))
            real, why = await real_embedder()
            if real is None:
                print(f"no real embedder configured: {why}")
                continue
            cached = CachedEmbedder(real, cache_dir() / f"{set_name}-{real.name}-{real.model}.npz")
            real_name = f"{real.name}:{real.model}"
            try:
                for engine in engines:
                    results.append(await evaluate(cached, docs, queries, engine, pg, set_name))
            finally:
                await cached.aclose()
    finally:
        if pg is not None:
            pg.stop()
    _print(results)
    path = write_results(
        args.out,
        {
            "python": sys.version.split()[0],
            "sets": corpora,
            "fusion": FUSION_NOTE,
            "dense_weights": {
                name: {"weight": w.weight, "depth": w.depth, "confident_at": w.confident_at}
                for name, w in DENSE_WEIGHTS.items()
            },
            "fusion_rules": {
                "after": {
                    "light_depth": RULES.light_depth,
                    "agreement_depth": RULES.agreement_depth,
                    "agreement_full": RULES.agreement_full,
                },
                "before": {
                    "light_depth": NO_RULES.light_depth,
                    "agreement_depth": NO_RULES.agreement_depth,
                    "agreement_full": NO_RULES.agreement_full,
                },
            },
            "real_embedder": real_name,
            "real_embedder_note": None if real_name else why,
            "results": results,
        },
    )
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(main_async(argv))


if __name__ == "__main__":
    raise SystemExit(main())
