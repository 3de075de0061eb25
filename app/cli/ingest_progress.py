"""The progress an ``agentchat ingest`` shows on stderr while it works: a ``tqdm`` bar on
a terminal (files, rate, ETA and chunks), plain lines now and then otherwise, so a log
file never gets ``\\r`` frames - and a line every few seconds however quiet the
ingestion is, since silence would mean the process is stuck. Apart from the commands
(``app/cli/kb.py``) because it is a display with its own clock and rate smoothing.

It names each stage and counts it with the ingest's own numbers (``on_stage``): the
HTML pages compared with their Markdown copies before any file is read (a docs folder's
first ingest said "looking for files (40s so far)" through that), the files read, the
chunks embedded and the chunks stored. The stored count moves only as each batch's
write commits, so it alone read ``0 chunks, 0 chunks/s`` for the whole embedding of a
large batch; the embedded count moves with every request to the embedder, and its rate
is taken over the time since embedding began, a files rate over the reading alone.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from app.cli.counts import plural

#: A plain progress line shows an ETA once this much of the ingestion has been seen -
#: this many seconds, or this share of the files: one file's time times the files left
#: read "ETA 3h45m" on the first line of an ingestion whose first file was a large one.
ETA_AFTER_S = 5.0
ETA_AFTER_SHARE = 0.02
#: Weight of the latest interval's rate (from one finished file to the next reported) in
#: the smoothed rate the ETA divides by (the first is the average so far): a slow or fast
#: stretch moves it, one line does not swing it.
ETA_SMOOTHING = 0.3
#: The stages ``on_stage`` hears (``knowledge.ingest_stages``' names, not imported: every
#: ``agentchat`` command loads this module, and ``knowledge`` loads numpy).
STAGE_COMPARE = "compare"
STAGE_EMBED = "embed"


class _Count:
    """One stage's ``done`` of ``total``, and when it was first and last heard of (its rate)."""

    __slots__ = ("done", "first", "first_done", "last", "total")

    def __init__(self) -> None:
        self.done = 0
        self.total = 0
        self.first: float | None = None
        self.first_done = 0
        self.last = 0.0

    def set(self, done: int, total: int, now: float) -> None:
        if self.first is None:
            self.first, self.first_done = now, done
        self.done, self.total, self.last = done, total, now

    def rate(self, now: float) -> float | None:
        """Per second since it was first heard of (its first count not included: that
        one's time is unknown); ``None`` before a second report."""
        if self.first is None or now <= self.first or self.done <= self.first_done:
            return None
        return (self.done - self.first_done) / (now - self.first)


