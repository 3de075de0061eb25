"""Issue 25 items 1, 2 and 5 over HTTP: a user's conversations (list, title, rename,
delete), runs (look up, list) and feedback — each route for its owner and for another
JWT user, who must get exactly what an unknown id gets (404, or an empty list).

``scenario`` and ``live_delete`` run again over PostgreSQL in
``tests/storage/test_history_app.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.test_compat_faces_owners import bearer, env

ALICE, BOB = bearer("alice"), bearer("bob")


async def start(http: httpx.AsyncClient, head: dict[str, str], message: str, conversation: str) -> str:
    """A run of ``message`` in ``conversation``, followed to its end; its id."""
    body = {"message": message, "context_type": "knowledge", "conversation_id": conversation}
    started = await http.post("/v1/agent/runs", json=body, headers=head)
    assert started.status_code == 201, started.text
    run_id: str = started.json()["run_id"]
    events = await collect_sse(http, "GET", f"/v1/agent/runs/{run_id}/events", headers=head)
    assert events[-1].event == "message_complete"
    return run_id


async def wait_titled(http: httpx.AsyncClient, head: dict[str, str], count: int) -> list[dict[str, Any]]:
    """The user's conversations once ``count`` of them have their title (set after the run)."""
    for _ in range(500):
        got = (await http.get("/v1/agent/conversations", headers=head)).json()["conversations"]
        if sum(1 for c in got if c["title"]) >= count:
            return got  # type: ignore[no-any-return]
        await asyncio.sleep(0.02)
    raise AssertionError(f"titles not set: {got}")


async def scenario(settings: Settings, engine: str = "sqlite") -> None:
    long_question = "How do I configure the retention of conversations in the agent service for a whole team"
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        assert app.state.services.storage.engine == engine
        first = await start(http, ALICE, long_question, "c-one")
        second = await start(http, ALICE, "and a second question", "c-one")
        other = await start(http, ALICE, "Short one", "c-two")
        bobs = await start(http, BOB, "bob asks", "c-one")  # his own c-one: ids are per user

        # --- list: newest first by update, titles from the first question's words ----------
        listed = await wait_titled(http, ALICE, 2)
        assert [c["id"] for c in listed] == ["c-two", "c-one"]
        assert listed[0]["title"] == "Short one" and listed[0]["last_run_status"] == "completed"
        one = listed[1]
        assert one["title"].endswith("…") and len(one["title"]) <= 60
        assert long_question.startswith(one["title"][:-1]) and long_question[len(one["title"]) - 1] == " "
        assert one["created_at"] <= one["updated_at"]
        page1 = (await http.get("/v1/agent/conversations?limit=1", headers=ALICE)).json()
        assert [c["id"] for c in page1["conversations"]] == ["c-two"] and page1["next_cursor"]
        page2 = (await http.get(f"/v1/agent/conversations?limit=1&cursor={page1['next_cursor']}", headers=ALICE)).json()
        assert [c["id"] for c in page2["conversations"]] == ["c-one"] and page2["next_cursor"] is None
        for bad in ("cursor=nope!", "cursor=WzEsMl0", "limit=0", "limit=101", "limit=x"):
            got = await http.get(f"/v1/agent/conversations?{bad}", headers=ALICE)
            assert got.status_code == 400, (bad, got.text)
        assert (await http.get("/v1/agent/conversations")).status_code == 401
        bob_list = (await http.get("/v1/agent/conversations", headers=BOB)).json()["conversations"]
        assert [c["id"] for c in bob_list] == ["c-one"]

        # --- rename: the owner only; another user's id is a 404 ----------------------------
        renamed = await http.patch("/v1/agent/conversations/c-two", json={"title": "  Renamed  "}, headers=ALICE)
        assert renamed.status_code == 200 and renamed.json()["title"] == "Renamed"
        assert (await http.patch("/v1/agent/conversations/c-two", json={"title": "x"}, headers=BOB)).status_code == 404
        for body in ({}, {"title": ""}, {"title": "   "}, {"title": 3}, {"title": "x" * 201}, []):
            got = await http.patch("/v1/agent/conversations/c-two", json=body, headers=ALICE)
            assert got.status_code == 400, (body, got.text)
        # A later run never overwrites a title.
        await start(http, ALICE, "third question", "c-two")
        await asyncio.sleep(0)  # the title task, if any, would find a title and stop
        got = (await http.get("/v1/agent/conversations", headers=ALICE)).json()["conversations"]
        assert {c["id"]: c["title"] for c in got}["c-two"] == "Renamed"

        # --- runs: look one up, list a conversation's ---------------------------------------
        run = (await http.get(f"/v1/agent/runs/{first}", headers=ALICE)).json()
        assert run["run_id"] == first and run["conversation_id"] == "c-one" and run["status"] == "completed"
        assert run["turns"] >= 1 and set(run["usage"]) == {"input_tokens", "output_tokens"}
        assert run["tool_call_count"] >= 1 and run["ending"] == {"status": "completed", "error": None}
        assert run["created_at"] <= run["finished_at"] and run["feedback"] is None
        assert (await http.get(f"/v1/agent/runs/{first}", headers=BOB)).status_code == 404
        assert (await http.get("/v1/agent/runs/run_nope", headers=ALICE)).status_code == 404
        runs = (await http.get("/v1/agent/runs?conversation_id=c-one", headers=ALICE)).json()
        assert [r["run_id"] for r in runs["runs"]] == [second, first] and runs["next_cursor"] is None
        paged = (await http.get("/v1/agent/runs?conversation_id=c-one&limit=1", headers=ALICE)).json()
        assert [r["run_id"] for r in paged["runs"]] == [second]
        rest = (
            await http.get(f"/v1/agent/runs?conversation_id=c-one&cursor={paged['next_cursor']}", headers=ALICE)
        ).json()
        assert [r["run_id"] for r in rest["runs"]] == [first]
        bob_runs = (await http.get("/v1/agent/runs?conversation_id=c-one", headers=BOB)).json()["runs"]
        assert [r["run_id"] for r in bob_runs] == [bobs]
        assert (await http.get("/v1/agent/runs?conversation_id=bad id", headers=ALICE)).status_code == 400
        everything = (await http.get("/v1/agent/runs", headers=ALICE)).json()["runs"]
        assert other in {r["run_id"] for r in everything} and bobs not in {r["run_id"] for r in everything}

        # --- feedback: the owner's, replaced by a second post, counted ---------------------
        up = await http.post(f"/v1/agent/runs/{first}/feedback", json={"score": 1, "comment": "good"}, headers=ALICE)
        assert up.status_code == 200 and up.json()["feedback"]["score"] == 1
        assert up.json()["feedback"]["comment"] == "good"
        stranger = await http.post(f"/v1/agent/runs/{first}/feedback", json={"score": -1}, headers=BOB)
        assert stranger.status_code == 404
        for body in (
            {},
            {"score": 0},
            {"score": 2},
            {"score": True},
            {"score": "1"},
            {"score": 1, "comment": 5},
            {"score": 1, "comment": "x" * 2001},
        ):
            got = await http.post(f"/v1/agent/runs/{first}/feedback", json=body, headers=ALICE)
            assert got.status_code == 400, (body, got.text)
        down = await http.post(f"/v1/agent/runs/{first}/feedback", json={"score": -1}, headers=ALICE)
        assert down.status_code == 200
        run = (await http.get(f"/v1/agent/runs/{first}", headers=ALICE)).json()
        assert run["feedback"]["score"] == -1 and run["feedback"]["comment"] is None
        metrics = (await http.get("/metrics")).text
        assert 'agentchat_run_feedback_total{score="1"} 1.0' in metrics
        assert 'agentchat_run_feedback_total{score="-1"} 1.0' in metrics

        # --- delete: the owner's only; everything of it gone --------------------------------
        assert (await http.delete("/v1/agent/conversations/c-one", headers=BOB)).status_code == 204
        # (Bob deleted *his* c-one; Alice's is untouched.)
        assert (await http.get("/v1/agent/conversations/c-one", headers=ALICE)).status_code == 200
        assert (await http.get(f"/v1/agent/runs/{bobs}", headers=BOB)).status_code == 404
        assert (await http.delete("/v1/agent/conversations/c-one", headers=BOB)).status_code == 404
        gone = await http.delete("/v1/agent/conversations/c-one", headers=ALICE)
        assert gone.status_code == 204 and gone.content == b""
        assert (await http.get("/v1/agent/conversations/c-one", headers=ALICE)).status_code == 404
        for run_id in (first, second):
            assert (await http.get(f"/v1/agent/runs/{run_id}", headers=ALICE)).status_code == 404
            assert (await http.get(f"/v1/agent/runs/{run_id}/events", headers=ALICE)).status_code == 404
        assert (await http.get("/v1/agent/runs?conversation_id=c-one", headers=ALICE)).json()["runs"] == []
        left = (await http.get("/v1/agent/conversations", headers=ALICE)).json()["conversations"]
        assert [c["id"] for c in left] == ["c-two"]
        assert 'agentchat_conversations_deleted_total{reason="user"} 2.0' in (await http.get("/metrics")).text


