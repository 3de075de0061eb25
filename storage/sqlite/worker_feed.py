"""The run feed of worker processes sharing one SQLite file (``agentchat serve --workers``).

A file notifies no one, so before this each follower of a run executing on a sibling
worker read the run's log every 50 ms — a read per followed run per tick whether or not
anything was written, which doubled the CPU per run with ``--workers``. Here the workers
tell each other instead, the way PostgreSQL's ``LISTEN/NOTIFY`` does between replicas
(``storage.postgres.notify``), behind the same ``RunFeed`` interface:

* each worker listens on a Unix stream socket in a runtime directory next to the file
  (``<db>.workers/<pid>-<token>.sock``; in the temporary directory where that path is
  too long for a socket address: ``storage.sqlite.runtime_dir``, which also says who
  removes it) and connects to every sibling's socket it finds
  there (looked for again every ``scan_s``, and at once when a connection fails);
* after a step of a run commits, the worker that wrote it sends the step's events to
  every sibling (``feed_payload``: the events themselves when they fit, else "read the
  log"), coalesced into one write per sibling per loop tick; cancels asked for travel
  the same way, and so do a worker's words of which runs it has clients attached to
  (``announce_followers``, ``app.runs.presence``) and a topic's news
  (``subscribe``/``announce``). Knowledge-base changes do not: every process on the
  file, the CLI's included, counts them in the file itself
  (``storage.stores.kb_generation``), which each worker reads before a search.

The log stays the single source of truth. A frame that cannot be delivered — a sibling
that does not keep up (its unread bytes past ``max_buffer``), a connection that broke or
was not yet made — becomes "read the log" for the receiver: a new or re-made connection
makes every watcher there read the log once and every cancel subscriber look in the
store, and a sender that dropped frames for a slow sibling sends it "read everything"
first once it keeps up again. What slips through all of that is caught by the
followers' slow safety poll (``RemoteRuns.poll_s``).

Frames are ``<length: 4 bytes, big-endian><kind: 1 byte><text>``: ``E`` a run's
events, ``C`` a cancel (the run id), ``F`` a word of followers, ``T`` a topic's news
(``<topic>\\n<text>``), ``R`` "read everything".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from storage.close_bounds import FEED_CLOSE_S
from storage.feed_payload import encode_payload
from storage.records import RunEvent
from storage.run_feed import RunWatch, RunWatchers
from storage.sqlite.runtime_dir import make_runtime_dir, runtime_dir, tidy_runtime_dir, worker_gone

log = logging.getLogger("agentchat.storage")

#: Events of one step carried in one frame up to this size; a bigger step says "read".
MAX_FRAME_BYTES = 64 * 1024
#: A sibling this far behind reading its socket gets frames dropped (then "read all").
MAX_BUFFER_BYTES = 4 * 1024 * 1024
_HEAD = struct.Struct(">I")
#: How long ``close`` waits for the readers of siblings' connections once it closed them
#: (named in ``storage.close_bounds``, which the close budget reads without this module).
CLOSE_S = FEED_CLOSE_S
EVENTS, CANCEL, FOLLOWERS, TOPIC, READ_ALL = b"E", b"C", b"F", b"T", b"R"


def _frame(kind: bytes, text: str) -> bytes:
    body = kind + text.encode()
    return _HEAD.pack(len(body)) + body


@dataclass(slots=True)
class _Peer:
    """This worker's connection to one sibling's socket."""

    path: Path
    writer: asyncio.StreamWriter
    #: Frames were dropped for it: send "read everything" before the next ones.
    dropped: bool = False


@dataclass(slots=True)
class WorkerFeed:
    """``RunFeed`` between processes on one SQLite file; see the module's docstring."""

    directory: Path
    scan_s: float = 1.0
    max_buffer: int = MAX_BUFFER_BYTES
    _path: Path | None = None
    _server: asyncio.AbstractServer | None = None
    _peers: dict[Path, _Peer] = field(default_factory=dict)
    _connecting: set[Path] = field(default_factory=set)
    _hub: RunWatchers = field(default_factory=lambda: RunWatchers(log))
    _topics: dict[str, list[Callable[[str], None]]] = field(default_factory=dict)
    _pending: list[bytes] = field(default_factory=list)
    _flush_scheduled: bool = False
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _scanner: asyncio.Task[None] | None = None
    #: Siblings' connections to our socket, each read by a ``_serve`` task asyncio made.
    _incoming: dict[asyncio.Task[None], asyncio.StreamWriter] = field(default_factory=dict)
    _closing: bool = False
    #: Figures for tests and metrics: frames received, and frames dropped for slow siblings.
    received: int = 0
    dropped: int = 0

    @property
    def path(self) -> Path | None:
        """This worker's socket (``None`` until started)."""
        return self._path

    @property
    def siblings(self) -> int:
        return len(self._peers)

    async def start(self) -> None:
        self._path = self.directory / f"{os.getpid()}-{secrets.token_hex(4)}.sock"
        for attempt in range(3):
            make_runtime_dir(self.directory)
            try:
                self._server = await asyncio.start_unix_server(self._serve, path=str(self._path))
                break
            except FileNotFoundError:
                # The last worker of the group before removed the directory between our
                # mkdir and our bind (``tidy_runtime_dir``): make it again.
                if attempt == 2:
                    raise
        os.chmod(self._path, 0o600)
        await self._scan()
        self._scanner = asyncio.create_task(self._scan_forever(), name="worker-feed-scan")

    async def close(self) -> None:
        """Stop listening, hang up on every sibling and end every reader.

        A sibling's connection to us is read by a task asyncio's server made: left
        running, the end of the event loop cancelled it, and Python 3.11's server logs
        a cancelled reader as an ERROR ("Exception in callback": its done callback asks
        the task for its exception) - once per worker shutdown. So the readers are ended
        here, by closing their connections: each sees the end of its stream and returns."""
        self._closing = True
        if self._scanner is not None:
            self._scanner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scanner
        if self._server is not None:
            self._server.close()
        for writer in list(self._incoming.values()):
            writer.close()
        if self._incoming:
            _, stuck = await asyncio.wait(list(self._incoming), timeout=CLOSE_S)
            if stuck:  # never seen: a closed transport ends its reader at once
                log.warning("sibling readers still running after the feed closed", extra={"tasks": len(stuck)})
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
        for peer in list(self._peers.values()):
            peer.writer.close()
        self._peers.clear()
        # The last worker out leaves no directory behind: with the siblings gone (and
        # this worker's metrics socket and leader lock closed before its storage), only
        # dead workers' files and an unheld leader lock are left (``storage.sqlite.runtime_dir``).
        tidy_runtime_dir(self.directory)
        for task in list(self._tasks):
            task.cancel()

    # --- the RunFeed interface (what followers and the cancel path use) -----------------

    def watch(self, run_id: str) -> contextlib.AbstractContextManager[RunWatch]:
        return self._hub.watch(run_id)

    def subscribe_cancels(self, callback: Callable[[str | None], None]) -> None:
        self._hub.subscribe_cancels(callback)

    def subscribe_followers(self, callback: Callable[[str], None]) -> None:
        self._hub.subscribe_followers(callback)

    def subscribe(self, topic: str, callback: Callable[[str], None]) -> None:
        """``callback(text)`` when a sibling announces news of ``topic`` (and ``""`` when
        some may have been missed)."""
        self._topics.setdefault(topic, []).append(callback)

    @property
    def watched(self) -> int:
        return self._hub.watched

    # --- sending ----------------------------------------------------------------------

    def announce_events(self, run_id: str, events: Sequence[RunEvent]) -> None:
        """A step of ``run_id`` committed here (call after the commit)."""
        if events and self._peers:
            self._queue(_frame(EVENTS, encode_payload(run_id, events, MAX_FRAME_BYTES)))

    def announce_cancels(self, run_ids: Sequence[str]) -> None:
        """Cancels of these runs were stored here (call after the commit)."""
        for run_id in run_ids:
            self._queue(_frame(CANCEL, run_id))

    def announce_followers(self, payload: str) -> None:
        """A word of this worker's followers, to its siblings and to itself."""
        self._queue(_frame(FOLLOWERS, payload))
        self._hub.followers(payload)

    def announce(self, topic: str, text: str = "") -> None:
        self._queue(_frame(TOPIC, f"{topic}\n{text}"))

    def _queue(self, frame: bytes) -> None:
        if not self._peers:
            return  # nobody to tell; a sibling connecting later reads everything first
        self._pending.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """One write per sibling for everything announced during this loop tick."""
        self._flush_scheduled = False
        data, self._pending = b"".join(self._pending), []
        for peer in list(self._peers.values()):
            transport = peer.writer.transport
            if transport.is_closing():
                self._lost(peer)
                continue
            if transport.get_write_buffer_size() > self.max_buffer:
                if not peer.dropped:
                    log.warning(
                        "a sibling worker is not reading its feed; it will read the log", extra={"peer": peer.path.name}
                    )
                peer.dropped = True
                self.dropped += 1
                continue
            if peer.dropped:
                peer.writer.write(_frame(READ_ALL, ""))
                peer.dropped = False
            peer.writer.write(data)

    def _lost(self, peer: _Peer) -> None:
        if self._peers.get(peer.path) is peer:
            del self._peers[peer.path]
        peer.writer.close()

    # --- finding siblings -------------------------------------------------------------

    async def _scan_forever(self) -> None:
        while True:
            await asyncio.sleep(self.scan_s)
            try:
                await self._scan()
            except OSError as exc:
                log.warning("looking for sibling workers failed", extra={"error": str(exc)[:300]})

    async def _scan(self) -> None:
        for path in self.directory.glob("*.sock"):
            if path == self._path or path in self._peers or path in self._connecting:
                continue
            self._connecting.add(path)
            try:
                _, writer = await asyncio.open_unix_connection(str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                # A worker killed without cleaning up left its socket: nobody listens. A
                # sibling starting has bound its socket and may not listen yet: its pid
                # runs, so the socket is kept, and the next scan connects to it.
                if worker_gone(path):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                continue
            except OSError as exc:
                log.warning("cannot reach a sibling worker", extra={"peer": path.name, "error": str(exc)[:200]})
                continue
            finally:
                self._connecting.discard(path)
            self._peers[path] = _Peer(path, writer)
            task = asyncio.create_task(self._await_close(path, writer), name="worker-feed-peer")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _await_close(self, path: Path, writer: asyncio.StreamWriter) -> None:
        """Siblings never write back on our connection: EOF means it went away."""
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        peer = self._peers.get(path)
        if peer is not None and peer.writer is writer:
            del self._peers[path]

    # --- receiving --------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One sibling's frames, in its commit order. A new connection may follow frames
        lost with an old one (or sent before it existed): everyone reads once."""
        me = asyncio.current_task()
        if self._closing or me is None:
            writer.close()
            return
        self._incoming[me] = writer
        self._read_all()
        try:
            while True:
                head = await reader.readexactly(_HEAD.size)
                body = await reader.readexactly(_HEAD.unpack(head)[0])
                self.received += 1
                self._handle(body[:1], body[1:].decode())
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:  # a bug here must not stop hearing the others
            log.exception("a sibling's feed frame could not be handled")
        finally:
            del self._incoming[me]
            writer.close()
            if not self._closing:
                self._read_all()  # whatever its broken connection still carried

    def _handle(self, kind: bytes, text: str) -> None:
        if kind == EVENTS:
            self._hub.deliver(text)
        elif kind == CANCEL:
            self._hub.cancel(text)
        elif kind == FOLLOWERS:
            self._hub.followers(text)
        elif kind == TOPIC:
            topic, _, news = text.partition("\n")
            for callback in self._topics.get(topic, ()):
                self._call(callback, news)
        elif kind == READ_ALL:
            self._read_all()

    def _read_all(self) -> None:
        self._hub.read_all()
        self._hub.cancel(None)
        for callbacks in self._topics.values():
            for callback in callbacks:
                self._call(callback, "")

    @staticmethod
    def _call(callback: Callable[..., None], arg: str | None) -> None:
        try:
            callback(arg)
        except Exception:  # one subscriber's bug must not stop the feed
            log.exception("a worker feed subscriber failed")


__all__ = ["WorkerFeed", "make_runtime_dir", "runtime_dir"]
