"""Catalog entry for ``find_tools``: the way to the tools selection did not offer.

Selection offers the core tools and the six best-ranked ones (``app.agent.selector``); a large
catalog (hundreds of MCP tools) has many more. ``find_tools`` lets the model search the
context's whole catalog with its own words; the tools it finds are offered from the
next model turn on (``app.agent.find_tools`` runs it, ``app.agent.loop`` widens the offer). It is
a core tool in every context.
"""

from __future__ import annotations

from typing import Final

from agenttools.core.catalog_schema import integer, obj, string
from agenttools.core.registry import ToolSpec
from llm.types import ToolDefinition

FIND_TOOLS: Final = "find_tools"
FIND_TOOLS_MAX_RESULTS: Final = 10


def discovery_specs() -> list[ToolSpec]:
    return [
        ToolSpec(
            ToolDefinition(
                FIND_TOOLS,
                "Search every tool available in this chat (including connected MCP servers) when none of "
                "the tools you were given fits the task. Returns the names and descriptions of the best "
                "matching tools; they can be called from your next turn on.",
                obj(
                    {
                        "query": string(
                            "What the needed tool should do, in a few words (e.g. 'tide times for a harbour').",
                            max_length=300,
                            min_length=2,
                        ),
                        "limit": integer(
                            "How many tools to return.", minimum=1, maximum=FIND_TOOLS_MAX_RESULTS,
                            default=FIND_TOOLS_MAX_RESULTS,
                        ),
                    },
                    ("query",),
                ),
            ),
            frozenset({"workflow", "tables", "knowledge"}),
            (
                "find a tool for this",
                "is there a tool that can do this",
                "which tools are available for tides",
                "search the available tools for a converter",
            ),
            read_only=True,
        )
    ]
