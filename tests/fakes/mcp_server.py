"""Real MCP servers for the tests, built with the ``mcp`` SDK's ``MCPServer`` (FastMCP's
name since mcp 2): the generated catalog (``tests.fakes.mcp_catalog``) plus a handful of
tools that do something checkable.

* ``build_server("ops")`` — for stdio: domains 0–4 of the catalog, ``word_stats``,
  ``echo``, ``grow_catalog`` (adds a tool and announces the change) and ``crash_server``
  (the process exits mid-call). Run it as ``python -m tests.fakes.mcp_server ops``.
* ``build_server("desk")`` — for streamable HTTP, served in-process on loopback by the
  test (``server.streamable_http_app()``): domains 5–9, ``convert_temperature``,
  ``lookup_order``, ``flaky_failure`` (``isError``), ``slow_operation`` (sleeps),
  ``echo`` (clashes with ops' ``echo``) and ``knowledge_base_search`` (clashes with the
  built-in tool). ``DeskState.calls`` records which real tools ran, so a test can show
  that a rejected call never reached the server; ``DeskState.add_tool`` changes the list
  and publishes ``tools/list_changed``.
* ``build_server("all")`` — the whole generated catalog, for the benchmark.
* ``build_server("lean")`` — ops' own handful of tools without the catalog: a real stdio
  server for a test about the process, not the catalog (building ~250 tools costs ~1 s of
  CPU a start).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.subscriptions import InMemorySubscriptionBus, ToolsListChanged
from mcp.types import ToolAnnotations
from pydantic import Field

from tests.fakes.mcp_catalog import GeneratedTool, Param, generate_tools

#: The fakes' tools only read (or pretend to), so by default they run without an approval
#: (``AGENT_APPROVAL_TOOLS``); ``cancel_order`` is the one that says it destroys.
READS = ToolAnnotations(readOnlyHint=True)
DESTROYS = ToolAnnotations(readOnlyHint=False, destructiveHint=True)

PARTS = {"ops": range(0, 5), "desk": range(5, 10), "all": range(0, 10), "lean": range(0, 0)}


@dataclass(slots=True)
class DeskState:
    server: MCPServer
    bus: InMemorySubscriptionBus
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def add_tool(self, name: str, description: str) -> None:
        """Add a tool that answers ``added:<text>`` and tell listening clients the list changed."""

        def added(text: Annotated[str, Field(description="Any text.")]) -> str:
            return f"added:{text}"

        self.server.add_tool(added, name=name, description=description, annotations=READS)
        await self.bus.publish(ToolsListChanged())


def _annotation(p: Param) -> Any:
    if p.kind == "enum":
        base: Any = Literal[p.choices]  # type: ignore[valid-type]
        return Annotated[base, Field(description=p.description)]
    if p.kind == "integer":
        return Annotated[int, Field(description=p.description, ge=p.minimum, le=p.maximum)]
    return Annotated[str, Field(description=p.description, max_length=500)]


def _generated(server: MCPServer, tool: GeneratedTool) -> None:
    """Register a generated tool whose signature (hence inputSchema) is built from its params."""

    def run(**kwargs: Any) -> dict[str, Any]:
        return {"tool": tool.name, "arguments": {k: v for k, v in kwargs.items() if v is not None}, "ok": True}

    params = []
    for p in sorted(tool.params, key=lambda p: not p.required):
        ann = _annotation(p)
        if p.required:
            params.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, annotation=ann))
        else:
            params.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, annotation=ann | None,
                                            default=None))
    run.__signature__ = inspect.Signature(params, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    run.__name__ = tool.name
    server.add_tool(run, name=tool.name, description=tool.description, annotations=READS)


def _ops_tools(server: MCPServer) -> None:
    @server.tool(annotations=READS)
    def word_stats(text: Annotated[str, Field(description="The text to measure.")]) -> dict[str, Any]:
        """Count the words and characters of a text and find its longest word."""
        words = text.split()
        return {"words": len(words), "characters": len(text), "longest_word": max(words, key=len) if words else ""}

    @server.tool(annotations=READS)
    def echo(text: str) -> str:
        """Repeat the text back, prefixed with the server's name (ops)."""
        return f"ops:{text}"

    @server.tool(annotations=READS)
    async def grow_catalog(
        name: Annotated[str, Field(description="Name of the tool to add.")],
        description: Annotated[str, Field(description="What the new tool does.")],
        ctx: Context,
    ) -> str:
        """Grow the catalog: register a new tool on this server and announce the changed tool list."""

        def added(text: Annotated[str, Field(description="Any text.")]) -> str:
            return f"added:{text}"

        server.add_tool(added, name=name, description=description, annotations=READS)
        with contextlib.suppress(Exception):  # 2026-era sessions: the listen stream carries it
            await ctx.notify_tools_changed()
        with contextlib.suppress(Exception):  # handshake-era sessions: the plain notification
            await ctx.session.send_tool_list_changed()
        return f"added {name}"

    @server.tool(annotations=READS)
    def crash_server() -> str:
        """Simulate a crash: the server process exits in the middle of this call."""
        sys.stdout.flush()
        os._exit(17)


