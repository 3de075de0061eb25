"""The progress an ``agentchat ingest`` shows on stderr while it works: a ``tqdm`` bar on
a terminal (files, rate, ETA and chunks), plain lines now and then otherwise, so a log
file never gets ``\\r`` frames - and a line every few seconds however quiet the
ingestion is, since silence would mean the process is stuck. Apart from the commands
(``app/cli/kb.py``) because it is a display with its own clock and rate smoothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

#: A plain progress line shows an ETA once this much of the ingestion has been seen -
#: this many seconds, or this share of the files: one file's time times the files left
#: read "ETA 3h45m" on the first line of an ingestion whose first file was a large one.
ETA_AFTER_S = 5.0
ETA_AFTER_SHARE = 0.02
#: Weight of the latest interval's rate in the smoothed rate the ETA divides by (the
#: first is the average so far): a slow or fast stretch moves it, one line does not swing it.
ETA_SMOOTHING = 0.3


class IngestProgress:
    """Per-file progress with chunk counts: a ``tqdm`` bar when ``stream`` is a terminal
    (and tqdm is installed), else a plain line every ``interval_s`` seconds and at the end.

    The ingestion calls it after each file and while it embeds a batch; ``ticking()``
    runs beside it so a quiet stretch (a folder being listed, one slow embedding call)
    still gets its line every ``interval_s``: silence means the process is stuck."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interval_s: float = 5.0,
        tty: bool | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval_s = interval_s
        self._clock = clock
        self.started = clock()
        #: The smoothed files/s the ETA divides by, and when (and at how many files) it
        #: was last updated; ``None`` until enough has been seen (``ETA_AFTER_S``).
        self._rate: float | None = None
        self._rate_at = (0.0, 0)
        self.chunks = 0
        self.total = 0
        self.done = 0
        #: What happens besides reading files (``"embedding 128/900 chunks"``), or "".
        self.phase = ""
        self._bar: Any = None
        self._last_line = 0.0
        if self.tty:
            try:
                import tqdm  # noqa: F401
            except ImportError:
                self.tty = False

    def __call__(self, done: int, total: int, label: str) -> None:
        self.done, self.total = done, total
        self.phase = label if label.startswith("embedding ") else ""
        if self.tty:
            if self._bar is None:
                from tqdm import tqdm

                self._bar = tqdm(total=total, unit="file", file=self.stream, dynamic_ncols=True,
                                 smoothing=0.1, desc="ingest", leave=True)
            self._bar.update(done - self._bar.n)
            self._bar.set_postfix_str(self._chunk_text(), refresh=False)
            return
        self.tick()

    def tick(self) -> None:
        """A plain line if none was written for ``interval_s`` (a bar redraws itself)."""
        now = self._clock()
        if self._bar is not None:
            self._bar.set_postfix_str(self._chunk_text())
        elif not self.tty and now - self._last_line >= self.interval_s:
            self._write_line(now)

    async def ticking(self) -> None:
        """Tick every ``interval_s`` until cancelled (run it as a task beside the ingestion)."""
        import asyncio

        while True:
            await asyncio.sleep(self.interval_s)
            self.tick()

    def on_batch(self, report: Any) -> None:
        self.chunks = int(getattr(report, "chunks", 0))
        if self._bar is not None:
            self._bar.set_postfix_str(self._chunk_text())

    def close(self) -> None:
        """The last word: the bar's final state, or one last line (after the last batch
        was written, so its chunks are counted)."""
        self.phase = ""
        if self._bar is not None:
            self._bar.set_postfix_str(self._chunk_text())
            self._bar.close()
            self._bar = None
        elif not self.tty and self.total:
            self._write_line(self._clock())
            self.total = 0

    def _write_line(self, now: float) -> None:
        self._last_line = now
        self.stream.write(self._line(now) + "\n")
        self.stream.flush()

    def _chunk_text(self) -> str:
        elapsed = max(1e-9, self._clock() - self.started)
        text = f"{self.chunks} chunks, {self.chunks / elapsed:.0f} chunks/s"
        return f"{text}, {self.phase}" if self.phase else text

    def _line(self, now: float) -> str:
        elapsed = max(1e-9, now - self.started)
        if not self.total:
            return f"ingest: looking for files ({_duration(elapsed)} so far)"
        rate = self.done / elapsed
        pct = 100.0 * self.done / self.total
        line = (
            f"ingest: {self.done}/{self.total} files ({pct:.0f}%), {self.chunks} chunks, "
            f"{rate:.1f} files/s, {self.chunks / elapsed:.0f} chunks/s"
        )
        eta = self._eta(now, elapsed)
        if eta is not None and self.done < self.total:
            line += f", ETA {_duration(eta)}"
        return f"{line}, {self.phase}" if self.phase else line

    def _eta(self, now: float, elapsed: float) -> float | None:
        """Seconds left at the smoothed rate; ``None`` until enough has been seen
        (``ETA_AFTER_S`` or ``ETA_AFTER_SHARE`` of the files) to say."""
        if self.done <= 0 or (elapsed < ETA_AFTER_S and self.done < ETA_AFTER_SHARE * self.total):
            return None
        at, done_then = self._rate_at
        if self._rate is None:
            self._rate = self.done / elapsed
        elif now > at and self.done >= done_then:
            recent = (self.done - done_then) / (now - at)
            self._rate = ETA_SMOOTHING * recent + (1 - ETA_SMOOTHING) * self._rate
        self._rate_at = (now, self.done)
        return (self.total - self.done) / self._rate if self._rate > 0 else None


def _duration(value: float) -> str:
    seconds = round(value)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


__all__ = ["IngestProgress"]
