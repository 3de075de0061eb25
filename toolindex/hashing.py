"""``HashingEmbedder``: a deterministic, model-free embedder (the offline default).

Why hashing: the service must select tools with no network and no model download,
and tests need an embedder that is fast and gives the same vectors on every machine
and every run. Features are hashed into ``dim`` buckets with a *stable* hash
(BLAKE2b; Python's ``hash()`` is salted per process) and a hash-derived sign, so
collisions cancel out on average instead of piling up.

Features, each weighted so no single kind dominates the cosine:

* word unigrams, lightly stemmed (``rules`` and ``rule`` meet), stop words kept but
  down-weighted so "show me the ..." does not match every tool;
* bigrams of consecutive content words, for phrases such as "alert rule";
* character 3–5-grams of each content word with ``<``/``>`` boundary marks, which make
  the match robust to inflections, typos and compounds the stemmer misses. Together
  they weigh as much as the word itself (``_CHAR_MASS`` = 1.0; it was 0.6 in
  ``hashing-v1``). Fuzzy matching is what this embedder adds next to BM25 in the
  knowledge base's fused ranking (its word features repeat BM25 without its IDF), and
  an equal share made that fusion beat BM25 alone on the labelled stdlib queries
  (bench/corpus_quality.py, tune half) while tool-selection recall with core merge
  stayed at 0.979 (bench/retrieval_quality.py); 1.5 dropped it to 0.969, below 0.97.

Term frequency is sublinear (``1 + ln tf``) and the result is L2-normalised float32.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from collections.abc import Iterable

import numpy as np

from toolindex.embedder import EmbeddingError, EmbedTask, Matrix, Vector
from toolindex.vectors import describe_error, to_unit_rows

_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)

#: Common English function words, plus the filler of chat requests ("please show me").
#: Kept apart from the service's list (``knowledge.textnorm.STOP_WORDS``) on purpose:
#: this room may not import that one, and this list is part of the ``hashing-v2`` vector
#: space — changing it would silently change every stored vector.
STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves please pls thanks thank hi hello hey want wanna need like
    let lets let's could would shall may might must also get got really okay ok
    """.split()
)

_WORD_WEIGHT = 1.0
_STOP_WEIGHT = 0.15
_BIGRAM_WEIGHT = 0.8
#: Share of a content word's squared weight given to its character n-grams in total.
_CHAR_MASS = 1.0
_CHAR_NGRAM_SIZES = (3, 4, 5)

#: Texts longer than this (in total characters per call) are featurised in a worker
#: thread so a huge message never stalls the event loop.
_OFFLOAD_CHARS = 4_000


def light_stem(word: str) -> str:
    """Strip the commonest English inflections; crude but applied to both sides alike."""
    n = len(word)
    if n > 5 and word.endswith("ies"):
        return word[:-3] + "y"
    if n > 5 and word.endswith("ing"):
        return word[:-3]
    if n > 4 and word.endswith("ed"):
        return word[:-2]
    if n > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if n > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


#: A content word's own features, in order: its stem's word feature, then its character
#: n-grams with their shared weight (the bigram, which depends on the word before, is
#: added between them by ``text_features``).
WordFeatures = tuple[str, str, tuple[str, ...], float]


def _word_features(word: str) -> WordFeatures:
    stem = light_stem(word)
    padded = "<" + word + ">"
    grams = tuple("c:" + padded[i : i + size] for size in _CHAR_NGRAM_SIZES for i in range(len(padded) - size + 1))
    return stem, "w:" + stem, grams, math.sqrt(_CHAR_MASS / len(grams)) if grams else 0.0


def text_features(text: str, words: dict[str, WordFeatures] | None = None) -> dict[str, float]:
    """Map ``text`` to weighted features (before hashing); exposed for tests and tuning.

    ``words``: a cache of each content word's own features (``HashingEmbedder`` keeps
    one, bounded): the same features in the same order as without it (issue 23)."""
    counts: dict[str, int] = {}
    weights: dict[str, float] = {}

    def add(feature: str, weight: float) -> None:
        counts[feature] = counts.get(feature, 0) + 1
        if weight > weights.get(feature, -1.0):
            weights[feature] = weight

    prev_stem: str | None = None
    for word in _TOKEN_RE.findall(text.casefold()):
        if word in STOP_WORDS:
            add("w:" + word, _STOP_WEIGHT)
            prev_stem = None  # bigrams join content words that are adjacent in the text
            continue
        known = words.get(word) if words is not None else None
        if known is None:
            known = _word_features(word)
            if words is not None:
                words[word] = known
        stem, stem_feature, grams, char_weight = known
        add(stem_feature, _WORD_WEIGHT)
        if prev_stem is not None:
            add("b:" + prev_stem + " " + stem, _BIGRAM_WEIGHT)
        prev_stem = stem
        for gram in grams:  # inline ``add``: a call per n-gram was most of this loop
            counts[gram] = counts.get(gram, 0) + 1
            if char_weight > weights.get(gram, -1.0):
                weights[gram] = char_weight
    return {f: weights[f] * (1.0 + math.log(c)) for f, c in counts.items() if weights[f] > 0.0}


