"""How the copy reports its progress: a ``ProgressFactory`` gives one reporter per table;
``TqdmProgress`` draws a ``tqdm`` bar per table on stderr.

Why apart: the copy only counts rows; what is drawn, and where, is the caller's choice
(the CLI passes ``TqdmProgress``, tests may pass none).
"""

from __future__ import annotations

import contextlib
import sys
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


class _Bar:
    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def advance(self, rows: int) -> None:
        self._bar.update(rows)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._bar.close()
