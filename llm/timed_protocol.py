"""What our two connection protocols share: one waiter, a lazy read deadline, write flow control.

Both ``llm.netstream`` (the bytes under httpcore) and ``llm.h1connection`` (HTTP/1.1 answers
parsed by httptools) read a streamed model answer one small piece per token. A read waits on
one future; its timeout is a deadline that the read only moves (one float), checked by one
timer per connection armed at the deadline and re-armed when it fires early (the read it was
armed for was answered long ago) - so a stream of tokens 100 ms apart costs one timer per
timeout period, not one per token. A read without a timeout sets the deadline to infinity, so
a timer a previous read armed does not end it.

A write hands its bytes to the transport and, while the peer is not reading
(``pause_writing``), waits for it at most its timeout. The one difference between the two
is the exception types: httpcore's under httpcore (its transport maps them to httpx's),
httpx's own in ours.
"""

from __future__ import annotations

import asyncio
import math
from typing import cast


class TimedProtocol(asyncio.Protocol):
    """A connection's waiter, read deadline and write flow control (see the module docstring)."""

    #: What a read past its deadline raises, a write past its timeout, and a write the
    #: connection cannot take.
    read_timeout: type[Exception] = TimeoutError
    write_timeout: type[Exception] = TimeoutError
    write_error: type[Exception] = ConnectionError

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        #: What ended or spoiled the connection, if anything did.
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused_reading = False
        self.drain: asyncio.Future[None] | None = None
        #: The read deadline (loop time) and the one timer that checks it.
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not ``asyncio.Transport`` subclasses: no isinstance here.
        self.transport = cast(asyncio.Transport, transport)

    def pause_writing(self) -> None:
        if self.drain is None or self.drain.done():
            self.drain = self.loop.create_future()

    def resume_writing(self) -> None:
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)

    def _lost(self) -> None:
        """The connection is gone: a waiting read and a waiting write learn it now."""
        self._wake()
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def arm(self, timeout: float) -> None:
        """The next read must be answered within ``timeout`` seconds from now."""
        self.deadline = self.loop.time() + timeout
        timer = self.timer
        if timer is None:
            self.timer = self.loop.call_at(self.deadline, self._check)
        elif timer.when() > self.deadline:  # a shorter timeout than the armed one
            timer.cancel()
            self.timer = self.loop.call_at(self.deadline, self._check)

    def _check(self) -> None:
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # no read waits: the next one arms a timer again
        if self.loop.time() >= self.deadline:
            self.waiter = None
            waiter.set_exception(self.read_timeout("timed out"))
        elif self.deadline != math.inf:  # a read without a timeout needs no timer
            self.timer = self.loop.call_at(self.deadline, self._check)

    async def write(self, transport: asyncio.Transport | None, data: bytes, timeout: float | None) -> None:
        """``data`` out on ``transport`` (this connection's, or the TLS one over it), waiting
        at most ``timeout`` seconds while the peer is not reading."""
        if self.error is not None or transport is None or transport.is_closing():
            raise self.write_error(str(self.error or "the connection is closed"))
        transport.write(data)
        drain = self.drain
        if drain is not None and not drain.done():
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(drain)
            except TimeoutError as exc:
                raise self.write_timeout("timed out") from exc
            if self.error is not None:
                raise self.write_error(str(self.error))

    async def wait(self, timeout: float | None) -> None:
        """Until the connection has news (``_wake``) or ``timeout`` seconds pass
        (:attr:`read_timeout`)."""
        waiter = self.loop.create_future()
        self.waiter = waiter
        if timeout is not None:
            self.arm(timeout)
        else:  # no timeout: a timer a previous read armed must not end this one
            self.deadline = math.inf
        try:
            await waiter
        finally:
            if self.waiter is waiter:
                self.waiter = None


__all__ = ["TimedProtocol"]
