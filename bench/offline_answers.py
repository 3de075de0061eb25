"""Offline answers as a reader judges them: the share of questions whose answer carries
its fact, and how many sentences were said twice or started mid-sentence, and how many
quotes open with a sentence referring back to text not shown ("This …", "It …"), and
how many lines introduce a list or code block the answer does not show ("… can access:").

Runs the default configuration (no model reachable: the extractive answerer, the
hashing embedder) on a fresh database, ingests the npm documentation installed with npm
through ``agentchat ingest``, asks tests/data/offline_questions.json in the knowledge
context (the original set, tuned on, then the held-out, fresh, final, unseen, last,
round6, round8, round9, round10, round11, round12, round13, round14, round15, round16, round17,
round18, round19, round20, round21, round23 and walkthrough sets, only measured; and the
followup set, two-turn conversations whose earlier questions (an item's ``before``) are
asked first in the same conversation) and writes
bench/results/offline_answers.json; a set's questions over the project's own docs/
("docs": round21's) are asked of a second fresh database where docs/ is ingested as the
bucket ``docs`` beside the sample KB;
``--show`` prints every answer to read.

``--capture FILE`` also keeps what the answerer was given for each question (the question
and the passages of its searches, page-scoped reads included) and ``--replay FILE``
composes the answers again from that file with the answerer as it is now, without a
service, and says of each what the provider says (``llm.extractive.reply_of``: a decline
or the hint to rephrase too, so a capture replayed unchanged gives the live figures and
answers): how a change to the answerer alone (``llm/extractive*.py``) is tried on every
set in seconds before the live measurement. A change to what the searches return needs
a new capture.

``--embedder KIND`` sets ``AGENT_EMBEDDER`` for the service and the ingest (default: unset,
i.e. ``auto``); ``--out FILE`` writes the figures there instead of
bench/results/offline_answers.json.

    .venv/bin/python bench/offline_answers.py [--show] [--capture FILE | --replay FILE]
        [--embedder KIND] [--out FILE]
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llm.extractive as extractive
from llm.extractive_answer import Composed
from llm.extractive_followup import FollowUp
from llm.extractive_read import Passage
from llm.extractive_subject import ask_of, names
from llm.extractive_words import Words
from tests.support.offline_answers import (
    SETS,
    carries,
    dangling_introductions,
    dangling_openings,
    fragments,
    load_questions,
    npm_docs,
    project_docs,
    repeated_sentences,
)
from tests.test_offline_answers import ask_all, defaults, ingest
from toolindex.factory import EMBEDDER_KINDS

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
        "dangling_introductions": sum(len(dangling_introductions(r["answer"])) for r in results),
        "missed": [r["question"] for r in results if r not in carried],
    }


def print_set(label: str, sets: dict[str, list[dict[str, Any]]], show: bool) -> dict[str, Any]:
    """One set's figures per corpus and overall, printed (every answer too with ``show``)."""
    sets = {name: results for name, results in sets.items() if results}
    out: dict[str, Any] = {name: summary(results) for name, results in sets.items()}
    out["overall"] = summary([r for results in sets.values() for r in results])
    for name, figures in out.items():
        print(
            f"{label} {name}: carried {figures['carried']}/{figures['questions']} "
            f"({figures['carried_rate']:.0%}), repeated sentences {figures['repeated_sentences']}, "
            f"fragments {figures['fragments']}, dangling openings {figures['dangling_openings']}, "
            f"dangling introductions {figures['dangling_introductions']}"
        )
    if show:
        for r in (r for results in sets.values() for r in results):
            mark = "carried" if carries(r["answer"], r["fact"]) else "MISSED"
            print(f"\n=== [{mark}: {r['fact']}] {r['question']}\n{r['answer']}")
    return out


def capturing(store: dict[str, Any]) -> None:
    """Keep, per question, the passages the answerer composes from (the last call wins):
    ``{"passages": [...]}``, with what it leans on for a follow-up
    (``llm.extractive_followup``, ``"follow_up"``) and the chunks read for what they go on
    with after an introduction (``llm.extractive_next``, ``"following"``)."""
    compose = extractive.compose

    def recorded(
        question: str,
        passages: list[Passage],
        words: Words | None = None,
        follow_up: FollowUp | None = None,
        following: list[Passage] | None = None,
    ) -> Composed:
        entry: dict[str, Any] = {"passages": [dataclasses.asdict(p) for p in passages]}
        if follow_up is not None:
            entry["follow_up"] = dataclasses.asdict(follow_up)
        if following:
            entry["following"] = [dataclasses.asdict(p) for p in following]
        store[question] = entry
        return compose(question, passages, words, follow_up, following)

    extractive.compose = recorded  # type: ignore[assignment]


