"""The OpenAI-compatible provider's lean stream reader (``llm.openai.sse_chunks``, issue
23): each ``data:`` field decoded once into a dict, whatever way the bytes are cut, as
the SDK's own SSE reader reads them (multi-line data joined, comments and other fields
skipped, CRLF line ends, ``[DONE]`` ends the stream). The provider against the fake
speaking the wire format is tested in ``tests/test_provider_openai.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from llm.openai import sse_chunks

WIRE = (
    b": keep-alive comment\r\n"
    b"event: message\r\n"
    b'data: {"choices": [{"delta": {"content": "Hel"}}]}\r\n'
    b"\r\n"
    b'data: {"choices": [{"delta":\n'
    b'data:  {"content": "lo"}}]}\n'
    b"id: 7\n"
    b"\n"
    b'data: {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n'
    b"\n"
    b"data: [DONE]\n"
    b"\n"
    b'data: {"after": "done"}\n'
    b"\n"
)
EXPECTED = [
    {"choices": [{"delta": {"content": "Hel"}}]},
    {"choices": [{"delta": {"content": "lo"}}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
]


def response_of(pieces: list[bytes]) -> httpx.Response:
    async def body() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    return httpx.Response(200, content=body())


async def read(pieces: list[bytes]) -> list[dict[str, object]]:
    return [chunk async for chunk in sse_chunks(response_of(pieces))]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(WIRE)])
async def test_every_cut_of_the_bytes_reads_the_same_chunks(size: int) -> None:
    pieces = [WIRE[i : i + size] for i in range(0, len(WIRE), size)]
    assert await read(pieces) == EXPECTED


async def test_an_event_the_body_ends_inside_is_not_dispatched() -> None:
    """The spec's rule, and the SDK's reader's: an event without its blank line is
    incomplete. A body cut mid-event is a stream that ended early, not bad JSON."""
    assert await read([b'data: {"a": 1}\n\ndata: {"b": 2}']) == [{"a": 1}]
    assert await read([b'data: {"a": 1}\n\ndata: {"b": 2}\n']) == [{"a": 1}]
    assert await read([b'data: {"a": 1}\n\ndata: {"choices": [{"del']) == [{"a": 1}]


#: Lines ended by a lone CR (the spec allows CRLF, LF or CR), a multi-line data field
#: among them; and the same with CRLF, whose CR and LF a network chunk may part.
CR_WIRE = (
    b": comment\r"
    b'data: {"choices": [{"delta":\r'
    b'data: {"content": "Hel"}}]}\r'
    b"\r"
    b'data: {"choices": [{"delta": {"content": "lo"}}]}\r'
    b"\r"
    b"data: [DONE]\r"
    b"\r"
)
CR_EXPECTED = [{"choices": [{"delta": {"content": "Hel"}}]}, {"choices": [{"delta": {"content": "lo"}}]}]


@pytest.mark.parametrize("wire", [CR_WIRE, CR_WIRE.replace(b"\r", b"\r\n")], ids=["cr", "crlf"])
@pytest.mark.parametrize("size", [1, 2, 3, 5, 64, len(CR_WIRE) * 2])
async def test_lines_ended_by_cr_alone_or_crlf_cut_anywhere(wire: bytes, size: int) -> None:
    pieces = [wire[i : i + size] for i in range(0, len(wire), size)]
    assert await read(pieces) == CR_EXPECTED


async def test_data_that_is_not_json_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        await read([b"data: {not json\n\n"])
