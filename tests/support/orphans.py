"""Children of the test process die with it, even when it is killed.

pytest-timeout ends a hung xdist worker with ``os._exit``: no fixture teardown runs, so
the servers its test started (``AgentServer``, a test PostgreSQL) would live on as
orphans — one SIGSTOPped replica stayed stopped for 40 minutes once, and running ones
keep eating the two cores the rest of the suite needs. On Linux a child can ask the
kernel for a signal when its parent goes (``PR_SET_PDEATHSIG``); this module sets it
between ``fork`` and ``exec`` through ``Popen``'s ``preexec_fn``.

The kernel sends the signal when the *thread* that forked the child ends, not the
process, so it is set only for children started on the main thread (the one pytest and
pytest-asyncio run tests on); a child started from a worker thread would otherwise be
killed when that thread's pool shuts down. Elsewhere (not Linux) nothing is set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``sig`` when this thread ends, or None."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    prctl = ctypes.CDLL(libc_name, use_errno=True).prctl  # loaded here, not in the child
    parent = os.getpid()

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl: nobody will signal
            os.kill(os.getpid(), sig)

    return set_pdeathsig
