"""Offline answers as a reader judges them: the share of questions whose answer carries
its fact, and how many sentences were said twice or started mid-sentence, and how many
quotes open with a sentence referring back to text not shown ("This …", "It …").

Runs the default configuration (no model reachable: the extractive answerer, the
hashing embedder) on a fresh database, ingests the npm documentation installed with npm
through ``agentchat ingest``, asks tests/data/offline_questions.json in the knowledge
context (the original set, tuned on, then the held-out, fresh, final, unseen, last,
round6, round8, round9 and round10 sets, only measured) and writes bench/results/offline_answers.json;
``--show`` prints every answer to read.

    .venv/bin/python bench/offline_answers.py [--show]
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.offline_answers import (
    SETS,
    carries,
    dangling_openings,
    fragments,
    load_questions,
    npm_docs,
    repeated_sentences,
)
from tests.test_offline_answers import ask_all, defaults, ingest

RESULTS = Path(__file__).resolve().parent / "results" / "offline_answers.json"


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    carried = [r for r in results if carries(r["answer"], r["fact"])]
    return {
        "questions": len(results),
        "carried": len(carried),
        "carried_rate": round(len(carried) / len(results), 3),
        "repeated_sentences": sum(len(repeated_sentences(r["answer"])) for r in results),
        "fragments": sum(len(fragments(r["answer"])) for r in results),
        "dangling_openings": sum(len(dangling_openings(r["answer"])) for r in results),
        "missed": [r["question"] for r in results if r not in carried],
    }


async def main(show: bool) -> None:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = defaults(Path(tmp))
        docs = npm_docs()
        if docs is not None:
            await ingest(env, docs, "npm")
        else:
            print("npm is not installed: the npm documentation set is skipped")
        for label in SETS:
            questions = load_questions(name=label)
            sets = {"sample": await ask_all(env, questions["sample"], None)}
            if docs is not None:
                sets["npm"] = await ask_all(env, questions["npm"], {"bucket": "npm"})
            out[label] = {name: summary(results) for name, results in sets.items()}
            out[label]["overall"] = summary([r for results in sets.values() for r in results])
            for name, figures in out[label].items():
                print(f"{label} {name}: carried {figures['carried']}/{figures['questions']} "
                      f"({figures['carried_rate']:.0%}), repeated sentences {figures['repeated_sentences']}, "
                      f"fragments {figures['fragments']}, dangling openings {figures['dangling_openings']}")
            if show:
                for r in (r for results in sets.values() for r in results):
                    mark = "carried" if carries(r["answer"], r["fact"]) else "MISSED"
                    print(f"\n=== [{mark}: {r['fact']}] {r['question']}\n{r['answer']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    asyncio.run(main("--show" in sys.argv[1:]))
