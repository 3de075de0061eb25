"""SC-006: saved Perplexity answers found again by later related questions, without a new call.

Data: ``bench/data/keyword_reuse.json`` — 14 saved answers on ordinary topics (each the
question, the query sent to Perplexity, the answer with its citations, and the keywords
a model passed to ``index_keywords``), 57 later questions labelled with the answer that
covers them (paraphrases, word-order, plural and hyphenation variants, follow-ups on a
detail), and 20 negatives no saved answer covers (most on a neighbouring topic).

Each set-up runs on a fresh SQLite file with the sample knowledge base ingested: the
answers are saved and their keywords indexed as the RAG tools do it
(``KeywordIndex.save_result``, ``validate_keywords`` + ``KeywordIndex.index``), then every
question goes through the real ``knowledge_base_search`` handler. A question is
*found* when the expected answer is among the handler's ``external_answers`` — which
come with their web citations and a hint that no new ``perplexity_search`` is needed.

Set-ups:
  * ``phrase (before)`` — the rule this replaces, recomputed here: a keyword matched
    only when its exact normalised phrase occurred in the question;
  * ``terms`` — stemmed, order-free keyword terms only (no embedder);
  * ``hashing`` — terms + the vectors of each answer's question, answer and keywords
    with the offline hashing embedder (the default);
  * ``minilm`` — the same with all-MiniLM-L6-v2 (``make local``), when installed.

Reported per set-up: the share found (and at rank 1), by kind of question; the share of
negatives that brought back any saved answer; and the mean time the saved-answer lookup
adds to a KB search (the KB search's own time beside it). The embedder set-ups run a
second time with ~600 distractor answers saved as well (the standard library's module
docstrings, with keywords), for recall and latency with a fuller store.

Run from the repository root:  .venv/bin/python bench/keyword_reuse.py
Writes bench/results/keyword_reuse.json.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import statistics
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402

from agenttools.core.catalog_knowledge import knowledge_specs  # noqa: E402
from agenttools.core.registry import RunToolState, ToolContext, ToolRegistry  # noqa: E402
from agenttools.rag.deps import RagToolDeps  # noqa: E402
from agenttools.rag.external_results import Citation, new_external_result  # noqa: E402
from agenttools.rag.keyword_rules import keyword_key, validate_keywords  # noqa: E402
from agenttools.rag.keywords import KeywordIndex  # noqa: E402
from agenttools.rag.policy import KB_SEARCH  # noqa: E402
from agenttools.rag.tools import register_rag_tools  # noqa: E402
from bench._common import pct, write_results  # noqa: E402
from knowledge.kb import KnowledgeBase  # noqa: E402
from knowledge.sample import ensure_sample_kb  # noqa: E402
from knowledge.saved_answers import SavedAnswerVectors  # noqa: E402
from knowledge.textnorm import STOP_WORDS  # noqa: E402
from storage.open import open_storage  # noqa: E402
from storage.postgres import PostgresStorage  # noqa: E402
from storage.sqlite import SqliteStorage  # noqa: E402
from toolindex.embedder import Embedder  # noqa: E402

DATA = ROOT / "bench" / "data" / "keyword_reuse.json"
#: Lookups timed per question (the median is kept), after one untimed warm-up.
REPEATS = 5
TARGETS = {"seed": 0.20, "hashing": 0.80, "minilm": 0.90}
#: The ids of the labelled saved answers (distractors are ``stdlib:<module>``).
LABELLED = frozenset(s["id"] for s in orjson.loads(DATA.read_bytes())["saved"])


# --------------------------------------------------------------------------- the old rule


def _old_tokens(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).casefold()
    out = []
    for raw in folded.split():
        tok = re.sub(r"^[^\w#%&@+]+|[^\w#%&@+]+$", "", raw)
        if tok:
            out.append(tok)
    return out


def phrase_rule_found(query: str, keywords_by_answer: dict[str, list[str]]) -> list[str]:
    """The answers the replaced lookup returned: a keyword's exact phrase in the query."""
    toks = _old_tokens(query)
    text = " " + " ".join(toks) + " "
    hits: dict[str, int] = {}
    for answer_id, keywords in keywords_by_answer.items():
        for kw in keywords:
            key = keyword_key(kw)
            if f" {key} " in text:
                hits[answer_id] = hits.get(answer_id, 0) + len(key.split())
    return sorted(hits, key=lambda a: -hits[a])[:3]


# --------------------------------------------------------------------------- distractors


def distractors() -> list[dict[str, Any]]:
    """Saved answers nobody asks about here: stdlib module docstrings, with keywords."""
    from bench.corpus_quality import stdlib_documents

    out = []
    for doc in stdlib_documents():
        if not doc["id"].startswith("module:"):
            continue
        name = doc["id"].removeprefix("module:")
        text = " ".join(doc["text"].split())[:600]
        # Two phrases of adjacent content words, as a model would pick them.
        words = [w if w.casefold() not in STOP_WORDS else "" for w in re.findall(r"[A-Za-z]+", text)]
        phrases = [f"{a} {b}" for a, b in itertools.pairwise(words) if len(a) > 3 and len(b) > 3][:2]
        out.append(
            {
                "id": f"stdlib:{name}",
                "perplexity_query": f"what is the Python {name} module for",
                "answer": text,
                "citations": [{"url": f"https://docs.python.org/3/library/{name}.html", "title": f"{name}"}],
                "keywords": [f"{name} module", f"Python {name}", *phrases],
            }
        )
    return out


