"""MCP servers in the app: their connections, their tools in the catalog and in the tool
index, and their state in ``/readyz``.

The tool index is kept as the built-in tools' index (built once at start-up) plus one
segment per MCP server, combined into one ``ToolIndex`` so that ranking is exactly the
built-in ranking. When a server connects, reports a changed tool list, or goes away, only
that server's segment is embedded again (through a vector cache of its own, so a
reconnect with an unchanged list embeds nothing); the registry and the combined index are
then swapped in one synchronous step, so a selection never sees a tool without its vector
or a vector without its tool.

Nothing here waits for a server at start-up: connections run in their own tasks, and a
server that fails to start only leaves its tools absent until it is up.

Each server's last known tool names are kept in ``<cache>/mcp/known_tools.json``, so the
names a clash gives (``McpCatalog``) are the same after a restart even while one of the
clashing servers is still down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import mcp_types as types
import numpy as np
import orjson

from agenttools.core.registry import ToolRegistry
from agenttools.mcp.catalog import McpCatalog, McpTool, tool_from_mcp
from agenttools.mcp.client import McpConnection, State
from agenttools.mcp.config import McpServerConfig
from app.agent.selector import IndexState
from app.ops.close_budget import MCP_CANCEL_S, MCP_CLOSE_S
from toolindex.caches import VectorCache
from toolindex.embedder import Embedder
from toolindex.index import ToolIndex

log = logging.getLogger("agentchat.mcp")


class McpRoom:
    """Every configured MCP server of one app (see the module docstring)."""

    def __init__(
        self,
        servers: Sequence[McpServerConfig],
        registry: ToolRegistry,
        index_state: IndexState,
        embedder: Embedder | None,
        cache_dir: Path | None,
        *,
        probe_interval_s: float = 30.0,
        known: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.servers = list(servers)
        self.index_state = index_state
        self.embedder = embedder
        self.cache_dir = cache_dir
        self.connections = {
            s.name: McpConnection(s, self.on_tools, probe_interval_s=probe_interval_s) for s in self.servers
        }
        self.catalog = McpCatalog(
            registry, {s.name: s.contexts for s in self.servers}, self.connections, known=known
        )
        self._known_saved = self.catalog.known()
        self._base: ToolIndex | None = None
        self._segments: dict[str, ToolIndex] = {}
        self._index_notes: dict[str, str] = {}
        #: Servers whose tools are offered but not in the tool index (their embedding
        #: failed, or its dimension differs): a selection never ranks them, only a
        #: fallback offers them. ``/readyz`` and ``agentchat_mcp_servers_unranked``.
        self.unranked: set[str] = set()
        self.updates = 0

    def start(self) -> None:
        for connection in self.connections.values():
            connection.start()

    async def aclose(self) -> None:
        """Close every connection at once, each within the close budget's step for them."""
        await asyncio.gather(
            *(c.close(MCP_CLOSE_S, MCP_CANCEL_S) for c in self.connections.values()), return_exceptions=True
        )

    # --- tool lists -----------------------------------------------------------------

    async def on_tools(self, server: str, listed: Sequence[types.Tool] | None) -> None:
        """A server's current tools (``None``: gone): embed its segment, then swap."""
        tools = [tool_from_mcp(server, t) for t in listed] if listed is not None else None
        if not tools:  # down, or listing none: no tools offered, so none unranked
            self.unranked.discard(server)
        segment = await self._embed(server, tools) if tools else None
        self.catalog.update(server, tools)
        if segment is None:
            self._segments.pop(server, None)
        else:
            self._segments[server] = segment
        self._combine()
        self.updates += 1
        log.info("MCP tools applied", extra={"mcp_server": server, "tools": len(tools or ())})
        await self._save_known()

    async def _save_known(self) -> None:
        known = self.catalog.known()
        if self.cache_dir is None or known == self._known_saved:
            return
        self._known_saved = known
        try:
            await asyncio.to_thread(_write_json, known_tools_path(self.cache_dir), known)
        except OSError as exc:  # names stay stable in this process; a restart may not know a down server's
            log.warning("MCP tool names could not be kept for the next start", extra={"reason": str(exc)})

    async def _embed(self, server: str, tools: list[McpTool]) -> ToolIndex | None:
        self.unranked.discard(server)
        if self.embedder is None:
            self._index_notes.pop(server, None)
            return None
        cache = VectorCache(self.cache_dir / "mcp" / server) if self.cache_dir is not None else None
        started = time.perf_counter()
        try:
            segment = await ToolIndex.build([(t.name, t.embedding_text()) for t in tools], self.embedder, cache=cache)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # its tools stay offered in fallbacks, just never ranked
            self._index_notes[server] = f"embedding failed: {exc}"[:300]
            self.unranked.add(server)
            log.warning("MCP tools could not be embedded; they are not ranked",
                        extra={"mcp_server": server, "reason": self._index_notes[server]})
            return None
        self._index_notes[server] = f"{len(tools)} tools embedded in {(time.perf_counter() - started) * 1000:.0f} ms"
        return segment

    def adopt_embedder(self, embedder: Embedder) -> asyncio.Task[None]:
        """An embedder found after start-up (``app.embedder_adoption``): tool lists from
        now on are embedded, and the servers that listed theirs meanwhile (offered, never
        embedded) get their segments now, in a task whose end the combined index shows."""
        self.embedder = embedder
        return asyncio.create_task(self._embed_listed(), name="mcp-embed-late")

    async def _embed_listed(self) -> None:
        for server in self.connections:
            tools = self.catalog.tools(server)
            if not tools or server in self._segments:
                continue
            segment = await self._embed(server, tools)
            # A list that came meanwhile was embedded by its own ``on_tools``: not overwritten.
            if segment is not None and server not in self._segments and self.catalog.tools(server) == tools:
                self._segments[server] = segment
                self._combine()

    # --- the combined index -----------------------------------------------------------

    def base_ready(self, index: ToolIndex) -> None:
        """The built-in tools' index is ready: from now on the state holds the combination."""
        self._base = index
        self._combine()

    def _combine(self) -> None:
        base = self._base
        if base is None:  # still building, failed or disabled: selection falls back meanwhile
            return
        segments = {}
        for server in self.connections:
            segment = self._segments.get(server)
            if segment is not None and segment.dim != base.dim and len(segment):
                self._index_notes[server] = f"dimension {segment.dim} differs from the index's {base.dim}"
                self.unranked.add(server)
            elif segment is not None:
                segments[server] = segment
        combined = combine_indexes(base, segments, self.catalog.exposed())
        self.index_state.ready(combined, self.index_state.built_ms or 0.0)

    # --- readiness --------------------------------------------------------------------

    async def readiness(self) -> dict[str, Any]:
        """Not ready only while a server makes its first connection attempt (bounded by its
        ``connect_timeout_s``); a server that is down is reported, and retried, but never
        holds the service back: its tools are simply absent."""
        servers: dict[str, Any] = {}
        for name, connection in self.connections.items():
            status = connection.status()
            if name in self._index_notes:
                status["index"] = self._index_notes[name]
            servers[name] = status
        waiting = [n for n, c in self.connections.items() if not c.first_attempt.is_set()]
        out: dict[str, Any] = {
            "ok": not waiting,
            "tools": len(self.catalog.exposed()),
            "servers": servers,
        }
        down = [n for n, s in servers.items() if s["state"] != "up"]
        unranked = sorted(self.unranked & set(self.connections))
        if unranked:
            out["unranked"] = unranked
        if waiting:
            out["detail"] = "connecting to MCP servers: " + ", ".join(_with_timeout(n, servers[n]) for n in waiting)
        elif down:
            out["detail"] = "MCP servers not connected (their tools are absent, retrying): " + ", ".join(down)
        elif unranked:
            out["detail"] = "MCP tools not in the tool index (never selected by meaning): " + ", ".join(unranked)
        return out

    def server_states(self) -> dict[str, int]:
        """How many servers are in each connection state (``agentchat_mcp_servers``), every
        state listed, 0 included: a series that vanished when its last server left the
        state would read as "no data" (``sum(agentchat_mcp_servers{state="down"})`` empty,
        an alert on it never resolving) instead of 0."""
        counts = dict.fromkeys(get_args(State), 0)
        for connection in self.connections.values():
            counts[connection.state] += 1
        return counts


