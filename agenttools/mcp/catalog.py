"""MCP tools in the catalog: specs, names, handlers, and results the model can read.

An MCP tool becomes an ordinary ``ToolSpec`` (its ``inputSchema`` is the parameter
schema, so the shared validator checks it like any built-in tool's) with a handler that
calls the server; the agent loop, the selector, the call log, the tool budget and the
result caps never learn it is remote. What is specific to MCP lives here:

* **Names.** A tool keeps its own name when it is unique; one that clashes with a
  built-in tool, or with a tool of another server, is exposed as ``<server>__<name>`` —
  every clashing one, so the outcome depends only on the set of tools, never on which
  server happened to connect first — and the rename is logged once. The set is every
  configured server's *known* list: the last list it gave, kept while it is down (and
  across restarts, by ``McpRoom``), so a server going away never renames another's
  tools and a call by a name the model was given keeps working. Names are reduced to
  what every model API accepts (letters, digits, ``_``, ``-``; 64 characters).
* **Groups.** Each tool is in the ``mcp`` group plus the chat contexts its server is
  configured for, so stage 1 of selection (the context filter) sees it there.
* **Results.** ``isError`` results and every failure on the way (server down, timeout,
  the server dying mid-call) become a failed ``ToolOutcome``; text is quoted as retrieved
  data (``agenttools.core.untrusted``), structured content is kept as data, binary content is
  described, not inlined.
* **Arguments** pass the shared validator (types, sizes, sanitising) and then the full
  JSON Schema of the tool (``anyOf``, ``$ref``, formats the shared walker does not
  read), so a call the server would reject never leaves the service.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import mcp_types as types
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from agenttools.core.untrusted import TRUST, neutralize_text, quoted
from agenttools.mcp.config import MCP_GROUP
from llm.types import ToolDefinition

log = logging.getLogger("agentchat.mcp")

MAX_NAME = 64
MAX_DESCRIPTION = 2000
MAX_TEXT_CHARS = 20_000
_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class McpTool:
    """A server's tool as listed, with what the catalog needs from it."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    title: str | None = None
    read_only: bool = False
    #: The server's ``destructiveHint`` (MCP says it defaults to true for a tool that is
    #: not read-only; only an explicit ``true`` is kept here).
    destructive: bool = False

    @property
    def asks_approval(self) -> bool:
        """The MCP default for approvals: a tool that may destroy, or that does not say
        it only reads (``readOnlyHint``), waits for the user's decision (as the AI SDK's
        MCP guide does: ``needsApproval: readOnlyHint !== true``)."""
        return self.destructive or not self.read_only

    @property
    def key(self) -> tuple[str, str]:
        return (self.server, self.name)

    def embedding_text(self) -> str:
        """What the tool index embeds: the server's own name for the tool (so a rename
        caused by a clash costs no re-embedding), its title and description."""
        head = f"{self.name} ({self.title})" if self.title and self.title != self.name else self.name
        return f"{head} \u2014 {self.description}"


class McpCaller(Protocol):
    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult: ...


def tool_from_mcp(server: str, tool: types.Tool) -> McpTool:
    """The catalog's view of a listed tool: description neutralised and capped, schema an object."""
    title = tool.title or (tool.annotations.title if tool.annotations else None)
    description = " ".join((tool.description or title or tool.name).split())
    schema = dict(tool.input_schema or {})
    if schema.get("type") != "object":
        schema = {**schema, "type": "object"}
    schema.setdefault("properties", {})
    return McpTool(
        server=server,
        name=tool.name,
        description=neutralize_text(description)[:MAX_DESCRIPTION],
        input_schema=schema,
        title=neutralize_text(title)[:200] if title else None,
        read_only=bool(tool.annotations and tool.annotations.read_only_hint),
        destructive=bool(tool.annotations and tool.annotations.destructive_hint),
    )


def safe_name(name: str) -> str:
    """``name`` reduced to ``[A-Za-z0-9_-]``, at most 64 characters (a hash keeps long ones apart)."""
    clean = _NAME_BAD.sub("_", name).strip("_") or "tool"
    if len(clean) <= MAX_NAME:
        return clean
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{clean[: MAX_NAME - 9]}_{digest}"


