"""The OpenAI-compatible face: ``GET /v1/models`` and ``POST /v1/chat/completions``.

Open WebUI and any OpenAI SDK can use the agent as a "model": one model per agent
context (``agentchat-knowledge``, ``agentchat-workflow``, ``agentchat-tables``, from the
catalog's contexts). A completion is a run of the same run manager as
``/v1/agent/runs`` (auth from ``Authorization: Bearer``, limits, durability); its answer
is the run's event log translated (``app/server/compat_runs.py``), never a second agent path.

What a client gets (documented in docs/compatible-faces.md "OpenAI-compatible endpoints"):

* ``delta.content`` / ``message.content``: the streamed answer text; a final answer
  that reached us only through ``generate_response`` (or a clarification) is appended
  unless it was already streamed. Its citation markers are numbered ``[1]``, ``[2]`` and
  it ends with a "Sources:" list (``app/server/openai_citations.py``): the ids mean
  nothing to a person reading an OpenAI client.
* ``agentchat``, an extra top-level field on chunks with an empty ``delta``: every other
  native event as ``{"event", "data"}`` (tool calls and results, previews, the
  ``response`` with its sources, ``message_complete`` on the final chunk). Empty deltas
  and extra top-level fields are what other OpenAI-compatible servers send too
  (llama.cpp's ``timings``, Perplexity's ``citations``), so text-only clients skip them;
  the OpenAI SDKs keep them (``chunk.model_extra``).
* Errors before the stream: OpenAI's ``{"error": {"message", "type", "param", "code"}}``
  with a 4xx/5xx status; after it started: one such error chunk, then ``[DONE]``.

History: OpenAI clients resend the whole transcript each time. With an explicit
conversation (``X-Conversation-Id`` header or body ``conversation_id``) the server-side
conversation is continued and the earlier messages are imported only when it is new.
Otherwise every request gets a fresh conversation: when its earlier turns are exactly a
transcript this server answered (that run is found by a hash of the transcript, stored
as its idempotency key, and the answer the client holds is what it sent), that
conversation's stored messages are copied, tool calls and results included; else the
earlier turns are imported as text.
Either way nothing the client shows is lost, and edits, branches and regenerations
behave as they do on OpenAI's own stateless API.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, assert_never

import orjson
from starlette.requests import Request
from starlette.responses import Response

import events
from app.runs.follow import Batches, Followed
from app.runs.records import ChatInput
from app.server import request_admission, run_start, run_streams, storage_budget
from app.server.compat_runs import (
    AnswerText,
    copy_history,
    has_conversation,
    import_history,
    logged_events,
    normalized,
    translated,
)
from app.server.context_scope import check_bucket_scope
from app.server.identity import Identity
from app.server.openai_citations import CitationNumbers
from app.server.openai_cut import AnswerCut
from app.server.openai_errors import error_body, error_response
from app.server.openai_request import CompletionRequest, model_ids, parse_request, unknown_model
from app.server.problems import HTTPProblem, ORJSONResponse
from llm.types import Message
from storage.errors import IdempotencyKeyUsed

if TYPE_CHECKING:
    from app.server.services import Services

CHAIN_KEY_PREFIX = "oai-chain:"


# --- GET /v1/models -----------------------------------------------------------------------


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "agentchat"}


async def list_models(request: Request) -> Response:
    try:
        request_admission.identify(request)
    except HTTPProblem as exc:
        return error_response(exc)
    return ORJSONResponse({"object": "list", "data": [_model(m) for m in model_ids()]})


async def get_model(request: Request) -> Response:
    try:
        request_admission.identify(request)
        model = request.path_params["model"]
        if model not in model_ids():
            raise unknown_model(model)
    except HTTPProblem as exc:
        return error_response(exc)
    return ORJSONResponse(_model(model))


# --- the conversation the transcript continues ---------------------------------------------------


def chain_key(turns: list[tuple[str, str]]) -> str:
    """The idempotency key a run is stored under: a hash of the transcript it answered."""
    canonical = orjson.dumps([[role, normalized(text)] for role, text in turns])
    return CHAIN_KEY_PREFIX + hashlib.sha256(canonical).hexdigest()


async def _answered_by_us(svc: Services, user_id: str, earlier: list[tuple[str, str]]) -> str | None:
    """The conversation of the run that answered ``earlier`` up to its last user turn, when
    the assistant text after it is what that run sent; else None."""
    last_user = max((i for i, (role, _) in enumerate(earlier) if role == "user"), default=None)
    if last_user is None or last_user == len(earlier) - 1:
        return None
    held = normalized(" ".join(text for _, text in earlier[last_user + 1:]))
    parent = await svc.run_store.find_by_idempotency_key(user_id, chain_key(earlier[: last_user + 1]))
    if parent is None or parent.status != "completed":
        return None
    tr = Translator("", "", 0, include_usage=False)
    for item in await logged_events(svc, parent.id, user_id):
        tr.feed(item)
    return parent.conversation_id if normalized(tr.text) == held else None


async def conversation_for(svc: Services, ident: Identity, req: CompletionRequest) -> tuple[str, str | None]:
    """(conversation id, idempotency key) of the run that answers ``req`` — see the module doc."""
    user = ident.user_id
    earlier = [Message(role, text) for role, text in req.turns[:-1]]  # type: ignore[arg-type]
    if req.conversation_id is not None:
        if not await has_conversation(svc, req.conversation_id, user):
            await import_history(svc, req.conversation_id, user, earlier)
        return req.conversation_id, None
    conversation_id = f"oai_{uuid.uuid4().hex}"
    # Reads before the run is acknowledged: within the request's storage budget.
    source = await storage_budget.bounded(
        "the service cannot read runs right now", _answered_by_us(svc, user, req.turns[:-1])
    )
    if source is not None:
        await copy_history(svc, source, conversation_id, user)
    else:
        await import_history(svc, conversation_id, user, earlier)
    return conversation_id, chain_key(req.turns)


# --- events → chunks -------------------------------------------------------------------------------


class Translator:
    """Run events → ``chat.completion.chunk`` frames (SSE bytes); its state is the
    non-streamed answer."""

    def __init__(
        self, completion_id: str, model: str, created: int, *, include_usage: bool, cut: AnswerCut | None = None
    ) -> None:
        self.id, self.model, self.created, self.include_usage = completion_id, model, created, include_usage
        #: The answer as the run wrote it (its citation ids): what ``owed`` compares with.
        self.answer = AnswerText()
        #: Its markers numbered for the client, and the sources the ``response`` names.
        self.citations = CitationNumbers()
        self.sources: list[events.Source] = []
        #: The client's ``max_tokens``/``stop``: what it is sent of the answer.
        self.cut = cut
        #: The content the client was sent, in order (``text``).
        self.sent: list[str] = []
        self.events: list[dict[str, Any]] = []  # ``{event, data}``, ``data`` as stored JSON
        self.usage: dict[str, int] | None = None
        self.error: dict[str, str] | None = None
        self.status: str | None = None
        #: The numbers of the answer's citations (``CitationNumbers.mapping``), once it ended.
        self.mapping: list[dict[str, Any]] = []
        #: The run waits for a decision on this call (its last event was ``approval_required``).
        self.awaiting: events.ApprovalRequired | None = None
        # The hot path (one frame per token) splices the delta into pre-encoded bytes.
        head = orjson.dumps(self.chunk({}))
        self._before_delta = b"data: " + head[: head.index(b'"delta":') + 8]
        self._after_content = b',"logprobs":null,"finish_reason":null}]}\n\n'
        # Every other event's chunk: the empty-delta chunk with ``agentchat`` spliced in.
        self._before_extra = b"data: " + head[:-1] + b',"agentchat":{"event":'

    def chunk(self, delta: dict[str, Any], finish: str | None = None, extra: Any = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if extra is not None:
            out["agentchat"] = extra
        return out

    def _content(self, text: str, encoded: str | None = None) -> list[bytes]:
        """The chunk of the answer's ``text``, its citations numbered; ``encoded`` is its JSON
        string when the run already wrote it."""
        shown = self.citations.feed(text)
        return self._send(shown, encoded if shown == text else None)

    def _send(self, text: str, encoded: str | None = None) -> list[bytes]:
        """The chunk of ``text`` as the client's ``max_tokens``/``stop`` let it through."""
        if self.cut is not None:
            shown = self.cut.feed(text)
            encoded, text = (encoded if shown == text else None), shown
        if not text:
            return []
        self.sent.append(text)
        value = encoded.encode() if encoded is not None else orjson.dumps(text)
        return [self._before_delta + b'{"content":' + value + b"}" + self._after_content]

    def _extra_frame(self, item: Followed) -> bytes:
        """``frame(self.chunk({}, extra={"event": name, "data": data}))`` without encoding:
        the prefix is built once and the event's stored JSON is spliced in."""
        name = item.name.encode() if item.name.isascii() and item.name.isidentifier() else None
        quoted = b'"' + name + b'"' if name is not None else orjson.dumps(item.name)
        return self._before_extra + quoted + b',"data":' + item.data.encode() + b"}}\n\n"

    def feed(self, item: Followed) -> list[bytes]:
        """The frames of one run event. Text becomes ``content``; every other event rides
        as ``agentchat: {event, data}``, its ``data`` the stored JSON spliced in as is
        (``orjson.Fragment``: never decoded or encoded again)."""
        event = item.event
        self.awaiting = event if isinstance(event, events.ApprovalRequired) else None
        match event:
            case events.ContentChunk(chunk=chunk):
                delta = self.answer.chunk(chunk)
                # The stored ``{"chunk":"…"}`` already holds the text as a JSON string.
                same = delta == chunk and item.data.startswith('{"chunk":') and item.data.endswith("}")
                return self._content(delta, item.data[9:-1] if same else None)
            case events.MessageComplete():
                return self._complete(event, item.data)
        self.events.append({"event": item.name, "data": orjson.Fragment(item.data)})
        out = [self._extra_frame(item)]
        match event:
            case events.MessageStart():
                self.answer.new_turn()
            case events.Response(answer=answer, sources=sources):
                self.sources = list(sources)
                self.citations.know(self.sources)
                out += self._content(self.answer.owed(answer))
            case events.Clarification(missing_info=missing_info):
                out += self._content(self.answer.owed(missing_info))
            case events.Error(message=message, code=code):
                self.error = {"message": message or "the run failed", "code": code}
            case (
                events.RunStarted()
                | events.RunResumed()
                | events.ToolSelection()
                | events.ToolCallStart()
                | events.ToolCallResult()
                | events.ApprovalRequired()
                | events.WorkflowPreview()
                | events.TableConfigPreview()
                | events.TableConfigValidationError()
                | events.Heartbeat()
                | events.UnknownEvent()
                | events.ContentChunk()
                | events.MessageComplete()
            ):
                pass  # carried by the ``agentchat`` field alone
            case _:
                assert_never(event)
        return out

    def _complete(self, event: events.MessageComplete, data: str) -> list[bytes]:
        self.status = event.status
        prompt, completion = event.usage.input_tokens, event.usage.output_tokens
        self.usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        if self.status == "cancelled" and self.error is None:
            self.error = {"message": "the run was cancelled", "code": "cancelled"}
        if self.error is not None or self.status != "completed":
            err = self.error or {"message": "the run failed", "code": "run_failed"}
            return [*self.held(), frame(error_body(err["message"], err["code"], 500))]
        ended = {"event": events.MessageComplete.name, "data": orjson.Fragment(data)}
        self.events.append(ended)
        # The text held in case it began a marker, the sources' list (never renumbered), what the cut held.
        out = self._send(self.citations.finish())
        self.mapping = self.citations.mapping(self.sources)
        out += self._send(self.citations.sources_list(self.mapping)) + self.held()
        out.append(frame(self.chunk({}, self.finish_reason, {**ended, "citations": self.mapping})))
        if self.include_usage:
            last = self.chunk({})
            last["choices"], last["usage"] = [], self.usage
            out.append(frame(last))
        return out

    def held(self) -> list[bytes]:
        """The text held back in case it began a citation marker, then a stop sequence: it
        goes out before what ends the answer (the sources' list, an error, a wait)."""
        out = self._send(self.citations.finish())
        held = self.cut.finish() if self.cut is not None else ""  # it began no stop sequence after all
        if held:
            self.sent.append(held)
            out.append(frame(self.chunk({"content": held})))
        return out

    @property
    def finish_reason(self) -> str:
        return (self.cut.reason if self.cut is not None else None) or "stop"

    @property
    def text(self) -> str:
        """The answer as the client is sent it: citations numbered, the sources' list at
        its end, cut at its ``max_tokens``/``stop``."""
        return "".join(self.sent)

    def completion(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": self.finish_reason,
                }
            ],
            "usage": self.usage,
            "agentchat": {"events": self.events, "citations": self.mapping},
        }


def frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def _failure_status(code: str) -> int:
    if code == "storage_unavailable":
        return 503
    if code.startswith("provider_"):
        return 502
    # approval_pending: queued behind a run that then parked for an approval (docs/approvals.md)
    return 409 if code in ("cancelled", "approval_pending") else 500


# --- POST /v1/chat/completions ------------------------------------------------------------------


async def chat_completions(request: Request) -> Response:
    try:
        return await _chat_completions(request)
    except HTTPProblem as exc:
        return error_response(exc)


async def _chat_completions(request: Request) -> Response:
    sent = request.headers
    svc, ident, req = await request_admission.admit(
        request, lambda body, settings: parse_request(body, sent, max_message_chars=settings.max_message_chars)
    )
    # Refused before any history is imported (a refusal leaves nothing), in start_run's
    # order: the context's buckets, the replica's load; the run cap just before an import.
    await check_bucket_scope(svc, req.context)
    run_start.check_load(svc)
    conversation_id, key = await conversation_for(svc, ident, req)
    chat = ChatInput(req.question, req.context_type, req.context, conversation_id, req.multitask)
    try:
        run = await run_start.start_run(svc, ident, chat, key=key)
    except IdempotencyKeyUsed:  # the same transcript again (regenerate): it runs again, the first keeps the key
        run = await run_start.start_run(svc, ident, chat)
    cut = AnswerCut(req.max_tokens, req.stop) if req.max_tokens is not None or req.stop else None
    tr = Translator(f"chatcmpl-{run.id}", req.model, int(time.time()), include_usage=req.include_usage, cut=cut)
    headers = {"X-Run-Id": run.id, "X-Conversation-Id": run.conversation_id}
    if req.stream:
        following = run_streams.follow_started(svc, run, cancel_on_exit=True)
        return run_streams.sse(_stream(following.batches, tr), svc, headers)
    async with contextlib.aclosing(run_streams.follow_started(svc, run, cancel_on_exit=False).batches) as batches:
        async for batch in batches:
            for item in batch or ():
                tr.feed(item)
    if tr.status == "completed" and tr.error is None:
        return ORJSONResponse(tr.completion(), headers=headers)
    if tr.status is None and tr.awaiting is not None:
        return ORJSONResponse(_awaiting_body(run.id, tr.awaiting), 409, headers=headers)
    err = tr.error or {"message": "the server stopped before the run ended; retry", "code": "interrupted"}
    status = _failure_status(err["code"]) if tr.status is not None else 503
    return ORJSONResponse(error_body(err["message"], err["code"], status), status, headers=headers)


