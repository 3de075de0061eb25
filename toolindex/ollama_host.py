"""``OLLAMA_HOST`` as Ollama itself reads it, as a base URL: the one rule the settings
(``app.config_env``), the embedder and ``auto``'s reachability probe
(``toolindex.factory``) share.

Why Ollama's rule and not a URL's: ``OLLAMA_HOST`` is Ollama's own variable, and the
value an operator sets for ``ollama serve`` (``0.0.0.0``, ``ollama``, ``:11434``) is
read here too. Without a scheme a URL's rule gives port 80, where Ollama's CLI and its
Python client (``ollama._client._parse_host``) use 11434: ``OLLAMA_HOST=127.0.0.1`` called
``http://127.0.0.1:80``, found no Ollama and fell to the offline answerer. So, as they
do: no scheme is ``http://``; no host is ``127.0.0.1``; no port is 11434 (a URL with a
scheme keeps its scheme's own, 80 or 443); a path is kept; a bare IPv6 address (``::1``)
is the host (as Ollama's CLI takes it; the Python client refuses it). ``0.0.0.0`` stays
as written, as both keep it (connecting to it reaches this machine on Linux and macOS).

Apart from ``toolindex.ollama`` because that module imports the ``ollama`` client
library (its pydantic types, and a module-level ``httpx.Client`` that loads a CA bundle:
~0.3 s of CPU), which neither the settings nor the probe need.
"""

from __future__ import annotations

import ipaddress

DEFAULT_HOST = "http://127.0.0.1:11434"
OLLAMA_PORT = "11434"


def normalise_host(host: str | None) -> str:
    """``OLLAMA_HOST`` → a base URL without a trailing slash: ``127.0.0.1`` →
    ``http://127.0.0.1:11434``, ``:8080`` → ``http://127.0.0.1:8080``, ``::1`` →
    ``http://[::1]:11434``, ``https://ollama.example`` as it is. A value that is no host
    (a port that is not a number, an unclosed ``[``) is returned in URL form for the
    URL check (``agenttools.core.urls``) to refuse in words."""
    value = (host or "").strip()
    if not value:
        return DEFAULT_HOST
    if "://" in value:
        return value.rstrip("/")
    hostport, _, path = value.partition("/")
    name, port = _split(hostport)
    path = path.strip("/")
    return f"http://{name or '127.0.0.1'}:{port or OLLAMA_PORT}" + (f"/{path}" if path else "")


def _split(hostport: str) -> tuple[str, str]:
    """(host, port) of ``host[:port]``, an IPv6 host in brackets; anything else unsplit."""
    if hostport.startswith("["):
        name, close, rest = hostport.partition("]")
        if close and (not rest or rest.startswith(":")):
            return name + close, rest[1:]
        return hostport, ""
    if hostport.count(":") > 1:  # a bare IPv6 address, never with a port (Ollama's CLI reads it so)
        try:
            return f"[{ipaddress.IPv6Address(hostport)}]".replace("%", "%25"), ""  # a zone, URL-quoted
        except ValueError:
            return hostport, ""
    name, _, port = hostport.partition(":")
    return name, port
