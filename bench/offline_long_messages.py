"""What one message of ``AGENT_MAX_MESSAGE_CHARS`` costs the offline answerer: the CPU of
the extractive provider's whole path for adversarial messages at the accepted maximum.

The extractive answerer is pure Python: it runs in a worker thread, but it holds the GIL,
so while it works on one message every live stream of the process slows. A message of
32,000 characters (the largest accepted) of thousands of made-up words cost 6.9-14.3 s
of CPU before round 37, 0.02-0.10 s after (docs/knowledge-base.md,
bench/results/offline_long_messages_s44.json). This asks each adversarial message
of the extractive provider itself, turn by turn, its searches run on one knowledge-base
file as the tools run them (``bench/offline_search_plan.py``'s ``ask`` and ``Tools``),
and reports per message the process CPU (``time.process_time``: every thread) of the
whole path, of its ``compose`` calls and of its tool calls (the searches); then, for the
knowledge search beside it, the CPU of ``bm25_terms`` and of a hybrid search over the
whole message and over its first 500 characters (the most a search tool's schema takes,
so the most a model can send).

``--profile`` prints each message's ten costliest functions of ``compose`` (cProfile,
cumulative). ``--db FILE`` reuses (or builds there) the knowledge-base file of
``bench/offline_search_plan.py``. ``--read WORDS CHARS`` tries another bound on what the
answerer reads (``llm.extractive_long.MAX_READ_WORDS``, ``MAX_READ_CHARS``): how the
bound was chosen. Besides the adversarial messages, two real ones: a question with the
two sentences of why it is asked (47 words, which round 37's 32 words cut), and a
question followed by a message's worth of context.

    .venv/bin/python bench/offline_long_messages.py [--db FILE] [--profile] [--out FILE] [--only LABEL ...]
        [--read WORDS CHARS]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import llm.extractive as extractive
import llm.extractive_long as long_part
from app.cli.kb_file import open_kb_file
from app.config import Settings
from bench.offline_search_plan import Question, Tools, ask, build
from knowledge.query_terms import bm25_terms
from llm.extractive import ExtractiveProvider
from toolindex.hashing import HashingEmbedder

#: The largest message the service accepts (``AGENT_MAX_MESSAGE_CHARS``' default).
MAX_CHARS = Settings.from_env({}).max_message_chars
#: The longest query the knowledge search tools take (``agenttools.core.catalog_knowledge``).
TOOL_QUERY_CHARS = 500
#: Why the question is asked, after it: an ordinary message of 47 words, 263 characters.
REASON = (
    " I'm asking because our users are on flaky mobile networks and we see the EventSource connection drop "
    "every few minutes, and each time they lose the half-written answer and have to ask again, which is "
    "annoying for them."
)
_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables)) + rng.choice(_CONSONANTS)


def _fill(rng: random.Random, piece: Callable[[random.Random], str], end: str = "") -> str:
    """Pieces joined by spaces up to ``MAX_CHARS`` (``end`` last)."""
    out: list[str] = []
    size = len(end)
    while True:
        p = piece(rng)
        if size + len(p) + 1 > MAX_CHARS:
            break
        out.append(p)
        size += len(p) + 1
    return " ".join(out) + end


def messages(seed: int = 37) -> dict[str, str]:
    """The adversarial messages, each at most ``MAX_CHARS`` long."""
    rng = random.Random(seed)
    distinct = _fill(rng, lambda r: _word(r, r.randint(3, 6)), "?")
    names = _fill(
        rng,
        lambda r: f"we use {_word(r, 3).capitalize()} {_word(r, 2).capitalize()} with {_word(r, 3).capitalize()},",
        " how do I configure them?",
    )
    sentences = _fill(rng, lambda r: f"How do I {_word(r, 2)} the {_word(r, 3)} of {_word(r, 2)}?")
    code = _fill(
        rng,
        lambda r: f"`{_word(r, 2)}_{_word(r, 2)}` --{_word(r, 2)}-{_word(r, 1)} /{_word(r, 2)}/{_word(r, 2)}.toml",
        " what do these do?",
    )
    salad = _fill(rng, lambda r: rng.choice([_word(r, 2), "run", "stream", "the", "token", "bucket", "resume", "key"]))
    long_words = _fill(rng, lambda r: _word(r, r.randint(20, 60)), "?")
    one_word = ("".join(rng.choice(_CONSONANTS + _VOWELS) for _ in range(MAX_CHARS - 1))) + "?"
    context = _fill(rng, lambda r: f"Our {_word(r, 3)} team {_word(r, 2)}s the {_word(r, 3)}.")
    asked = " How do I resume a stream after a disconnect?"
    real_tail = context[: MAX_CHARS - len(asked)].rsplit(".", 1)[0] + "." + asked
    real_first = asked.strip() + " " + context[: MAX_CHARS - len(asked)].rsplit(".", 1)[0] + "."
    return {
        "a_real_question": asked.strip(),
        "question_with_its_reason": asked.strip() + REASON,
        "distinct_words": distinct,
        "capitalised_names": names,
        "many_questions": sentences,
        "code_spans": code,
        "word_salad_line": salad,
        "long_words": long_words,
        "one_word": one_word,
        "context_then_question": real_tail,
        "question_then_context": real_first,
    }


class Meter:
    """Process CPU spent in ``compose`` (on its worker thread) and in the tool calls,
    and, with ``profile``, cProfile's view of each ``compose``."""

    def __init__(self, profile: bool) -> None:
        self.compose_s = 0.0
        self.tools_s = 0.0
        self.profile = cProfile.Profile() if profile else None
        self._compose = extractive.compose

    def install(self, tools: Tools) -> None:
        inner = self._compose

        def measured(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            if self.profile is not None:
                self.profile.enable()
            try:
                return inner(*args, **kwargs)
            finally:
                if self.profile is not None:
                    self.profile.disable()
                self.compose_s += time.process_time() - start

        extractive.compose = measured  # type: ignore[assignment]
        run = tools.run

        async def timed_run(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return await run(*args, **kwargs)
            finally:
                self.tools_s += time.process_time() - start

        tools.run = timed_run  # type: ignore[method-assign]

    def top(self, n: int = 10) -> str:
        if self.profile is None:
            return ""
        out = io.StringIO()
        pstats.Stats(self.profile, stream=out).sort_stats("cumulative").print_stats(n)
        return out.getvalue()


async def _cpu(coro: Any) -> tuple[Any, float]:
    start = time.process_time()
    result = await coro
    return result, time.process_time() - start


async def main(args: argparse.Namespace) -> None:
    if args.read:
        long_part.MAX_READ_WORDS, long_part.MAX_READ_CHARS = args.read
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "kb.sqlite3"
        if not db.exists():
            await build(db)
        kb = await open_kb_file(db, HashingEmbedder(dim=384))
        rows: dict[str, Any] = {}
        try:
            searcher = kb._search
            tuning = kb.config.text_tuning
            # Warm the memo and the database pages with one real question.
            warm = Tools(kb, db, None)
            await ask(ExtractiveProvider(), warm, Question("warm", "sample", "How do I cancel a run?", ""))
            for label, message in messages().items():
                if args.only and label not in args.only:
                    continue
                provider, tools = ExtractiveProvider(), Tools(kb, db, None)
                meter = Meter(args.profile)
                meter.install(tools)
                item = Question("long", "sample", message, "")
                done, total = await _cpu(ask(provider, tools, item))
                sent = [step["args"]["query"] for step in done["log"] if step["tool"] == "knowledge_base_search"]
                terms, terms_s = await _cpu(bm25_terms(searcher.index, message, 100, tuning))
                _, search_whole_s = await _cpu(kb.search(message, bucket="default", top_k=8))
                # The most a search tool takes (its schema's maxLength): what a model can send.
                _, search_tool_max_s = await _cpu(kb.search(message[:TOOL_QUERY_CHARS], bucket="default", top_k=8))
                row = {
                    "chars": len(message),
                    "words": len(message.split()),
                    "path_cpu_s": round(total, 3),
                    "compose_cpu_s": round(meter.compose_s, 3),
                    "tools_cpu_s": round(meter.tools_s, 3),
                    "search_calls": [(step["tool"], len(str(step["args"].get("query", "")))) for step in done["log"]],
                    "query_sent_chars": [len(q) for q in sent],
                    "bm25_terms_whole_message": len(terms),
                    "bm25_terms_whole_message_cpu_s": round(terms_s, 3),
                    "search_whole_message_cpu_s": round(search_whole_s, 3),
                    "search_tool_max_query_cpu_s": round(search_tool_max_s, 3),
                    "answer": done["answer"][:400],
                }
                rows[label] = row
                print(f"{label}: {orjson.dumps(row).decode()}", flush=True)
                if args.profile:
                    print(meter.top(), flush=True)
                extractive.compose = meter._compose  # type: ignore[assignment]
        finally:
            await kb.aclose()
    rows["read_bound"] = [long_part.MAX_READ_WORDS, long_part.MAX_READ_CHARS]
    rows["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load {' '.join(rows['loadavg'])}")
    if args.out is not None:
        args.out.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--db", type=Path, help="the knowledge-base file (built there when absent)")
    parser.add_argument("--profile", action="store_true", help="print compose's costliest functions per message")
    parser.add_argument("--out", type=Path, help="write the figures here")
    parser.add_argument("--only", nargs="*", help="only these messages (their labels)")
    parser.add_argument(
        "--read",
        nargs=2,
        type=int,
        metavar=("WORDS", "CHARS"),
        help="the answerer's bound to try",
    )
    asyncio.run(main(parser.parse_args()))
