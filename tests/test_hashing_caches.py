"""The hashing embedder's caches (issue 23: a run's tool selection embeds its query with
it): each feature's BLAKE2b key and each content word's own features are kept, bounded,
and change nothing — the same features in the same order as the ``hashing-v2`` rules
spelled out below, and bit-identical vectors from a cold, a warm and a tiny cache."""

from __future__ import annotations

import hashlib
import math
import random

import numpy as np

from toolindex.hashing import _CHAR_MASS, _TOKEN_RE, STOP_WORDS, HashingEmbedder, light_stem, text_features

TEXTS = [
    "Build me a workflow that mails ops when an order ships",
    "[run 17] build a workflow that mails ops when an order ships",
    "please show me the alert rules, alert rule and ALERTING rules!!",
    "Straße café naïve résumé — 東京 データ 123 4567",
    "a the of to and",  # stop words only
    "",
    "???",
    "x",
    "workflow workflow workflow workflows workflowing",
    "Tables: configure columns, filters and sorting for the orders table " * 20,
]


def reference_features(text: str) -> dict[str, float]:
    """``text_features`` as written before its caches (hashing-v2), for comparison."""
    counts: dict[str, int] = {}
    weights: dict[str, float] = {}

    def add(feature: str, weight: float) -> None:
        counts[feature] = counts.get(feature, 0) + 1
        if weight > weights.get(feature, -1.0):
            weights[feature] = weight

    prev_stem: str | None = None
    for word in _TOKEN_RE.findall(text.casefold()):
        if word in STOP_WORDS:
            add("w:" + word, 0.15)
            prev_stem = None
            continue
        stem = light_stem(word)
        add("w:" + stem, 1.0)
        if prev_stem is not None:
            add("b:" + prev_stem + " " + stem, 0.8)
        prev_stem = stem
        padded = "<" + word + ">"
        grams = [padded[i : i + size] for size in (3, 4, 5) for i in range(len(padded) - size + 1)]
        if grams:
            char_weight = math.sqrt(_CHAR_MASS / len(grams))
            for gram in grams:
                add("c:" + gram, char_weight)
    return {f: weights[f] * (1.0 + math.log(c)) for f, c in counts.items() if weights[f] > 0.0}


def reference_vector(text: str, dim: int = 384) -> np.ndarray:
    features = reference_features(text) or {"\x00empty": 1.0}
    keys = np.array(
        [int.from_bytes(hashlib.blake2b(f.encode(), digest_size=8).digest(), "little") for f in features],
        dtype=np.uint64,
    )
    values = np.fromiter(features.values(), dtype=np.float64, count=len(features))
    signs = np.where((keys >> np.uint64(63)) == 1, -1.0, 1.0)
    row = np.bincount((keys % np.uint64(dim)).astype(np.intp), weights=values * signs, minlength=dim)
    return (row / np.linalg.norm(row)).astype(np.float32)


def test_features_are_the_same_in_the_same_order_with_and_without_the_word_cache() -> None:
    words: dict = {}
    for _ in range(2):  # cold, then warm
        for text in TEXTS:
            expected = reference_features(text)
            assert list(text_features(text).items()) == list(expected.items())
            assert list(text_features(text, words).items()) == list(expected.items())
    assert "workflow" in words and "the" not in words  # content words only


async def test_vectors_are_bit_identical_cold_warm_and_with_a_tiny_cache() -> None:
    cold_texts = [t for t in TEXTS if t.strip("?")] + [
        " ".join(random.Random(seed).choices(["order", "ships", "mail", "ops", "rule", "table"], k=12))
        for seed in range(20)
    ]
    warm, tiny = HashingEmbedder(), HashingEmbedder(cached_features=5)
    first = await warm.embed_batch(cold_texts)
    second = await warm.embed_batch(cold_texts)
    small = await tiny.embed_batch(cold_texts)
    for i, text in enumerate(cold_texts):
        expected = reference_vector(text)
        assert first[i].tobytes() == expected.tobytes(), text
        assert second[i].tobytes() == expected.tobytes(), text
        assert small[i].tobytes() == expected.tobytes(), text
    assert len(tiny._keys) <= 5 and len(tiny._words) <= 5 + max(len(t.split()) for t in cold_texts)
    assert len(warm._keys) > 5


async def test_search_ranks_as_rank_does_on_the_same_query() -> None:
    """``search`` ranks its already-unit query vector without normalising it a third
    time: the same matches as ``rank`` on the embedded query."""
    from toolindex.index import ToolIndex

    items = [
        ("create_workflow", "Create a workflow that runs actions when an event happens"),
        ("send_email", "Send an email to a list of recipients"),
        ("list_tables", "List the table configurations of the account"),
        ("alert_rules", "Configure alert rules and thresholds"),
    ]
    index = await ToolIndex.build(items, HashingEmbedder())
    for query in ("mail the ops team when an order ships", "alert me on thresholds", "tables"):
        vector, _ = await index.embed_query(query)
        for allow in (None, {"send_email", "alert_rules"}):
            found = await index.search(query, top_k=3, allowlist=allow)
            assert found.matches == index.rank(vector, top_k=3, allowlist=allow)
            assert found.matches and (allow is None or {m.name for m in found.matches} <= allow)


def _words_cache_bytes(embedder: HashingEmbedder) -> int:
    """What the per-word cache holds: each word, its stem, stem feature, n-grams and tuples."""
    import sys

    total = sys.getsizeof(embedder._words)
    for word, (stem, feature, grams, weight) in embedder._words.items():
        total += sum(sys.getsizeof(x) for x in (word, stem, feature, grams, weight))
        total += sum(sys.getsizeof(g) for g in grams) + sys.getsizeof((stem, feature, grams, weight))
    return total


async def test_the_per_word_cache_stays_small_however_many_words_it_sees() -> None:
    """The embedder that selects tools also embeds the knowledge base's documents (one
    per process): a corpus's vocabulary must not fill the per-word cache to hundreds
    of MB (~1.6 kB a word: at 200k words it held ~330 MB). 25,000 words are enough to
    show the bound: kept whole they hold ~46 MB, past the 40 MB asserted, while the bound
    keeps at most ~10,500 of them (~19 MB); 45,000 only doubled the test's CPU."""
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choices(letters, k=rng.randint(6, 12))) for _ in range(25_000)]
    embedder = HashingEmbedder()
    for start in range(0, len(words), 500):
        await embedder.embed_batch([" ".join(words[start : start + 500])])
    assert _words_cache_bytes(embedder) < 40_000_000
