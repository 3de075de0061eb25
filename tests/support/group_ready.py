"""Until a ``serve`` on a loopback port answers ``/readyz`` 200: every answer kept.

A process test that starts a ``serve --workers`` group (no ``AgentServer`` of its own
to ask) used to probe ``/readyz`` once with a 5-10 s timeout the moment the workers had
said "serving on": on a loaded machine that one probe is the step that can miss (a
read timeout, or a check that answers late), though the group serves. Waiting for 200,
with every answer kept, lets the test still judge what the group said meanwhile (no
worker ever answered as a waiting process, ``"writer"``) without depending on how fast
the machine is.
"""

from __future__ import annotations

import asyncio

import httpx

from tests.support.procs import ManagedProcess

#: One probe's read timeout: a guard, generous for a loaded 2-core machine.
PROBE_TIMEOUT_S = 15.0

Answer = tuple[int, str]
"""(status, the first 300 characters of the body); status 0 and the error when none came."""


async def until_ready(
    http: httpx.AsyncClient, port: int, proc: ManagedProcess, *, timeout_s: float = 60.0
) -> list[Answer]:
    """Poll ``GET http://127.0.0.1:PORT/readyz`` until it answers 200; every answer in
    order (the 200 last). Fails at once if ``proc`` exits, and after ``timeout_s`` (a
    guard against a hang), naming the last answers and the process's log."""
    seen: list[Answer] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            answer = await http.get(f"http://127.0.0.1:{port}/readyz", timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError as exc:
            seen.append((0, repr(exc)))
        else:
            seen.append((answer.status_code, answer.text[:300]))
            if answer.status_code == 200:
                return seen
        assert proc.running, (seen[-3:], proc.tail())
        assert loop.time() < deadline, (f"/readyz not 200 within {timeout_s:g} s", seen[-3:], proc.tail())
        await asyncio.sleep(0.05)


__all__ = ["PROBE_TIMEOUT_S", "until_ready"]