def _awaiting_body(run_id: str, wait: events.ApprovalRequired) -> dict[str, Any]:
    """The answer of a run that waits for an approval: an OpenAI client cannot decide, so
    it is told where the decision goes (the run stays stored, waiting)."""
    return error_body(
        f"the run waits for an approval of {wait.tool_name}: "
        f"POST /v1/agent/runs/{run_id}/approvals/{wait.tool_use_id}, then read /v1/agent/runs/{run_id}/events",
        "approval_required",
        409,
    )


async def _stream(source: Batches, tr: Translator) -> AsyncIterator[bytes]:
    yield frame(tr.chunk({"role": "assistant", "content": ""}))
    async for part in translated(source, tr.feed):
        yield part
    if tr.status is None:  # no ending stored: what was held back goes out before the error that ends it
        for part in tr.held():
            yield part
    if tr.status is None and tr.awaiting is not None:  # parked: the decision goes to its own route
        yield frame(_awaiting_body(tr.id.removeprefix("chatcmpl-"), tr.awaiting))  # the id names the run
    elif tr.status is None and tr.error is not None:  # no ending stored (the database away): this error is the end
        yield frame(error_body(tr.error["message"], tr.error["code"], _failure_status(tr.error["code"])))
    elif tr.status is None:  # released at shutdown: an OpenAI client cannot resume a stream
        yield frame(error_body("the server restarted before the run ended; retry", "interrupted", 503))
    yield DONE