class IngestProgress:
    """Per-file progress with chunk counts: a ``tqdm`` bar when ``stream`` is a terminal
    (and tqdm is installed), else a plain line every ``interval_s`` seconds and at the end.

    The ingestion calls it after each file (``__call__``), with its stages' counts
    (``on_stage``) and after each write (``on_batch``); ``ticking()`` runs beside it so a
    quiet stretch (a folder being listed, one slow embedding call) still gets its line
    every ``interval_s``: silence means the process is stuck."""

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
        #: Chunks stored (committed): the report's count after each write.
        self.chunks = 0
        self.total = 0
        self.done = 0
        #: When the files began to be read (after the comparison), and when the last was.
        self._reading_since: float | None = None
        self._read_all_at: float | None = None
        self.compared = _Count()
        self.embedded = _Count()
        self._bar: Any = None
        self._compare_bar: Any = None
        self._last_line = 0.0
        if self.tty:
            try:
                import tqdm  # noqa: F401
            except ImportError:
                self.tty = False

    def __call__(self, done: int, total: int, label: str) -> None:
        """After each file (and with ``"embedding k/n chunks"`` for a batch's own count,
        which ``on_stage`` gives for the whole ingest: not shown twice)."""
        now = self._clock()
        if self._reading_since is None:
            self._reading_since = self.compared.last if self.compared.first is not None else self.started
        self.done, self.total = done, total
        if done >= total and self._read_all_at is None:
            self._read_all_at = now
        if self.tty:
            self._close_compare_bar()
            if self._bar is None:
                from tqdm import tqdm

                self._bar = tqdm(total=total, unit="file", file=self.stream, dynamic_ncols=True,
                                 smoothing=0.1, desc="ingest", leave=True)
            self._bar.update(done - self._bar.n)
            self._bar.set_postfix_str(self._chunk_text(now), refresh=False)
            return
        self.tick()

    def on_stage(self, stage: str, done: int, total: int) -> None:
        """A stage's count (``knowledge.ingest_stages.StageHook``): HTML pages compared, chunks embedded."""
        now = self._clock()
        if stage == STAGE_COMPARE:
            self.compared.set(done, total, now)
            if self.tty and self._bar is None and total:
                if self._compare_bar is None:
                    from tqdm import tqdm

                    self._compare_bar = tqdm(total=total, unit="page", file=self.stream, dynamic_ncols=True,
                                             desc="comparing HTML pages with their Markdown copies", leave=False)
                self._compare_bar.update(done - self._compare_bar.n)
        elif stage == STAGE_EMBED:
            self.embedded.set(done, total, now)
            if self._bar is not None:
                self._bar.set_postfix_str(self._chunk_text(now))

    def tick(self) -> None:
        """A plain line if none was written for ``interval_s`` (a bar redraws itself)."""
        now = self._clock()
        if self._bar is not None:
            self._bar.set_postfix_str(self._chunk_text(now))
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
            self._bar.set_postfix_str(self._chunk_text(self._clock()))

    def close(self) -> None:
        """The last word: the bar's final state, or one last line (after the last batch
        was written, so its chunks are counted)."""
        self._close_compare_bar()
        now = self._clock()
        if self._bar is not None:
            self._bar.set_postfix_str(self._chunk_text(now))
            self._bar.close()
            self._bar = None
        elif not self.tty and self.total:
            self._write_line(now)
            self.total = 0

    def _close_compare_bar(self) -> None:
        if self._compare_bar is not None:
            self._compare_bar.close()
            self._compare_bar = None

    def _write_line(self, now: float) -> None:
        self._last_line = now
        self.stream.write(self._line(now) + "\n")
        self.stream.flush()

    def _chunk_text(self, now: float) -> str:
        """``chunks: 19072/21478 embedded (350/s), 2000 stored``; without an embedder
        (or before its first answer) ``chunks: 2000 stored``."""
        stored = f"{self.chunks} stored"
        if self.embedded.first is None:
            return f"chunks: {stored}"
        rate = self.embedded.rate(now)
        per_s = f" ({rate:.0f}/s)" if rate is not None else ""
        return f"chunks: {self.embedded.done}/{self.embedded.total} embedded{per_s}, {stored}"

    def _line(self, now: float) -> str:
        elapsed = max(1e-9, now - self.started)
        if not self.total:
            return self._waiting_line(now, elapsed)
        since = self._reading_since if self._reading_since is not None else self.started
        reading = max(1e-9, (self._read_all_at or now) - since)
        pct = 100.0 * self.done / self.total
        line = f"ingest: {self.done}/{self.total} files ({pct:.0f}%), {self.done / reading:.1f} files/s"
        eta = self._eta(now, max(1e-9, now - since))
        if self.done >= self.total:  # the files are read: what is left is the embedding's
            rate = self.embedded.rate(now)
            left = self.embedded.total - self.embedded.done
            eta = left / rate if rate and left > 0 else None
        line += f"; {self._chunk_text(now)}"
        return f"{line}, ETA {_duration(eta)}" if eta is not None else line

    def _waiting_line(self, now: float, elapsed: float) -> str:
        """Before the first file: the comparison of HTML pages with their Markdown copies
        when there is one, else the walk of the folders."""
        c = self.compared
        if c.first is None or not c.total:
            return f"ingest: looking for files ({_duration(elapsed)} so far)"
        copies = "its Markdown copy" if c.total == 1 else "their Markdown copies"
        line = f"ingest: comparing {plural(c.total, 'HTML page')} with {copies}: {c.done}/{c.total}"
        rate = c.rate(now)
        if rate and c.done < c.total:
            return f"{line}, ETA {_duration((c.total - c.done) / rate)}"
        return f"{line} ({_duration(elapsed)} so far)"

    def _eta(self, now: float, elapsed: float) -> float | None:
        """Seconds left at the smoothed rate; ``None`` until enough has been seen
        (``ETA_AFTER_S`` or ``ETA_AFTER_SHARE`` of the files) to say.

        Only a finished file moves the smoothed rate (over the time since the last one):
        folding each quiet line's 0 files/s into it shrank it 0.7 times a line while a
        batch was embedded, the ETA growing to thousands of hours. While no file
        finishes, the ETA is the one the rate would give if one finished now."""
        if self.done <= 0 or (elapsed < ETA_AFTER_S and self.done < ETA_AFTER_SHARE * self.total):
            return None
        at, done_then = self._rate_at
        if self._rate is None:
            self._rate = self.done / elapsed
            self._rate_at = (now, self.done)
        elif now > at and self.done > done_then:
            recent = (self.done - done_then) / (now - at)
            self._rate = ETA_SMOOTHING * recent + (1 - ETA_SMOOTHING) * self._rate
            self._rate_at = (now, self.done)
        rate = self._rate
        if self.done == self._rate_at[1] and now > self._rate_at[0]:  # none since the last
            rate = min(rate, ETA_SMOOTHING / (now - self._rate_at[0]) + (1 - ETA_SMOOTHING) * rate)
        return (self.total - self.done) / rate if rate > 0 else None


def _duration(value: float) -> str:
    seconds = round(value)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


__all__ = ["STAGE_COMPARE", "STAGE_EMBED", "IngestProgress"]
