"""The Python client's history methods (issue 25) against a real server: two JWT users,
each seeing only their own conversations and runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from app.config import Settings
from app.server.auth import sign_hs256
from client import AgentClient, APIError
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app
from tests.test_compat_faces_owners import SECRET, env


def token(sub: str) -> str:
    now = int(time.time())
    return sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)


async def test_client_lists_renames_rates_and_deletes(tmp_path: Path) -> None:
    async with (
        running_app(Settings.from_env(env(tmp_path)), provider=ExtractiveProvider()) as (base, _),
        AgentClient(base, token("alice")) as alice,
        AgentClient(base, token("bob")) as bob,
    ):
        run = await alice.start_run("What is retention?", "knowledge", conversation_id="cl-1")
        async for _ in alice.stream(run.run_id):
            pass
        page = await alice.conversations(limit=5)
        assert [c.id for c in page.conversations] == ["cl-1"] and page.next_cursor is None
        assert (await bob.conversations()).conversations == ()
        renamed = await alice.rename_conversation("cl-1", "Retention")
        assert renamed.title == "Retention" and renamed.last_run_status == "completed"
        info = await alice.get_run(run.run_id)
        assert info.status == "completed" and info.turns and info.ending == {"status": "completed", "error": None}
        assert [r.run_id for r in (await alice.runs("cl-1")).runs] == [run.run_id]
        rated = await alice.feedback(run.run_id, -1, "missed the point")
        assert rated.feedback is not None and rated.feedback.score == -1
        assert rated.feedback.comment == "missed the point"
        for call in (
            bob.get_run(run.run_id),
            bob.feedback(run.run_id, 1),
            bob.delete_conversation("cl-1"),
            bob.rename_conversation("cl-1", "mine"),
        ):
            with pytest.raises(APIError) as refused:
                await call
            assert refused.value.status == 404
        await alice.delete_conversation("cl-1")
        assert (await alice.conversations()).conversations == ()
        with pytest.raises(APIError):
            await alice.get_run(run.run_id)
