"""One of the processes sharing a lock file leads the background jobs (``app/ops/leader.py``).

Two ``FileLeader`` s on one file, as two workers hold it (``flock`` locks belong to an open
file, so two opens in one process contend like two processes): one leads and runs its
job, the other waits; when the leader goes, the other takes over and runs its job. The
same through real processes, with SIGKILL, is in ``tests/test_workers_feed.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.ops.leader import FileLeader


async def test_one_leads_and_the_other_takes_over_when_it_goes(tmp_path: Path) -> None:
    lock = tmp_path / "leader.lock"
    first, second = FileLeader(lock, retry_s=0.02), FileLeader(lock, retry_s=0.02)
    ran: list[str] = []

    async def job(name: str) -> None:
        ran.append(name)
        await asyncio.Event().wait()  # a periodic job runs until cancelled

    first.start()
    second.start()
    first.when_leading(lambda: job("first"), name="job")
    second.when_leading(lambda: job("second"), name="job")
    try:
        await asyncio.wait_for(first.leading.wait(), 10)
        await asyncio.wait_for(_until(lambda: ran == ["first"]), 10)
        assert first.is_leader and not second.is_leader
        await first.aclose()  # the leader stops (a dead process releases the lock as well)
        await asyncio.wait_for(second.leading.wait(), 10)
        await asyncio.wait_for(_until(lambda: ran == ["first", "second"]), 10)
        assert not first.is_leader
    finally:
        await first.aclose()
        await second.aclose()


async def _until(condition: object) -> None:
    while not condition():  # type: ignore[operator]
        await asyncio.sleep(0.01)
