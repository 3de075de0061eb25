"""Which ``Host`` names the reference backend answers to (``--allowed-hosts``, which
``agentchat serve`` and ``agentchat backend`` fill from ``AGENT_ALLOWED_HOSTS``): the guard
against DNS rebinding.

Beside ``agentchat serve`` the backend listens on 127.0.0.1 and its demo tokens
(``demo-alice``, …) are public: a hostile page that has its own name resolve to 127.0.0.1
becomes, for the browser, the backend's own origin and may call it with any header. The
``Host`` header still carries the hostile name, so on loopback (``auto``) only the names
that mean this machine are answered; bound elsewhere, any name is.

The same rule as the agent's ``app/server/host_check.py`` (tests/test_host_check.py runs
one table of cases through both): written twice because the backend imports nothing of
the agent's. Always accepted: an IP address (a rebinding needs a name), ``localhost`` and
names under ``.localhost``, and a request without ``Host``. The refusal is the Ichor error
shape, ``403 {"code": "host_not_allowed", "message"}``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from backend.responses import JSONResponse

_HOST_HEADER = re.compile(r"(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<name>[^:\[\]]*))(?::[0-9]*)?")


@dataclass(frozen=True, slots=True)
class HostRule:
    names: frozenset[str]

    def allows(self, header: str) -> bool:
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


def parse_allowed_hosts(raw: str) -> tuple[str, ...]:
    """``--allowed-hosts``: ``auto``, ``*`` or a comma list of names (``ValueError`` for
    ``auto`` among names, or an entry with a scheme or port)."""
    items = tuple(dict.fromkeys(p.strip().lower().removesuffix(".") for p in raw.split(",") if p.strip()))
    if not items:
        return ("auto",)
    if "auto" in items and len(items) > 1:
        raise ValueError("auto stands alone (a list of names replaces it)")
    bad = [i for i in items if "/" in i or (":" in i and not _is_address(_bare(i)))]
    if bad:
        raise ValueError(f"host names without a scheme or port, please: {', '.join(bad)}")
    return items


def host_rule(allowed_hosts: tuple[str, ...], listen_host: str) -> HostRule | None:
    """The rule for a backend bound to ``listen_host``; ``None``: any ``Host`` is answered."""
    if "*" in allowed_hosts:
        return None
    if tuple(allowed_hosts) == ("auto",):
        return HostRule(frozenset()) if _loopback(listen_host) else None
    return HostRule(frozenset(_bare(name) for name in allowed_hosts if name != "auto"))


def _loopback(host: str) -> bool:
    """``localhost`` or a loopback address (``0.0.0.0`` and ``::`` are every address, so not)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    return _is_address(name) and ipaddress.ip_address(name).is_loopback


def _bare(name: str) -> str:
    return name.lower().removeprefix("[").removesuffix("]").removesuffix(".")


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class HostCheck:
    """Pure ASGI: a request whose ``Host`` the rule refuses gets the 403, nothing else."""

    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app, self.rule = app, rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = next((bytes(v).decode("latin-1") for k, v in scope.get("headers") or () if k.lower() == b"host"),
                          None)
            if header is not None and not self.rule.allows(header):
                match = _HOST_HEADER.fullmatch(header.strip())
                shown = match["name"] if match is not None and match["name"] is not None else header
                shown = shown if len(shown) <= 100 else shown[:100] + "…"
                message = (f"this backend does not answer to the host name {shown!r} (a guard against DNS "
                           "rebinding); add the name to AGENT_ALLOWED_HOSTS (python -m backend --allowed-hosts)")
                await JSONResponse({"code": "host_not_allowed", "message": message}, status_code=403)(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)


__all__ = ["HostCheck", "HostRule", "host_rule", "parse_allowed_hosts"]
