"""A paced, stateless Ollama fake for crash and restart tests.

It speaks the ``/api/chat`` NDJSON wire format of :mod:`tests.fakes.ollama` (the real
``ollama`` client reads it), but holds no script: every answer is decided from the
request's ``messages`` alone, so the fake can outlive any number of agent processes
and a re-run of a model turn after a crash gets the same answer as the first try.

A run's question carries a tag (``[run <tag>] …``, see :func:`tagged`). Counting the
``role: tool`` messages that follow the tagged question, the fake walks one flow:

1. ``knowledge_base_search`` (the mandatory first step);
2. ``preview_workflow`` with the tag in the workflow's name: the agent POSTs it to the
   backend's ``/v1/workflow/rules/full`` (a dry run), so a counting proxy in front of the
   backend can tell how many times this run's call reached it. The service counts it as
   a write (it is not one of the executor's read-only tools): after a crash it must not
   be run again;
3. ``generate_response`` (retried while its result is an error, at most twice).

Each turn first streams ``tokens`` words ``pause_s`` apart, so a signal lands in the
middle of a model turn, not between turns.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

MODEL = "paced-llama:latest"
FLOW_CONTEXT = "workflow"
"""The ``context_type`` of runs that walk the flow (its tools are in that context)."""
SIDE_EFFECT_TOOL = "preview_workflow"
SIDE_EFFECT_PATH = "/v1/workflow/rules/full"
FLOW: tuple[str, ...] = ("knowledge_base_search", SIDE_EFFECT_TOOL, "generate_response")
ERROR_PREFIX = "ERROR: "
TAG_RE = re.compile(r"\[run (?P<tag>[A-Za-z0-9_-]{3,64})\]")
_NDJSON = "application/x-ndjson"


def tagged(tag: str, text: str = "preview a workflow that mails ops on new orders") -> str:
    """A question the fake recognises as run ``tag``."""
    return f"[run {tag}] {text}"


def run_body(tag: str) -> dict[str, Any]:
    """The ``POST /v1/agent/runs`` body of a run that walks the flow."""
    return {"message": tagged(tag), "context_type": FLOW_CONTEXT, "context": {}}


def side_effect_marker(tag: str) -> bytes:
    """Bytes that appear in the backend request body of run ``tag``'s side-effecting call."""
    return f"chaos {tag}".encode()


@dataclass(frozen=True, slots=True)
class Step:
    tool: str | None
    arguments: dict[str, Any]
    tag: str


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def plan(messages: Sequence[dict[str, Any]], flow: Sequence[str] = FLOW) -> Step:
    """The next step of the flow for this conversation, from the messages alone."""
    start, tag = -1, "untagged"
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "user" and (found := TAG_RE.search(str(m.get("content") or ""))):
            start, tag = i, found.group("tag")
            break
    results: dict[str, list[bool]] = {}
    for m in messages[start + 1 :]:
        if m.get("role") == "tool":
            ok = not str(m.get("content") or "").startswith(ERROR_PREFIX)
            results.setdefault(str(m.get("tool_name") or ""), []).append(ok)
    for tool in flow:
        seen = results.get(tool, [])
        if not seen:
            return Step(tool, arguments_for(tool, tag), tag)
        if tool == "generate_response" and not any(seen) and len(seen) < 3:
            return Step(tool, arguments_for(tool, tag), tag)
    return Step(None, {}, tag)


def arguments_for(tool: str, tag: str) -> dict[str, Any]:
    if tool == "knowledge_base_search":
        return {"query": f"workflow notifications on new orders {tag}"}
    if tool == SIDE_EFFECT_TOOL:
        return {"workflow": _workflow(tag), "description": f"Mail ops on new orders ({tag})"}
    if tool == "perplexity_search":  # the tag travels in the query, so a fake can count per run
        return {"query": f"latest release notes of the order service {tag}"}
    if tool == "index_keywords":
        return {"keywords": ["order service release", "release notes", "refunds"]}
    if tool == "generate_response":
        return {
            "answer": f"The workflow preview for run {tag} is ready.",
            "sources": [],
            "confidence_score": 0.5,
            "used_internal_kb": False,
            "used_external_kb": False,
        }
    return {}


def _workflow(tag: str) -> dict[str, Any]:
    """A workflow the reference backend accepts (see tests/test_backend_flows.py)."""
    return {
        "name": f"chaos {tag}",
        "is_active": True,
        "entity": "sales.orders",
        "trigger_type": "on_create",
        "actions": [
            {"name": "Check", "action_type": "check_inventory", "action_config": {"threshold": 1}, "is_active": True},
            {
                "name": "Mail",
                "action_type": "send_email",
                "is_active": True,
                "after": "Check",
                "action_config": {"recipients": ["ops@example.com"], "subject": "s", "body": "b"},
            },
        ],
        "edges": [],
    }