def combine_indexes(
    base: ToolIndex, segments: Mapping[str, ToolIndex], exposed: Mapping[tuple[str, str], str]
) -> ToolIndex:
    """One index: ``base``'s rows, then each server segment's rows under their exposed
    names (rows of tools no longer in the catalog are left out). No embedding happens:
    the vectors are reused, and the query cache is ``base``'s (same embedder)."""
    names, blocks = list(base.names), [base.matrix]
    for server, segment in segments.items():
        if len(segment) == 0 or segment.dim != base.dim:
            continue
        rows = [i for i, n in enumerate(segment.names) if (server, n) in exposed]
        names.extend(exposed[(server, segment.names[i])] for i in rows)
        blocks.append(segment.matrix[rows])
    return ToolIndex(names, np.vstack(blocks), base.embedder, query_cache=base.query_cache)


def known_tools_path(cache_dir: Path) -> Path:
    return cache_dir / "mcp" / "known_tools.json"


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(orjson.dumps(value))
    tmp.replace(path)


def _read_known(path: Path) -> dict[str, list[str]]:
    """The names kept by the last start; an unreadable file is ignored (names are then
    assigned from what the servers list in this process)."""
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(value, dict):
        return {}
    return {s: [n for n in names if isinstance(n, str)] for s, names in value.items()
            if isinstance(s, str) and isinstance(names, list)}


def _with_timeout(name: str, status: dict[str, Any]) -> str:
    """A server still on its first attempt, with the most that attempt can still take:
    ``/readyz`` is not ok until it ends, and a watcher should know whether to wait a
    second or a minute (a stdio server has 60 s by default)."""
    left = status.get("timeout_in_s")
    return name if left is None else f"{name} (times out in {left:.0f} s)"


async def attach_mcp(
    servers: Sequence[McpServerConfig],
    registry: ToolRegistry,
    index_state: IndexState,
    embedder: Embedder | None,
    cache_dir: Path | None,
) -> McpRoom:
    """Build the room and start connecting (in the background)."""
    known = await asyncio.to_thread(_read_known, known_tools_path(cache_dir)) if cache_dir is not None else {}
    room = McpRoom(servers, registry, index_state, embedder, cache_dir, known=known)
    room.start()
    log.info("MCP servers configured", extra={"mcp_servers": [s.name for s in servers]})
    return room
