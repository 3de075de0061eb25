"""The OpenAI face's translation of a run's events into ``chat.completion.chunk`` frames.

Why apart from the routes (``app/server/openai_compat.py``): this is the per-token hot
path and the one place that decides what an OpenAI client sees of a run — the answer's
text with its citations numbered (``CitationNumbers``), cut to the client's
``max_tokens``/``stop`` (``AnswerCut``), every other native event riding in an
``agentchat`` field of an empty-delta chunk — and the same state is the non-streamed
answer (``Translator.completion``). The routes decide which run and conversation; this
module only reads events.
"""

from __future__ import annotations

from typing import Any, assert_never

import orjson

import events
from agenttools.rag.policy import PERPLEXITY_SEARCH
from app.runs.follow import Followed
from app.server.compat_runs import AnswerText
from app.server.openai_citations import CitationNumbers
from app.server.openai_cut import AnswerCut
from app.server.openai_errors import error_body


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
            case events.ToolCallResult(tool_name=tool, is_error=False) if tool == PERPLEXITY_SEARCH:
                self.citations.read_web_answer()  # the answer's bare [n] may be its pages
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