class PacedOllama:
    """Serve ``fake.app`` on loopback (``tests.support.server.serve_app``).

    ``tokens`` words are streamed ``pause_s`` apart before each turn's tool call.
    ``streaming_until``: while it is set to an event not yet set, a turn goes on
    streaming words past ``tokens`` until it is - a run that must be live for as long
    as something else takes (a command's ingest) is, by that condition, not by a guess
    of how long its turns last on a loaded machine.
    ``flow`` is the sequence of tools a run walks (empty: a text-only answer).
    Counters: ``chats`` (turns answered), ``streams_finished`` and ``streams_cut``.
    """

    def __init__(
        self,
        *,
        model: str = MODEL,
        tokens: int = 30,
        pause_s: float = 0.05,
        flow: Sequence[str] = FLOW,
    ) -> None:
        self.model = model
        self.tokens = tokens
        self.pause_s = pause_s
        self.flow = tuple(flow)
        self.streaming_until: asyncio.Event | None = None
        #: Words streamed past ``tokens`` while held by ``streaming_until``.
        self.held_words = 0
        self.chats = 0
        self.streams_finished = 0
        self.streams_cut = 0
        self.app = Starlette(
            routes=[
                Route("/api/chat", self._chat, methods=["POST"]),
                Route("/api/tags", self._tags, methods=["GET"]),
                Route("/api/version", self._version, methods=["GET"]),
            ]
        )

    async def _chat(self, request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _json({"error": "invalid JSON"}, 400)
        if not isinstance(body, dict) or not body.get("model"):
            return _json({"error": "model is required"}, 400)
        model = str(body["model"])
        messages = body.get("messages") or []
        if not messages:  # a load request (the provider warms the model)
            line = {"model": model, "created_at": _now(), "message": {"role": "assistant", "content": ""},
                    "done_reason": "load", "done": True}
            return Response(orjson.dumps(line) + b"\n", media_type=_NDJSON)
        self.chats += 1
        step = plan(messages, self.flow)
        if body.get("stream", True) is False:
            return _json(self._final(model, self._message(step)))
        return StreamingResponse(self._lines(model, step), media_type=_NDJSON)

    def _message(self, step: Step) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        if step.tool is None:
            message["content"] = f"Nothing left to do for {step.tag}."
        else:
            message["tool_calls"] = [{"function": {"index": 0, "name": step.tool, "arguments": step.arguments}}]
        return message

    async def _lines(self, model: str, step: Step) -> AsyncIterator[bytes]:
        finished = False
        try:
            for i in range(self.tokens):
                await asyncio.sleep(self.pause_s)
                yield self._chunk(model, {"role": "assistant", "content": f"w{i} "})
            i = self.tokens
            while self.streaming_until is not None and not self.streaming_until.is_set():
                await asyncio.sleep(self.pause_s)
                yield self._chunk(model, {"role": "assistant", "content": f"w{i} "})
                i += 1
                self.held_words += 1
            yield self._chunk(model, self._message(step))
            yield orjson.dumps(self._final(model, {"role": "assistant", "content": ""})) + b"\n"
            finished = True
        finally:
            if finished:
                self.streams_finished += 1
            else:
                self.streams_cut += 1

    @staticmethod
    def _chunk(model: str, message: dict[str, Any]) -> bytes:
        return orjson.dumps({"model": model, "created_at": _now(), "message": message, "done": False}) + b"\n"

    def _final(self, model: str, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "model": model,
            "created_at": _now(),
            "message": message,
            "done": True,
            "done_reason": "stop",
            "total_duration": 1_000_000,
            "load_duration": 10_000,
            "prompt_eval_count": 11,
            "prompt_eval_duration": 100_000,
            "eval_count": self.tokens,
            "eval_duration": 800_000,
        }

    async def _tags(self, request: Request) -> Response:
        return _json(
            {
                "models": [
                    {
                        "name": self.model,
                        "model": self.model,
                        "modified_at": "2025-01-01T00:00:00Z",
                        "size": 1_000_000,
                        "digest": hashlib.sha256(self.model.encode()).hexdigest(),
                        "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B",
                                    "quantization_level": "Q4_K_M"},
                    }
                ]
            }
        )

    async def _version(self, request: Request) -> Response:
        return _json({"version": "0.12.6"})


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")
