"""The registry's per-user index of runs whose ending is not stored yet (issue 23):
``RunRegistry.ending_unwritten`` is read by every admission with a run cap, and with
``AGENT_AUTH=none`` one user holds every run of the replica, so it is kept in step with
each run's life instead of walking the user's runs. Checked against the definition
(``Run.ending_unwritten`` of each of the user's runs) at every step of a run's life, and
end to end with two JWT users at their caps.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from agenttools.core.registry import ToolRegistry
from app.runs.registry import RunRegistry
from app.runs.run import Run, terminal_event
from app.server.auth import sign_hs256
from events import ContentChunk
from llm.types import ChatRequest
from storage.errors import StorageUnavailable
from storage.records import RunWrite
from tests.conftest import running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.test_limits import BODY, settings

SECRET = "ending-index-secret-0123456789abcdef"


class HeldLog:
    """A run store's writer that commits or fails the queued writes when told to."""

    def __init__(self) -> None:
        self.queued: list[tuple[RunWrite, Callable[[], None] | None, Callable[[BaseException], None] | None]] = []

    def write(
        self,
        step: RunWrite,
        *,
        on_commit: Callable[[], None] | None = None,
        on_fail: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.queued.append((step, on_commit, on_fail))

    def commit_all(self) -> None:
        queued, self.queued = self.queued, []
        for _, on_commit, _ in queued:
            if on_commit is not None:
                on_commit()

    def fail_all(self, exc: BaseException) -> None:
        queued, self.queued = self.queued, []
        for _, _, on_fail in queued:
            if on_fail is not None:
                on_fail(exc)


def new_run(run_id: str, user_id: str, log: HeldLog) -> Run:
    return Run(id=run_id, conversation_id=f"c-{run_id}", user_id=user_id, context_type="knowledge", log=log)


def by_definition(registry: RunRegistry, user_id: str) -> set[str]:
    """What the index must say: the user's runs here that are ``ending_unwritten``."""
    return {r.id for r in registry.by_user.get(user_id, {}).values() if r.ending_unwritten}


def indexed(registry: RunRegistry, user_id: str) -> set[str]:
    answer = registry.ending_unwritten(user_id)
    assert len(answer) == len(set(answer)), answer
    assert set(answer) == by_definition(registry, user_id), (answer, by_definition(registry, user_id))
    return set(answer)


async def test_the_index_follows_a_runs_life_started_ended_written_refused_forgotten() -> None:
    registry = RunRegistry()
    log = HeldLog()
    alice, bob = new_run("a1", "alice", log), new_run("b1", "bob", log)
    registry.register(alice)
    registry.register(bob)
    assert indexed(registry, "alice") == set() and indexed(registry, "bob") == set()  # started

    alice.emit(ContentChunk(chunk="partial"))
    await asyncio.sleep(0)  # the burst's write is queued on the next turn of the loop
    log.commit_all()
    assert indexed(registry, "alice") == set()  # live, its events stored: not an ending

    alice.emit(terminal_event(alice, "completed"))
    assert indexed(registry, "alice") == {"a1"} and indexed(registry, "bob") == set()  # ending in the queue

    log.commit_all()
    assert indexed(registry, "alice") == set()  # ending written
    assert not registry.unwritten  # nothing kept for a user without any

    bob.emit(terminal_event(bob, "completed"))
    assert indexed(registry, "bob") == {"b1"}
    log.fail_all(StorageUnavailable("database is locked"))
    assert bob.storage_error is not None
    assert indexed(registry, "bob") == {"b1"}  # refused: still unwritten while the rescue writes it again

    registry.forget("b1")
    assert indexed(registry, "bob") == set() and "bob" not in registry.unwritten  # removed
    registry.forget("a1")
    assert registry.unwritten == {}


async def test_a_copy_replaced_by_a_later_claim_does_not_speak_for_the_id() -> None:
    """The same process taking a lapsed lease back registers a new copy of the run: the
    old copy's ending (or its abandonment) changes nothing for the id the new one holds."""
    registry = RunRegistry()
    log = HeldLog()
    old = new_run("r1", "alice", log)
    registry.register(old)
    old.emit(terminal_event(old, "completed"))
    assert indexed(registry, "alice") == {"r1"}

    new = new_run("r1", "alice", log)
    registry.register(new)
    assert indexed(registry, "alice") == set()  # the registered copy has not ended
    new.emit(terminal_event(new, "failed"))
    assert indexed(registry, "alice") == {"r1"}
    old.abandon()  # the old copy lets its unstored ending go: the new copy's still counts
    assert indexed(registry, "alice") == {"r1"}
    log.commit_all()
    assert indexed(registry, "alice") == set()


async def test_a_taken_over_run_drops_its_unstored_ending() -> None:
    registry = RunRegistry()
    log = HeldLog()
    run = new_run("r1", "alice", log)
    registry.register(run)
    run.emit(terminal_event(run, "completed"))
    assert indexed(registry, "alice") == {"r1"}
    run.abandon()  # another replica holds it now: its ending is that one's to write
    assert indexed(registry, "alice") == set()


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


async def test_two_jwt_users_at_their_caps_are_counted_apart(tmp_path: Path) -> None:
    """Each user's cap counts that user's runs only, and a run that ended — its ending
    written or still in the write queue — frees its user's place at once."""
    gates = {"alice": Gate(), "bob": Gate()}

    def turn(request: ChatRequest, index: int) -> GatedTurn:
        text = str(request)
        for who, gate in gates.items():
            if f"hold {who}" in text:
                return GatedTurn(steps=(who, gate))
        return GatedTurn(steps=("done",))

    provider = GatedProvider(turn)
    env = settings(tmp_path, AGENT_MAX_RUNS_PER_USER="1", AGENT_AUTH="jwt", AGENT_JWT_SECRET=SECRET)
    alice, bob = bearer("alice"), bearer("bob")
    async with (
        running_app(env, provider=provider, registry=ToolRegistry(), embedder=None) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        runs = app.state.services.runs
        try:
            held = await client.post("/v1/agent/runs", json={**BODY, "message": "hold alice"}, headers=alice)
            assert held.status_code == 201, held.text
            await asyncio.wait_for(gates["alice"].reached.wait(), 10)
            refused = await client.post("/v1/agent/runs", json=BODY, headers=alice)
            bobs = await client.post("/v1/agent/runs", json={**BODY, "message": "hold bob"}, headers=bob)
            assert bobs.status_code == 201, bobs.text  # alice's cap is not bob's
            await asyncio.wait_for(gates["bob"].reached.wait(), 10)
            bob_refused = await client.post("/v1/agent/runs", json=BODY, headers=bob)
            gates["alice"].open()
            await asyncio.wait_for(runs.get(held.json()["run_id"]).wait_finished(), 10)
            again = await client.post("/v1/agent/runs", json=BODY, headers=alice)
            bob_still = await client.post("/v1/agent/runs", json=BODY, headers=bob)
        finally:
            for gate in gates.values():
                gate.open()
        async with asyncio.timeout(10):  # every ending written: the index is empty again
            while runs.active() or runs.registry.unwritten:
                await asyncio.sleep(0.02)
    assert (refused.status_code, refused.json()["error"]) == (429, "too_many_runs")
    assert (bob_refused.status_code, bob_refused.json()["error"]) == (429, "too_many_runs")
    assert again.status_code == 201, again.text
    assert (bob_still.status_code, bob_still.json()["error"]) == (429, "too_many_runs")
