"""Retrieval quality on real text nobody here wrote: BM25 alone, vectors alone, fused.

Corpus: the module docstrings of the running interpreter's standard library (read from
the source with ``ast`` where there is source, so nothing is executed; C modules are
imported for their ``__doc__``) plus every topic of ``pydoc_data.topics`` (the language
reference sections ``help()`` shows). Documents are ingested into a real
``KnowledgeBase`` and chunked as usual.

Queries: ``bench/data/corpus_queries.json``, hand-labelled with the documents that answer
them (``module:<name>`` / ``topic:<name>``). For each query the three modes of
``KnowledgeBase.search`` — ``text`` (FTS5 BM25 + re-ranking), ``semantic`` (vectors +
re-ranking) and ``hybrid`` (both fused with RRF + re-ranking) — give a ranked list of
documents (chunks de-duplicated by document), scored with nDCG@10 and Recall@10.

Embedders: the hashing embedder always; a real one (Gemini or Ollama) too when it is
configured and reachable (``AGENT_EMBEDDER``/``GEMINI_API_KEY``/``OLLAMA_HOST``).

Run from the repository root:  .venv/bin/python bench/corpus_quality.py
Writes bench/results/corpus_quality.json.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.util
import math
import os
import pkgutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from bench._common import write_results  # noqa: E402

QUERIES = ROOT / "bench" / "data" / "corpus_queries.json"
K = 10
MODES = ("text", "semantic", "hybrid")
LABELS = {"text": "bm25", "semantic": "vectors", "hybrid": "fused"}
# Never read: packages of tests and tools, and modules whose import has side effects
# (only relevant for modules without source, which are imported).
SKIP = {"test", "idlelib", "lib2to3", "turtledemo", "ensurepip", "pydoc_data", "antigravity", "this"}
MIN_DOC_CHARS = 60


def _docstring(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return ast.get_docstring(ast.parse(f.read())) or ""
    except (SyntaxError, ValueError, OSError):
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


def ndcg(ranked: list[str], relevant: set[str], k: int = K) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal if ideal else 0.0


def recall(ranked: list[str], relevant: set[str], k: int = K) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant) if relevant else 0.0


def _doc_scores(hits: Any) -> list[tuple[str, float]]:
    """Best score per document, in rank order."""
    best: dict[str, float] = {}
    for h in hits:
        best.setdefault(h.doc_id, float(h.score))
    return list(best.items())


def _rrf(text: list[tuple[str, float]], vec: list[tuple[str, float]], w_vec: float, k: int = 60) -> list[str]:
    fused: dict[str, float] = {}
    for weight, ranking in ((1.0, text), (w_vec, vec)):
        for rank, (doc, _s) in enumerate(ranking, start=1):
            fused[doc] = fused.get(doc, 0.0) + weight / (k + rank)
    return sorted(fused, key=lambda d: -fused[d])


def _combsum(text: list[tuple[str, float]], vec: list[tuple[str, float]], w_vec: float) -> list[str]:
    fused: dict[str, float] = {}
    for weight, ranking in ((1.0, text), (w_vec, vec)):
        for doc, score in ranking:
            fused[doc] = fused.get(doc, 0.0) + weight * score
    return sorted(fused, key=lambda d: -fused[d])


# Fusions of the two single-mode rankings (document level), tried to see what would beat
# both: they are measurements for the knowledge base's fusion, not what the tools run.
ALTERNATIVES = {
    "doc_rrf_equal": lambda t, v: _rrf(t, v, 1.0),
    "doc_rrf_vec_0.5": lambda t, v: _rrf(t, v, 0.5),
    "doc_combsum_equal": lambda t, v: _combsum(t, v, 1.0),
    "doc_combsum_vec_0.5": lambda t, v: _combsum(t, v, 0.5),
}


async def evaluate(embedder: Any, docs: list[dict[str, Any]], queries: list[dict[str, Any]]) -> dict[str, Any]:
    from knowledge.kb import KnowledgeBase

    with tempfile.TemporaryDirectory(prefix="agentchat-quality-") as tmp:
        kb = await KnowledgeBase.open(Path(tmp) / "kb.sqlite3", embedder)
        try:
            report = await kb.ingest_documents(docs, bucket="pydocs")
            scores: dict[str, dict[str, list[float]]] = {m: {"ndcg": [], "recall": []} for m in MODES}
            alt: dict[str, list[float]] = {name: [] for name in ALTERNATIVES}
            per_query = []
            for q in queries:
                rel = set(q["relevant"])
                row: dict[str, Any] = {"query": q["query"]}
                lists: dict[str, list[tuple[str, float]]] = {}
                for mode in MODES:
                    res = await kb.search(q["query"], bucket="pydocs", mode=mode, top_k=40)
                    ranked = list(dict.fromkeys(h.doc_id for h in res.hits))
                    lists[mode] = _doc_scores(res.hits)
                    n, r = ndcg(ranked, rel), recall(ranked, rel)
                    scores[mode]["ndcg"].append(n)
                    scores[mode]["recall"].append(r)
                    row[LABELS[mode]] = round(n, 3)
                for name, fuse in ALTERNATIVES.items():
                    alt[name].append(ndcg(fuse(lists["text"], lists["semantic"]), rel))
                per_query.append(row)
        finally:
            await kb.aclose()
    summary = {
        LABELS[m]: {
            f"ndcg@{K}": round(sum(s["ndcg"]) / len(s["ndcg"]), 4),
            f"recall@{K}": round(sum(s["recall"]) / len(s["recall"]), 4),
        }
        for m, s in scores.items()
    }
    fused, bm25, vec = (summary[k][f"ndcg@{K}"] for k in ("fused", "bm25", "vectors"))
    fused_r, bm25_r, vec_r = (summary[k][f"recall@{K}"] for k in ("fused", "bm25", "vectors"))
    return {
        "embedder": f"{embedder.name}:{embedder.model}",
        "documents": len(docs),
        "chunks": report.chunks,
        "summary": summary,
        "fused_beats_both": {"ndcg": fused > max(bm25, vec), "recall": fused_r > max(bm25_r, vec_r)},
        "fusion_experiments_ndcg@10": {name: round(sum(v) / len(v), 4) for name, v in alt.items()},
        "per_query": per_query,
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


async def main_async() -> int:
    from toolindex.hashing import HashingEmbedder

    data = orjson.loads(QUERIES.read_bytes())
    queries = data["queries"]
    docs = stdlib_documents()
    ids = {d["id"] for d in docs}
    missing = sorted({r for q in queries for r in q["relevant"]} - ids)
    if missing:
        print(f"labels naming documents not in this interpreter's corpus (ignored): {missing}")
        for q in queries:
            q["relevant"] = [r for r in q["relevant"] if r in ids]
        queries = [q for q in queries if q["relevant"]]
    print(f"corpus: {len(docs)} documents (Python {sys.version.split()[0]}), {len(queries)} labelled queries")

    results = []
    hashing = HashingEmbedder(dim=384)
    results.append(await evaluate(hashing, docs, queries))
    real, why = await real_embedder()
    if real is not None:
        try:
            results.append(await evaluate(real, docs, queries))
        finally:
            await real.aclose()
    else:
        print(f"no real embedder configured: {why}")
    for r in results:
        print(f"== {r['embedder']}  ({r['documents']} docs, {r['chunks']} chunks)")
        for name, s in r["summary"].items():
            print(f"  {name:8s} nDCG@{K} {s[f'ndcg@{K}']:.4f}   Recall@{K} {s[f'recall@{K}']:.4f}")
        print(f"  fused beats both: {r['fused_beats_both']}")
        print(f"  fusion experiments (nDCG@{K}): {r['fusion_experiments_ndcg@10']}")
    path = write_results(
        "corpus_quality",
        {"python": sys.version.split()[0], "queries": len(queries), "missing_labels": missing,
         "real_embedder": None if real is None else f"{real.name}:{real.model}", "real_embedder_note": None if real else why,
         "results": results},
    )
    print(f"wrote {path}")
    return 0


def main() -> int:
    return asyncio.run(main_async())


if __name__ == "__main__":
    raise SystemExit(main())
