"""Drive a real headless Chromium over the DevTools protocol (CDP), with no extra dependency
beyond ``websockets``.

Chromium is started with ``--remote-debugging-port=0``; it prints the browser's
websocket URL on stderr. We attach to one page target in "flattened" session mode and
send commands (``Page.navigate``, ``Runtime.evaluate``, ...) over that one socket.
Everything the page does runs in the real browser: ``fetch``, ``EventSource`` with its
own reconnects, ``sessionStorage``, a real reload.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect

from tests.support.deadline import reap

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--window-size=1100,1400",
)
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def find_chromium() -> str | None:
    explicit = os.environ.get("CHROMIUM_BIN")
    if explicit and Path(explicit).exists():
        return explicit
    if Path("/usr/bin/chromium").exists():
        return "/usr/bin/chromium"
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class CDPError(Exception):
    pass


@dataclass
class Page:
    """One attached page target: commands, JS evaluation, and the page's own errors."""

    browser: Browser
    session_id: str
    exceptions: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    failed_requests: list[tuple[int, str]] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)
    loads: int = 0
    _loaded: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.browser.send(method, params, session_id=self.session_id)

    def _on_event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            exc = details.get("exception", {})
            self.exceptions.append(str(exc.get("description") or details.get("text")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Network.responseReceived":
            response = params.get("response", {})
            self.requested.append(str(response.get("url")))
            if int(response.get("status", 0)) >= 400:
                self.failed_requests.append((int(response["status"]), str(response.get("url"))))
        elif method == "Page.loadEventFired":
            self.loads += 1
            self._loaded.set()

    async def navigate(self, url: str, *, timeout: float = 15) -> None:
        self._loaded.clear()
        result = await self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CDPError(f"navigation to {url} failed: {result['errorText']}")
        await asyncio.wait_for(self._loaded.wait(), timeout)

    async def reload(self, *, timeout: float = 15) -> None:
        self._loaded.clear()
        await self.send("Page.reload", {"ignoreCache": True})
        await asyncio.wait_for(self._loaded.wait(), timeout)

    async def evaluate(self, expression: str) -> Any:
        """Evaluate JS in the page (promises awaited); return the JSON value."""
        result = await self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise CDPError(f"JS error: {details.get('exception', {}).get('description') or details.get('text')}")
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, *, timeout: float = 15, what: str | None = None) -> Any:
        """Poll a JS expression until it is truthy; return its value. The timeout only
        turns a hang into a readable failure."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if loop.time() > deadline:
                raise TimeoutError(f"timed out waiting for {what or expression}")
            await asyncio.sleep(0.05)

    async def click(self, selector: str) -> None:
        """A trusted mouse click at the element's centre (as a user would)."""
        box = await self.evaluate(
            f"(() => {{ const n = document.querySelector({orjson.dumps(selector).decode()});"
            " if (!n) return null; n.scrollIntoView({block: 'center'});"
            " const r = n.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        if not box:
            raise CDPError(f"no element matches {selector!r}")
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            await self.send(
                "Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}
            )

    async def type_into(self, selector: str, text: str) -> None:
        await self.evaluate(f"document.querySelector({orjson.dumps(selector).decode()}).focus()")
        await self.send("Input.insertText", {"text": text})

    async def screenshot(self, path: Path) -> None:
        result = await self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(result["data"]))


@dataclass
class Browser:
    ws: ClientConnection
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _pending: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    _pages: dict[str, Page] = field(default_factory=dict)
    _reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                msg = orjson.loads(raw)
                if "id" in msg:
                    fut = self._pending.pop(msg["id"], None)
                    if fut is not None and not fut.done():
                        if "error" in msg:
                            fut.set_exception(CDPError(str(msg["error"])))
                        else:
                            fut.set_result(msg.get("result", {}))
                else:
                    page = self._pages.get(msg.get("sessionId", ""))
                    if page is not None:
                        page._on_event(msg["method"], msg.get("params", {}))
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(CDPError("the browser connection closed"))

    async def send(self, method: str, params: dict[str, Any] | None = None, *, session_id: str | None = None) -> dict[str, Any]:
        msg_id = next(self._ids)
        msg: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session_id:
            msg["sessionId"] = session_id
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        try:
            async with asyncio.timeout(30):
                await self.ws.send(orjson.dumps(msg).decode())
                return await fut
        except TimeoutError:
            self._pending.pop(msg_id, None)
            raise CDPError(f"chromium did not answer {method} within 30 s") from None

    async def new_page(self) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        attached = await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = Page(self, attached["sessionId"])
        self._pages[page.session_id] = page
        for domain in ("Page.enable", "Runtime.enable", "Network.enable"):
            await page.send(domain)
        return page

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


@contextlib.asynccontextmanager
async def launch(binary: str) -> AsyncIterator[Browser]:
    """Start headless Chromium on a throw-away profile; yield a connected ``Browser``.

    Everything the browser writes goes under one ``cdp-profile-*`` directory - the profile
    and, as its ``TMPDIR``, Chromium's own temporary files (an ``org.chromium.Chromium.*``
    directory per start, left in ``/tmp`` when it is stopped before its shutdown ends) - which is
    removed once no process of the browser's is left: it runs in a process group of its
    own, and its helpers (the network service among them) wrote into the profile after
    the browser itself had exited, so the directory was sometimes left behind."""
    scratch = tempfile.mkdtemp(prefix="cdp-profile-")
    profile, own_tmp = os.path.join(scratch, "profile"), os.path.join(scratch, "t")
    os.mkdir(profile)
    os.mkdir(own_tmp)
    proc = await asyncio.create_subprocess_exec(
        binary,
        *FLAGS,
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        "about:blank",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "TMPDIR": own_tmp},
        start_new_session=True,
    )
    drain: asyncio.Task[None] | None = None
    try:
        assert proc.stderr is not None
        ws_url = await asyncio.wait_for(_devtools_url(proc.stderr), 30)
        # Keep reading stderr so the browser never blocks on a full pipe.
        drain = asyncio.create_task(_drain(proc.stderr))
        async with connect(ws_url, max_size=None, ping_interval=None) as ws:
            browser = Browser(ws)
            browser.start()
            try:
                yield browser
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(browser.send("Browser.close"), 5)
                await browser.close()
    finally:
        try:
            # Chromium's own children inherit its stderr: ``proc.wait()`` also waits for
            # that pipe to close, so it has a deadline (reap) and the drain keeps reading.
            await reap(proc, "chromium")
            await _end_group(proc.pid)
        finally:
            if drain is not None:
                drain.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await drain
            shutil.rmtree(scratch)


async def _end_group(pgid: int, *, within_s: float = 10) -> None:
    """SIGKILL what is left of the browser's process group (helpers outlive the browser
    for a moment) and wait until none of it runs, so nothing writes into the profile
    while it is removed."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + within_s
    while await asyncio.to_thread(_running_in_group, pgid):
        if time.monotonic() > deadline:
            raise AssertionError(f"chromium's process group {pgid} outlived SIGKILL by {within_s} s")
        await asyncio.sleep(0.01)


def _running_in_group(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. A killed helper is left a zombie
    until its new parent (the container's init) reaps it, a second or so later: it holds
    no file and writes nothing, so it is not waited for (``killpg(pgid, 0)`` counts it)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        state, _ppid, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            return True
    return False


async def _devtools_url(stderr: asyncio.StreamReader) -> str:
    lines: list[str] = []
    while True:
        raw = await stderr.readline()
        if not raw:
            raise CDPError("chromium exited before DevTools was listening:\n" + "".join(lines[-20:]))
        line = raw.decode(errors="replace")
        lines.append(line)
        match = LISTENING.search(line)
        if match:
            return match.group(1)


async def _drain(stderr: asyncio.StreamReader) -> None:
    while await stderr.read(65536):
        pass
