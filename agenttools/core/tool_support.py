"""Plumbing shared by the workflow and table tool handlers.

``WorkflowToolDeps`` is built once by the app factory; ``CallScope`` is built per call
from it and the ``ToolContext`` (the caller's client and resolver). ``guarded`` turns any
failure into a ``ToolOutcome.error`` so no handler ever raises into the agent loop.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agenttools.core.backend_client import BackendClient, BackendError
from agenttools.core.drafts import DraftError, Drafts
from agenttools.core.registry import ToolContext, ToolOutcome
from agenttools.core.resolution import ResolutionCache, Resolver, caller_key
from agenttools.core.untrusted import labelled

__all__ = [
    "CallScope",
    "ToolInputError",
    "WorkflowToolDeps",
    "cap_items",
    "guarded",
    "opt_str",
    "page_args",
    "req_str",
]

log = logging.getLogger("agenttools.backend")


class ToolInputError(Exception):
    """The model's arguments are unusable; the message says how to fix them."""


@dataclass(slots=True)
class WorkflowToolDeps:
    """Everything the backend tools need, built once by the app factory."""

    backend_url: str
    drafts: Drafts
    resolution_cache: ResolutionCache = field(default_factory=ResolutionCache)
    timeout_s: float = 15.0
    max_response_bytes: int = 2_000_000
    #: Soft cap on the JSON the model sees from list-like tools (characters).
    max_result_chars: int = 24_000
    #: Largest ``config`` / ``workflow`` object accepted from the model (encoded bytes).
    max_input_bytes: int = 256_000
    #: Sent when the caller sent no ``Authorization`` (``AGENT_AUTH=none`` with the
    #: reference backend: ``Bearer demo-alice``); a caller's own header always wins.
    fallback_authorization: str | None = None


@dataclass(slots=True)
class CallScope:
    """One tool call's view of the backend: the caller's client and resolver."""

    deps: WorkflowToolDeps
    ctx: ToolContext
    client: BackendClient
    resolver: Resolver

    @classmethod
    def build(cls, deps: WorkflowToolDeps, ctx: ToolContext) -> CallScope:
        authorization = ctx.authorization or deps.fallback_authorization
        client = BackendClient(
            http=ctx.http,
            base_url=deps.backend_url,
            authorization=authorization,
            timeout_s=deps.timeout_s,
            max_response_bytes=deps.max_response_bytes,
        )
        resolver = Resolver(client, deps.resolution_cache, caller_key(ctx.user_id, authorization))
        return cls(deps=deps, ctx=ctx, client=client, resolver=resolver)

    @property
    def owner(self) -> str:
        """Drafts belong to the user (the same user in two tabs shares them)."""
        return self.ctx.user_id or caller_key(None, self.ctx.authorization)


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolOutcome]]
ScopedHandler = Callable[[dict[str, Any], CallScope], Awaitable[ToolOutcome]]


def guarded(name: str, deps: WorkflowToolDeps, fn: ScopedHandler) -> Handler:
    """Bind ``fn`` to ``deps`` and make it total: every failure becomes a tool error."""

    @functools.wraps(fn)
    async def handler(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return _labelled(name, await run(args, ctx))

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        try:
            if not isinstance(args, dict):
                raise ToolInputError("arguments must be a JSON object")
            return await fn(args, CallScope.build(deps, ctx))
        except (BackendError, ToolInputError, DraftError) as exc:
            return ToolOutcome.error(str(exc))
        except Exception:  # a bug in a handler must not end the run
            log.exception("tool %s failed unexpectedly", name)
            return ToolOutcome.error(f"{name} failed because of an internal error; try again or ask the user")

    return handler


def _labelled(name: str, outcome: ToolOutcome) -> ToolOutcome:
    """The backend's answers (and its error texts) are another system's data: what the
    model reads of them carries the retrieved-data label, like a search hit or an MCP
    result. A fixed answer of ours (``model_content``, e.g. a preview's) is left as is."""
    if outcome.model_content is not None:
        return outcome
    return dataclasses.replace(outcome, content=labelled(outcome.content, source=f"backend:{name}"))


def req_str(args: dict[str, Any], key: str, hint: str = "") -> str:
    value = args.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ToolInputError(f"{key} is required" + (f": {hint}" if hint else ""))
    return value.strip()


def opt_str(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ToolInputError(f"{key} must be a string")
    return value.strip()


def opt_enum(args: dict[str, Any], key: str, allowed: Sequence[str]) -> str:
    value = opt_str(args, key).lower()
    if value and value not in allowed:
        raise ToolInputError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _positive_int(args: dict[str, Any], key: str, default: int, maximum: int) -> int:
    raw = args.get(key)
    if raw is None or raw == "":
        return default
    if isinstance(raw, bool):
        raise ToolInputError(f"{key} must be a whole number")
    try:
        value = int(raw) if not isinstance(raw, float) or raw.is_integer() else None
    except (TypeError, ValueError):
        value = None
    if value is None or value < 1 or value > maximum:
        raise ToolInputError(f"{key} must be a whole number between 1 and {maximum}; got {raw!r}")
    return value


def page_args(args: dict[str, Any], default_rows: int) -> tuple[int, int]:
    return _positive_int(args, "page", 1, 1_000_000), _positive_int(args, "rows", default_rows, 1000)


def object_arg(args: dict[str, Any], key: str, deps: WorkflowToolDeps) -> dict[str, Any]:
    value = args.get(key)
    if value is None:
        raise ToolInputError(f"{key} is required")
    if isinstance(value, str):  # some models send nested objects as JSON text
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise ToolInputError(f"{key} must be a JSON object, got a string that is not JSON") from None
    if not isinstance(value, dict):
        raise ToolInputError(f"{key} must be a JSON object")
    if len(orjson.dumps(value)) > deps.max_input_bytes:
        raise ToolInputError(f"{key} is larger than {deps.max_input_bytes // 1000} KB; send a smaller object")
    return value


def cap_items(items: list[Any], max_chars: int, *, what: str) -> tuple[list[Any], str | None]:
    """Keep a prefix of ``items`` whose JSON fits ``max_chars``; say what was left out."""
    encoded = [len(orjson.dumps(i)) + 1 for i in items]
    total = sum(encoded)
    if total <= max_chars:
        return items, None
    kept, size = 0, 0
    for n in encoded:
        if size + n > max_chars:
            break
        size += n
        kept += 1
    note = (
        f"showing the first {kept} of {len(items)} {what} to keep the answer short; "
        "ask for a narrower request or the next page to see more"
    )
    return items[:kept], note
