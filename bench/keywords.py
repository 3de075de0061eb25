"""Keyword merging under concurrency: 200 concurrent ``index_keywords`` calls.

Each call is a real tool call (catalog schema validation, then the handler) from its own
run, for its own stored Perplexity result, with 3-6 keywords drawn from a small
overlapping vocabulary that also contains case / width / ß variants of the same key
("Straße", "STRASSE", full-width letters) so merging and normalisation are exercised
together. Afterwards every usage count must equal the number of calls that named the
key, and every (keyword, query, result, conversation) association must be present.

Two set-ups, each repeated on a fresh SQLite file:
  * one storage bundle (one writer connection, as one app process has),
  * four storage bundles on the same file (as four worker processes would), where only
    BEGIN IMMEDIATE + busy_timeout + retries keep the counts exact.

Run from the repository root:  .venv/bin/python bench/keywords.py
Writes bench/results/keywords.json.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from agenttools.core.catalog_knowledge import knowledge_specs  # noqa: E402
from agenttools.core.registry import RunToolState, ToolContext, ToolRegistry  # noqa: E402
from agenttools.core.validation import validate_arguments  # noqa: E402
from agenttools.rag.deps import RagToolDeps  # noqa: E402
from agenttools.rag.external_results import new_external_result  # noqa: E402
from agenttools.rag.keyword_rules import keyword_key  # noqa: E402
from agenttools.rag.keywords import KeywordIndex  # noqa: E402
from agenttools.rag.policy import INDEX_KEYWORDS, mark_kb_searched, note_external_result  # noqa: E402
from agenttools.rag.tools import register_rag_tools  # noqa: E402
from bench._common import write_results  # noqa: E402
from storage.open import open_storage

CALLS = 200
REPEATS = 5
VOCAB = [
    "Straße",
    "STRASSE",
    "ｓｔｒａｓｓｅ",  # one key, three spellings
    "quantum computing",
    "Quantum Computing",
    "EU VAT",
    "reverse charge",
    "AAPL stock price",
    "2026 market trends",
    "liquid nitrogen",
    "boiling point",
    "cryogenics",
    "freight rates",
    "solid state battery",
]


def keywords_for(i: int) -> list[str]:
    n = 3 + i % 4
    return [VOCAB[(i * 7 + j * 3) % len(VOCAB)] for j in range(n)]


class _NoKnowledge:
    async def search(self, query: str, *, bucket: str | None = None, top_k: int = 5) -> Any:
        raise AssertionError("not used by this benchmark")


async def one_round(connections: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        bundles = [await open_storage(db) for _ in range(connections)]
        results = bundles[0].external_results
        stores = [KeywordIndex(b.keywords, b.external_results) for b in bundles]
        async with httpx.AsyncClient() as http:
            registries = []
            for store in stores:
                registry = ToolRegistry(knowledge_specs())
                register_rag_tools(registry, RagToolDeps(_NoKnowledge(), store, results, None))
                registries.append(registry)
            spec = registries[0].spec(INDEX_KEYWORDS)

            # Set-up (not timed): each call's run has searched the KB and got a web answer.
            runs: list[tuple[ToolContext, str]] = []
            for i in range(CALLS):
                state = RunToolState(query_id=f"q{i}")
                result = new_external_result(
                    provider="perplexity",
                    query=f"question {i}",
                    answer="answer",
                    citations=[],
                    query_id=f"q{i}",
                )
                await results.save(result)
                mark_kb_searched(state)
                note_external_result(state, result.id, needs_keywords=True)
                ctx = ToolContext("u", None, f"conv-{i}", f"run-{i}", "knowledge", {}, http, state)
                runs.append((ctx, result.id))

            async def call(i: int) -> bool:
                ctx, _ = runs[i]
                checked = validate_arguments(spec, {"keywords": keywords_for(i)})
                assert checked.ok, checked.error
                handler = registries[i % connections].handler(INDEX_KEYWORDS)
                assert handler is not None
                outcome = await handler(checked.arguments, ctx)
                return not outcome.is_error

            started = time.perf_counter()
            ok = await asyncio.gather(*(call(i) for i in range(CALLS)))
            elapsed = time.perf_counter() - started

            # Verification: exact counts and complete associations.
            expected: dict[str, set[int]] = {}
            for i in range(CALLS):
                for word in keywords_for(i):
                    expected.setdefault(keyword_key(word), set()).add(i)
            count_errors, missing_assocs = [], 0
            for key, callers in expected.items():
                rec = await stores[0].get(key, owner="u")  # the user of every call below
                if rec is None or rec.usage_count != len(callers):
                    count_errors.append(
                        {"key": key, "expected": len(callers), "got": rec.usage_count if rec else None}
                    )
                got = {
                    (a.query_id, a.external_result_id, a.conversation_id)
                    for a in await stores[0].associations(key, owner="u")
                }
                want = {(f"q{i}", runs[i][1], f"conv-{i}") for i in callers}
                missing_assocs += len(want - got)
            for bundle in bundles:
                await bundle.close()
    return {
        "seconds": elapsed,
        "calls_per_s": CALLS / elapsed,
        "failed_calls": ok.count(False),
        "keys": len(expected),
        "count_errors": count_errors,
        "missing_associations": missing_assocs,
        "keyword_upserts": sum(len({keyword_key(w) for w in keywords_for(i)}) for i in range(CALLS)),
    }


async def main() -> int:
    report: dict[str, Any] = {"calls": CALLS, "repeats": REPEATS, "setups": []}
    all_exact = True
    for connections in (1, 4):
        rounds = [await one_round(connections) for _ in range(REPEATS)]
        exact = all(
            not r["count_errors"] and r["missing_associations"] == 0 and r["failed_calls"] == 0
            for r in rounds
        )
        all_exact &= exact
        rates = [r["calls_per_s"] for r in rounds]
        setup = {
            "connections": connections,
            "exact": exact,
            "calls_per_s_median": round(statistics.median(rates), 1),
            "calls_per_s_min": round(min(rates), 1),
            "calls_per_s_max": round(max(rates), 1),
            "keyword_upserts_per_round": rounds[0]["keyword_upserts"],
            "distinct_keys": rounds[0]["keys"],
            "count_errors": [e for r in rounds for e in r["count_errors"]][:10],
            "missing_associations": sum(r["missing_associations"] for r in rounds),
        }
        report["setups"].append(setup)
        print(
            f"{connections} connection(s): exact={exact}  "
            f"{setup['calls_per_s_median']} calls/s median "
            f"({setup['calls_per_s_min']}-{setup['calls_per_s_max']}) "
            f"over {REPEATS} rounds of {CALLS} concurrent calls"
        )
    report["all_exact"] = all_exact
    path = write_results("keywords", report)
    print(f"wrote {path}")
    return 0 if all_exact else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
