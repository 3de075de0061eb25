"""``AGENT_MCP_SERVERS``: the file that names the MCP servers whose tools join the catalog.

A TOML or JSON file (chosen by its extension; anything else is tried as JSON, then TOML)
with one table per server under ``servers`` (``mcpServers``, the key Claude Desktop and
Cursor use, is accepted too, so an existing file can be pointed at as it is)::

    [servers.files]                     # stdio: the service starts the process
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/shared"]
    env = { LOG_LEVEL = "warn" }        # merged over a minimal safe environment
    contexts = ["knowledge"]            # default: every chat context

    [servers.tickets]                   # streamable HTTP
    url = "https://mcp.example.com/mcp"
    headers = { Authorization = "Bearer ${TICKETS_TOKEN}" }

``${NAME}`` in ``url``, ``headers``, ``env``, ``args`` and ``cwd`` is replaced by that
variable of the service's environment, so secrets stay out of the file; a missing one is
a configuration error. The file is read once, by ``Settings.from_env``: a malformed file
stops the start-up with every problem listed (a server that is configured well but
cannot be reached is a runtime matter: logged, reported in ``/readyz`` and retried).

This module imports nothing of the ``mcp`` SDK, so reading settings stays cheap.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from agenttools.core.catalog import CONTEXT_TYPES
from agenttools.core.urls import http_url_problem

MCP_GROUP: Final = "mcp"
"""The catalog group every MCP tool carries, beside the chat contexts it is offered in."""

CHAT_CONTEXTS: Final = CONTEXT_TYPES
"""The contexts a server's tools may be offered in (the request's ``context_type`` values)."""

Transport = Literal["stdio", "http"]
Protocol = Literal["auto", "legacy"]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KNOWN_KEYS: Final = frozenset(
    {"transport", "type", "command", "args", "env", "cwd", "url", "headers", "contexts", "protocol",
     "enabled", "connect_timeout_s", "disabled"}
)


class McpConfigError(ValueError):
    """The servers file is unreadable or invalid; the message lists every problem."""


#: How long one connection attempt may take unless configured. A stdio server's start
#: includes its process's: an ``npx -y`` server downloads its package then (19-22 s on a
#: fresh machine at load ~10), and an ``npx`` ended in the middle of that install leaves
#: npm's cache half-filled (``~/.npm/_npx/…``: every later start exits at once, "Cannot
#: find package"). 10 s, the old default for both, did exactly that on the README's
#: first start.
DEFAULT_CONNECT_TIMEOUT_S: dict[Transport, float] = {"stdio": 60.0, "http": 10.0}


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One MCP server as configured. ``env`` and ``headers`` stay out of ``repr`` (secrets)."""

    name: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    contexts: tuple[str, ...] = CHAT_CONTEXTS
    #: ``auto`` negotiates the newest protocol the server speaks; ``legacy`` forces the
    #: ``initialize`` handshake (for servers that misbehave on discovery).
    protocol: Protocol = "auto"
    #: How long one connection attempt (start, handshake, first tool list) may take.
    connect_timeout_s: float = 10.0
    #: The service's environment variables its ``${NAME}`` placeholders read, in order:
    #: read, so ``agentchat serve`` does not warn of an ``AGENT_*`` one as nothing's
    #: (``app.config.known_variables``). Names only, never values.
    variables: tuple[str, ...] = ()

    def describe(self) -> str:
        """Where the server is, for logs and ``/readyz``: never headers, env values, args
        (a ``${TOKEN}`` may have been expanded into them) or the URL's userinfo and query."""
        if self.transport == "http":
            return _strip_userinfo(self.url or "").split("?", 1)[0].split("#", 1)[0]
        return f"{self.command} ({len(self.args)} args)"


