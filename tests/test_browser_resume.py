"""The playground's resume of a refused stream waits between attempts, in a real headless
Chromium against the real app behind a front that refuses every other stream request.

A browser's EventSource gives a stream up for good when a reconnect is answered anything
but 200, and the page then asks the stream's URL itself (``resumeLater``) and opens a new
EventSource once it answers 200. Behind a load balancer spreading requests over a replica
that answers and one that refuses (a rolling restart's draining replica: 503
``shutting_down``), the page's own ask reached the one and its new EventSource the other:
refused, the page asked again at once, as a first attempt - a loop with no wait and no
end, a few requests every few milliseconds per open page. An EventSource that never opened
now counts as a refused attempt: the page waits (doubling) before it asks again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from functools import partial

import pytest

from app.config import Settings
from tests.browser.cdp import Page, find_chromium, launch
from tests.conftest import running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.procs import until
from tests.test_browser import RUN, ask, last_run, open_playground, registry, with_playground

pytestmark = pytest.mark.slow

REFUSAL = b'{"error":"shutting_down","detail":"the server is restarting; resume shortly"}'


class FlappingFront:
    """A load balancer over two replicas, one of which refuses streams: one request per
    connection, relayed to the app; while ``flapping``, every other GET of a run's events
    is answered 503 with ``Retry-After`` instead. ``drop()`` closes every connection (a
    proxy's idle timeout)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.flapping = False
        #: While set (with ``flapping``), every GET of a run's events is refused.
        self.refuse_all = False
        #: The GETs of a run's events while flapping, and how many of them were refused.
        self.stream_requests = 0
        self.refused = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    def drop(self) -> None:
        for writer in list(self._writers):
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                await self._serve(reader, writer)
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target = head.split(b" ", 2)[:2]
        if method == b"GET" and b"/events" in target and self.flapping:
            self.stream_requests += 1
            if self.refuse_all or self.stream_requests % 2 == 1:
                self.refused += 1
                writer.write(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(REFUSAL), REFUSAL)
                )
                await writer.drain()
                return
        lines = [line for line in head[:-4].split(b"\r\n") if not line.lower().startswith(b"connection:")]
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers.add(up_writer)
        try:
            up_writer.write(b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n")
            body = asyncio.create_task(_pipe(reader, up_writer))  # a POST's body
            try:
                await _pipe(up_reader, writer)  # the answer, until the app closes (Connection: close)
            finally:
                body.cancel()
        finally:
            self._writers.discard(up_writer)
            up_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


@contextlib.asynccontextmanager
async def flapping_front(upstream_port: int) -> AsyncIterator[FlappingFront]:
    front = FlappingFront(upstream_port)
    server = await asyncio.start_server(front._accept, "127.0.0.1", 0)
    front.port = int(server.sockets[0].getsockname()[1])
    try:
        yield front
    finally:
        front.drop()
        server.close()
        await within(server.wait_closed(), "the front's connections to close", 10)


@contextlib.asynccontextmanager
async def page_mid_answer(
    settings: Settings, before: str, after: str
) -> AsyncIterator[tuple[FlappingFront, Page, Gate]]:
    """The playground in headless Chromium behind the front, its run's answer shown up to
    ``before`` and held there at the model's gate (``after`` comes once it opens)."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    gate = Gate()
    provider = GatedProvider([GatedTurn([before, gate, after])])
    async with running_app(settings, provider=provider, registry=registry(), embedder=None) as (base, app):
        with_playground(app)
        async with flapping_front(int(base.rsplit(":", 1)[1])) as front, launch(binary) as browser:
            page = await browser.new_page()
            await open_playground(page, f"http://127.0.0.1:{front.port}")
            await page.click("input[value=workflow]")
            await ask(page, "Tell me something")
            await within(gate.reached.wait(), "the run mid-answer", 60)
            await page.wait_for(f"{RUN} && {RUN}.querySelector('.answer').textContent.includes('before the')",
                                what="the answer's first part")
            yield front, page, gate
        gate.open()


async def test_a_resumed_stream_refused_again_is_asked_again_only_after_a_wait(settings: Settings) -> None:
    async with page_mid_answer(settings, "before the flapping ", "and after it.") as (front, page, gate):
        # The page's connection drops; from now on every other stream request is refused
        # (the draining replica), the others answered: the page's own ask gets a 200, the
        # EventSource it opens then a 503.
        front.flapping = True
        front.drop()
        try:
            await page.wait_for("document.getElementById('conn').textContent.startsWith('reconnecting in 2 s')",
                                timeout=30, what="the page waiting longer after a second refused resume")
        except TimeoutError:
            raise AssertionError(
                f"never waited 2 s: {front.stream_requests} stream requests, {front.refused} refused"
            ) from None
        assert front.refused <= 3, f"{front.stream_requests} stream requests, {front.refused} refused"
        assert await last_run(page, "run.dataset.status") == "running"

        front.flapping = False  # the draining replica is gone
        gate.open()
        await page.wait_for(f"{RUN}.dataset.status === 'completed'", timeout=60, what="the page showing the ending")
        answer = await last_run(page, "run.querySelector('.answer').textContent")
        assert answer.count("before the flapping") == 1 and "and after it." in answer, answer
        errors = await last_run(page, "[...run.querySelectorAll('.errors p')].map(n => n.textContent)")
        assert not any("could not be opened" in e for e in errors), errors
        assert page.exceptions == [], page.exceptions


async def test_a_refused_resume_is_given_up_after_ten_minutes_of_refusals_not_after_a_count(
    settings: Settings,
) -> None:
    """A database outage lasts minutes and the run is carried on after it, so the page
    keeps asking for ten minutes of refusals in a row (``RESUME_GIVE_UP_MS``), then says
    it gave up. Before, it gave up after 20 refused attempts: 100 s at the server's
    ``Retry-After`` of 5 s. The page's clock (``Date.now``) is moved on 45 s at each
    refused ask instead of waiting minutes: a page that waited that long between asks.

    Only the time the page lived counts: a gap longer than a minute between two asks is a
    laptop asleep (its timers paused) or a clock set forward, and a clock set back counts
    nothing. Before, the page read ``Date.now()`` against the first refusal: two hours
    asleep gave the run up at the first ask after waking (its network not back yet, or the
    outage not over), and a clock set back an hour kept it asking an hour longer."""
    async with page_mid_answer(settings, "before the outage ", "and after it.") as (front, page, _):
        # The page's clock moves on 45 s at each of its next ``__steps`` asks for the stream,
        # as the ask leaves: moved from here after the front counted an ask, a loaded
        # machine let the page ask twice (its wait is 1 s) before one step, and the ten
        # minutes took more asks than the page really needs.
        await page.evaluate("(() => { const real = Date.now; window.__skew = 0; window.__steps = 0;"
                            " Date.now = () => real() + window.__skew;"
                            " const fetchReal = window.fetch;"
                            " window.fetch = function (input, init) {"
                            "   if (String(input).includes('/events') && window.__steps > 0) {"
                            "     window.__steps -= 1; window.__skew += 45000; }"
                            "   return fetchReal.call(this, input, init); }; })()")
        front.flapping = front.refuse_all = True
        front.drop()
        await page.wait_for("document.getElementById('conn').textContent.startsWith('reconnecting in')",
                            timeout=30, what="the page waiting after a refused resume")

        def asked_since(seen: int) -> bool:
            return front.stream_requests > seen

        async def refused_asks(count: int) -> None:
            """Wait for ``count`` more refused asks."""
            for _ in range(count):
                await until(partial(asked_since, front.stream_requests), "a refused ask (none: gave up?)", 30)

        async def steps_left() -> int:
            return int(await page.evaluate("window.__steps"))

        await page.evaluate("window.__skew += 2 * 60 * 60 * 1000")  # two hours asleep
        await refused_asks(2)
        assert await last_run(page, "run.dataset.status") == "running", "gave up at waking from a sleep"
        await page.evaluate("window.__skew -= 60 * 60 * 1000")  # the clock set back an hour
        await refused_asks(1)

        await page.evaluate("window.__steps = 10")  # under nine minutes of refusals, lived
        await page.wait_for("window.__steps === 0", timeout=60, what="ten asks, 45 s apart")
        assert await last_run(page, "run.dataset.status") == "running"  # still waiting, not given up
        await page.evaluate("window.__steps = 20")
        await page.wait_for(f"{RUN}.dataset.status === 'unknown'", timeout=120, what="the page giving up")
        # Ten minutes at 45 s an ask: 14 or 15 asks in all, a few more than the 13 so far.
        more = 20 - await steps_left()
        assert 1 <= more <= 4, f"gave up after {more} more asks"
        errors = await last_run(page, "[...run.querySelectorAll('.errors p')].map(n => n.textContent)")
        assert any("could not be opened or resumed" in e for e in errors), errors
        assert page.exceptions == [], page.exceptions
