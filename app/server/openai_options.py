"""The options of an OpenAI chat completion that change what the answer must be: OpenAI's
ranges for its numbers (refused with OpenAI's own codes, ``decimal_above_max_value`` …),
and the options the agent cannot honour, refused as ``unsupported_parameter`` naming
them rather than dropped in silence (a client asking for JSON, a tool call, log
probabilities or audio would otherwise get plain text and not know why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.server.openai_errors import OpenAIProblem

#: name → (lowest, highest, "integer"/"decimal"): OpenAI's bounds and the words of its codes.
RANGES: dict[str, tuple[float | None, float | None, str]] = {
    "max_tokens": (1, None, "integer"),
    "max_completion_tokens": (1, None, "integer"),
    "temperature": (0, 2, "decimal"),
    "top_p": (0, 1, "decimal"),
    "presence_penalty": (-2, 2, "decimal"),
    "frequency_penalty": (-2, 2, "decimal"),
    "seed": (None, None, "integer"),
    "top_logprobs": (0, 20, "integer"),
}


def out_of_range(name: str, raw: Any) -> OpenAIProblem:
    """OpenAI's error for a number out of its range (``decimal_above_max_value`` …) or not a number."""
    low, high, kind = RANGES[name]
    number = isinstance(raw, (int, float)) and not isinstance(raw, bool)
    if not number or (kind == "integer" and not isinstance(raw, int)):
        return OpenAIProblem(400, "invalid_type", f"Invalid '{name}': expected {'an' if kind == 'integer' else 'a'} "
                             f"{kind}, but got {raw!r} instead.", name)
    if low is not None and raw < low:
        return OpenAIProblem(400, f"{kind}_below_min_value", f"Invalid '{name}': {kind} below minimum value. "
                             f"Expected a value >= {low:g}, but got {raw!r} instead.", name)
    return OpenAIProblem(400, f"{kind}_above_max_value", f"Invalid '{name}': {kind} above maximum value. "
                         f"Expected a value <= {high:g}, but got {raw!r} instead.", name)


def _unsupported(name: str, what: str) -> OpenAIProblem:
    return OpenAIProblem(400, "unsupported_parameter", f"{what} is not supported: {_WHY[name]}", name)


_WHY = {
    "response_format": "the agent answers in text; leave response_format out or send {\"type\": \"text\"}",
    "tool_choice": "the agent calls only its own tools; client tools can be offered with tool_choice auto or none",
    "function_call": "the agent calls only its own tools",
    "logprobs": "log probabilities are not available from the agent",
    "top_logprobs": "log probabilities are not available from the agent",
    "modalities": "the answer is text only",
    "audio": "the answer is text only",
    "logit_bias": "token biases cannot be applied to the agent's model",
}


def _response_format(value: Any) -> None:
    kind = value.get("type") if isinstance(value, dict) else None
    if value is None or kind == "text":
        return
    if kind in ("json_object", "json_schema"):
        raise _unsupported("response_format", f"response_format {kind}")
    raise OpenAIProblem(400, "invalid_value", "response_format must be an object with a type", "response_format")


def _choice(name: str) -> Any:
    def check(value: Any) -> None:
        if value in (None, "auto", "none"):
            return
        if value == "required" or isinstance(value, dict):
            raise _unsupported(name, f"{name} {value!r}" if isinstance(value, str) else f"a named {name}")
        raise OpenAIProblem(400, "invalid_value", f"{name} must be auto, none, required or a function", name)

    return check


def _logprobs(value: bool | None) -> None:
    if value:
        raise _unsupported("logprobs", "logprobs")


def _top_logprobs(value: int | None) -> None:
    if value:
        raise _unsupported("top_logprobs", "top_logprobs")


def _modalities(value: list[str] | None) -> None:
    other = [m for m in value or () if m != "text"]
    if other:
        raise _unsupported("modalities", f"modalities {other[0]!r}")


def _audio(value: Any) -> None:
    if value is not None:
        raise _unsupported("audio", "audio")


def _logit_bias(value: dict[str, Any] | None) -> None:
    if value:
        raise _unsupported("logit_bias", "logit_bias")


def _stop(value: str | list[str] | None) -> None:
    if value == "" or (isinstance(value, list) and "" in value):
        raise OpenAIProblem(400, "invalid_value", "stop sequences must not be empty", "stop")


#: name → the check of a value the type accepted: raises what the agent cannot honour.
CONTRACTS: dict[str, Callable[[Any], None]] = {
    "response_format": _response_format,
    "tool_choice": _choice("tool_choice"),
    "function_call": _choice("function_call"),
    "logprobs": _logprobs,
    "top_logprobs": _top_logprobs,
    "modalities": _modalities,
    "audio": _audio,
    "logit_bias": _logit_bias,
    "stop": _stop,
}
