"""A partition: only the replica running a run loses the database; another replica still
reaches it.

The replica cut off (A) cannot store the run's next events: it lets the run go
(``Run._suspend``) without an ending. Its lease lapses, and the replica that still
reaches the database (B) takes the run over from its last checkpoint and finishes it —
while A is still cut off. A client that followed the run on B reads it to its one
ending; a client that followed it on A, kept through the outage by heartbeats, reads
the rest from the log once A is back; and A, back, adds nothing to a run it no longer
owns. The whole-cluster outage is ``test_postgres_outage_runs_app``; a follower cut off
from a run that ends elsewhere is ``test_postgres_outage_follower_app``.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import httpx

from tests.storage.test_postgres_outage_follower_app import direct_and_relayed
from tests.storage.test_postgres_outage_runs_app import let_go, settings_for
from tests.storage.test_reattach_elsewhere_app import Reader
from tests.storage.test_replica_ops_app import replica
from tests.support.deadline import until
from tests.support.gated_provider import Gate, GatedTurn
from tests.support.tcp_cut import CuttableRelay

__all__ = ["direct_and_relayed"]  # the fixture, used by name


def _events(lines: list[str]) -> list[tuple[int, str, str]]:
    """(id, event, data) of each stored event an SSE reader saw, in order."""
    out: list[tuple[int, str, str]] = []
    ident: int | None = None
    name = ""
    for line in lines:
        if line.startswith("id: "):
            ident = int(line[4:])
        elif line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and ident is not None:
            out.append((ident, name, line[6:]))
            ident = None
    return out


async def test_a_run_whose_replica_alone_loses_the_database_is_finished_by_another(
    direct_and_relayed: tuple[str, str, CuttableRelay], tmp_path: Path
) -> None:
    direct, relayed, relay = direct_and_relayed
    gate = Gate()
    held = GatedTurn(steps=("before the outage ", gate, "after the outage"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with AsyncExitStack() as stack:
        a, app_a = await replica(
            stack, settings_for(relayed, tmp_path / "a", AGENT_HEARTBEAT_S="0.2"), lambda _r, _i: held
        )
        b, app_b = await replica(
            stack,
            settings_for(direct, tmp_path / "b", AGENT_HEARTBEAT_S="0.2"),
            lambda _r, _i: GatedTurn(steps=("carried on elsewhere",)),
        )
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        started = await http.post(f"{a}/v1/agent/runs", json={"message": "hello", "context_type": "workflow"})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        app_a.state.services.remote.outage_pause_s = 0.1
        on_a = Reader(http, "GET", f"{a}/v1/agent/runs/{run_id}/events")
        on_b = Reader(http, "GET", f"{b}/v1/agent/runs/{run_id}/events")
        await until(lambda: on_a.saw("before the outage "), "the follower on A mid-answer", 30)
        await until(lambda: on_b.saw("before the outage "), "the follower on B mid-answer", 30)

        await let_go(app_a, relay, gate)  # A alone cannot reach the database
        counters_b = app_b.state.services.runs.counters

        async def completed() -> bool:
            got = await http.get(f"{b}/v1/agent/runs/{run_id}")
            return got.status_code == 200 and got.json()["status"] == "completed"

        await until(completed, "B to take the run over and finish it while A is cut off", 60, step=0.1)
        assert counters_b.taken_over >= 1
        lines_b = await on_b.finished()
        assert not on_a.ended, "A's follower was ended while A could not read the run"

        relay.restore()  # A reaches the database again
        lines_a = await on_a.finished()

        def let_go_on_a() -> bool:
            copy = app_a.state.services.runs.get(run_id)
            return copy is None or copy.lost or copy.finished

        # A's copy of the run is dropped or known lost, so nothing of it can still write.
        await until(let_go_on_a, "A to let its copy of the run go", 60)
        stored = await http.get(f"{b}/v1/agent/runs/{run_id}/events")
        assert stored.status_code == 200, stored.text
        # A, back, writes nothing more into the run it lost: reading it again through A
        # after A's follower ended gives the same log B finished.
        again = await http.get(f"{a}/v1/agent/runs/{run_id}/events")
        assert again.status_code == 200, again.text

    log = _events(stored.text.splitlines())
    ids = [i for i, _, _ in log]
    assert ids == list(range(1, len(ids) + 1)), f"every event once, in order: {ids}"
    endings = [data for _, name, data in log if name == "message_complete"]
    assert len(endings) == 1 and '"status":"completed"' in endings[0], endings
    assert not [d for _, name, d in log if name == "error"], "the outage of one replica showed as an error"
    assert any(name == "run_resumed" for _, name, _ in log), "B did not carry the run on from its checkpoint"
    assert any("carried on elsewhere" in data for _, _, data in log)
    assert _events(again.text.splitlines()) == log, "A changed the log of a run it lost"
    for lines, where in ((lines_b, "B"), (lines_a, "A")):
        seen = _events(lines)
        assert seen == log, f"the follower on {where} saw {[(i, n) for i, n, _ in seen]}"