def load_servers(path: str | Path, env: Mapping[str, str]) -> tuple[McpServerConfig, ...]:
    """Read and validate the servers file; ``env`` supplies ``${NAME}`` values."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise McpConfigError(f"AGENT_MCP_SERVERS: cannot read {str(p)!r}: {exc.strerror or exc}") from exc
    document = _parse(raw, p.suffix.lower())
    if isinstance(document, str):
        raise McpConfigError(f"AGENT_MCP_SERVERS: {str(p)!r} {document}")
    return parse_servers(document, env, source=str(p))


def parse_servers(
    document: Any, env: Mapping[str, str], *, source: str = "AGENT_MCP_SERVERS"
) -> tuple[McpServerConfig, ...]:
    """Validate a decoded servers document; raises ``McpConfigError`` listing every problem."""
    problems: list[str] = []
    if not isinstance(document, Mapping):
        raise McpConfigError(f"{source}: the top level must be a table/object with a 'servers' table")
    servers = document.get("servers", document.get("mcpServers"))
    if not isinstance(servers, Mapping):
        raise McpConfigError(f"{source}: expected a 'servers' table (or 'mcpServers' object) naming the servers")
    out: list[McpServerConfig] = []
    for name, entry in servers.items():
        where = f"{source}: server {name!r}"
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(f"{where}: a name is a letter then up to 31 letters, digits, '_' or '-'")
            continue
        if not isinstance(entry, Mapping):
            problems.append(f"{where}: must be a table/object")
            continue
        config = _server(name, entry, env, where, problems)
        if config is not None:
            out.append(config)
    if problems:
        raise McpConfigError("invalid MCP servers file:\n  - " + "\n  - ".join(problems))
    return tuple(out)


def _parse(raw: bytes, suffix: str) -> Any:
    """The decoded document, or a string saying why it could not be decoded."""
    text = raw.decode("utf-8", errors="replace")
    order = ("toml", "json") if suffix == ".toml" else ("json", "toml")
    errors = []
    for kind in order:
        try:
            return tomllib.loads(text) if kind == "toml" else json.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            errors.append(f"{kind}: {exc}")
            if suffix in (".toml", ".json"):
                break
    return "is neither valid JSON nor TOML (" + "; ".join(errors) + ")"


def _server(
    name: str, entry: Mapping[str, Any], env: Mapping[str, str], where: str, problems: list[str]
) -> McpServerConfig | None:
    unknown = sorted(set(entry) - _KNOWN_KEYS)
    if unknown:
        problems.append(f"{where}: unknown keys {unknown}")
    if entry.get("disabled") is True or entry.get("enabled") is False:
        return None
    before = len(problems)
    read: list[str] = []  # the names its ${NAME}s read

    def text(key: str) -> str | None:
        value = entry.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            problems.append(f"{where}: {key} must be a non-empty string")
            return None
        return _expand(value.strip(), env, f"{where}: {key}", problems, read)

    def table(key: str) -> dict[str, str]:
        value = entry.get(key) or {}
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            problems.append(f"{where}: {key} must map names to strings")
            return {}
        return {k: _expand(v, env, f"{where}: {key}.{k}", problems, read) for k, v in value.items()}

    command, url = text("command"), text("url")
    kind = str(entry.get("transport") or entry.get("type") or ("http" if url else "stdio")).lower()
    kind = {"streamable-http": "http", "streamable_http": "http", "streamablehttp": "http"}.get(kind, kind)
    transport: Transport = "http"
    if kind == "stdio":
        transport = "stdio"
        if command is None:
            problems.append(f"{where}: a stdio server needs a command")
    elif kind == "http":
        why = "it has none" if url is None else http_url_problem(url)
        if why is not None:
            problems.append(f"{where}: an HTTP server needs an http(s) url with a host ({why})")
    else:
        problems.append(f"{where}: transport must be stdio or http (streamable HTTP); got {kind!r}")
    args_raw = entry.get("args") or []
    if not isinstance(args_raw, list) or not all(isinstance(a, str) for a in args_raw):
        problems.append(f"{where}: args must be a list of strings")
        args_raw = []
    contexts_raw = entry.get("contexts", list(CHAT_CONTEXTS))
    if isinstance(contexts_raw, str):
        contexts_raw = [contexts_raw]
    if not isinstance(contexts_raw, list) or any(c not in CHAT_CONTEXTS for c in contexts_raw):
        problems.append(f"{where}: contexts must be a list drawn from {', '.join(CHAT_CONTEXTS)}")
        contexts_raw = []
    protocol = entry.get("protocol", "auto")
    if protocol not in ("auto", "legacy"):
        problems.append(f"{where}: protocol must be auto or legacy")
    timeout = entry.get("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S[transport])
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0.1 <= timeout <= 600:
        problems.append(f"{where}: connect_timeout_s must be a number between 0.1 and 600")
        timeout = DEFAULT_CONNECT_TIMEOUT_S[transport]
    config = McpServerConfig(
        name=name,
        transport=transport,
        command=command,
        args=tuple(_expand(a, env, f"{where}: args", problems, read) for a in args_raw),
        env=table("env"),
        cwd=text("cwd"),
        url=url,
        headers=table("headers"),
        contexts=tuple(dict.fromkeys(contexts_raw)),
        protocol="legacy" if protocol == "legacy" else "auto",
        connect_timeout_s=float(timeout),
        variables=tuple(dict.fromkeys(read)),
    )
    return config if len(problems) == before else None


def _expand(value: str, env: Mapping[str, str], where: str, problems: list[str], read: list[str]) -> str:
    """``value`` with each ``${NAME}`` replaced by ``env``'s; each name appended to ``read``."""

    def repl(match: re.Match[str]) -> str:
        var = match.group(1)
        read.append(var)
        if var not in env:
            problems.append(f"{where}: ${{{var}}} is not set in the environment")
            return ""
        return env[var]

    return _VAR.sub(repl, value)


def _strip_userinfo(url: str) -> str:
    return re.sub(r"//[^/@]*@", "//", url, count=1)
