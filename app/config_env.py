"""Reading typed values from the environment for ``Settings.from_env``: ``EnvReader``
(text, URLs, choices, bounded numbers, booleans, lists) collects every problem instead
of stopping at the first, and the few values with a parsing of their own (the demo
token, the approval tools, optional paths).

Why apart: how a value is parsed and what a bad one says is the same for every
variable; ``app.config`` says which variables there are. ``docs/config_docs.py`` finds
this class through ``Settings.from_env`` (a class named ``*Reader``) and records its
public methods' calls to write the configuration reference.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from agenttools.core.urls import url_error
from toolindex.ollama_host import normalise_host

N = TypeVar("N", int, float)
#: An ``AGENT_ALLOWED_HOSTS`` name: a DNS name or IPv4 address, ``*.`` before a domain
#: for its names (an IPv6 address is checked by ``ipaddress``).
_HOST_NAME = re.compile(r"(?:\*\.)?[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*")


@dataclass(frozen=True, slots=True)
class Bounds(Generic[N]):
    """The range a number setting must be in. A command-line option that sets the same
    thing checks the same range (``app/cli/ranges.py``): one copy, so ``--port`` and
    ``AGENT_PORT`` never disagree."""

    lo: N
    hi: N


PORT_BOUNDS = Bounds(0, 65535)  # 0: any free port
WORKERS_BOUNDS = Bounds(1, 256)
SHUTDOWN_GRACE_BOUNDS = Bounds(0, 3600)
KEYWORD_MIN_USAGE_BOUNDS = Bounds(1, 1_000_000)
#: Ages in days: keywords' idle time, the retention of run events and of conversations.
DAYS_BOUNDS = Bounds(0, 36_500)


def demo_token(value: str) -> str | None:
    return None if value.lower() in {"none", "-", "off", "false"} else value.removeprefix("Bearer ").strip()


def approval_tools(raw: str | None) -> tuple[str, ...] | None:
    """``AGENT_APPROVAL_TOOLS``: unset or ``default`` → each tool's own default (``None``),
    ``none`` → no tool waits, else the comma list of tool names that do."""
    if raw is None or raw.strip().lower() in {"", "default"}:
        return None
    if raw.strip().lower() in {"none", "-"}:
        return ()
    return tuple(dict.fromkeys(p.strip() for p in raw.split(",") if p.strip()))


def opt_path(value: str | None) -> Path | None:
    return Path(value) if value else None


class EnvReader:
    """Reads typed values, collecting every problem instead of stopping at the first."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: list[str] = []
        #: Every name asked for, in order (``app.config.known_variables``).
        self.asked: list[str] = []

    def _raw(self, name: str) -> str | None:
        self.asked.append(name)
        value = self.env.get(name)
        if value is None:
            return None
        value = value.strip()
        return value or None

    def text(self, name: str, default: str) -> str:
        return self._raw(name) or default

    def optional(self, name: str) -> str | None:
        return self._raw(name)

    def url(self, name: str, default: str) -> str:
        value = self._raw(name) or default
        if name == "OLLAMA_HOST":  # Ollama's own reading: 127.0.0.1 is port 11434, not 80
            value = normalise_host(value)
        return self._checked_url(name, value)

    def optional_url(self, name: str) -> str | None:
        value = self._raw(name)
        return None if value is None else self._checked_url(name, value)

    def _checked_url(self, name: str, value: str) -> str:
        """Every URL setting through the one check (``agenttools.core.urls``): an http(s) URL with
        a host, so ``http://`` or ``localhost:8080`` stops the start instead of failing
        each call later."""
        problem = url_error(name, value)
        if problem is not None:
            self.problems.append(problem)
        return value.rstrip("/")

    def database_url(self, name: str) -> str | None:
        value = self._raw(name)
        if value is not None and not value.lower().startswith(("postgresql://", "postgres://")):
            self.problems.append(f"{name} must be a postgresql:// URL, got a value of another form")
            return None
        return value

    def choice(self, name: str, allowed: tuple[str, ...], default: str) -> str:
        value = (self._raw(name) or default).lower()
        if value not in allowed:
            self.problems.append(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
            return default
        return value

    def integer(self, name: str, default: int, *, lo: int | None = None, hi: int | None = None) -> int:
        raw = self._raw(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            self.problems.append(f"{name} must be an integer, got {raw!r}")
            return default
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.problems.append(f"{name} must be {_range_words(lo, hi)}, got {value}")
            return default
        return value

    def number(self, name: str, default: float, *, lo: float | None = None, hi: float | None = None) -> float:
        raw = self._raw(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            self.problems.append(f"{name} must be a number, got {raw!r}")
            return default
        if not math.isfinite(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
            self.problems.append(f"{name} must be a finite number {_range_words(lo, hi)}, got {raw!r}")
            return default
        return value

    def boolean(self, name: str, default: bool) -> bool:
        raw = self._raw(name)
        if raw is None:
            return default
        low = raw.lower()
        if low in {"1", "true", "yes", "on"}:
            return True
        if low in {"0", "false", "no", "off"}:
            return False
        self.problems.append(f"{name} must be a boolean (true/false), got {raw!r}")
        return default

    def listing(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        raw = self._raw(name)
        if raw is None:
            return default
        return tuple(p.strip() for p in raw.split(",") if p.strip())

    def host_names(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        """``AGENT_ALLOWED_HOSTS``: ``auto`` alone, or a comma list of host names (no port:
        any port is fine), ``*.domain`` for a domain's names, ``*`` for any; lower-cased."""
        raw = self._raw(name)
        if raw is None:
            return default
        items = tuple(dict.fromkeys(p.strip().lower().removesuffix(".") for p in raw.split(",") if p.strip()))
        if not items:
            return default
        bad = [i for i in items if i not in {"auto", "*"} and not is_host_entry(i)]
        if bad:
            self.problems.append(
                f"{name} takes host names without a scheme or port (any port is allowed), *.domain, * or auto; "
                f"got {', '.join(repr(b) for b in bad)}"
            )
            return default
        if "auto" in items and len(items) > 1:
            self.problems.append(f"{name}: auto stands alone (a list of names replaces it); got {raw.strip()!r}")
            return default
        return items

    def subset(self, name: str, allowed: tuple[str, ...], default: tuple[str, ...]) -> tuple[str, ...]:
        raw = self._raw(name)
        if raw is None:
            return default
        if raw.lower() in {"none", "-"}:
            return ()
        items = tuple(p.strip().lower() for p in raw.split(",") if p.strip())
        bad = [i for i in items if i not in allowed]
        if bad:
            self.problems.append(f"{name} entries must be among {', '.join(allowed)}; got {bad}")
            return default
        return items


def is_host_entry(entry: str) -> bool:
    """Whether ``entry`` is one ``AGENT_ALLOWED_HOSTS`` takes (lower case): a DNS name or
    address, ``*.domain``, or an IPv6 address (bracketed or not)."""
    if _HOST_NAME.fullmatch(entry):
        return True
    bare = entry.removeprefix("[").removesuffix("]")
    if ":" not in bare or (entry.startswith("[") != entry.endswith("]")):
        return False
    try:
        ipaddress.IPv6Address(bare)
    except ValueError:
        return False
    return True


def _range_words(lo: float | None, hi: float | None) -> str:
    """A range in words - between 1 and 10, at least 1, at most 10 - naming only the
    bounds there are ("between 1 and None" read as a typo)."""
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    if lo is not None:
        return f"at least {lo}"
    return f"at most {hi}"


__all__ = ["EnvReader", "approval_tools", "demo_token", "is_host_entry", "opt_path"]
