"""``agentchat compact`` (a real CLI subprocess) deletes an idle conversation together
with its attachments (issue 25): the documents and chunks of the conversation's private
``att_*`` bucket go with it, as they do with the server's own retention pass, while a
pass that keeps conversations leaves them, on SQLite and PostgreSQL. Two users' conversations of one id have two
buckets; both go, each with its own conversation."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from knowledge.attachments import attachment_bucket
from storage.open import open_storage
from tests.conftest import running_app
from tests.support.deadline import reap, within
from tests.support.procs import REPO, child_env
from tests.test_compat_faces_owners import bearer, env

pytestmark = pytest.mark.slow  # `agentchat` CLI subprocesses

ALICE = bearer("alice")
BOB = bearer("bob")
NOTE = b"# Lighthouse notes\n\nThe lamp is lit at seven minutes past dawn.\n"


async def agentchat(environ: dict[str, str], *argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        *argv,
        cwd=REPO,
        env=child_env(environ),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await within(proc.communicate(), f"agentchat {' '.join(argv)}", 180)
    finally:
        await reap(proc, "agentchat", grace=5)  # left running by a timeout otherwise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def documents_in(db: str, bucket: str) -> tuple[int, int]:
    """(documents, chunks) stored in ``bucket``."""
    storage = await open_storage(db)
    try:
        docs = await storage.runs.sql.fetchone("SELECT count(*) FROM kb_documents WHERE bucket = ?", (bucket,))
        chunks = await storage.runs.sql.fetchone(
            "SELECT count(*) FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id WHERE d.bucket = ?", (bucket,)
        )
        assert docs is not None and chunks is not None
        return int(docs[0]), int(chunks[0])
    finally:
        await storage.close()


async def test_compact_deletes_an_idle_conversations_attachments(shared_db: dict[str, str], tmp_path: Path) -> None:
    environ = env(tmp_path, **shared_db)
    db = environ.get("AGENT_DATABASE_URL") or environ["AGENT_DB_PATH"]
    async with (
        running_app(Settings.from_env(environ)) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        for head in (ALICE, BOB):
            up = await http.post(
                "/v1/agent/conversations/notes/attachments",
                files={"file": ("lighthouse notes.md", NOTE, "text/markdown")},
                headers=head,
            )
            assert up.status_code == 201, up.text
    alice_bucket, bob_bucket = attachment_bucket("alice", "notes"), attachment_bucket("bob", "notes")
    assert (await documents_in(db, alice_bucket))[0] == 1 and (await documents_in(db, alice_bucket))[1] >= 1
    assert (await documents_in(db, bob_bucket))[0] == 1

    code, out, err = await agentchat(environ, "compact", "--conversation-days", "0")  # conversations kept
    assert code == 0, err
    assert "deleted 0 idle conversations (0 attachments removed)" in out
    assert (await documents_in(db, alice_bucket))[0] == 1

    code, out, err = await agentchat(environ, "compact", "--conversation-days", "0.000001")
    assert code == 0, err
    assert "deleted 2 idle conversations (2 attachments removed)" in out, out
    assert await documents_in(db, alice_bucket) == (0, 0)
    assert await documents_in(db, bob_bucket) == (0, 0)
    storage = await open_storage(db)
    try:
        convs = await storage.runs.sql.fetchone("SELECT count(*) FROM conversations", ())
        assert convs is not None and int(convs[0]) == 0
        left = await storage.runs.sql.fetchone("SELECT count(*) FROM kb_buckets WHERE name LIKE 'att_%'", ())
        assert left is not None and int(left[0]) == 0
    finally:
        await storage.close()
