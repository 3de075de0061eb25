"""The feed between worker processes on one SQLite file (``storage/sqlite/worker_feed.py``).

Two feeds in one runtime directory talk over real Unix sockets, as two workers do: a
committed step's events reach the other's watchers (carried, or "read the log" when they
do not fit), cancels and topics reach its subscribers, a socket left by a killed worker
is cleared, a sibling that does not read is told to read everything once it does, and a
real SQLite run store announces only what committed. The cross-process behaviour
(followers on another worker with the safety poll out of the way) is in
``tests/test_workers_feed.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest

from storage.records import NewRun, RunEvent, RunWrite
from storage.sqlite import open_sqlite_storage
from storage.sqlite.runtime_dir import tidy_runtime_dir
from storage.sqlite.worker_feed import MAX_FRAME_BYTES, WorkerFeed, runtime_dir


def ev(seq: int, name: str = "content_chunk", text: str = "") -> RunEvent:
    return RunEvent(seq, name, orjson.dumps({"chunk": text or f"token {seq}"}).decode())


async def settled(condition: object, what: str) -> None:
    async def wait() -> None:
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), 10)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


@asynccontextmanager
async def two_feeds(tmp_path: Path) -> AsyncIterator[tuple[WorkerFeed, WorkerFeed]]:
    directory = runtime_dir(tmp_path / "agent.sqlite3")
    a, b = WorkerFeed(directory, scan_s=0.05), WorkerFeed(directory, scan_s=0.05)
    await a.start()
    await b.start()
    try:
        await settled(lambda: a.siblings == 1 and b.siblings == 1, "the two workers found each other")
        yield a, b
    finally:
        await a.close()
        await b.close()


async def test_a_committed_step_reaches_the_siblings_watchers_with_its_events(tmp_path: Path) -> None:
    async with two_feeds(tmp_path) as (a, b):
        with b.watch("run-1") as watch, b.watch("run-1") as second, b.watch("run-2") as other:
            for w in (watch, second, other):
                w.take()  # the first look (and the connection's "read all") done
            a.announce_events("run-1", [ev(1), ev(2, text="tab\there ünï 🙂")])
            a.announce_events("run-1", [ev(3, "message_complete")])
            await settled(lambda: len(watch.carried) == 3, "the events arrived")
            carried, must_read = watch.take()
            assert carried == [ev(1), ev(2, text="tab\there ünï 🙂"), ev(3, "message_complete")]
            assert not must_read
            assert second.take() == (carried, False)  # every local watcher of the run
            assert other.take() == ([], False)  # not the other run's


async def test_a_step_too_big_for_a_frame_says_read_the_log(tmp_path: Path) -> None:
    async with two_feeds(tmp_path) as (a, b):
        with b.watch("big") as watch:
            watch.take()
            a.announce_events("big", [ev(1, text="x" * MAX_FRAME_BYTES)])
            await settled(lambda: watch.woke.is_set(), "the sibling was told")
            assert watch.take() == ([], True)


async def test_cancels_and_topics_reach_the_siblings_subscribers(tmp_path: Path) -> None:
    async with two_feeds(tmp_path) as (a, b):
        cancels: list[str | None] = []
        news: list[str] = []
        b.subscribe_cancels(cancels.append)
        b.subscribe("kb", news.append)
        a.announce_cancels(["run-7"])
        a.announce("kb", "generation 3")
        await settled(lambda: "run-7" in cancels and "generation 3" in news, "cancel and news arrived")
        assert a.received == 0  # nobody tells the sender its own news


async def test_a_socket_left_by_a_killed_worker_is_cleared(tmp_path: Path) -> None:
    directory = runtime_dir(tmp_path / "agent.sqlite3")
    directory.mkdir(mode=0o700)
    stale = directory / "4242-dead.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(stale))  # bound, never listening, then gone: what SIGKILL leaves
    feed = WorkerFeed(directory)
    await feed.start()
    try:
        assert not stale.exists() and feed.siblings == 0
    finally:
        await feed.close()
    assert not any(directory.glob("*.sock"))  # its own socket went with it


async def test_a_sibling_that_has_bound_its_socket_but_not_yet_listens_is_kept(tmp_path: Path) -> None:
    """A worker starting binds its socket, then listens; a sibling scanning between the
    two is refused like at a dead worker's socket. It removed the socket, and the starting
    worker failed its start ("No such file or directory" on its own socket: seen in
    ``serve --workers 2`` on a loaded machine, the whole group stopped). Its pid runs: kept,
    and connected to once it listens."""
    directory = runtime_dir(tmp_path / "agent.sqlite3")
    directory.mkdir(mode=0o700)
    starting = directory / f"{os.getpid()}-0123abcd.sock"  # a live pid's, as a sibling's is
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sibling:
        sibling.bind(str(starting))  # bound, not listening yet
        feed = WorkerFeed(directory, scan_s=0.05)
        await feed.start()
        try:
            assert starting.exists() and feed.siblings == 0
            sibling.listen()
            await settled(lambda: feed.siblings == 1, "the sibling was connected to once it listened")
        finally:
            await feed.close()
            # The sibling is this test's: its socket file and the directory (in the system's
            # temporary one, tmp_path being long) are this test's to remove, as a worker's are.
            starting.unlink(missing_ok=True)
            directory.rmdir()


async def test_a_sibling_that_does_not_keep_up_reads_everything_once_it_does(tmp_path: Path) -> None:
    async with two_feeds(tmp_path) as (a, b):
        a.max_buffer = -1  # every flush finds the sibling "behind": frames are dropped
        with b.watch("run-1") as watch:
            watch.take()
            a.announce_events("run-1", [ev(1)])
            await settled(lambda: a.dropped >= 1, "a frame was dropped")
            a.max_buffer = 1 << 20
            a.announce_events("run-1", [ev(2)])
            await settled(lambda: len(watch.carried) == 1, "the next frame arrived")
            carried, must_read = watch.take()
            assert carried == [ev(2)] and must_read  # event 1 is read from the log


async def test_the_sqlite_run_store_announces_committed_steps_and_cancels(tmp_path: Path) -> None:
    storage = await open_sqlite_storage(tmp_path / "agent.sqlite3")
    async with two_feeds(tmp_path) as (a, b):
        storage.runs.feed = a
        cancels: list[str | None] = []
        b.subscribe_cancels(cancels.append)
        try:
            await storage.runs.create(
                NewRun(id="r1", conversation_id="c1", user_id="u1", context_type="knowledge", input=b"{}")
            )
            with b.watch("r1") as watch:
                watch.take()
                committed: list[bool] = []
                storage.runs.write(
                    RunWrite("r1", "c1", "u1", events=[ev(1, "run_started")]), on_commit=lambda: committed.append(True)
                )
                await storage.runs.commit(RunWrite("r1", "c1", "u1", events=[ev(2)]))
                await settled(lambda: len(watch.carried) == 2, "both steps announced")
                assert committed == [True]
                assert watch.take() == ([ev(1, "run_started"), ev(2)], False)
                assert [e.seq for e in await storage.runs.events_after("r1", 0)] == [1, 2]  # stored first
            await storage.runs.request_cancel("r1")
            await settled(lambda: "r1" in cancels, "the cancel was announced")
        finally:
            storage.runs.feed = None
            await storage.close()


async def test_a_database_too_deep_for_a_socket_address_meets_in_the_temporary_directory(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    short = runtime_dir(tmp_path / "a.sqlite3")
    far = runtime_dir(deep / "agent.sqlite3")
    assert short.parent == tmp_path or len(str(tmp_path)) > 60  # beside the file when it fits
    assert far.parent == Path(tempfile.gettempdir()) and far == runtime_dir(deep / "agent.sqlite3")
    a, b = WorkerFeed(far, scan_s=0.05), WorkerFeed(far, scan_s=0.05)
    await a.start()
    await b.start()
    try:
        await settled(lambda: a.siblings == 1 and b.siblings == 1, "the two workers found each other")
        assert far.stat().st_mode & 0o777 == 0o700
    finally:
        await a.close()
        await b.close()


def readers_of(feed: WorkerFeed) -> list[asyncio.Task[object]]:
    """The tasks reading siblings' connections to ``feed`` (its ``_serve`` coroutines)."""
    found = []
    for task in asyncio.all_tasks():
        coro = task.get_coro()
        frame = getattr(coro, "cr_frame", None)
        serving = getattr(coro, "__qualname__", "") == "WorkerFeed._serve"
        if serving and frame is not None and frame.f_locals.get("self") is feed:
            found.append(task)
    return found


