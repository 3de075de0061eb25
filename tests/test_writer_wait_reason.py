"""What a ``serve`` waiting for another's SQLite file says (``app.cli.writer_wait``): the
log line and ``/readyz``'s ``checks.writer.detail``. A newcomer who followed the README
("Port 8000 taken? ``AGENT_PORT=8100 make run``") while their first ``make run`` still ran
got a second process that only waited, told why but not how to serve beside the first."""

from __future__ import annotations

import os
from pathlib import Path

from app.cli.writer_wait import waiting_reason
from storage.sqlite.writer_lock import WriterLock


def test_the_waiting_reason_names_the_holder_the_file_and_how_to_serve_beside_it(tmp_path: Path) -> None:
    db = tmp_path / "agentchat.sqlite3"
    holder = WriterLock(db)
    assert holder.try_acquire()
    try:
        waiter = WriterLock(db)
        assert not waiter.try_acquire()
        reason = waiting_reason(waiter)
    finally:
        holder.release()
    assert reason.startswith(f"another agentchat serve (pid {os.getpid()}) writes the database {db}")
    assert "this process takes over when it exits" in reason
    assert "a database of its own: AGENT_DB_PATH" in reason