def _captured(entry: Any) -> tuple[list[Passage], FollowUp | None, list[Passage]]:
    """One captured question's passages, follow-up and following chunks (a list, as
    captures before round 28 kept: passages alone)."""
    if isinstance(entry, list):
        return [Passage(**p) for p in entry], None, []
    follow_up = FollowUp(**entry["follow_up"]) if entry.get("follow_up") else None
    return [Passage(**p) for p in entry["passages"]], follow_up, [Passage(**p) for p in entry.get("following") or []]


def replay_answers(captured: dict[str, Any], questions: list[dict[str, Any]], words: Words) -> list[dict[str, Any]]:
    """``questions`` answered again from ``captured`` passages, each answer what the
    provider says of them (``extractive.reply_of``: a decline too); a question not
    captured is left out."""
    results = []
    for item in questions:
        # A capture keeps the passages under the message the provider composed for; one made
        # between round 35 and its review under the message less every context naming
        # anything (``ask_of`` then left all of them out).
        question = item["question"]
        entry = captured.get(question, captured.get(ask_of(question, names(question))))
        if entry is None:
            continue
        passages, follow_up, following = _captured(entry)
        said = extractive.reply_of(extractive.compose(question, passages, words, follow_up, following))
        results.append({**item, "answer": said.answer, "sources": said.sources})
    return results


def replay(path: Path, show: bool) -> None:
    """Every set's answers composed again from captured passages (no service)."""
    captured: dict[str, Any] = orjson.loads(path.read_bytes())
    words = Words()  # one answerer's memo for every answer, as the provider keeps one
    for label in SETS:
        sets: dict[str, list[dict[str, Any]]] = {}
        for corpus, questions in load_questions(name=label).items():
            results = replay_answers(captured, questions, words)
            if results:
                sets[corpus] = results
        if sets:
            print_set(label, sets, show)


async def main(show: bool, capture: Path | None, embedder: str | None, results_path: Path) -> None:
    out: dict[str, Any] = {}
    store: dict[str, Any] = {}
    if capture is not None:
        capturing(store)
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as tmp_docs:
        env = defaults(Path(tmp))
        # The project's docs/ in a database of their own (beside the sample KB, as a user
        # adds a bucket), so that their pages do not move the other sets' corpus statistics.
        env_docs = defaults(Path(tmp_docs))
        if embedder is not None:
            env["AGENT_EMBEDDER"] = env_docs["AGENT_EMBEDDER"] = embedder
        docs = npm_docs()
        if docs is not None:
            await ingest(env, docs, "npm")
        else:
            print("npm is not installed: the npm documentation set is skipped")
        docs_ingested = False
        for label in SETS:
            questions = load_questions(name=label)
            sets = {"sample": await ask_all(env, questions["sample"], None)}
            if docs is not None and questions["npm"]:
                sets["npm"] = await ask_all(env, questions["npm"], {"bucket": "npm"})
            if questions.get("docs"):
                if not docs_ingested:
                    await ingest(env_docs, project_docs(), "docs")
                    docs_ingested = True
                sets["docs"] = await ask_all(env_docs, questions["docs"], {"bucket": "docs"})
            out[label] = print_set(label, sets, show)
    out["embedder"] = embedder or "auto"
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print(f"wrote {results_path}")
    if capture is not None:
        capture.write_bytes(orjson.dumps(store))
        print(f"captured the passages of {len(store)} questions in {capture}")


def _option(args: list[str], name: str) -> Path | None:
    return Path(args[args.index(name) + 1]) if name in args[:-1] else None


if __name__ == "__main__":
    argv = sys.argv[1:]
    replayed = _option(argv, "--replay")
    embedder = _option(argv, "--embedder")
    if embedder is not None and str(embedder) not in EMBEDDER_KINDS:
        sys.exit(f"--embedder must be one of {', '.join(EMBEDDER_KINDS)}")
    if replayed is not None:
        replay(replayed, "--show" in argv)
    else:
        out_path = _option(argv, "--out") or RESULTS
        asyncio.run(main("--show" in argv, _option(argv, "--capture"), str(embedder) if embedder else None, out_path))
