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

from urllib.parse import SplitResult, urlsplit


def shown(value: str) -> str:
    """``value`` as an error message may show it: everything between ``//`` and the last
    ``@`` masked. The last, not the first, and across ``/``, ``?`` and ``#``: the value is
    one a check refused, so where its authority ends is unknown, and a password holding a
    raw ``@``, ``/`` or ``#`` (``http://admin:s3cr/t@backend``) is still a password. A
    path or query holding an ``@`` is masked with it: too much hidden, never too little."""
    scheme, slashes, rest = value.partition("//")
    _, at, after = rest.rpartition("@")
    if slashes and at:
        value = f"{scheme}//***@{after}"
    return value[:200]


def http_url_problem(value: str) -> str | None:
    """Why ``value`` is not an http(s) URL with a host (a phrase to follow "must be an
    http(s) URL with a host"), or ``None`` when it is one."""
    if any(c.isspace() for c in value):
        return "it has white space in it"
    try:
        parts = urlsplit(value)
    except ValueError:  # never quoted: its words may hold the host as written, or a password's part
        if "[" in value or "]" in value:
            return "its [bracketed] host is not a whole IPv6 address"
        return "its host has characters a URL may not hold there"
    try:
        port = parts.port
    except ValueError:  # its words quote the port as written: a password's part, when it holds a raw '/'
        return _port_problem(parts)
    if parts.scheme.lower() not in ("http", "https"):
        return "the scheme is not http:// or https://"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "port 0 is no port to call"
    return None


def _port_problem(parts: SplitResult) -> str:
    """Why ``parts.port`` raised, in words that quote nothing of the value: urlsplit's
    own message holds the port as written, which is the start of a password when the
    password holds a raw ``/``, ``?`` or ``#`` (``http://admin:s3cr/t@backend``: port 's3cr')."""
    host = parts.netloc.rpartition("@")[2]
    port = host.rpartition("]")[2] if host.startswith("[") else host
    port = port.partition(":")[2]
    if port.isascii() and port.isdigit():
        return "the port is not between 0 and 65535"
    if "@" in parts.path + parts.query + parts.fragment:  # most likely a password's raw '/', '?' or '#'
        return ("the port is not a number; a '/', '?', '#' or '@' in a user name or password must be "
                "percent-encoded (%2F, %3F, %23, %40)")
    return "the port is not a number"


def url_error(name: str, value: str) -> str | None:
    """The one line a bad URL setting ``name`` gets (``None``: it is a usable URL)."""
    why = http_url_problem(value)
    if why is None:
        return None
    return f"{name} must be an http(s) URL with a host, such as http://localhost:8080 ({why}); got {shown(value)!r}"


__all__ = ["http_url_problem", "shown", "url_error"]