def assign_names(builtin: Collection[str], tools: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Exposed names for ``(server, tool)`` pairs: the tool's own (safe) name when no
    built-in tool and no other listed tool has it, else ``<server>__<name>`` (with
    ``_2``, ``_3`` … in the unlikely case that is taken too). Deterministic: the result
    depends only on the arguments, never on their order."""
    wanted = {key: safe_name(key[1]) for key in tools}
    counts = Counter(wanted.values())
    out = {key: n for key, n in wanted.items() if counts[n] == 1 and n not in builtin}
    taken = set(builtin) | set(out.values())
    for key in sorted(k for k in wanted if k not in out):
        candidate = safe_name(f"{key[0]}__{wanted[key]}")
        i = 2
        while candidate in taken:
            suffix = f"_{i}"
            candidate = candidate[: MAX_NAME - len(suffix)] + suffix if len(candidate) + len(suffix) > MAX_NAME \
                else candidate + suffix
            i += 1
        out[key] = candidate
        taken.add(candidate)
    return out


def outcome_from_result(tool: McpTool, result: types.CallToolResult) -> ToolOutcome:
    """A ``CallToolResult`` as the model sees it; ``isError`` makes a failed outcome."""
    texts: list[str] = []
    other: list[dict[str, Any]] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                texts.append(res.text)
            else:
                other.append({"type": "resource", "uri": str(res.uri), "mime_type": res.mime_type,
                              "note": "binary content not shown"})
        elif isinstance(block, types.ResourceLink):
            other.append({"type": "resource_link", "uri": str(block.uri), "name": block.name})
        else:
            other.append({"type": getattr(block, "type", "unknown"), "mime_type": getattr(block, "mime_type", None),
                          "note": "binary content not shown"})
    text = "\n".join(texts)
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + f"… [cut: {len(text)} characters in all]"
    source = f"mcp:{tool.server}/{tool.name}"
    if result.is_error:
        return ToolOutcome.error(
            "mcp_tool_error",
            reason=(" ".join(text.split()) or "the tool reported an error")[:1000],
            server=tool.server,
            guidance="The tool failed. Fix the arguments if the reason says how, use another tool, "
            "or tell the user what failed.",
            quoted_from=neutralize_text(source),  # the reason is the server's text: data
            trust=TRUST,
        )
    content: dict[str, Any] = {"server": tool.server, "tool": tool.name}
    if text or not (result.structured_content or other):
        content.update(quoted(text, source=source))
    else:
        content.update({"quoted_from": neutralize_text(source), "trust": TRUST})
    if result.structured_content is not None:
        content["data"] = result.structured_content
    if other:
        content["attachments"] = other
    return ToolOutcome(content=content)


@dataclass(slots=True)
class McpToolHandler:
    """Runs one MCP tool: full-schema check, the call, the result as an outcome.

    The schema's own check (against the JSON Schema meta-schema, ~10 ms) runs at the
    first call, not when a server lists hundreds of tools."""

    tool: McpTool
    caller: McpCaller
    _validator: Draft202012Validator | None = field(default=None, init=False)
    _checked: bool = field(default=False, init=False)

    def validator(self) -> Draft202012Validator | None:
        if not self._checked:
            self._checked = True
            try:
                Draft202012Validator.check_schema(self.tool.input_schema)
                self._validator = Draft202012Validator(self.tool.input_schema)
            except SchemaError as exc:  # a broken schema from the server: the shared validator still ran
                log.warning("MCP tool has an invalid input schema; only the shared checks apply", extra={
                    "mcp_server": self.tool.server, "tool": self.tool.name, "error": exc.message[:200]})
        return self._validator

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        validator = self.validator()
        if validator is not None:
            problems = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))[:6]
            if problems:
                reason = "; ".join(f"{'.'.join(map(str, e.absolute_path)) or 'arguments'}: {e.message[:200]}"
                                   for e in problems)
                return ToolOutcome(
                    content={"error": "invalid_parameters", "reason": reason,
                             "guidance": f"Correct the arguments to match the schema and call {self.tool.name} again."},
                    is_error=True,
                    counts_as_execution=False,
                )
        try:
            result = await self.caller.call_tool(self.tool.name, args)
        except TimeoutError:
            raise  # the executor reports its own timeout (AGENT_TOOL_TIMEOUT_S)
        except Exception as exc:
            return ToolOutcome.error(
                "mcp_call_failed",
                reason=_failure(self.tool.server, exc),
                server=self.tool.server,
                guidance="Do not retry this tool right now; continue without it or tell the user.",
                # The reason quotes the server's (or its transport's) error text.
                quoted_from=neutralize_text(f"mcp:{self.tool.server}/{self.tool.name}"),
                trust=TRUST,
            )
        return outcome_from_result(self.tool, result)


def _failure(server: str, exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())[:300] or type(exc).__name__
    if type(exc).__name__ == "McpUnavailable":
        return text
    return f"the MCP server {server!r} failed the call ({type(exc).__name__}: {text})"


class McpCatalog:
    """The MCP part of one registry: which exposed name is which server's tool.

    ``update`` replaces one server's tools (``None``: the server is gone) and brings
    the registry in line in one synchronous step, so a selection running concurrently
    sees either the old catalog or the new one, never half of each.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        contexts: Mapping[str, Sequence[str]],
        callers: Mapping[str, McpCaller],
        known: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.registry = registry
        self._contexts = {s: frozenset({MCP_GROUP, *c}) for s, c in contexts.items()}
        self._callers = dict(callers)
        self._order = list(contexts)
        self._tools: dict[str, list[McpTool]] = {}
        self._exposed: dict[tuple[str, str], str] = {}
        self._handlers: dict[tuple[str, str], McpToolHandler] = {}
        #: Each configured server's last known tool names (kept while it is down); the
        #: names are assigned over these, so they do not depend on who is up.
        self._known: dict[str, tuple[str, ...]] = {
            s: tuple(names) for s, names in (known or {}).items() if s in self._contexts
        }
        self._renames_logged: set[tuple[str, str, str]] = set()

    def tools(self, server: str) -> list[McpTool]:
        return list(self._tools.get(server, ()))

    def exposed(self) -> dict[tuple[str, str], str]:
        """``(server, tool) -> exposed name`` for every registered MCP tool."""
        return dict(self._exposed)

    def owns(self, name: str) -> bool:
        return name in self._exposed.values()

    def known(self) -> dict[str, list[str]]:
        """Each server's last known tool names (what ``McpRoom`` keeps across restarts)."""
        return {s: list(names) for s, names in self._known.items()}

    def update(self, server: str, tools: Sequence[McpTool] | None) -> dict[tuple[str, str], str]:
        if tools is None:
            self._tools.pop(server, None)
        else:
            seen: set[str] = set()
            unique = []
            for t in tools:  # a server listing one name twice: the first wins
                if t.name not in seen:
                    seen.add(t.name)
                    unique.append(t)
            self._tools[server] = unique
            self._known[server] = tuple(t.name for t in unique)
        for name in self._exposed.values():
            self.registry.remove(name)
        builtin = set(self.registry.names())
        ordered = [t for s in self._order for t in self._tools.get(s, ())]
        known = {(s, n) for s in self._order for n in self._known.get(s, ())}
        names = assign_names(builtin, known | {t.key for t in ordered})
        exposed = {t.key: names[t.key] for t in ordered}
        handlers: dict[tuple[str, str], McpToolHandler] = {}
        for t in ordered:
            name = exposed[t.key]
            spec = ToolSpec(
                ToolDefinition(name, t.description, t.input_schema), self._contexts[t.server],
                asks_approval=t.asks_approval,
            )
            self.registry.add_spec(spec)
            handler = self._handlers.get(t.key)
            if handler is None or handler.tool != t:  # unchanged tools keep their compiled schema
                handler = McpToolHandler(t, self._callers[t.server])
            handlers[t.key] = handler
            self.registry.set_handler(name, handler)
            if name != safe_name(t.name) and (t.server, t.name, name) not in self._renames_logged:
                self._renames_logged.add((t.server, t.name, name))
                clash = "a built-in tool" if safe_name(t.name) in builtin else "a tool of another server"
                log.warning("MCP tool renamed: its name clashes with %s", clash, extra={
                    "mcp_server": t.server, "tool": t.name, "exposed_as": name})
        self._exposed = exposed
        # A server that went away keeps its handlers for its return (same tools: same schemas).
        self._handlers = {**{k: h for k, h in self._handlers.items() if k[0] not in self._tools}, **handlers}
        return dict(exposed)
