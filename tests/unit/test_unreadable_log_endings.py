"""A follower that cannot read a run's log (the database away) ends every face's stream
with one ``error`` (``storage_unavailable``) and no made-up ending: the native frame has
no ``id:`` (``Last-Event-ID`` stays on the last logged event), and the AI SDK message
gets that one error part — not a second "the server restarted" one after it."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import orjson

from app.runs.follow import Followed, unreadable
from app.server.ai_sdk_chunks import UIChunks
from app.server.ai_sdk_stream import _stream
from app.server.run_streams import native_frames
from storage.errors import StorageUnavailable
from storage.records import RunEvent

STARTED = RunEvent(1, "run_started", '{"run_id":"r1","conversation_id":"c1"}')


async def _batches() -> AsyncGenerator[list[Followed] | None, None]:
    yield [Followed(STARTED)]
    yield unreadable("r1", StorageUnavailable("database unreachable"))


async def test_the_native_frame_has_no_id_and_no_ending() -> None:
    body = b"".join([frame async for frame in native_frames(_batches())]).decode()
    frames = [f for f in body.split("\n\n") if f]
    assert frames[-1].startswith("event: error\ndata: "), frames
    assert "id:" not in frames[-1]
    assert orjson.loads(frames[-1].split("data: ", 1)[1])["code"] == "storage_unavailable"
    assert "message_complete" not in body


async def test_the_ui_message_gets_one_error() -> None:
    body = b"".join([part async for part in _stream(UIChunks("r1", "c1"), _batches())]).decode()
    chunks = [orjson.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
    errors = [c for c in chunks if c["type"] == "error"]
    assert len(errors) == 1 and "Last-Event-ID" in errors[0]["errorText"], chunks
    assert "finish" not in [c["type"] for c in chunks]
    assert body.endswith("data: [DONE]\n\n")


async def test_the_openai_stream_ends_with_that_one_error_and_done() -> None:
    """The OpenAI-compatible stream's documented error form after it started: one error
    chunk with the run's code, then ``[DONE]`` (before: an ``interrupted`` 'the server
    restarted' error instead of the storage_unavailable one, which rode only as an extra)."""
    from app.server.openai_chunks import Translator
    from app.server.openai_compat import _stream as openai_stream

    tr = Translator("chatcmpl-r1", "agent", 0, include_usage=False)
    body = b"".join([part async for part in openai_stream(_batches(), tr)]).decode()
    chunks = [orjson.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
    errors = [c["error"] for c in chunks if "error" in c]
    assert [e["code"] for e in errors] == ["storage_unavailable"], chunks
    assert "Last-Event-ID" in errors[0]["message"]
    assert not any(c.get("choices") and c["choices"][0].get("finish_reason") for c in chunks), chunks
    assert body.endswith("data: [DONE]\n\n")
