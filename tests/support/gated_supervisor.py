"""``serve --workers``' supervisor (``app/cli/workers.py``) as a process of its own, with
one worker start held at a gate the test opens: how a test makes a signal arrive while
the supervisor is inside ``Popen`` for a worker (under load that call takes long: the
parent waits for the child's ``exec``), which no timing from outside hits reliably.

    python -m tests.support.gated_supervisor --port P --workers N [--grace G]
        [--stop-after S] [--gate FIFO --gate-spawn K]

The workers are real ``agentchat serve`` workers (the environment configures them). The
``K``-th start (0-based, counting restarts) runs, in the child between ``fork`` and
``exec``, a read of one byte from the named pipe ``FIFO``: until the test writes it, the
supervisor is blocked in that worker's ``Popen``. Exits with ``Supervisor.run``'s code.
Like ``agentchat serve --workers`` it holds the SQLite file's writer lock and hands it to
its workers (``storage.sqlite.writer_lock``); it exits 3 when another process holds it.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable

from app.cli.children import die_with_parent
from app.cli.serving import bind_socket
from app.cli.workers import Supervisor, worker_env
from app.config import Settings
from storage.open import is_postgres_url
from storage.sqlite.writer_lock import INHERITED_FD_ENV, WriterLock


def gate(path: str, then: Callable[[], None] | None) -> Callable[[], None]:
    """A ``preexec_fn`` that waits for one byte on the FIFO ``path``, then runs ``then``."""

    def wait_at_gate() -> None:
        with open(path, "rb") as fifo:
            fifo.read(1)
        if then is not None:
            then()

    return wait_at_gate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--grace", type=float, default=None)
    parser.add_argument("--stop-after", type=float, default=None)
    parser.add_argument("--gate", default=None)
    parser.add_argument("--gate-spawn", type=int, default=-1)
    args = parser.parse_args(argv)

    sock = bind_socket("127.0.0.1", args.port)
    dies_with_us = die_with_parent()
    gated = gate(args.gate, dies_with_us) if args.gate else dies_with_us
    starts = itertools.count()
    spawn = Supervisor.spawn

    def gated_spawn(self: Supervisor, index: int) -> object:
        self.preexec = gated if next(starts) == args.gate_spawn else dies_with_us
        return spawn(self, index)

    Supervisor.spawn = gated_spawn  # type: ignore[assignment,method-assign]  # this process only
    options = {} if args.stop_after is None else {"stop_after_s": args.stop_after}
    env = worker_env(None, args.workers, None)
    settings = Settings.from_env()
    target = settings.database_url or settings.db_path
    keep: tuple[int, ...] = ()
    if not is_postgres_url(target):
        lock = WriterLock(target)
        if not lock.try_acquire():
            print(f"gated_supervisor: the writer lock of {target} is held by {lock.holder()}", file=sys.stderr)
            return 3
        keep = (lock.fileno(),)
        env[INHERITED_FD_ENV] = str(lock.fileno())
    with sock:
        supervisor = Supervisor([sock], args.workers, env, grace=args.grace, keep_fds=keep, **options)
        return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