class HashingEmbedder:
    """Signed feature hashing of words, word bigrams and character n-grams."""

    name = "hashing"
    model = "hashing-v2"  # v2: character n-grams weigh as much as their word

    def __init__(
        self, dim: int = 384, *, max_chars: int = 20_000, cached_features: int = 200_000, cached_words: int = 10_000
    ) -> None:
        if dim < 8:
            raise ValueError("dim must be at least 8")
        self.dim = dim
        self.max_chars = max_chars
        #: Each feature's BLAKE2b key, kept: a chat message's words and n-grams mostly
        #: recur ("workflow", "<wo", "flow>"), and hashing each again was about half of
        #: a query's embedding, once per run (issue 23). Bounded (emptied when full); the
        #: vectors are the same with or without it.
        self._keys: dict[str, int] = {}
        self._keys_max = cached_features
        #: Each content word's own features (``text_features``), bounded alike but
        #: smaller: a word holds ~1.6 kB (its n-grams), and this embedder also embeds the
        #: knowledge base's documents, whose vocabulary would fill 200k words (~330 MB).
        self._words: dict[str, WordFeatures] = {}
        self._words_max = min(cached_features, cached_words)

    def _hash_features(self, features: dict[str, float]) -> np.ndarray:
        if not features:
            # Empty text, or only symbols: a fixed feature keeps the vector non-zero, and
            # it scores ~0 against every real text.
            features = {"\x00empty": 1.0}
        known = self._keys
        found: list[int] = []
        for feature in features:
            key = known.get(feature)
            if key is None:
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                key = int.from_bytes(digest, "little")
                if len(known) >= self._keys_max:
                    known.clear()
                known[feature] = key
            found.append(key)
        keys = np.array(found, dtype=np.uint64)
        values = np.fromiter(features.values(), dtype=np.float64, count=len(features))
        buckets = (keys % np.uint64(self.dim)).astype(np.intp)
        signs = np.where((keys >> np.uint64(63)) == 1, -1.0, 1.0)
        return np.bincount(buckets, weights=values * signs, minlength=self.dim)

    def _embed_all(self, texts: Iterable[str]) -> Matrix:
        raw = []
        for text in texts:
            if not isinstance(text, str):
                raise EmbeddingError(f"hashing: expected text, got {type(text).__name__}")
            if len(self._words) >= self._words_max:
                self._words.clear()
            row = self._hash_features(text_features(text[: self.max_chars], self._words))
            if not row.any():  # signed features cancelled out exactly: stay zero-safe
                row = self._hash_features({})
            raw.append(row)
        matrix = np.asarray(raw, dtype=np.float64).reshape(len(raw), self.dim)
        if not raw:
            return to_unit_rows(matrix, expected_count=0, expected_dim=self.dim, source="hashing")
        # ``to_unit_rows``'s arithmetic without its checks of an embedder's output: these
        # rows are finite and never zero (above), and the same expression gives the same bits.
        return (matrix / np.linalg.norm(matrix, axis=1)[:, None]).astype(np.float32)

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        rows = await self.embed_batch([text], task=task)
        vector: Vector = rows[0]
        return vector

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        """Embed ``texts``; ``task`` is ignored (the hashing space is symmetric)."""
        try:
            if sum(min(len(t), self.max_chars) for t in texts) > _OFFLOAD_CHARS:
                return await asyncio.to_thread(self._embed_all, list(texts))
            return self._embed_all(texts)
        except EmbeddingError:
            raise
        except Exception as exc:  # a bad input type must not escape as TypeError & co.
            raise EmbeddingError(f"hashing: {describe_error(exc)}") from exc

    async def aclose(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"
