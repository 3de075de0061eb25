"""One MCP server connection, kept alive: connect, list tools, follow changes, reconnect.

Each configured server gets one ``McpConnection`` with one supervising task. The task
owns the SDK ``Client`` (its anyio scopes must be entered and left by the same task), so
start-up never waits for a server: the app serves at once, and a server's tools appear
when it is up. The supervisor

* connects (a stdio process is started, or the streamable HTTP endpoint is reached) with
  a bounded time for the handshake and the first tool list, then reports the tools;
* follows ``notifications/tools/list_changed`` — on a 2026-era connection through a
  ``subscriptions/listen`` stream it opens, on a handshake-era one as the plain
  notification — and reports the new list;
* notices a lost server at once when its stdio process exits or its pipe breaks (the end
  of its stdout is the signal, see ``agenttools.mcp.stdio_watch``), and otherwise when a call
  finds the connection closed, the listen stream drops or a periodic probe fails; it
  reports "no tools" so the catalog drops them, and reconnects with exponential backoff,
  as it does after a failed start;
* stops on ``close()``: the stdio process is ended, the HTTP session deleted.

Calls run on the caller's task through the shared session; the caller (the tool
executor) bounds them with ``AGENT_TOOL_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agenttools.mcp.config import McpServerConfig
from agenttools.mcp.stdio_watch import watched_stdio

log = logging.getLogger("agentchat.mcp")

State = Literal["connecting", "up", "down", "closed"]
ToolsListener = Callable[[str, Sequence[types.Tool] | None], Awaitable[None]]
"""Called with a server's full tool list after each (re)listing, and ``None`` when it is lost."""

_MAX_PAGES = 100


class McpUnavailable(RuntimeError):
    """The server is not connected right now (starting, down, or closed)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between connection attempts: ``initial_s`` doubling up to ``max_s``, ±20 %."""

    initial_s: float = 0.5
    max_s: float = 30.0

    def delay(self, failures: int) -> float:
        base = min(self.max_s, self.initial_s * 2 ** max(0, failures - 1))
        return base * random.uniform(0.8, 1.2)


