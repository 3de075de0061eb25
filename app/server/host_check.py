"""Which ``Host`` names the service answers to (``AGENT_ALLOWED_HOSTS``): the guard against
DNS rebinding.

A page on a hostile site can have its own name resolve to 127.0.0.1 a moment after it
loaded; the browser then counts the service on this machine as that site's own origin and
lets the page read every answer — with ``AGENT_AUTH=none``, as the local user. The one
thing that gives it away is the ``Host`` header, which carries the hostile name. So a
service that listens on loopback only answers just the names that mean this machine
(``auto``), as Jupyter and Vite's dev server do; one the operator bound to another
address (``--host 0.0.0.0``, a container, behind a proxy that sets its own ``Host``)
answers any name unless a list is set.

What is always accepted, whatever the list: an IP address (a rebinding needs a name: a
page whose origin is an address can only reach that address), ``localhost`` and the names
under ``.localhost`` (no one can register them; browsers resolve them to loopback), and a
request with no ``Host`` at all (no browser sends one without it: HTTP/1.0 probes).

Why not Starlette's ``TrustedHostMiddleware``: its refusal is a fixed ``400`` in plain
text (and a ``www.`` redirect), baked into its ``__call__``; a client of this API reads a
JSON problem (OpenAI's shape on that face), and a Host the operator did not allow is a
``403`` that says which setting to change. It knows nothing of IP addresses or of which
address the server is bound to either, so only its name matching would be left to reuse.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from app.config_checks import is_loopback
from app.server.guards import refusal, scope_header
from app.server.problems import ORJSONResponse

log = logging.getLogger("agentchat.http")

#: ``name[:port]`` or ``[v6][:port]``; a name is kept as sent (checked by ``HostRule``).
_HOST_HEADER = re.compile(r"(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<name>[^:\[\]]*))(?::[0-9]*)?")
#: Names warned about once per app (a hostile page may send thousands of requests).
_WARNED_AT_MOST = 64


@dataclass(frozen=True, slots=True)
class HostRule:
    """The names a server answers to besides the ones always accepted; ``*.domain``
    entries match the names under ``domain``."""

    names: frozenset[str]

    def allows(self, header: str) -> bool:
        """Whether a request with this ``Host`` header value is answered."""
        match = _HOST_HEADER.fullmatch(header.strip())
        if match is None:
            return False
        if match["v6"] is not None:
            return _is_address(match["v6"])
        name = match["name"].lower().removesuffix(".")
        if not name:
            return False
        if _is_address(name) or name == "localhost" or name.endswith(".localhost") or name in self.names:
            return True
        return any(entry.startswith("*.") and name.endswith(entry[1:]) for entry in self.names)


def host_rule(allowed_hosts: tuple[str, ...], listen_host: str) -> HostRule | None:
    """The rule for a server bound to ``listen_host`` (``AGENT_HOST``; ``serve`` sets it to
    the address its socket is bound to), or ``None`` when any ``Host`` is answered:
    ``*``, or ``auto`` on an address other than loopback."""
    if "*" in allowed_hosts:
        return None
    if tuple(allowed_hosts) == ("auto",):
        return HostRule(frozenset()) if is_loopback(listen_host) else None
    return HostRule(frozenset(_bare(name) for name in allowed_hosts if name != "auto"))


def _bare(name: str) -> str:
    """An entry as ``allows`` compares it: an IPv6 address without brackets."""
    return name.lower().removeprefix("[").removesuffix("]").removesuffix(".")


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class HostCheck:
    """Pure ASGI (streams pass through untouched): a request whose ``Host`` the rule
    refuses is answered ``403 host_not_allowed`` before any route runs."""

    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app, self.rule = app, rule
        self.warned: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = scope_header(scope, b"host")
            if header is not None and not self.rule.allows(header):
                await self._refuse(scope, header)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refuse(self, scope: Scope, header: str) -> ORJSONResponse:
        shown = _name_of(header)
        detail = (
            f"this server does not answer to the host name {shown!r} (a guard against DNS rebinding); "
            "to reach it under that name, add the name to AGENT_ALLOWED_HOSTS (comma-separated, * for any)"
        )
        if len(self.warned) < _WARNED_AT_MOST and shown not in self.warned:
            self.warned.add(shown)
            log.warning("refused a request for a host name not allowed (AGENT_ALLOWED_HOSTS)",
                        extra={"host": shown, "path": scope.get("path", "")})
        return refusal(scope, 403, "host_not_allowed", detail)


def _name_of(header: str) -> str:
    """The name of a ``Host`` value (what ``AGENT_ALLOWED_HOSTS`` takes: no port), shortened."""
    match = _HOST_HEADER.fullmatch(header.strip())
    name = match["name"] if match is not None and match["name"] is not None else header
    return name if len(name) <= 100 else name[:100] + "…"


__all__ = ["HostCheck", "HostRule", "host_rule"]
