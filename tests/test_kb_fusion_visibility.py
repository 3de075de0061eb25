"""A hybrid search that fusion ranked on one side says so (issue 24 item 5, review):
the search result names the sides that counted and why the other did not, the
``knowledge_base_search`` result the model and the stream see carries it, and
``agentchat_kb_fusion_side_dropped_total`` counts it.

The embedder is pinned to the hashing one: its confidence floor
(``knowledge.fusion.DENSE_WEIGHTS``) is what drops the vector side here.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import numpy as np

from app.cli.kb_file import open_kb_file
from app.config import Settings
from knowledge.fusion import NOT_CONFIDENT, dense_weight
from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.test_knowledge_fusion import DOCS
from tests.test_metrics import get_metrics, value
from toolindex.hashing import HashingEmbedder

#: Under the hashing embedder's floor (the vectors sit out) and above it (both count).
WEAK, STRONG = "verify a checksum", "crc32 checksums of compressed data"
DROPPED = "agentchat_kb_fusion_side_dropped"


async def test_the_checked_queries_sit_either_side_of_the_floor() -> None:
    embedder = HashingEmbedder(dim=384)
    floor = dense_weight(embedder.name).confident_at
    assert floor is not None
    matrix = np.asarray(await embedder.embed_batch([f"{d['title']}\n{d['text']}" for d in DOCS]))
    best = {q: float(np.max(matrix @ np.asarray(await embedder.embed(q)))) for q in (WEAK, STRONG)}
    assert best[WEAK] < floor <= best[STRONG], best


async def test_a_hybrid_search_says_which_sides_its_ranking_rests_on(tmp_path: Path) -> None:
    kb = await open_kb_file(tmp_path / "kb.sqlite3", HashingEmbedder(dim=384))
    try:
        assert not (await kb.ingest_documents(DOCS, bucket="b")).rejected
        weak = await kb.search(WEAK, bucket="b")
        assert weak.mode == "hybrid" and weak.hits
        assert weak.fused_sides == ["text"] and weak.dropped_sides == {"semantic": NOT_CONFIDENT}
        assert weak.to_dict()["dropped_sides"] == {"semantic": NOT_CONFIDENT}
        strong = await kb.search(STRONG, bucket="b")
        assert strong.fused_sides == ["text", "semantic"] and strong.dropped_sides == {}
        # Text or semantic mode has one side by request: nothing to report, nothing counted.
        for mode in ("text", "semantic"):
            alone = await kb.search(WEAK, bucket="b", mode=mode)  # type: ignore[arg-type]
            assert alone.fused_sides is None and alone.dropped_sides == {}
        assert dict(kb.status.fusion_drops) == {("semantic", NOT_CONFIDENT): 1}
        await kb.search(WEAK, bucket="b", top_k=2)
        assert dict(kb.status.fusion_drops) == {("semantic", NOT_CONFIDENT): 2}
    finally:
        await kb.aclose()


async def test_the_tool_result_the_stream_and_the_metric_show_a_dropped_side(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "v.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_ADMIN_OPEN": "true",  # POST /v1/kb/documents in `none` auth mode
            "AGENT_EMBEDDER": "hashing",
            "AGENT_LLM_PROVIDER": "extractive",
            "OLLAMA_HOST": "http://127.0.0.1:9",
        }
    )
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, _app),
        httpx.AsyncClient(timeout=60) as client,
    ):
        before = await get_metrics(client, base)
        assert before[DROPPED][0] == "counter" and before[DROPPED][1] == {}
        assert (await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})).status_code == 200

        async def searched(question: str) -> str:
            events = await collect_sse(
                client, "POST", f"{base}/v1/agent/chat", json={"message": question, "context_type": "knowledge"}
            )
            assert events[-1].json()["status"] == "completed"
            results = [e.json() for e in events if e.event == "tool_call_result"]
            found = [r for r in results if r["name"] == "knowledge_base_search"]
            assert found and not found[0]["is_error"], results
            return str(found[0].get("summary") or "")

        weak = await searched(WEAK)
        # In plain words, not the fusion's terms ("semantic side dropped").
        assert "(ranked by matching words only: no close match by meaning)" in weak, weak
        strong = await searched(STRONG)
        assert "dropped" not in strong and re.match(r"\d+ passages? from \d+ documents?: \u201c", strong), strong
        after = await get_metrics(client, base)
    assert value(after, DROPPED, f"{DROPPED}_total", side="semantic", reason=NOT_CONFIDENT) >= 1
    assert set(after[DROPPED][1]) == {(f"{DROPPED}_total", (("reason", NOT_CONFIDENT), ("side", "semantic")))}
