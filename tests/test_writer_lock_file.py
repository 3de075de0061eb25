"""The writer lock file itself (``storage.sqlite.writer_lock``), and the other file beside
the database that must follow SQLite to the real path (``app.keyring``'s ``<db>.key``).

Second review of issue 23's live log: a symlinked ``AGENT_DB_PATH`` gave a second
writer (the lock sat beside the link, SQLite opened the target); a worker's inherited
lock descriptor stayed inheritable and leaked into what it started; a lock file removed
while held let a second process lock a new one.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from pathlib import Path

import pytest

from app.cli.writer_wait import watch_writer_lock
from app.config import Settings
from app.keyring import key_file_for, resolve_keyring
from storage.sqlite.writer_lock import WriterLock, held_by_a_group, lock_path
from tests.support.file_replaced import replace_on_first_flock


def _linked(tmp_path: Path) -> tuple[Path, Path]:
    """(the database's real path, a symlink to it in another directory)."""
    real = tmp_path / "data" / "agent.sqlite3"
    real.parent.mkdir()
    real.touch()
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "agent.sqlite3"
    link.symlink_to(real)
    return real, link


def test_a_symlink_to_the_file_names_the_same_lock(tmp_path: Path) -> None:
    real, link = _linked(tmp_path)
    assert lock_path(link) == lock_path(real) == real.with_name("agent.sqlite3.writer.lock")
    first = WriterLock(real)
    assert first.try_acquire()
    try:
        assert not WriterLock(link).try_acquire()  # a second writer before the fix
        assert not WriterLock(tmp_path / "data" / ".." / "data" / "agent.sqlite3").try_acquire()
    finally:
        first.release()
    second = WriterLock(link)
    assert second.try_acquire()
    second.release()


def test_the_probe_of_a_one_off_command_sees_a_holder_and_never_keeps_the_lock(tmp_path: Path) -> None:
    """``held_by_a_group`` (``storage.sqlite.group_gap``: ``agentchat ingest`` beside a
    serve) tells a held lock from a free one, creates no lock file, and leaves a free
    lock free: a serve trying it right after the probe takes it."""
    real, link = _linked(tmp_path)
    assert not held_by_a_group(real)
    assert not lock_path(real).exists()
    holder = WriterLock(real)
    assert holder.try_acquire()
    assert held_by_a_group(real) and held_by_a_group(link)
    holder.release()
    assert not held_by_a_group(real)
    serve = WriterLock(link)
    assert serve.try_acquire()  # the probe let go of it
    serve.release()


def test_an_inherited_lock_descriptor_is_not_handed_on(tmp_path: Path) -> None:
    """``pass_fds`` leaves the worker's copy inheritable; uvloop's subprocesses close no
    inherited descriptor, so an MCP stdio server held the lock after the group exited."""
    db = tmp_path / "agent.sqlite3"
    holder = WriterLock(db)
    assert holder.try_acquire()
    assert not os.get_inheritable(holder.fileno())  # taken here: never inheritable
    passed = os.dup(holder.fileno())
    os.set_inheritable(passed, True)  # what the worker finds (``pass_fds``)
    try:
        worker = WriterLock(db)
        assert worker.inherit(passed)
        assert not os.get_inheritable(passed)
    finally:
        os.close(passed)
        holder.release()


def test_an_inherited_lock_descriptor_is_the_groups_lock_after_the_file_was_removed(tmp_path: Path) -> None:
    """Third review: a worker restarted after the lock file was removed refused the
    descriptor it inherited (its inode no longer the path's) and waited for the new file
    on the group's own socket. The supervisor holds the lock on that open file for the
    group's life: the worker shares it, and its watch reports the removed file."""
    db = tmp_path / "agent.sqlite3"
    holder = WriterLock(db)
    assert holder.try_acquire()
    holder.path.unlink()
    passed = os.dup(holder.fileno())
    os.set_inheritable(passed, True)
    try:
        worker = WriterLock(db)
        assert worker.inherit(passed)
        assert worker.held and not worker.intact()  # the watch's ERROR line, not a wait
        assert not os.get_inheritable(passed)
    finally:
        os.close(passed)
        holder.release()


def test_a_lock_file_replaced_between_open_and_lock_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file removed (and made again) after ``open`` and before ``flock``: the lock
    on the old file would exclude nobody opening the path now - taken again on the new."""
    db = tmp_path / "agent.sqlite3"
    path = lock_path(db)
    real_flock = fcntl.flock
    replaced = replace_on_first_flock(monkeypatch, path)
    lock = WriterLock(db)
    assert lock.try_acquire()
    try:
        assert replaced and lock.intact()
        monkeypatch.setattr(fcntl, "flock", real_flock)
        assert not WriterLock(db).try_acquire()
    finally:
        lock.release()


async def test_a_lock_file_removed_while_held_is_locked_again(tmp_path: Path) -> None:
    """Removed while held (a reset script, a clean-up of "stale" lock files), the next
    process would lock a new file beside this one: the holder's watch locks it first."""
    db = tmp_path / "agent.sqlite3"
    lock = WriterLock(db)
    assert lock.try_acquire()
    watch = asyncio.create_task(watch_writer_lock(lock, relock=True, every_s=0.02))
    try:
        lock.path.unlink()
        assert not lock.intact()
        deadline = asyncio.get_running_loop().time() + 30
        while not lock.intact():
            assert asyncio.get_running_loop().time() < deadline, "the watch never locked the new file"
            await asyncio.sleep(0.02)
        assert not WriterLock(db).try_acquire()
        assert lock.holder() == f"pid {os.getpid()}"
    finally:
        watch.cancel()
        lock.release()


async def test_a_lock_file_another_process_took_is_an_error_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "agent.sqlite3"
    lock = WriterLock(db)
    assert lock.try_acquire()
    lock.path.unlink()
    other = WriterLock(db)
    assert other.try_acquire()  # what the lock cannot prevent: it is said, not silent
    try:
        with caplog.at_level("ERROR", logger="agentchat.cli"):
            watch = asyncio.create_task(watch_writer_lock(lock, relock=True, every_s=0.02))
            deadline = asyncio.get_running_loop().time() + 30
            while not any("removed or replaced" in r.getMessage() for r in caplog.records):
                assert asyncio.get_running_loop().time() < deadline, "no error line"
                await asyncio.sleep(0.02)
            watch.cancel()
        assert not lock.intact()
    finally:
        lock.release()
        other.release()


class _NoSecrets:
    async def get_or_create(self, name: str, value: str) -> str:
        raise AssertionError("SQLite keeps its key in a file")


def _settings(db: Path) -> Settings:
    return Settings.from_env({
        "AGENT_DB_PATH": str(db), "AGENT_MANDATORY_CONTEXTS": "none", "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none", "OLLAMA_HOST": "http://127.0.0.1:9",
    })


async def test_a_symlink_to_the_file_shares_its_key(tmp_path: Path) -> None:
    """Beside the link, a serve given the symlink had a key of its own: the stream links
    and sealed run inputs of the other were not its."""
    real, link = _linked(tmp_path)
    via_real = await resolve_keyring(_settings(real), _NoSecrets(), engine="sqlite")
    via_link = await resolve_keyring(_settings(link), _NoSecrets(), engine="sqlite")
    assert key_file_for(link) == key_file_for(real) == real.with_name("agent.sqlite3.key")
    assert via_link.stream_secret == via_real.stream_secret
    assert not link.with_name("agent.sqlite3.key").exists()


async def test_a_key_kept_beside_the_symlink_is_carried_over(tmp_path: Path) -> None:
    real, link = _linked(tmp_path)
    old = link.with_name("agent.sqlite3.key")
    old.write_text("k" * 64 + "\n")
    old.chmod(0o600)
    carried = await resolve_keyring(_settings(link), _NoSecrets(), engine="sqlite")
    assert key_file_for(link).read_text().strip() == "k" * 64  # the old key, not a new one
    via_real = await resolve_keyring(_settings(real), _NoSecrets(), engine="sqlite")
    assert via_real.stream_secret == carried.stream_secret
