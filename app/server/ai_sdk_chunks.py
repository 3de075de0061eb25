"""Run events → Vercel AI SDK UI message chunks, for one assistant message (``UIChunks``).

The routes that serve them are ``app/server/ai_sdk_stream.py``; this is the translation
alone, kept apart so the mapping reads in one place and can be checked without a server.

The mapping (docs/compatible-faces.md "AI SDK UI message stream"): each model turn is a step
(``start-step``/``finish-step``); streamed text is a text part; each tool call is a
``dynamic`` and ``providerExecuted`` tool part (``tool-input-start``,
``tool-input-available`` with the arguments the call ran with — ``tool_call_result``'s
``arguments``; ``null`` when they were too long to stream —, then
``tool-output-available`` with ``{summary, duration_ms}``, the result in the line the
native stream shows, or ``tool-output-error``; a call the message ends without — the
model stream failed, the run was cancelled or released after ``tool_call_start`` — ends
in the SDK's ``tool-input-error`` when its input never came, else ``tool-output-error``,
so no part stays ``input-streaming`` for ever); the ``response`` event's sources become
``source-url`` (they have a link) or ``source-document`` parts, and an answer that was
not streamed as text becomes one; previews and clarifications are
``data-workflow-preview``, ``data-table-config-preview``,
``data-table-config-validation-error``, ``data-clarification`` parts; other native
events are transient ``data-<event>`` parts (``onData`` only); ``error`` is an ``error``
chunk; the end is ``finish`` (metadata: run and conversation ids, status, usage,
confidence) — or ``abort`` for a cancelled run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, assert_never

import msgspec
import orjson
from msgspec import UnsetType

import events
from app.agent.approvals import REJECTED_BY_USER
from app.runs.follow import Followed
from app.server.compat_runs import AnswerText

#: Native events with a part of their own; ``response``/``clarification`` also add text.
DATA_PARTS = {
    events.WorkflowPreview.name: "data-workflow-preview",
    events.TableConfigPreview.name: "data-table-config-preview",
    events.TableConfigValidationError.name: "data-table-config-validation-error",
    events.Clarification.name: "data-clarification",
}
_TOOL = {"dynamic": True, "providerExecuted": True}


class UIChunks:
    """Run events → UI message chunks (dicts), in order, for one assistant message.

    ``skip``: the event ids (``seq``, counted from 1 as the events arrive — every stream
    here reads a run from its first event) a restart discarded, a model turn cut off and
    streamed again. The native face sends them and lets ``run_resumed.discarded`` tell the
    client to drop them; a UI message cannot take a part back, so they are left out.

    ``hold``: the event ids of a model turn the stored log ended inside when a resume of
    a run of another process began (``recovery.unsettled_span``) — a turn its owner may
    never finish: killed, its lease not yet expired, a take-over would discard it. They
    are held back, not shown, until the first event after them says which it is: a
    ``run_resumed`` whose ``discarded`` names them drops them (the re-run turn then
    streams once); any other event is the owner going on, and they are sent then, ahead
    of it. A stream that ends first (the run released, the log unreadable) never sends
    them: its message ends asking for a resume, which replays the run from its start."""

    def __init__(
        self,
        run_id: str,
        conversation_id: str,
        skip: Sequence[tuple[int, int]] = (),
        hold: tuple[int, int] | None = None,
    ) -> None:
        self.message_id = run_id
        self.skip = tuple(skip)
        self.hold = hold
        self._held: list[Followed] = []
        self.seq = 0
        self.metadata: dict[str, Any] = {"run_id": run_id, "conversation_id": conversation_id}
        self.answer = AnswerText()
        self.step_open = False
        self.text_id: str | None = None
        self._delta_head = b""
        self.parts = 0
        self.tools: dict[str, str] = {}
        self.done = False
        #: The last event was ``approval_required``: the run waits for a decision, stored.
        self.awaiting_approval = False
        #: Calls whose tool part the client already holds (the one an approval reply
        #: answered): their start is not sent again, only their result.
        self.client_has: set[str] = set()
        #: Calls whose input the client has been sent (``tool-input-available``).
        self.inputs: set[str] = set()
        #: Calls whose part reached a final state (an output, an error, a denial).
        self.ended: set[str] = set()
        #: Steps opened so far, and the step each call's part was started in.
        self.steps = 0
        self.call_step: dict[str, int] = {}

    def start(self) -> list[dict[str, Any]]:
        return [{"type": "start", "messageId": self.message_id, "messageMetadata": dict(self.metadata)}]

    def _id(self, kind: str) -> str:
        self.parts += 1
        return f"{kind}-{self.parts}"

    def _close_text(self, out: list[dict[str, Any]]) -> None:
        if self.text_id is not None:
            out.append({"type": "text-end", "id": self.text_id})
            self.text_id = None

    def _step(self, out: list[dict[str, Any]]) -> None:
        if not self.step_open:
            out.append({"type": "start-step"})
            self.step_open = True
            self.steps += 1

    def _end_step(self, out: list[dict[str, Any]]) -> None:
        self._close_text(out)
        if self.step_open:
            out.append({"type": "finish-step"})
            self.step_open = False

    def _text(self, out: list[dict[str, Any]], text: str) -> None:
        if not text:
            return
        self._step(out)
        if self.text_id is None:
            self.text_id = self._id("text")
            self._delta_head = b'data: {"type":"text-delta","id":' + orjson.dumps(self.text_id) + b',"delta":'
            out.append({"type": "text-start", "id": self.text_id})
        out.append({"type": "text-delta", "id": self.text_id, "delta": text})

    def _whole_text(self, out: list[dict[str, Any]], text: str) -> None:
        """Text the client has not seen yet (a final answer, a clarification), as its own part."""
        if self.answer.owed(text):
            self._close_text(out)
            self._text(out, text)
            self._close_text(out)

    def _tool_start(self, out: list[dict[str, Any]], call_id: str, name: str) -> None:
        self._close_text(out)
        self._step(out)
        self.tools[call_id] = name
        self.call_step[call_id] = self.steps
        out.append({"type": "tool-input-start", "toolCallId": call_id, "toolName": name, **_TOOL})

    def _input(self, out: list[dict[str, Any]], call_id: str, name: str, arguments: Any) -> None:
        """``tool-input-available`` once per call, with the arguments the call ran with:
        the native ``tool_call_start`` comes as the model begins the call, before its
        arguments, so the part stays ``input-streaming`` until they are known."""
        if call_id in self.inputs:
            return
        self.inputs.add(call_id)
        out.append({"type": "tool-input-available", "toolCallId": call_id, "toolName": name, "input": arguments,
                    **_TOOL})

    def wire(self, item: Followed) -> bytes:
        """``feed`` as SSE bytes; a token inside an open text part takes the short way.
        Events of the held turn wait (``hold``); the first logged one after it settles them."""
        self.seq += 1
        if self.hold is not None and item.seq:  # an event not in the log (id 0) says nothing of the turn
            first, last = self.hold
            if item.seq <= last:
                if item.seq >= first:
                    self._held.append(item)
                    return b""
            else:
                return self._settle(item)
        return self._wire(self.seq, item)

    def _settle(self, item: Followed) -> bytes:
        """The first event after the held turn: every ``run_resumed`` among the held
        events and it adds what it discarded to ``skip``, then the held events go out
        (those discarded are left out, as any other) ahead of ``item``."""
        self.hold = None
        pending, self._held = [*self._held, item], []
        for ev in pending:
            if ev.name == events.RunResumed.name:
                resumed = ev.event
                if isinstance(resumed, events.RunResumed) and resumed.discarded is not None:
                    self.skip += ((resumed.discarded.from_seq, resumed.discarded.to_seq),)
        return b"".join(self._wire(ev.seq, ev) for ev in pending)

    def _wire(self, seq: int, item: Followed) -> bytes:
        if any(first <= seq <= last for first, last in self.skip):
            return b""
        event = item.event
        if isinstance(event, events.ContentChunk) and self.text_id is not None:
            self.answer.chunk(event.chunk)
            if not event.chunk:
                return b""
            return self._delta_head + orjson.dumps(event.chunk) + b"}\n\n"
        return frames(self.feed(item))

    def feed(self, item: Followed) -> list[dict[str, Any]]:
        """The UI chunks of one run event; an event's ``data`` passed on whole is its stored
        JSON spliced in as is (``orjson.Fragment``: never decoded or encoded again)."""
        out: list[dict[str, Any]] = []
        event = item.event
        self.awaiting_approval = isinstance(event, events.ApprovalRequired)
        match event:
            case events.ContentChunk(chunk=chunk):
                self.answer.chunk(chunk)
                self._text(out, chunk)
            case events.MessageStart():
                self._end_step(out)
                self._step(out)
                self.answer.new_turn()
            case events.ToolCallStart(tool_use_id=call_id, tool_name=tool_name):
                if call_id in self.client_has:
                    self.tools[call_id] = tool_name
                else:
                    self._tool_start(out, call_id, tool_name)
            case events.ToolCallResult():
                self._tool_result(out, event)
            case events.ApprovalRequired(tool_use_id=call_id, tool_name=tool_name, arguments=arguments):
                self._approval_request(out, call_id, tool_name, arguments)
            case events.Response():
                self._whole_text(out, event.answer)
                out.extend(self._sources(event.sources))
                self._answer_metadata(event, item)
            case events.Error(message=message, code=code):
                self._close_text(out)
                self._end_calls(out, message or "the run failed")
                out.append({"type": "error", "errorText": message or "the run failed"})
                self.metadata["error_code"] = code
            case events.MessageComplete():
                out.extend(self._finish(event))
            case events.RunStarted():
                pass  # the ``start`` chunk already carries the run and conversation ids
            case events.WorkflowPreview() | events.TableConfigPreview() | events.TableConfigValidationError():
                out.append({"type": DATA_PARTS[item.name], "data": orjson.Fragment(item.data)})
            case events.Clarification(missing_info=missing_info):
                out.append({"type": DATA_PARTS[item.name], "data": orjson.Fragment(item.data)})
                self._whole_text(out, missing_info)
            case events.RunResumed() | events.ToolSelection() | events.Heartbeat() | events.UnknownEvent():
                out.append({"type": "data-" + item.name.replace("_", "-"), "data": orjson.Fragment(item.data),
                            "transient": True})
            case _:
                assert_never(event)
        return out

    def _answer_metadata(self, event: events.Response, item: Followed) -> None:
        """The answer's confidence and knowledge flags, as the run encoded them. Read back
        from the log, a confidence written as ``1`` decodes as ``1.0``: there the value is
        taken from the stored JSON (one decode per run, for the one event that needs it)."""
        confidence: Any = event.confidence_score
        if not item.kept and isinstance(confidence, float) and confidence.is_integer():
            confidence = orjson.loads(item.data).get("confidence_score")
        self.metadata["confidence_score"] = confidence
        self.metadata["used_internal_kb"] = event.used_internal_kb
        self.metadata["used_external_kb"] = event.used_external_kb

    def _approval_request(self, out: list[dict[str, Any]], call_id: str, name: str, arguments: Any) -> None:
        """The SDK's own tool-approval part (``ai`` 6): the call's input made available,
        then ``tool-approval-request`` (its ``approvalId`` is the ``tool_use_id`` the
        decision route takes), so ``useChat`` shows the part in ``approval-requested``."""
        if call_id not in self.tools:
            self._tool_start(out, call_id, name)
        self._input(out, call_id, name, arguments)
        out.append({"type": "tool-approval-request", "approvalId": call_id, "toolCallId": call_id})

    def _end_calls(self, out: list[dict[str, Any]], why: str) -> None:
        """Every call the message ends without a result reaches a final state: the SDK's
        ``tool-input-error`` (input ``null``) when its input never came — the model
        stream broke off mid-call —, ``tool-output-error`` when the call had its input
        (or its part is in an earlier step, where the SDK's input error would not find
        it) but never its output. Otherwise a ``useChat`` UI shows it running for ever."""
        for call_id in [*self.tools, *(c for c in self.client_has if c not in self.tools)]:
            if call_id in self.ended:
                continue
            self.ended.add(call_id)
            began_here = self.step_open and self.call_step.get(call_id) == self.steps
            if call_id in self.inputs or call_id in self.client_has or not began_here:
                out.append({"type": "tool-output-error", "toolCallId": call_id, "errorText": why, **_TOOL})
            else:
                out.append({"type": "tool-input-error", "toolCallId": call_id, "toolName": self.tools[call_id],
                            "input": None, "errorText": why, **_TOOL})

    def _tool_result(self, out: list[dict[str, Any]], event: events.ToolCallResult) -> None:
        call_id = event.tool_use_id
        self.ended.add(call_id)
        if call_id not in self.tools and call_id not in self.client_has:  # the SDK needs the part first
            self._tool_start(out, call_id, event.tool_name)
        if call_id not in self.client_has:
            arguments = None if isinstance(event.arguments, UnsetType) else event.arguments
            self._input(out, call_id, event.tool_name, arguments)
        if event.is_error and isinstance(event.error, str) and event.error.startswith(REJECTED_BY_USER):
            out.append({"type": "tool-output-denied", "toolCallId": call_id})
        elif event.is_error:
            error = event.error if isinstance(event.error, str) and event.error else "the tool call failed"
            out.append({"type": "tool-output-error", "toolCallId": call_id, "errorText": error, **_TOOL})
        else:
            # What came back, in the line the native stream shows (``summary``).
            output: dict[str, Any] = {"duration_ms": event.duration_ms}
            if isinstance(event.summary, str):
                output = {"summary": event.summary, **output}
            out.append({"type": "tool-output-available", "toolCallId": call_id, "output": output, **_TOOL})

    @staticmethod
    def _sources(sources: Sequence[events.Source]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for s in sources:
            if not s.id:
                continue
            title = s.title or s.id
            extra: dict[str, Any] = {"kind": s.kind}
            if not isinstance(s.location, UnsetType):
                extra["location"] = s.location
            if not isinstance(s.metadata, UnsetType):
                extra["metadata"] = msgspec.to_builtins(s.metadata)
            meta = {"agentchat": extra}
            if isinstance(s.url, str) and s.url:
                out.append({"type": "source-url", "sourceId": s.id, "url": s.url, "title": title,
                            "providerMetadata": meta})
            else:
                media = s.metadata.get("media_type") if isinstance(s.metadata, dict) else None
                out.append({"type": "source-document", "sourceId": s.id, "title": title,
                            "mediaType": str(media or "text/plain"), "providerMetadata": meta})
        return out

    def released(self) -> list[dict[str, Any]]:
        """The message's end when this process let the run go (shutdown) before its end:
        open calls end (a resume replays the run from its start, so the next stream
        rebuilds them), then an ``error`` that says to resume."""
        out: list[dict[str, Any]] = []
        self._close_text(out)
        text = "the server restarted before the run ended; resume the stream"
        self._end_calls(out, text)
        return [*out, {"type": "error", "errorText": text}]

    def paused(self) -> list[dict[str, Any]]:
        """The message's end while the run waits for an approval (its stream ends there):
        the step closes and the message finishes on ``tool-calls``, as the SDK's own
        approval flow does; the decision's route carries the run on, and a resume
        (``GET …/stream``) reads the rest."""
        out: list[dict[str, Any]] = []
        self._end_step(out)
        self.metadata.update(status="waiting_approval")
        return [*out, {"type": "finish", "finishReason": "tool-calls", "messageMetadata": self.metadata}]

    def _finish(self, event: events.MessageComplete) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cancelled = event.status == "cancelled"
        self._close_text(out)
        self._end_calls(out, "the run was cancelled" if cancelled else "the run ended before the call finished")
        self._end_step(out)
        self.done = True
        if cancelled:
            return [*out, {"type": "abort", "reason": "the run was cancelled"}]
        self.metadata.update(status=event.status, usage=msgspec.to_builtins(event.usage), turns=event.turns)
        reason = "stop" if event.status == "completed" else "error"
        return [*out, {"type": "finish", "finishReason": reason, "messageMetadata": self.metadata}]


def frames(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
