"""How the copy reports its progress: a ``ProgressFactory`` gives one reporter per table;
``TqdmProgress`` draws a ``tqdm`` bar per table on a terminal, ``LineProgress`` writes
plain lines (a pipe or a log file got tqdm's ``\r`` frames), as ``agentchat ingest`` does.

Why apart: the copy only counts rows; what is drawn, and where, is the caller's choice
(the CLI passes ``TqdmProgress``, tests may pass none).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol


class TableProgress(Protocol):
    def advance(self, rows: int) -> None: ...

    def close(self) -> None: ...


ProgressFactory = Callable[[str, int, int], TableProgress]
"""``(table, total rows, rows already copied)`` -> a progress reporter for that table."""


class TqdmProgress:
    """One ``tqdm`` bar per table on stderr (``ProgressFactory``)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr

    def __call__(self, table: str, total: int, done: int) -> TableProgress:
        from tqdm import tqdm

        bar = tqdm(
            total=total, initial=done, desc=table, unit="row", file=self.stream, dynamic_ncols=True, mininterval=0.5
        )
        return _Bar(bar)


class LineProgress:
    """A plain line per table when it starts, every ``interval_s`` while it is copied,
    and when it is done (``ProgressFactory``): for a stream that is not a terminal."""

    def __init__(self, stream: Any = None, *, interval_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.clock = clock

    def __call__(self, table: str, total: int, done: int) -> TableProgress:
        return _Lines(self, table, total, done)


class _Lines:
    def __init__(self, owner: LineProgress, table: str, total: int, done: int) -> None:
        self._owner, self._table, self._total, self._done = owner, table, total, done
        self._closed = False
        self._write("resumed at" if done else "starting")
        self._last = owner.clock()

    def _write(self, what: str) -> None:
        print(f"  {self._table}: {what} {self._done}/{self._total} rows", file=self._owner.stream, flush=True)

    def advance(self, rows: int) -> None:
        self._done += rows
        now = self._owner.clock()
        if now - self._last >= self._owner.interval_s:
            self._last = now
            self._write("copied")

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._write("done,")


class _Bar:
    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def advance(self, rows: int) -> None:
        self._bar.update(rows)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._bar.close()
