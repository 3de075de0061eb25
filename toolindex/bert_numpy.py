"""A BERT encoder's forward pass in plain numpy float32: weights read from a
sentence-transformers export with ``safetensors.numpy`` and the mean-pooled vectors of a
padded batch, for ``toolindex.minilm``'s embedder.

Apart from the embedder because this is arithmetic with its own concerns — an erf numpy
lacks, attention products kept under OpenBLAS's threading threshold, copies that keep
stacked products on BLAS — and the embedder is about tokenising, batching and threads.
Everything here is blocking: the embedder calls it from worker threads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

F32 = npt.NDArray[np.float32]

#: sentence-transformers' pooling settings, beside the model's own config.
POOLING_CONFIG = "1_Pooling/config.json"

#: Added to the attention scores of padding positions. exp() of it underflows to
#: exactly 0 in float32, so padding gets no weight; it is finite so no row becomes NaN.
_MASKED_SCORE = np.float32(-1e30)


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
class Encoder:
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


def load_encoder(model_dir: Path, dim: int) -> Encoder:
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
    return Encoder(
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


def encode(encoder: Encoder, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> F32:
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
