"""One of the processes sharing a lock file leads the background jobs (``app/ops/leader.py``).

Two ``FileLeader`` s on one file, as two workers hold it (``flock`` locks belong to an open
file, so two opens in one process contend like two processes): one leads and runs its
job, the other waits; when the leader goes, the other takes over and runs its job. The
same through real processes, with SIGKILL, is in ``tests/test_workers_feed.py``.
"""

from __future__ import annotations

import asyncio
import fcntl
from pathlib import Path

import pytest

from app.ops.leader import FileLeader, FileLock
from tests.support.file_replaced import replace_on_first_flock


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


async def test_a_leader_lock_file_replaced_between_open_and_lock_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock file removed (a clean-up of the runtime directory) and made again after
    ``open`` and before ``flock``: a lock on the old file would exclude nobody who opens
    the path now - two leaders. The lock is taken on the file the path names
    (``storage.file_lock``, as the writer lock's)."""
    path = tmp_path / "leader.lock"
    real_flock = fcntl.flock
    replaced = replace_on_first_flock(monkeypatch, path)
    first = FileLock(path)
    assert await first.try_acquire()
    try:
        assert replaced
        monkeypatch.setattr(fcntl, "flock", real_flock)
        second = FileLock(path)
        assert not await second.try_acquire()  # the file at the path is the one held
        await second.release()
    finally:
        await first.release()


async def _until(condition: object) -> None:
    while not condition():  # type: ignore[operator]
        await asyncio.sleep(0.01)


class AnswerAsCancelled:
    """A lock whose every attempt is a round trip through ``asyncio.wait_for`` (as the
    PostgreSQL lock's is) answered by the test: the answer can land together with the
    campaign's cancel, which Python 3.11's ``wait_for`` then loses (it returns the answer)."""

    kind = "test lock"
    last_error: str | None = None

    def __init__(self) -> None:
        self.asked: asyncio.Queue[asyncio.Future[bool]] = asyncio.Queue()

    async def try_acquire(self) -> bool:
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.asked.put_nowait(answer)
        return await asyncio.wait_for(answer, 60)

    async def still_held(self) -> bool:
        return False

    async def release(self) -> None:
        return None


async def test_a_close_ends_the_campaign_even_when_its_cancel_is_lost() -> None:
    """The lock answers and the close cancels the campaign in the same turn of the loop:
    the campaign ends anyway, and the close returns (it used to wait for ever)."""
    from app.ops.leader import Leader

    lock = AnswerAsCancelled()
    leader = Leader(lock, retry_s=0.01)
    leader.start()
    for _ in range(3):  # a few attempts, each answered "held by another process"
        (await asyncio.wait_for(lock.asked.get(), 10)).set_result(False)
    answer = await asyncio.wait_for(lock.asked.get(), 10)
    answer.set_result(False)  # ...and this one's answer lands with the cancel
    closing = asyncio.create_task(leader.aclose())
    done, _ = await asyncio.wait({closing}, timeout=10)  # not wait_for: its cancel would end the campaign
    try:
        assert closing in done, "the close waits for a campaign whose cancel was lost"
        assert closing.result() is None and not leader.is_leader
    finally:
        closing.cancel()