def test_a_worker_closing_while_a_sibling_is_connected_logs_no_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every ``serve --workers`` shutdown on SQLite logged an ERROR with a CancelledError
    traceback: the reader of a sibling's connection, still running when the worker's
    event loop ended, was cancelled there, and Python 3.11's stream server reports a
    cancelled reader as an error. A worker's close ends its readers itself. The worker's
    loop ends here as a real one does (``asyncio.run`` cancels whatever is left), while
    its sibling is still up."""
    directory = runtime_dir(tmp_path / "agent.sqlite3")
    left: list[WorkerFeed] = []

    async def worker_life() -> None:
        a, b = WorkerFeed(directory, scan_s=0.05), WorkerFeed(directory, scan_s=0.05)
        left.append(b)
        await a.start()
        await b.start()
        await settled(lambda: a.siblings == 1 and b.siblings == 1, "the two workers found each other")
        b.announce("kb", "hello")  # so a is surely reading b's connection
        await settled(lambda: a.received >= 1, "a heard from b")
        await a.close()
        # b, the sibling still running, sees a hang up; then a's loop ends (b's with it
        # here, but only after b's reader of a's connection is done: b stands in for a
        # process whose loop goes on).
        await settled(lambda: not readers_of(b), "b's reader of a's connection ended")

    caplog.set_level(logging.WARNING)
    try:
        asyncio.run(worker_life())
    finally:  # b's loop ended without its close: its socket, and the directory, go here
        for feed in left:
            if feed.path is not None:
                feed.path.unlink(missing_ok=True)
        tidy_runtime_dir(directory)
    errors = [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], errors


def test_the_temporary_meeting_place_is_the_files_not_the_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Containers sharing ``/tmp``, each with its own database at one path, met in one
    ``agentchat-<hash>`` (one leader lock for both groups, each other's feed), and so did
    two users serving one file (the second's workers found the first's private directory).
    Another directory at the same path (here: the first moved away, still there, so its
    inode is not reused) or another user: another meeting place."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    first = runtime_dir(deep / "agent.sqlite3")
    assert first.parent == Path(tempfile.gettempdir()) and first == runtime_dir(deep / "agent.sqlite3")
    deep.rename(tmp_path / "moved")
    deep.mkdir()
    again = runtime_dir(deep / "agent.sqlite3")
    assert again != first and again.parent == first.parent
    monkeypatch.setattr(os, "getuid", lambda: os.geteuid() + 1)
    assert runtime_dir(deep / "agent.sqlite3") != again
