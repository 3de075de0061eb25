"""A newcomer's first questions, answered by a fresh ``make run`` (issue 20).

Serves the default configuration (no model reachable: the offline extractive answerer,
the hashing embedder) on a fresh database, where the sample knowledge base is ingested
at start-up, asks bench/data/newcomer_questions.json in the knowledge context, and says
how many answers carry their fact (``tests.support.offline_answers.carries``), printing
every answer that does not, with the passages it quoted.

``--sample-dir DIR`` asks over another sample folder instead (``agentchat ingest DIR`` into
the ``default`` bucket, the shipped sample turned off): how the same questions fared
over an older sample, e.g. one taken with ``git archive <commit> knowledge/sample_kb``.
``--show`` prints every answer. Results go to bench/results/newcomer_answers.json
(``--out FILE`` elsewhere). ``--embedder KIND`` sets ``AGENT_EMBEDDER`` (default: unset,
i.e. ``auto``, which picks the local MiniLM model where ``make local`` installed it):
how the same questions fare with ``hashing`` and ``local`` side by side.

    .venv/bin/python bench/newcomer_answers.py [--show] [--sample-dir DIR] [--out FILE] [--embedder KIND]
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

from tests.support.offline_answers import carries
from tests.test_offline_answers import ask_all, defaults, ingest
from toolindex.factory import EMBEDDER_KINDS

HERE = Path(__file__).resolve().parent
QUESTIONS = HERE / "data" / "newcomer_questions.json"
RESULTS = HERE / "results" / "newcomer_answers.json"


async def ask(sample_dir: Path | None, embedder: str | None) -> list[dict[str, Any]]:
    questions = orjson.loads(QUESTIONS.read_bytes())["questions"]
    with tempfile.TemporaryDirectory() as tmp:
        env = defaults(Path(tmp))
        if embedder is not None:
            env["AGENT_EMBEDDER"] = embedder
        if sample_dir is not None:
            env["AGENT_INGEST_SAMPLE_KB"] = "false"
            await ingest(env, sample_dir, "default")
        return await ask_all(env, questions, None)


def report(results: list[dict[str, Any]], show: bool) -> dict[str, Any]:
    carried = [r for r in results if carries(r["answer"], r["fact"])]
    for r in results:
        ok = r in carried
        if show or not ok:
            cited = [s.get("location") or s.get("id") for s in r.get("sources") or []]
            mark = "carried" if ok else "MISSED"
            print(f"\n=== {mark}: {r['question']}  (must carry: {r['fact']}; page {r['page']})")
            print(f"cited: {cited}\n{r['answer']}")
    print(f"\ncarried {len(carried)}/{len(results)}")
    return {
        "questions": len(results),
        "carried": len(carried),
        "missed": [r["question"] for r in results if r not in carried],
        "answers": [
            {
                "question": r["question"],
                "fact": r["fact"],
                "page": r["page"],
                "carried": r in carried,
                "answer": r["answer"],
                "sources": [s.get("location") for s in r.get("sources") or []],
            }
            for r in results
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print every answer, not only the missed ones")
    parser.add_argument("--sample-dir", type=Path, help="ask over this sample folder instead of the shipped one")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--embedder", choices=EMBEDDER_KINDS, help="AGENT_EMBEDDER for the run (default: auto)")
    args = parser.parse_args()
    results = asyncio.run(ask(args.sample_dir.resolve() if args.sample_dir else None, args.embedder))
    out = report(results, args.show)
    out["embedder"] = args.embedder or "auto"
    out["sample"] = str(args.sample_dir) if args.sample_dir else "shipped (knowledge/sample_kb)"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
