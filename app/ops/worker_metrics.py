"""``/metrics`` of the whole service when several workers serve one port (``--workers``).

The kernel hands each connection to one worker, so a scrape used to see one worker at
random, and its counters jumped between workers' values. Prometheus' own multiprocess
mode does not fit here: most of our figures are read from live objects at scrape time
(custom collectors: runs, leases, load, the writer), which that mode cannot carry. So
the worker that answers the scrape asks its siblings instead: each worker serves its
own exposition on a Unix socket in the workers' runtime directory
(``<db>.workers/<pid>-<token>.metrics``), and the answering worker reads every sibling's
(concurrently, ``timeout_s`` each) and merges them with its own:

* counters, histograms and summaries are added up sample by sample (same name, same
  labels) — the service's totals; ``_created`` keeps the earliest;
* gauges (live runs, loop lag, leases held, …) are a worker's state, not a share of a
  total: each keeps its series with a ``worker`` label (the worker's replica id, as in
  ``/readyz`` ``load.replica``), as Prometheus' multiprocess mode does for gauges by
  default; ``sum`` or ``max`` over it in a query.

A worker that dies takes its counts with it (its socket stops answering and is
removed): the merged counters then drop, which ``rate()`` reads as a counter reset. A
sibling that does not answer in time is left out of that scrape and counted in
``agentchat_metrics_workers_missing``, so a partial answer says it is partial.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger("agentchat.ops")

SUFFIX = ".metrics"
#: Families whose samples are a worker's state: kept per worker, never added up.
PER_WORKER_TYPES = frozenset({"gauge", "info", "stateset", "unknown", "untyped"})


@dataclass(slots=True)
class WorkerMetrics:
    """Serves this worker's exposition to its siblings and merges theirs on a scrape."""

    directory: Path
    own: Callable[[], bytes]
    label: str
    timeout_s: float = 2.0
    _path: Path | None = None
    _server: asyncio.AbstractServer | None = None
    #: Siblings left out of the last merged answer (they did not answer in time).
    missing: int = 0

    async def start(self) -> None:
        self._path = self.directory / f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
        self._server = await asyncio.start_unix_server(self._serve, path=str(self._path))
        os.chmod(self._path, 0o600)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(self.label.encode() + b"\n" + self.own())
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _ask(self, path: Path) -> tuple[str, bytes] | None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), self.timeout_s)
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # left by a worker that died: nobody listens
            return None
        except (OSError, TimeoutError):
            self.missing += 1
            return None
        try:
            data = await asyncio.wait_for(reader.read(), self.timeout_s)
        except (OSError, TimeoutError):
            self.missing += 1
            return None
        finally:
            writer.close()
        label, _, body = data.partition(b"\n")
        return label.decode(errors="replace"), body

    async def body(self) -> bytes:
        """The service's exposition: this worker's merged with every sibling's."""
        self.missing = 0
        siblings = [p for p in self.directory.glob(f"*{SUFFIX}") if p != self._path]
        answers = await asyncio.gather(*(self._ask(p) for p in siblings))
        texts = [(self.label, self.own()), *(a for a in answers if a is not None)]
        return merge(texts, missing=self.missing)


def merge(texts: Sequence[tuple[str, bytes]], *, missing: int = 0) -> bytes:
    """One exposition from several workers' (see the module docstring)."""
    families: dict[str, Metric] = {}
    summed: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for worker, text in texts:
        for fam in text_string_to_metric_families(text.decode()):
            merged = families.get(fam.name)
            if merged is None:
                merged = families[fam.name] = Metric(fam.name, fam.documentation, fam.type)
            if fam.type in PER_WORKER_TYPES:
                for s in fam.samples:
                    merged.add_sample(s.name, {**s.labels, "worker": worker}, s.value)
                continue
            values = summed.setdefault(fam.name, {})
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                if key not in values:
                    values[key] = s.value
                elif s.name.endswith("_created"):
                    values[key] = min(values[key], s.value)
                else:
                    values[key] += s.value
    for name, values in summed.items():
        for (sample, labels), value in values.items():
            families[name].add_sample(sample, dict(labels), value)
    workers = Metric("agentchat_metrics_workers", "Workers whose figures this answer merges.", "gauge")
    workers.add_sample("agentchat_metrics_workers", {}, float(len(texts)))
    absent = Metric(
        "agentchat_metrics_workers_missing", "Sibling workers that did not answer this scrape in time.", "gauge"
    )
    absent.add_sample("agentchat_metrics_workers_missing", {}, float(missing))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed([*families.values(), workers, absent]))
    return generate_latest(registry)


class _Fixed:
    """A collector that yields the merged families once."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families

    def describe(self) -> Iterable[Metric]:
        return ()


__all__ = ["WorkerMetrics", "merge"]