def _desk_tools(server: MCPServer, state: DeskState) -> None:
    @server.tool(annotations=READS)
    def convert_temperature(
        value: Annotated[float, Field(description="The temperature to convert.")],
        to_unit: Annotated[Literal["celsius", "fahrenheit"], Field(description="The unit to convert to.")],
    ) -> dict[str, Any]:
        """Convert a temperature between degrees Celsius and degrees Fahrenheit."""
        state.calls.append(("convert_temperature", {"value": value, "to_unit": to_unit}))
        converted = value * 9 / 5 + 32 if to_unit == "fahrenheit" else (value - 32) * 5 / 9
        return {"value": round(converted, 2), "unit": to_unit}

    @server.tool(annotations=READS)
    def lookup_order(
        order_id: Annotated[str, Field(description="The order number, ORD- and four digits.", pattern=r"^ORD-\d{4}$")],
        include_items: Annotated[bool | None, Field(description="Also list the items.")] = None,
    ) -> dict[str, Any]:
        """Look up a customer order by its order number: status, item count and total."""
        state.calls.append(("lookup_order", {"order_id": order_id}))
        n = int(order_id[4:])
        out: dict[str, Any] = {"order_id": order_id, "status": "shipped" if n % 2 else "packing",
                               "items": n % 7 + 1, "total_eur": round(n * 1.25, 2)}
        if include_items:
            out["item_names"] = [f"item-{i}" for i in range(n % 7 + 1)]
        return out

    @server.tool(annotations=DESTROYS)
    def cancel_order(
        order_id: Annotated[str, Field(description="The order number, ORD- and four digits.", pattern=r"^ORD-\d{4}$")],
        reason: Annotated[str, Field(description="Why the order is cancelled.", max_length=200)],
    ) -> dict[str, Any]:
        """Cancel a customer order for good (it cannot be undone)."""
        state.calls.append(("cancel_order", {"order_id": order_id, "reason": reason}))
        return {"order_id": order_id, "status": "cancelled"}

    @server.tool(annotations=READS)
    def flaky_failure(reason: Annotated[str, Field(description="Why the upstream refuses.")]) -> str:
        """Call the flaky upstream billing gateway (it always refuses)."""
        state.calls.append(("flaky_failure", {"reason": reason}))
        raise ToolError(f"upstream billing gateway refused the request: {reason}")

    @server.tool(annotations=READS)
    async def slow_operation(seconds: Annotated[float, Field(description="How long to take.")]) -> str:
        """Run the slow nightly reconciliation operation and wait until it finishes."""
        state.calls.append(("slow_operation", {"seconds": seconds}))
        await asyncio.sleep(seconds)
        return "reconciled"

    @server.tool(annotations=READS)
    def echo(text: str) -> str:
        """Repeat the text back, prefixed with the server's name (desk)."""
        return f"desk:{text}"

    @server.tool(annotations=READS)
    def knowledge_base_search(query: str) -> str:
        """Search the help desk's own notes (a name that clashes with the built-in tool)."""
        return f"desk notes about {query}"


def build_server(part: str) -> tuple[MCPServer, DeskState]:
    """The server for ``part`` (``ops``, ``desk``, ``all`` or ``lean``) and its state."""
    bus = InMemorySubscriptionBus()
    server = MCPServer(f"fake-{part}", subscriptions=bus, log_level="WARNING", warn_on_duplicate_tools=False)
    state = DeskState(server, bus)
    for tool in generate_tools(PARTS[part]):
        _generated(server, tool)
    if part in ("ops", "lean"):
        _ops_tools(server)
    elif part == "desk":
        _desk_tools(server, state)
    return server, state


if __name__ == "__main__":
    build_server(sys.argv[1] if len(sys.argv) > 1 else "ops")[0].run("stdio")
