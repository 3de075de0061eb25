"""Is a missed answer the search's miss or the answerer's? Per embedder (issue 20).

Why: the offline answerer can only quote what ``knowledge_base_search`` hands it (the
top 8 chunks for the question). For every question of the offline sets
(tests/data/offline_questions.json) and the newcomer set, this asks the knowledge base
the question as the answerer does and finds the rank of the first chunk that carries
the question's fact (``tests.support.offline_answers.carries``), for the hybrid search
the service runs and for its two sides alone (BM25 text, vectors). A fact outside the
top 8 is a search miss no answerer change can fix; inside it, a miss is the answerer's.

The sample knowledge base goes into ``default`` and the npm documentation installed with
npm into ``npm``, as bench/offline_answers.py does, on a fresh SQLite file per embedder.

    .venv/bin/python bench/fact_retrieval.py [--embedders hashing,local] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli.kb_file import open_kb_file
from knowledge.sample import SAMPLE_KB_DIR
from tests.support.offline_answers import SETS, carries, load_questions, npm_docs
from toolindex.hashing import HashingEmbedder

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "fact_retrieval.json"
NEWCOMER = REPO / "bench" / "data" / "newcomer_questions.json"
TOP_K = 8  # llm.extractive.SEARCH_TOP_K
DEPTH = 50


def questions() -> list[dict[str, str]]:
    """Every question with its set, corpus and fact."""
    out = []
    for name in SETS:
        for corpus, items in load_questions(name=name).items():
            out += [
                {"set": name, "corpus": corpus, "question": q["question"], "fact": q["fact"]}
                for q in items
                if "decline" not in q  # nothing to find: the knowledge base never says it
            ]
    for q in orjson.loads(NEWCOMER.read_bytes())["questions"]:
        out.append({"set": "newcomer", "corpus": "sample", "question": q["question"], "fact": q["fact"]})
    return out


def embedder_of(kind: str) -> Any:
    if kind == "local":
        from toolindex.minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    return HashingEmbedder(dim=384)


async def ranks(kind: str, items: list[dict[str, str]], docs: Path | None) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        kb = await open_kb_file(Path(tmp) / "kb.sqlite3", embedder_of(kind))
        try:
            await kb.ingest_paths([SAMPLE_KB_DIR], bucket="default")
            if docs is not None:
                await kb.ingest_paths([docs], bucket="npm")
            out = []
            for item in items:
                if item["corpus"] == "npm" and docs is None:
                    continue
                bucket = "npm" if item["corpus"] == "npm" else "default"
                row: dict[str, Any] = dict(item)
                for mode in ("hybrid", "text", "semantic"):
                    found = await kb.search(item["question"][:500], bucket=bucket, top_k=DEPTH, mode=mode)  # type: ignore[arg-type]
                    rank = next((i + 1 for i, h in enumerate(found.hits) if carries(h.text, item["fact"])), None)
                    row[mode] = rank
                out.append(row)
            return out
        finally:
            await kb.aclose()


def in_top(rows: list[dict[str, Any]], mode: str) -> int:
    return sum(1 for r in rows if r[mode] is not None and r[mode] <= TOP_K)


async def main(kinds: list[str], out_path: Path) -> None:
    items = questions()
    docs = npm_docs()
    result: dict[str, Any] = {}
    for kind in kinds:
        rows = await ranks(kind, items, docs)
        summary = {mode: in_top(rows, mode) for mode in ("hybrid", "text", "semantic")}
        print(f"{kind}: fact in the top {TOP_K} of {len(rows)} questions: {summary}")
        result[kind] = {"questions": len(rows), f"in_top_{TOP_K}": summary, "rows": rows}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    print(f"wrote {out_path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedders", default="hashing,local", help="comma separated: hashing, local")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    asyncio.run(main(args.embedders.split(","), args.out))
