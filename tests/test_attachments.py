"""Issue 25 item 4: a conversation's attachments, over a served app with two JWT users.

Alice drops a Markdown file into one conversation: a knowledge question there is answered
from it (a citation naming the file, default offline answerer); her other conversation
and Bob's never find it; nobody else sees or removes it (404); bad uploads are 4xx; the
shared bucket listing does not show it; deleting the conversation removes it.
``scenario`` runs again over PostgreSQL in ``tests/storage/test_attachments_pg.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from client import AgentClient, APIError
from knowledge.attachments import attachment_bucket
from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.test_compat_faces_owners import bearer, env
from tests.test_seed004_sources_clarify_plan import _pdf

ALICE, BOB = bearer("alice"), bearer("bob")
FACT = "The Quillfeather lighthouse keeper rings the brass bell at seven minutes past dawn."
NOTE = f"# Quillfeather lighthouse\n\n{FACT}\n\nThe keeper's logbook is kept in the lamp room.\n"
QUESTION = "When does the Quillfeather lighthouse keeper ring the brass bell?"


async def ask(http: httpx.AsyncClient, head: dict[str, str], conversation: str) -> dict[str, Any]:
    """The ``response`` event of a knowledge question in ``conversation``."""
    body = {"message": QUESTION, "context_type": "knowledge", "conversation_id": conversation}
    started = await http.post("/v1/agent/runs", json=body, headers=head)
    assert started.status_code == 201, started.text
    events = await collect_sse(http, "GET", f"/v1/agent/runs/{started.json()['run_id']}/events", headers=head)
    assert events[-1].event == "message_complete"
    responses = [e.json() for e in events if e.event == "response"]
    assert responses, [e.event for e in events]
    return responses[-1]  # type: ignore[no-any-return]


def cites_note(response: dict[str, Any]) -> bool:
    """The answer cites the attachment by its file name and states its fact."""
    named = any("lighthouse notes.md" in str(s) for s in response["sources"])
    return named and "seven minutes past dawn" in response["answer"]


async def attach(
    http: httpx.AsyncClient,
    head: dict[str, str],
    conversation: str,
    name: str,
    data: bytes,
    ctype: str = "text/markdown",
) -> httpx.Response:
    files = {"file": (name, data, ctype)}
    return await http.post(f"/v1/agent/conversations/{conversation}/attachments", files=files, headers=head)


async def scenario(settings: Settings, engine: str = "sqlite") -> None:
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        assert app.state.services.storage.engine == engine
        kb = app.state.services.rooms.named("knowledge").kb
        # A conversation Alice does not have yet is created by her first upload.
        up = await attach(http, ALICE, "a-one", "lighthouse notes.md", NOTE.encode())
        assert up.status_code == 201, up.text
        note = up.json()
        assert note["filename"] == "lighthouse notes.md" and note["media_type"] == "text/markdown"
        assert note["size"] == len(NOTE.encode()) and note["chunks"] >= 1 and note["created_at"]
        listed = (await http.get("/v1/agent/conversations/a-one/attachments", headers=ALICE)).json()["attachments"]
        assert [a["id"] for a in listed] == [note["id"]]
        assert set(listed[0]) >= {"id", "filename", "size", "media_type", "chunks", "created_at"}

        # --- only Alice, only in a-one ------------------------------------------------------
        for method, url in (
            ("GET", "/v1/agent/conversations/a-one/attachments"),
            ("DELETE", f"/v1/agent/conversations/a-one/attachments/{note['id']}"),
        ):
            assert (await http.request(method, url, headers=BOB)).status_code == 404, url
        assert (await http.get("/v1/agent/conversations/a-one/attachments")).status_code == 401
        assert cites_note(await ask(http, ALICE, "a-one"))
        assert not cites_note(await ask(http, ALICE, "a-two"))
        assert not cites_note(await ask(http, BOB, "a-one"))  # his own a-one
        assert not cites_note(await ask(http, BOB, "b-one"))
        # Not among the shared buckets, not reachable by naming its bucket.
        private = attachment_bucket("alice", "a-one")
        assert private not in {b.name for b in await kb.list_buckets()}
        assert all(d["bucket"] != private for d in await kb.list_documents(limit=1000))
        assert not (await kb.search(QUESTION, buckets=["*"])).hits
        assert await kb.get_document(note["id"]) is None

        # --- bad uploads: 4xx with a reason ---------------------------------------------------
        png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
        bad = {
            "binary": await attach(http, ALICE, "a-one", "notes.md", png),
            "unknown type": await attach(http, ALICE, "a-one", "tool.exe", b"text", "application/octet-stream"),
            "too big": await attach(http, ALICE, "a-one", "big.txt", b"a " * (settings.attachment_max_bytes // 2 + 1)),
            "empty": await attach(http, ALICE, "a-one", "empty.txt", b""),
            "missing file part": await http.post(
                "/v1/agent/conversations/a-one/attachments", files={"other": ("x.md", b"# x")}, headers=ALICE
            ),
            "not multipart": await http.post(
                "/v1/agent/conversations/a-one/attachments", json={"file": "x"}, headers=ALICE
            ),
            "bad conversation id": await attach(http, ALICE, "bad id!", "x.md", b"# x"),
        }
        expected = {
            "binary": 415,
            "unknown type": 415,
            "too big": 413,
            "empty": 400,
            "missing file part": 400,
            "not multipart": 415,
            "bad conversation id": 400,
        }
        assert {k: r.status_code for k, r in bad.items()} == expected, {k: r.text for k, r in bad.items()}
        assert all(r.json().get("detail") or r.json().get("message") for r in bad.values()), [
            r.text for r in bad.values()
        ]

        # --- remove one; the conversation's delete removes the rest ---------------------------
        second = await attach(
            http, ALICE, "a-one", "page.html", b"<html><body><p>Harbour tide tables.</p></body></html>", "text/html"
        )
        assert second.status_code == 201, second.text
        gone = await http.delete(f"/v1/agent/conversations/a-one/attachments/{second.json()['id']}", headers=ALICE)
        assert gone.status_code == 204
        again = await http.delete(f"/v1/agent/conversations/a-one/attachments/{second.json()['id']}", headers=ALICE)
        assert again.status_code == 404
        listed = (await http.get("/v1/agent/conversations/a-one/attachments", headers=ALICE)).json()["attachments"]
        assert [a["id"] for a in listed] == [note["id"]]
        assert (await http.delete("/v1/agent/conversations/a-one", headers=ALICE)).status_code == 204
        assert (await http.get("/v1/agent/conversations/a-one/attachments", headers=ALICE)).status_code == 404
        assert await kb.list_documents(bucket=private, private=private) == []
        assert not cites_note(await ask(http, ALICE, "a-one"))  # a new a-one, without the file


async def test_attachments(tmp_path: Path) -> None:
    await scenario(Settings.from_env(env(tmp_path)))


async def test_idle_conversation_deleted_by_retention_takes_its_attachments(tmp_path: Path) -> None:
    """AGENT_CONVERSATION_RETENTION_DAYS: the background pass deletes an idle conversation
    and, with it, the files attached to it."""
    days = 0.2 / 86_400  # idle after 0.2 s
    settings = Settings.from_env(
        env(tmp_path, AGENT_CONVERSATION_RETENTION_DAYS=f"{days:.10f}", AGENT_RETENTION_INTERVAL_S="0.05")
    )
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        kb = app.state.services.rooms.named("knowledge").kb
        private = attachment_bucket("alice", "idle")
        assert (await attach(http, ALICE, "idle", "lighthouse notes.md", NOTE.encode())).status_code == 201
        for _ in range(1000):
            gone = (await http.get("/v1/agent/conversations/idle/attachments", headers=ALICE)).status_code == 404
            if gone and not await kb.list_documents(bucket=private, private=private):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the idle conversation's attachments were not removed")


async def test_python_client_attachments(tmp_path: Path) -> None:
    """``AgentClient.attach`` / ``attachments`` / ``delete_attachment``, owner and stranger."""
    async with (
        running_app(Settings.from_env(env(tmp_path)), provider=ExtractiveProvider()) as (base, _),
        AgentClient(base, ALICE["Authorization"].removeprefix("Bearer ")) as alice,
        AgentClient(base, BOB["Authorization"].removeprefix("Bearer ")) as bob,
    ):
        note = await alice.attach("c-client", NOTE.encode(), "lighthouse notes.md")
        assert note.filename == "lighthouse notes.md" and note.media_type == "text/markdown" and note.chunks >= 1
        assert [a.id for a in await alice.attachments("c-client")] == [note.id]
        for refused in (bob.attachments("c-client"), bob.delete_attachment("c-client", note.id)):
            with pytest.raises(APIError) as caught:
                await refused
            assert caught.value.status == 404
        with pytest.raises(APIError) as caught:
            await alice.attach("c-client", b"\x7fELF\x02\x01\x01" + bytes(64), "tool.md")
        assert caught.value.status == 415
        await alice.delete_attachment("c-client", note.id)
        assert await alice.attachments("c-client") == ()
        # A PDF goes through pypdf, as in the ingest (its pages kept for citations).
        pdf = tmp_path / "manual.pdf"
        _pdf(pdf, ["The Quillfeather lighthouse manual, page one.", FACT])
        manual = await alice.attach("c-client", pdf.read_bytes(), "manual.pdf")
        assert manual.media_type == "application/pdf" and manual.chunks >= 1 and manual.size == pdf.stat().st_size