async def test_history_routes_for_owner_and_stranger(tmp_path: Path) -> None:
    await scenario(Settings.from_env(env(tmp_path)))


async def live_delete(settings: Settings) -> None:
    """Deleting a conversation whose run is in the middle of its answer: the run is
    cancelled (it ends ``cancelled``), then everything of it is gone."""
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("Half an answer ", gate, "never sent"))])
    async with (
        running_app(settings, provider=provider) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        body = {"message": "a long one", "context_type": "workflow", "conversation_id": "live"}
        started = await http.post("/v1/agent/runs", json=body, headers=ALICE)
        assert started.status_code == 201
        run_id = started.json()["run_id"]
        await asyncio.wait_for(gate.reached.wait(), 30)
        assert (await http.get(f"/v1/agent/runs/{run_id}", headers=ALICE)).json()["status"] == "running"
        assert (await http.delete("/v1/agent/conversations/live", headers=BOB)).status_code == 404
        assert (await http.get(f"/v1/agent/runs/{run_id}", headers=ALICE)).json()["status"] == "running"
        deleted = await http.delete("/v1/agent/conversations/live", headers=ALICE)
        assert deleted.status_code == 204, deleted.text
        assert (await http.get(f"/v1/agent/runs/{run_id}", headers=ALICE)).status_code == 404
        assert (await http.get(f"/v1/agent/runs/{run_id}/events", headers=ALICE)).status_code == 404
        assert (await http.get("/v1/agent/conversations/live", headers=ALICE)).status_code == 404
        assert app.state.services.runs.get(run_id) is None
        await app.state.services.storage.db.flush()
        assert await app.state.services.run_store.events_after(run_id, 0) == []
        assert await app.state.services.run_store.get(run_id) is None


async def test_delete_while_a_run_is_live(tmp_path: Path) -> None:
    await live_delete(Settings.from_env(env(tmp_path)))
