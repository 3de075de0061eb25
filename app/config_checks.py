"""Which combinations of settings are refused at start-up, each with the line an
operator reads: a provider or embedder named without its key, JWT auth without a way
to verify tokens, a public key file that is not there, secrets too short to sign with.
And what ``agentchat serve`` warns of without refusing (``serve_warnings``): an
``AGENT_*`` variable nothing reads (a typo: ``AGENT_AUTHH=jwt`` served with no auth and
not a word), no authentication on an address other machines reach.

Why apart: each variable's own checks are made as it is read (``app.config_env``);
these look at several at once, after every variable is read, so ``Settings.from_env``
reports them together with the others. They read the settings through ``Combination``
(the fields they need), so this module does not import ``app.config``.
"""

from __future__ import annotations

import difflib
import ipaddress
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Protocol

from app.config_env import is_host_entry

#: Secrets that sign or seal something must be at least this long.
MIN_SECRET_CHARS = 16


class Combination(Protocol):
    """The settings these checks read."""

    @property
    def llm_provider(self) -> str: ...
    @property
    def embedder(self) -> str: ...
    @property
    def gemini_api_key(self) -> str | None: ...
    @property
    def auth(self) -> str: ...
    @property
    def jwt_secret(self) -> str | None: ...
    @property
    def jwt_jwks_url(self) -> str | None: ...
    @property
    def jwt_public_key(self) -> Path | None: ...
    @property
    def stream_token_secret(self) -> str | None: ...
    @property
    def secret_key(self) -> str | None: ...


def combination_problems(s: Combination) -> list[str]:
    """Every refused combination in ``s``, one line each (none: an empty list)."""
    problems: list[str] = []
    if s.llm_provider == "gemini" and not s.gemini_api_key:
        problems.append("AGENT_LLM_PROVIDER=gemini needs GEMINI_API_KEY")
    if s.embedder == "gemini" and not s.gemini_api_key:
        problems.append("AGENT_EMBEDDER=gemini needs GEMINI_API_KEY")
    if s.auth == "jwt" and not (s.jwt_secret or s.jwt_jwks_url or s.jwt_public_key):
        problems.append("AGENT_AUTH=jwt needs AGENT_JWT_SECRET, AGENT_JWT_JWKS_URL or AGENT_JWT_PUBLIC_KEY")
    if s.jwt_public_key is not None and not s.jwt_public_key.is_file():
        problems.append(f"AGENT_JWT_PUBLIC_KEY: no such file {str(s.jwt_public_key)!r}")
    if s.auth == "jwt" and s.jwt_secret and len(s.jwt_secret) < MIN_SECRET_CHARS:
        problems.append(f"AGENT_JWT_SECRET must be at least {MIN_SECRET_CHARS} characters")
    if s.stream_token_secret is not None and len(s.stream_token_secret) < MIN_SECRET_CHARS:
        problems.append(f"AGENT_STREAM_TOKEN_SECRET must be at least {MIN_SECRET_CHARS} characters")
    if s.secret_key is not None and len(s.secret_key) < MIN_SECRET_CHARS:
        problems.append(f"AGENT_SECRET_KEY must be at least {MIN_SECRET_CHARS} characters")
    return problems


def serve_warnings(env: Mapping[str, str], known: Collection[str], *, auth: str, host: str) -> list[str]:
    """The WARNING lines of a serve's start, one each: every ``AGENT_*`` variable of
    ``env`` not in ``known`` (``app.config.known_variables``), with the closest known
    name when one is close; ``AGENT_AUTH=none`` on a ``host`` that is not loopback."""
    names = sorted(known)
    lines: list[str] = []
    for name in sorted(n for n in env if n.startswith("AGENT_") and n not in known):
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else ""
        lines.append(f"{name} is not a setting: nothing reads it, and it changes nothing{hint}")
    if auth == "none" and not is_loopback(host):
        lines.append(
            f"AGENT_AUTH=none on {host}, an address other machines may reach: every request is served "
            "without a token, as one user; set AGENT_AUTH=jwt, or AGENT_HOST=127.0.0.1 behind a proxy "
            "that authenticates (and the Host name it forwards in AGENT_ALLOWED_HOSTS)"
        )
    return lines


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reached from this machine only: ``localhost`` or a loopback
    address (``0.0.0.0`` and ``::`` are every address, so not)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, it was named to be reached


def hosts_answered(allowed_hosts: tuple[str, ...], asked: str, bound: str) -> tuple[str, ...]:
    """``AGENT_ALLOWED_HOSTS`` for a server ``serve`` was told to listen on by the name
    ``asked`` (``--host devbox``) and bound to ``bound``, the address that name has.

    Under ``auto`` a server bound to loopback answers only this machine's names
    (``app/server/host_check.py``): a name of this machine that resolves to loopback
    (``/etc/hosts``: ``127.0.1.1 devbox``) was refused, though it is the name the
    operator gave, the one the "serving on" line shows and the one ``--reload``'s
    readiness probe asks by (so that line never came). Here it is answered too: ``auto``
    becomes that one name, which on loopback means the same plus it. Anything else —
    a list, ``*``, an address, ``localhost``, a name bound elsewhere — stays as it is."""
    name = asked.strip().lower().removesuffix(".")
    if tuple(allowed_hosts) != ("auto",) or not is_loopback(bound) or is_loopback(name) or _is_address(name):
        return allowed_hosts
    return (name,) if name and not name.startswith("*") and is_host_entry(name) else allowed_hosts


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


__all__ = [
    "MIN_SECRET_CHARS", "Combination", "combination_problems", "hosts_answered", "is_loopback", "serve_warnings",
]
