"""``serve --reload`` (``make dev``): say "serving" when the app answers, not before.

The reloader binds the port and hands it to a child process that imports and starts the
app, which takes seconds (``make dev`` against an Ollama: about ten). The parent never
sees the child's server start, so it printed "serving on" at once and a newcomer's first
request waited, or seemed to hang, for those seconds. Here the parent says "starting",
then asks the app's ``/healthz`` on the bound port from a thread beside the reloader
(which blocks the main thread) and prints the "serving on" line once it answers; within
a deadline, after which it says the app has not answered yet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: How long the parent waits for the app's first answer before saying it has none yet.
FIRST_ANSWER_DEADLINE_S = 300.0
#: Each probe's own bound: a connection queued while the child starts is answered late.
PROBE_TIMEOUT_S = 5.0
PROBE_EVERY_S = 0.1


def probe_url(host: str, port: int) -> str:
    """``/healthz`` on the bound port; a wildcard address is asked on loopback."""
    target = "::1" if host == "::" else "127.0.0.1" if host in ("", "0.0.0.0") else host
    netloc = f"[{target}]" if ":" in target else target
    return f"http://{netloc}:{port}/healthz"


def answers(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the app answers ``url`` with 200 (its start-up complete). Asked directly,
    never through ``HTTP_PROXY``: the app is on this machine's port, which a proxy
    elsewhere cannot reach (with one set, "serving on" never came)."""
    import httpx

    try:
        return httpx.get(url, timeout=timeout_s, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def announce_when_answering(
    url: str,
    serving: str,
    announce: Callable[[str], None],
    stop: threading.Event,
    *,
    deadline_s: float = FIRST_ANSWER_DEADLINE_S,
    probe: Callable[[str], bool] = answers,
) -> bool:
    """Announce ``serving`` once ``url`` answers; ``False`` (and a line saying so) when the
    deadline passes first, ``False`` silently when ``stop`` is set (the reloader ended)."""
    deadline = time.monotonic() + deadline_s
    while not stop.is_set():
        if probe(url):
            announce(serving)
            return True
        if time.monotonic() > deadline:
            announce(f"agentchat: the app has not answered {url} within {deadline_s:g} s; "
                     "it is still starting or failed to start (see the lines above)")
            return False
        stop.wait(PROBE_EVERY_S)
    return False


def start_watch(url: str, serving: str, announce: Callable[[str], None]) -> tuple[threading.Thread, threading.Event]:
    """Run ``announce_when_answering`` in a daemon thread; set the event to end it."""
    stop = threading.Event()
    thread = threading.Thread(
        target=announce_when_answering, args=(url, serving, announce, stop), name="reload-ready", daemon=True
    )
    thread.start()
    return thread, stop


__all__ = ["FIRST_ANSWER_DEADLINE_S", "announce_when_answering", "answers", "probe_url", "start_watch"]