class McpConnection:
    """A supervised connection to one MCP server (see the module docstring)."""

    def __init__(
        self,
        config: McpServerConfig,
        on_tools: ToolsListener,
        *,
        backoff: Backoff | None = None,
        probe_interval_s: float = 30.0,
    ) -> None:
        self.config = config
        self.name = config.name
        self._on_tools = on_tools
        self._backoff = backoff or Backoff()
        self._probe_interval_s = probe_interval_s
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._changed = asyncio.Event()
        self._lost = asyncio.Event()
        self.first_attempt = asyncio.Event()
        self.state: State = "connecting"
        self.protocol_version: str | None = None
        self.server_name: str | None = None
        self.tool_count = 0
        self.connects = 0
        self.failures = 0
        self.last_error: str | None = None
        self.next_retry_at: float | None = None
        #: When the connection attempt under way times out (``connect_timeout_s``), for
        #: ``/readyz``: ``None`` when no attempt is under way.
        self.attempt_times_out_at: float | None = None
        self.refreshes = 0
        self._listed: tuple[tuple[str, str], ...] = ()

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.name}")

    async def close(self, timeout_s: float = 5.0, cancel_s: float = 5.0) -> None:
        """Stop the supervisor and close the connection (ends a stdio process).

        The supervisor is asked to stop and given ``timeout_s``; then it is cancelled and
        given ``cancel_s`` more (the MCP library's shielded clean-up can take seconds, and
        can swallow the cancel): past that it is named in the log and left, so a close
        never hangs on a server. The caller's own cancellation is never swallowed: the
        supervisor is cancelled and the caller's ``CancelledError`` goes on."""
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout_s)
            except TimeoutError:
                task.cancel()
                await self._wait_cancelled(task, cancel_s)
            except asyncio.CancelledError:
                task.cancel()
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # the caller is being cancelled, not only the supervisor
        self.state = "closed"

    async def _wait_cancelled(self, task: asyncio.Task[None], cancel_s: float) -> None:
        """``task`` (cancelled) ends within ``cancel_s``, or is named in the log and left."""
        done, _ = await asyncio.wait({task}, timeout=cancel_s)
        for ended in done:  # its outcome is read, so asyncio does not report it unretrieved
            if not ended.cancelled():
                ended.exception()
        if not done:
            log.warning(
                "an MCP server's connection did not end within %.0f s of its cancellation; closing without it",
                cancel_s,
                extra={"mcp_server": self.name, "task": task.get_name()},
            )

    def status(self) -> dict[str, Any]:
        """What ``/readyz`` shows for this server (never headers or env values)."""
        out: dict[str, Any] = {
            "state": self.state,
            "transport": self.config.transport,
            "target": self.config.describe(),
            "tools": self.tool_count,
            "connects": self.connects,
        }
        if self.protocol_version:
            out["protocol"] = self.protocol_version
        if self.last_error:
            out["last_error"] = self.last_error
        if self.state == "down" and self.next_retry_at is not None:
            out["retry_in_s"] = round(max(0.0, self.next_retry_at - time.monotonic()), 2)
        if self.state == "connecting" and self.attempt_times_out_at is not None:
            # How long a watcher may wait for this attempt: it connects, or is "down" by then.
            out["connect_timeout_s"] = self.config.connect_timeout_s
            out["timeout_in_s"] = round(max(0.0, self.attempt_times_out_at - time.monotonic()), 2)
        return out

    # --- calls ------------------------------------------------------------------------

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call ``tool``; raises ``McpUnavailable`` when not connected, ``MCPError`` for a
        protocol error, and whatever the transport raises when the server dies mid-call
        (the connection is then marked lost, and the supervisor reconnects)."""
        client = self._client
        # A client is set only while connected ("connecting" for the moment its tools are
        # being put in the catalog, then "up"); a lost or closed server has none.
        if client is None or self.state in ("down", "closed"):
            why = f": {self.last_error}" if self.last_error else ""
            raise McpUnavailable(f"MCP server {self.name!r} is {self.state}{why}")
        try:
            return await client.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._mark_lost("the connection closed during a call")
            raise
        except (OSError, httpx2.HTTPError, ExceptionGroup) as exc:
            self._mark_lost(f"a call failed: {type(exc).__name__}")
            raise

    def _mark_lost(self, why: str) -> None:
        if not self._lost.is_set():
            self.last_error = why
            self._lost.set()

    # --- the supervisor ----------------------------------------------------------------

    async def _supervise(self) -> None:
        while not self._stop.is_set():
            self.state = "connecting"
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except TimeoutError as exc:  # ``connect_timeout_s``, the one timeout here: name it
                self.last_error = _describe(exc) if str(exc) else (
                    f"TimeoutError: not connected within connect_timeout_s ({self.config.connect_timeout_s:g} s)")
            except Exception as exc:  # a failed start or a lost server: retry
                self.last_error = _describe(exc)
            finally:
                self._client = None
                self.attempt_times_out_at = None
                self.first_attempt.set()
            if self.tool_count:
                self.tool_count = 0
                await self._report(None)
            if self._stop.is_set():
                break
            self.failures += 1
            self.state = "down"
            delay = self._backoff.delay(self.failures)
            self.next_retry_at = time.monotonic() + delay
            log.warning("MCP server unavailable; retrying", extra={
                "mcp_server": self.name, "reason": self.last_error, "retry_in_s": round(delay, 2),
                "failures": self.failures})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
        self.state = "closed"

    async def _session(self) -> None:
        """One connection, from connect to loss or stop."""
        self._lost.clear()
        self._changed.clear()
        async with AsyncExitStack() as stack:
            self.attempt_times_out_at = time.monotonic() + self.config.connect_timeout_s
            async with asyncio.timeout(self.config.connect_timeout_s):
                client = await stack.enter_async_context(self._new_client(stack))
                tools = await self._list_tools(client)
            # Past the timeout: putting its tools in the catalog (embedding them) may take
            # longer, and then it is up. A countdown to 0 here said it could still time out.
            self.attempt_times_out_at = None
            self._client = client
            self.protocol_version = client.protocol_version
            self.server_name = client.server_info.name if client.server_info else None
            # Its tools are in the catalog before it reads "up": whoever sees "up" on
            # /readyz (a person, a probe, a test) finds them registered.
            await self._report(tools)
            self.state, self.failures, self.last_error, self.next_retry_at = "up", 0, None, None
            self.connects += 1
            self.first_attempt.set()
            log.info("MCP server connected", extra={
                "mcp_server": self.name, "protocol": self.protocol_version, "tools": len(tools)})
            watchers: list[asyncio.Task[None]] = []
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                watchers.append(asyncio.create_task(self._listen(client), name=f"mcp-listen:{self.name}"))
            try:
                await self._follow(client)
            finally:
                for w in watchers:
                    w.cancel()
                await asyncio.gather(*watchers, return_exceptions=True)
                self._client = None

    async def _follow(self, client: Client) -> None:
        """Until stop or loss: relist on a change notice, probe now and then."""
        while True:
            waits = [asyncio.ensure_future(e.wait()) for e in (self._stop, self._changed, self._lost)]
            try:
                await asyncio.wait(waits, timeout=self._probe_interval_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            if self._stop.is_set():
                return
            if self._lost.is_set():
                raise ConnectionError(self.last_error or "connection lost")
            changed = self._changed.is_set()
            self._changed.clear()
            try:
                async with asyncio.timeout(self.config.connect_timeout_s):
                    tools = await self._list_tools(client)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                raise ConnectionError(f"listing tools failed: {_describe(exc)}") from exc
            if changed:
                self.refreshes += 1
                log.info("MCP tool list changed", extra={"mcp_server": self.name, "tools": len(tools)})
                await self._report(tools)
            elif _signature(tools) != self._listed:  # a change whose notice was missed
                await self._report(tools)

    async def _listen(self, client: Client) -> None:
        """2026-era servers send list changes only on a ``subscriptions/listen`` stream.

        A stream that ends (the server going away) means a reconnect; a server that
        refuses the stream is only re-read every ``probe_interval_s``."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._changed.set()
            why = "the change stream closed"
        except asyncio.CancelledError:
            raise
        except SubscriptionLost as exc:
            why = f"the change stream dropped: {_describe(exc)}"
        except Exception as exc:
            log.warning("MCP server refused the tool change stream; its list is re-read periodically",
                        extra={"mcp_server": self.name, "reason": _describe(exc),
                               "every_s": self._probe_interval_s})
            return
        if not self._stop.is_set():
            self._mark_lost(why)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._changed.set()

    async def _list_tools(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def _report(self, tools: Sequence[types.Tool] | None) -> None:
        self.tool_count = len(tools) if tools is not None else 0
        self._listed = _signature(tools or ())
        try:
            await self._on_tools(self.name, tools)
        except asyncio.CancelledError:
            raise
        except Exception:  # the catalog's problem must not kill the connection
            log.exception("MCP tool list could not be applied", extra={"mcp_server": self.name})

    def _new_client(self, stack: AsyncExitStack) -> Client:
        c = self.config
        server: Any
        if c.transport == "stdio":
            assert c.command is not None
            params = StdioServerParameters(command=c.command, args=list(c.args), env=dict(c.env) or None, cwd=c.cwd)
            server = watched_stdio(params, lambda: self._mark_lost("the server process exited or closed its output"))
        else:
            assert c.url is not None
            http = httpx2.AsyncClient(headers=dict(c.headers), timeout=httpx2.Timeout(30.0, read=300.0))
            stack.push_async_callback(http.aclose)  # the transport leaves a given client open
            server = streamable_http_client(c.url, http_client=http)
        return Client(
            server,
            mode="legacy" if c.protocol == "legacy" else "auto",
            message_handler=self._on_message,
            cache=None,  # the catalog always wants the server's current list
        )


def _signature(tools: Sequence[types.Tool]) -> tuple[tuple[str, str], ...]:
    return tuple((t.name, t.description or "") for t in tools)


def _describe(exc: BaseException) -> str:
    """A short, single-line reason; exception groups are unwrapped to their first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, TimeoutError) and not str(exc):
        text = "timed out"
    return f"{type(exc).__name__}: {text}"[:300]
