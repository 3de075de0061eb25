"""Review check: a reconciled run keeps the first-written row *of each seq*, not one
writer's stream: when the second writer's run went on longer, its tail (seqs the first
never wrote) survives after the first writer's message_complete - the settled replay has
two endings, and content after the first one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson

from tests.storage.test_live_log import new_run, step
from tests.support.storage import opened_storage


async def test_reconciled_replay_has_one_ending(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("r"))
        await runs.commit(step("r", range(1, 4)))
        # The first writer's own continuation: 4, then its ending at 5 (what its clients saw).
        await runs.commit(step("r", range(4, 5), end=True))
        await storage.db.flush()
        # A second writer group took the run over at seq 3 and wrote 4..8 of its own
        # generation, ending at 9 (what two serves on one file did before the lock).
        with sqlite3.connect(path) as conn:
            for seq in range(4, 9):
                conn.execute("INSERT INTO run_log(run_id, seq, event, data) VALUES ('r', ?, 'content_chunk', ?)",
                             (seq, orjson.dumps({"chunk": f"other{seq}"}).decode()))
            conn.execute("INSERT INTO run_log(run_id, seq, event, data) VALUES ('r', 9, 'message_complete', '{}')")
        await runs.settle_log()
        replay = await runs.events_after("r", 0)
        shown = [(e.seq, e.event, orjson.loads(e.data).get("chunk")) for e in replay]
        print(shown)
        endings = [s for s, name, _ in shown if name == "message_complete"]
        assert len(endings) == 1 and shown[-1][1] == "message_complete", shown