# --------------------------------------------------------------------------- one set-up


#: The one user of the benchmark: answers are saved for them and looked up by them (a
#: lookup sees only its user's saved answers, issue 21).
USER = "bench"


async def save_answers(index: KeywordIndex, saved: list[dict[str, Any]]) -> dict[str, str]:
    """Save each answer and index its keywords as the tools do (for ``USER``); label ->
    stored result id."""
    ids: dict[str, str] = {}
    for i, item in enumerate(saved):
        result = new_external_result(
            provider="perplexity",
            query=item["perplexity_query"],
            answer=item["answer"],
            citations=[Citation(n + 1, c["url"], c.get("title", "")) for n, c in enumerate(item["citations"])],
            model="sonar",
            query_id=f"q-{i}",
            owner=USER,
        )
        await index.save_result(result)
        checked = validate_keywords(item["keywords"])
        await index.index(checked.accepted, query_id=f"q-{i}", external_result_ids=[result.id], owner=USER)
        ids[result.id] = item["id"]
    return ids


async def run_setup(
    name: str,
    embedder: Embedder | None,
    data: dict[str, Any],
    *,
    use_vectors: bool,
    extra: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        storage = await open_storage(Path(tmp) / "bench.db")
        try:
            return await _run(name, storage, embedder, data, use_vectors=use_vectors, extra=extra)
        finally:
            await storage.close()


async def _run(
    name: str,
    storage: SqliteStorage | PostgresStorage,
    embedder: Embedder | None,
    data: dict[str, Any],
    *,
    use_vectors: bool,
    extra: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    kb = await KnowledgeBase.create(storage.kb_index, embedder)
    await ensure_sample_kb(kb)
    semantic = (
        SavedAnswerVectors(storage.external_vectors, embedder, embed_query=kb.embed_query)
        if use_vectors and embedder is not None
        else None
    )
    index = KeywordIndex(storage.keywords, storage.external_results, semantic=semantic)
    started = time.perf_counter()
    labels = await save_answers(index, data["saved"])
    if extra:
        labels.update(await save_answers(index, extra))
    save_s = time.perf_counter() - started

    registry = ToolRegistry(knowledge_specs())
    register_rag_tools(registry, RagToolDeps(kb, index, storage.external_results, None))
    handler = registry.handler(KB_SEARCH)
    assert handler is not None

    rows: list[dict[str, Any]] = []
    async with httpx.AsyncClient() as http:
        questions = [(q["query"], q["expect"], q["kind"]) for q in data["queries"]]
        questions += [(n["query"], None, "negative_" + n["kind"]) for n in data["negatives"]]
        for i, (query, expect, kind) in enumerate(questions):
            ctx = ToolContext(USER, None, f"conv-{i}", f"run-{i}", "knowledge", {}, http, RunToolState())
            outcome = await handler({"query": query, "top_k": 5}, ctx)
            assert not outcome.is_error, outcome.content
            returned = [labels.get(a["source_id"], "?") for a in outcome.content["external_answers"]]
            scores = [a["match_score"] for a in outcome.content["external_answers"]]
            kb_ms, lookup_ms = [], []
            for _ in range(REPEATS):
                t0 = time.perf_counter()
                await kb.search(query, top_k=5)
                t1 = time.perf_counter()
                await index.lookup(query, owner=USER)
                t2 = time.perf_counter()
                kb_ms.append((t1 - t0) * 1000)
                lookup_ms.append((t2 - t1) * 1000)
            rows.append(
                {
                    "query": query,
                    "kind": kind,
                    "expect": expect,
                    "returned": returned,
                    "scores": scores,
                    "found": expect in returned if expect else not returned,
                    "rank1": bool(returned) and returned[0] == expect if expect else not returned,
                    "kb_ms": statistics.median(kb_ms),
                    "lookup_ms": statistics.median(lookup_ms),
                }
            )
    return summarise(name, rows, saved=len(labels), save_s=save_s)


def summarise(name: str, rows: list[dict[str, Any]], *, saved: int, save_s: float | None) -> dict[str, Any]:
    positives = [r for r in rows if r["expect"]]
    negatives = [r for r in rows if not r["expect"]]
    kinds = sorted({r["kind"] for r in positives})
    lookup = [r["lookup_ms"] for r in rows if "lookup_ms" in r]
    kb = [r["kb_ms"] for r in rows if "kb_ms" in r]
    out: dict[str, Any] = {
        "setup": name,
        "saved_answers": saved,
        "queries": len(positives),
        "found": round(sum(r["found"] for r in positives) / len(positives), 4),
        "found_rank1": round(sum(r["rank1"] for r in positives) / len(positives), 4),
        "by_kind": {
            k: f"{sum(r['found'] for r in positives if r['kind'] == k)}/{sum(r['kind'] == k for r in positives)}"
            for k in kinds
        },
        "negatives": len(negatives),
        "negatives_with_an_answer": round(sum(not r["found"] for r in negatives) / max(1, len(negatives)), 4),
        "negatives_with_a_labelled_answer": round(
            sum(any(a in LABELLED for a in r["returned"]) for r in negatives) / max(1, len(negatives)), 4
        ),
        "missed": [r["query"] for r in positives if not r["found"]],
        "false_positives": [f"{r['query']} -> {r['returned'][0]}" for r in negatives if not r["found"]],
    }
    if lookup:
        out["added_ms_per_kb_search"] = {
            "mean": round(statistics.fmean(lookup), 3),
            "p95": round(pct(lookup, 95), 3),
        }
        out["kb_search_ms"] = {"mean": round(statistics.fmean(kb), 3), "p95": round(pct(kb, 95), 3)}
    if save_s is not None:
        out["save_and_index_ms_per_answer"] = round(save_s * 1000 / saved, 2)
    out["per_query"] = [
        {k: v for k, v in r.items() if k not in ("kb_ms", "lookup_ms")} for r in rows
    ]
    return out


def phrase_setup(data: dict[str, Any]) -> dict[str, Any]:
    keywords = {s["id"]: s["keywords"] for s in data["saved"]}
    rows = []
    for q in data["queries"]:
        returned = phrase_rule_found(q["query"], keywords)
        rows.append({"query": q["query"], "kind": q["kind"], "expect": q["expect"], "returned": returned,
                     "found": q["expect"] in returned, "rank1": returned[:1] == [q["expect"]]})
    for n in data["negatives"]:
        returned = phrase_rule_found(n["query"], keywords)
        rows.append({"query": n["query"], "kind": "negative_" + n["kind"], "expect": None, "returned": returned,
                     "found": not returned, "rank1": not returned})
    return summarise("phrase (before)", rows, saved=len(keywords), save_s=None)


def minilm() -> tuple[Embedder | None, str]:
    try:
        from toolindex.minilm import MiniLMEmbedder

        return MiniLMEmbedder(), "all-MiniLM-L6-v2 (in process)"
    except ImportError as exc:
        return None, f"not installed ({exc}); `make local` installs it"


def line(r: dict[str, Any]) -> str:
    text = (
        f"{r['setup']:<28} found {r['found']:6.1%} (rank 1: {r['found_rank1']:6.1%})  "
        f"negatives answered {r['negatives_with_an_answer']:5.1%}"
    )
    if r["negatives_with_a_labelled_answer"] != r["negatives_with_an_answer"]:
        text += f" ({r['negatives_with_a_labelled_answer']:.1%} by a labelled one)"
    if "added_ms_per_kb_search" in r:
        a, k = r["added_ms_per_kb_search"], r["kb_search_ms"]
        text += f"  +{a['mean']:.2f} ms/search (p95 {a['p95']:.2f}; KB search itself {k['mean']:.2f} ms)"
    return text


async def main_async() -> int:
    from toolindex.hashing import HashingEmbedder

    data = orjson.loads(DATA.read_bytes())
    print(f"{len(data['saved'])} saved answers, {len(data['queries'])} related questions, "
          f"{len(data['negatives'])} negatives")
    extra = distractors()
    results = [phrase_setup(data)]
    print(line(results[-1]))
    hashing = HashingEmbedder(dim=384)
    results.append(await run_setup("terms", hashing, data, use_vectors=False))
    print(line(results[-1]))
    results.append(await run_setup("hashing", hashing, data, use_vectors=True))
    print(line(results[-1]))
    local, why = minilm()
    if local is not None:
        results.append(await run_setup("minilm", local, data, use_vectors=True))
        print(line(results[-1]))
    else:
        print(f"minilm: {why}")
    results.append(await run_setup(f"hashing + {len(extra)} distractors", hashing, data, use_vectors=True, extra=extra))
    print(line(results[-1]))
    if local is not None:
        results.append(
            await run_setup(f"minilm + {len(extra)} distractors", local, data, use_vectors=True, extra=extra)
        )
        print(line(results[-1]))
        await local.aclose()
    for r in results:
        if r["missed"]:
            print(f"  {r['setup']} missed: {r['missed']}")
        if r["false_positives"]:
            print(f"  {r['setup']} answered negatives: {r['false_positives']}")
    by_name = {r["setup"]: r for r in results}
    verdict = {
        "seed_target_met": by_name["hashing"]["found"] >= TARGETS["seed"],
        "hashing_target_met": by_name["hashing"]["found"] >= TARGETS["hashing"],
        "minilm_target_met": by_name["minilm"]["found"] >= TARGETS["minilm"] if "minilm" in by_name else None,
    }
    path = write_results(
        "keyword_reuse",
        {"targets": TARGETS, "minilm": why, "distractors": len(extra), **verdict, "results": results},
    )
    print(f"targets (seed 20 %, hashing 80 %, MiniLM 90 %): {verdict}")
    print(f"wrote {path}")
    return 0


def main() -> int:
    return asyncio.run(main_async())


if __name__ == "__main__":
    raise SystemExit(main())
