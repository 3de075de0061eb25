"""The one check of an http(s) URL this service calls out to: the model servers
(``OLLAMA_HOST``, ``OPENAI_BASE_URL``, ``GEMINI_BASE_URL``), Perplexity, the backend
(``AGENT_BACKEND_URL``), a JWKS, an MCP server's ``url``.

Why one, and why strict: "starts with http://" let ``AGENT_BACKEND_URL=http://`` through,
and the service started, answered ``/readyz`` 200 and failed every tool call later with
httpx's ``UnsupportedProtocol``. A URL with no host, a port that is not a number, or white
space inside is refused when the settings are read, in words that name the variable. It
lives here, beside the backend client, because both the settings (``app.config_env``)
and the MCP configuration (``agenttools.mcp.config``) read URLs and may both import
``agenttools.core``, whose package imports nothing on the way (``llm``'s would cost
every command ~45 ms of CPU for the types it re-exports).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_USERINFO = re.compile(r"//[^/@]*@")


def shown(value: str) -> str:
    """``value`` as an error message may show it: any ``user:password@`` masked."""
    return _USERINFO.sub("//***@", value, count=1)[:200]


def http_url_problem(value: str) -> str | None:
    """Why ``value`` is not an http(s) URL with a host (a phrase to follow "must be an
    http(s) URL with a host"), or ``None`` when it is one."""
    if any(c.isspace() for c in value):
        return "it has white space in it"
    try:
        parts = urlsplit(value)
        port = parts.port  # a port that is not a number between 0 and 65535 raises here
    except ValueError as exc:
        return f"it does not parse ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return "the scheme is not http:// or https://"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "port 0 is no port to call"
    return None


def url_error(name: str, value: str) -> str | None:
    """The one line a bad URL setting ``name`` gets (``None``: it is a usable URL)."""
    why = http_url_problem(value)
    if why is None:
        return None
    return f"{name} must be an http(s) URL with a host, such as http://localhost:8080 ({why}); got {shown(value)!r}"


__all__ = ["http_url_problem", "shown", "url_error"]
