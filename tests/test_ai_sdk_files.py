"""The AI SDK's ``file`` parts become attachments of the chat's conversation (before, they
were dropped in silence: 200, the file neither attached nor refused). Over a served app
with two JWT users: a PDF sent as a ``data:`` URL with a question is stored as the
attachments route stores it and the answer comes from it (the ``ai`` package's reader
validates the stream); sent again it is stored once; Bob's chat of the same id neither
sees nor finds it; what the route refuses is refused the same way here, before anything
is stored; a run the admission refuses leaves no attachment behind."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import httpx
import orjson

from app.config import Settings
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.test_ai_sdk_stream import js, node, of
from tests.test_attachments import FACT, QUESTION
from tests.test_compat_faces_owners import bearer, env
from tests.test_seed004_sources_clarify_plan import _pdf

__all__ = ["node"]  # the fixture, shared with the AI SDK tests

ALICE, BOB = bearer("alice"), bearer("bob")


def data_url(raw: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


def with_file(chat_id: str, text: str, file: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The body ``sendMessage({text, files})`` posts: the file parts, then the text."""
    message = {"id": "msg-user-1", "role": "user", "parts": [{"type": "file", **file}, {"type": "text", "text": text}]}
    return {"id": chat_id, "messages": [message], "trigger": "submit-message", "messageId": None, **extra}


async def attachments(http: httpx.AsyncClient, chat_id: str, head: dict[str, str]) -> httpx.Response:
    return await http.get(f"/v1/agent/conversations/{chat_id}/attachments", headers=head)


async def test_a_pdf_file_part_is_attached_and_answers_the_question(node: str, tmp_path: Path) -> None:
    pdf = tmp_path / "manual.pdf"
    _pdf(pdf, ["The Quillfeather lighthouse manual, page one.", FACT])
    raw = pdf.read_bytes()
    part = {"mediaType": "application/pdf", "filename": "manual.pdf", "url": data_url(raw, "application/pdf")}
    body = with_file("chat-pdf", QUESTION, part)
    async with (
        running_app(Settings.from_env(env(tmp_path)), provider=ExtractiveProvider()) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        async with js(node, mode="reader", url=f"{base}/v1/agent/ui-stream", body=body, headers=ALICE) as client:
            records = await client.finish()
        [response] = of(records, "response")
        assert response["status"] == 200
        assert not of(records, "error"), records
        [message] = [r["message"] for r in of(records, "message")]
        text = "".join(p["text"] for p in message["parts"] if p["type"] == "text")
        assert "seven minutes past dawn" in text, message  # answered from the attached PDF
        sources = [p for p in message["parts"] if p["type"] in ("source-url", "source-document")]
        assert any("manual.pdf" in str(s) for s in sources), sources
        listed = (await attachments(http, "chat-pdf", ALICE)).json()["attachments"]
        assert [(a["filename"], a["media_type"], a["size"]) for a in listed] == [
            ("manual.pdf", "application/pdf", len(raw))]

        # The same message sent again (a retry; useChat sends every file with its message): stored once.
        again = await http.post("/v1/agent/ui-stream", json=body, headers=ALICE)
        assert again.status_code == 200, again.text
        assert len((await attachments(http, "chat-pdf", ALICE)).json()["attachments"]) == 1

        # Bob's chat of the same id is his own: he has no such attachment and cannot find it.
        assert (await attachments(http, "chat-pdf", BOB)).status_code == 404
        plain = {"id": "chat-pdf", "trigger": "submit-message", "messageId": None, "messages": [
            {"id": "m1", "role": "user", "parts": [{"type": "text", "text": QUESTION}]}]}
        bobs = await http.post("/v1/agent/ui-stream", json=plain, headers=BOB)
        assert bobs.status_code == 200 and "seven minutes past dawn" not in bobs.text


async def test_file_parts_the_attachments_route_refuses_are_refused_before_anything_is_stored(
    tmp_path: Path,
) -> None:
    note = b"# Notes\n\n" + b"The keeper rings the bell at dawn. " * 80  # 2.8 kB: within the attachment limit
    # A body of more than AGENT_MAX_BODY_BYTES is read when a file part makes it so.
    settings = Settings.from_env(env(tmp_path, AGENT_ATTACHMENT_MAX_BYTES="4096", AGENT_MAX_BODY_BYTES="2048"))
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        ({"mediaType": "application/pdf", "filename": "a.pdf", "url": "https://example.com/a.pdf"},
         400, "unsupported_part", "/attachments"),
        ({"mediaType": "application/zip", "filename": "a.zip", "url": data_url(b"PK\x03\x04zip", "application/zip")},
         415, "unsupported_media_type", "a.zip"),
        ({"mediaType": "text/markdown", "filename": "big.md", "url": data_url(b"x" * 5000, "text/markdown")},
         413, "file_too_large", "4096"),
        ({"mediaType": "text/markdown", "filename": "bad.md", "url": "data:text/markdown;base64,@@not base64@@"},
         400, "invalid_field", "base64"),
        ({"mediaType": "text/markdown", "filename": "empty.md", "url": "data:text/markdown;base64,"},
         400, "empty_file", "empty"),
    ]
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        for i, (part, status, code, named) in enumerate(cases):
            r = await http.post("/v1/agent/ui-stream", json=with_file(f"chat-bad-{i}", "What is in it?", part),
                                headers=ALICE)
            assert r.status_code == status, (part["filename"], r.text)
            assert r.json()["error"] == code and named in r.json()["detail"], r.text
            assert (await attachments(http, f"chat-bad-{i}", ALICE)).status_code == 404  # nothing made
        assert await app.state.services.storage.history.list_runs("alice", conversation_id=None, limit=10) == []
        # Markdown, as the route takes it, without a file name: its media type says its kind.
        ok = {"mediaType": "text/markdown", "url": data_url(note, "text/markdown")}
        assert len(orjson.dumps(with_file("chat-ok", "What is in it?", ok))) > 2048
        r = await http.post("/v1/agent/ui-stream", json=with_file("chat-ok", "What is in it?", ok), headers=ALICE)
        assert r.status_code == 200, r.text
        [entry] = (await attachments(http, "chat-ok", ALICE)).json()["attachments"]
        assert entry["media_type"] == "text/markdown" and entry["size"] == len(note)


async def test_a_file_sent_with_a_refused_message_is_not_left_behind(tmp_path: Path) -> None:
    """The file is stored before the run is admitted (the run must find it); when the
    admission refuses — here 409 ``conversation_busy``, a run of the chat live at a gate
    and ``multitask: reject`` — it is removed again."""
    gate = Gate()
    provider = GatedProvider([GatedTurn(["Working. ", gate, "Done."])])
    first = {"id": "chat-refused", "trigger": "submit-message", "messageId": None, "context_type": "workflow",
             "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "Plan a flow."}]}]}
    note = {"mediaType": "text/plain", "filename": "n.txt", "url": data_url(b"a note on the flow", "text/plain")}
    async with (
        running_app(Settings.from_env(env(tmp_path)), provider=provider) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        live = asyncio.create_task(http.post("/v1/agent/ui-stream", json=first, headers=ALICE))
        await within(gate.reached.wait(), "the first run to reach its gate")
        r = await http.post("/v1/agent/ui-stream", headers=ALICE, json=with_file(
            "chat-refused", "And this?", note, context_type="workflow", multitask="reject"))
        assert r.status_code == 409 and r.json()["error"] == "conversation_busy", r.text
        assert (await attachments(http, "chat-refused", ALICE)).json()["attachments"] == []
        gate.open()
        assert (await within(live, "the first run to end")).status_code == 200
