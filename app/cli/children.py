"""Child processes that die with their parent, even when it is SIGKILLed.

``agentchat serve`` starts the reference backend and, with ``--workers``, its serving
processes; the test harness starts servers and PostgreSQL. A parent killed outright runs
no clean-up, so on Linux each child asks the kernel for a signal when its parent goes
(``PR_SET_PDEATHSIG``), set between ``fork`` and ``exec`` through ``Popen``'s
``preexec_fn``. A parent that died before that call would never signal: the child checks
that its parent is still the one that forked it and, if not, signals itself.

The kernel sends the signal when the *thread* that forked the child ends, not the
process, so it is set only for children started on the main thread; a child started from
a worker thread would be killed when that thread's pool shuts down. Elsewhere (not Linux,
no ``prctl``) nothing is set.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, *, thread_outlives_child: bool = False) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``sig`` when this thread ends, or None.
    ``thread_outlives_child``: a thread other than the main one may ask, when it ends only
    after the child has (the reference backend's keeper, ``app/cli/backend_keeper.py``,
    which waits on its child for the life of the process)."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread() and not thread_outlives_child:
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # loaded here, not in the child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl: nobody will signal
            os.kill(os.getpid(), sig)

    return set_pdeathsig


def follow_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """In a child started without a ``preexec_fn`` (``multiprocessing``'s spawn: the
    ``serve --reload`` child): ask for ``sig`` when the parent goes, from the child itself.
    ``parent`` is the pid that started it; gone already, the signal comes at once."""
    if not sys.platform.startswith("linux"):
        return
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


__all__ = ["die_with_parent", "follow_parent"]
