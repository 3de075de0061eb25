"""What ``agentchat serve`` knows of the reference backend it started and keeps running,
for ``/readyz``.

The keeper (``app/cli/backend_keeper.py``) runs in ``serve``'s own process, and the app
that answers ``/readyz`` may run in another (a worker of ``--workers``, the ``--reload``
child): the keeper writes its state to a small JSON file whose path the app is given
(``AGENT_BACKEND_STATE_FILE``), replaced whole on each change, and the app reads it when
``/readyz`` asks. Without the file (a backend of your own, ``AGENT_BACKEND_URL``) nothing
is said of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

#: The variable ``serve`` gives the app the file's path in.
STATE_FILE_ENV = "AGENT_BACKEND_STATE_FILE"
RUNNING = "running"
RESTARTING = "restarting"
#: Exited too often within the keeper's window: not restarted again.
GIVEN_UP = "given_up"


@dataclass(frozen=True, slots=True)
class KeptBackend:
    """The keeper's state: ``running``, ``restarting`` (``retry_at``: when the next start
    is tried, a ``time.time()``) or ``given_up``; how many times it was restarted, and how
    it last ended (``code 1``, ``signal SIGKILL``)."""

    state: str
    restarts: int = 0
    last_exit: str | None = None
    retry_at: float | None = None
    #: ``given_up``: the exits within the window that ended the restarts, and the window.
    exits: int = 0
    window_s: float = 0.0


def exit_described(code: int) -> str:
    """A child's return code in words: ``code 1``, ``signal SIGKILL``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
        return f"signal {-code}"
    return f"code {code}"


def write_state(path: Path, state: KeptBackend) -> None:
    """Replace ``path`` whole (a reader never sees half a file)."""
    part = path.with_name(path.name + ".part")
    part.write_bytes(orjson.dumps(asdict(state)))
    os.replace(part, path)


def read_state(path: Path) -> KeptBackend | None:
    """The state in ``path``; ``None`` when it is missing or unreadable (the keeper not
    started yet, or gone)."""
    try:
        fields = orjson.loads(path.read_bytes())
        return KeptBackend(**fields)
    except (OSError, ValueError, TypeError):
        return None


def readiness_of(state: KeptBackend, now: float | None = None) -> tuple[dict[str, Any], str | None]:
    """``/readyz``'s ``checks.backend.kept_by_serve`` for ``state``, and the ``detail`` the
    check should say instead of its own, or ``None``: once the keeper has given up, that
    the backend stays down and what to do."""
    out: dict[str, Any] = {"state": state.state, "restarts": state.restarts}
    if state.last_exit is not None:
        out["last_exit"] = state.last_exit
    if state.state == RESTARTING and state.retry_at is not None:
        out["retry_in_s"] = round(max(0.0, state.retry_at - (time.time() if now is None else now)), 1)
    if state.state != GIVEN_UP:
        return out, None
    detail = (
        f"the reference backend agentchat serve started exited {state.exits} times within "
        f"{state.window_s:g} s (last: {state.last_exit}) and is not restarted again: workflow and table "
        "tools fail until agentchat serve is restarted (its log says why the backend exited)"
    )
    return out, detail


__all__ = [
    "GIVEN_UP",
    "RESTARTING",
    "RUNNING",
    "STATE_FILE_ENV",
    "KeptBackend",
    "exit_described",
    "read_state",
    "readiness_of",
    "write_state",
]
