"""A probe of the garbage collector's pauses in every Python process started with this
directory on ``PYTHONPATH`` and ``GCPROBE_DIR`` set (a benchmark's servers): each
collection's generation and duration via ``gc.callbacks``, written as JSON to
``$GCPROBE_DIR/<pid>.json`` at most every 2 s (after a collection, outside the timed
span) and at exit (benchmark servers are killed, so exit alone would lose it), with the
process's argv so a summary keeps the servers only. Not part of the service;
docs/scaling.md says how it was used (issue 23).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import time

_DIR = os.environ.get("GCPROBE_DIR")

if _DIR:
    _t0 = time.perf_counter()
    _start: list[float] = [0.0]
    _events: list[tuple[float, int, float]] = []
    _dumped: list[float] = [0.0]

    def _on_gc(phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            _start[0] = now
        else:
            _events.append((round(now - _t0, 4), info["generation"], round((now - _start[0]) * 1000, 3)))
            if now - _dumped[0] > 2.0:
                _dumped[0] = now
                _dump()

    def _dump() -> None:
        body = {
            "argv": sys.argv,
            "threshold": gc.get_threshold(),
            "frozen": gc.get_freeze_count(),
            "events": _events,
        }
        path = os.path.join(str(_DIR), f"{os.getpid()}.json")
        with open(path + ".tmp", "w") as out:
            json.dump(body, out)
        os.replace(path + ".tmp", path)

    gc.callbacks.append(_on_gc)
    atexit.register(_dump)
