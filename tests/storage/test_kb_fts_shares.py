"""SQLite full-text ranking split among readers (``storage/sqlite/kb_fts.py``): a ranking
scored in shares (chunk id modulo the shares, or the resolved documents dealt out) must
be exactly the one statement's — the same ids in the same order, the same scores and
the same match count — for the whole index, a bucket's probe, a resolved scope and a
filter ranked in one statement from its table."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from knowledge.buckets import typed_values
from knowledge.filters import compile_filters, parse_filters
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBRanked, KBScope, KBTextTuning
from storage.sqlite.kb_fts import FtsRanker
from tests.support.storage import opened_storage

FIELDS = {"party": "TEXT", "year": "INTEGER"}
WORDS = "alpha beta gamma delta notice termination period invoice network maintenance repair".split()
PARTIES = ["Acme", "Globex", "Initech"]
#: Every query term is scored (none is common enough to leave out), and every term's
#: match count is read: the split is decided on those counts.
TUNING = KBTextTuning(common_term_fraction=1.0, common_term_min_df=1)


def _doc(rng: random.Random, i: int, bucket: str) -> KBDocumentWrite:
    meta = {"party": rng.choice(PARTIES), "year": rng.randint(2020, 2024)}
    chunks = [
        KBChunkWrite(p, f"Part {p}", " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 30))))
        for p in range(rng.randint(1, 3))
    ]
    return KBDocumentWrite(
        id=f"{bucket}-{i}",
        title=f"{bucket} {i} {rng.choice(WORDS)}",
        source=f"{bucket}-{i}.md",
        url=None,
        content_hash=f"h{i}",
        metadata=meta,
        chars=sum(len(c.text) for c in chunks),
        chunks=chunks,
        typed=typed_values(FIELDS, meta),
    )


def _same(a: KBRanked, b: KBRanked) -> None:
    assert a.ids == b.ids
    assert a.scores == b.scores
    assert a.total == b.total


@pytest.mark.parametrize("seed", [1, 2])
async def test_shared_ranking_is_the_single_statements(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    async with opened_storage(tmp_path / "kb.db") as storage:
        index = storage.kb_index
        for bucket in ("contracts", "letters"):
            await index.create_bucket(bucket, FIELDS, typed_row=typed_values)
        # Interleaved batches, so a bucket's chunk ids are not one run.
        for batch in range(6):
            bucket = ("contracts", "letters")[batch % 2]
            await index.write_documents(bucket, FIELDS, [_doc(rng, batch * 100 + i, bucket) for i in range(60)])
        db = storage.db
        single = FtsRanker(db, parallel_min_matches=10**9)
        shared = FtsRanker(db, parallel_min_matches=1)
        schema = (await index.bucket_schemas())["contracts"]
        party = compile_filters(parse_filters({"party": "Acme"}), schema, bucket="contracts")
        scopes = [
            KBScope(),
            KBScope("contracts"),
            KBScope("letters"),
            KBScope("contracts", party),
            KBScope("contracts", party, doc_ids=await index.scoped_doc_ids(KBScope("contracts", party))),
            KBScope(doc_ids=[f"letters-{i}" for i in range(100, 160)] + [f"contracts-{i}" for i in range(0, 30)]),
        ]
        queries = [["notice", "termination"], ["alpha"], ["network", "maintenance", "repair", "gamma"], ["nothing"]]
        compared = 0
        for terms in queries:
            for ranker in (single, shared):
                await ranker.selective_terms(terms, 0, TUNING)  # the counts the split is decided on
            for scope in scopes:
                for limit in (1, 7, 100, 2000):
                    a = await single.text_candidates(terms, scope, limit, TUNING)
                    b = await shared.text_candidates(terms, scope, limit, TUNING)
                    _same(a, b)
                    compared += bool(a.ids)
        assert compared > 40  # the comparisons ranked something
        # The shared ranker did split: its whole-index ranking ran as shares.
        assert shared._worth_sharing(["notice"]) and not single._worth_sharing(["notice"])
