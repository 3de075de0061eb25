"""Credentials kept out of what the service says about itself: logs and ``/readyz``.

Three rules, each a pure function (no state):

* a URL's userinfo (``http://user:pa55@host``) is masked wherever a URL is shown —
  ``mask_url`` for one known URL, ``mask_urls_in`` for any text that may quote one
  (an exception's message, a provider's "chosen because" reason);
* a query parameter whose *name* suggests a credential (``token``, ``jwt``,
  ``client_secret``, ``access-token``, ``auth``, ``sig`` …) has its value masked
  (``mask_query``, the access log);
* values the operator configured as secrets (API keys, the demo token, passwords inside
  URLs) are replaced wherever they appear (``SecretScrubber``): the last line of
  defence for texts built from them in ways the first two rules cannot recognise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

MASK: Final = "***"

#: Query parameter names (after lower-casing, ``-`` read as ``_``) whose values are
#: credentials; a name *containing* one of ``CREDENTIAL_PARTS`` is one too.
CREDENTIAL_PARAMS: Final = frozenset(
    {"key", "sig", "auth", "jwt", "code", "pass", "pwd", "session", "sid", "otp", "x_amz_security_token"}
)
CREDENTIAL_PARTS: Final = (
    "token",
    "secret",
    "password",
    "passwd",
    "api_key",
    "apikey",
    "authorization",
    "credential",
    "signature",
    "private_key",
    "jwt",
    "cookie",
)

#: A URL's user name without a password is taken for a token from this length on.
TOKEN_AS_USER_MIN: Final = 16

#: ``scheme://userinfo@`` inside any text (userinfo up to the first ``@`` before a path).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/@?#]+)@")


def is_credential_param(name: str) -> bool:
    """Whether a query parameter named ``name`` carries a credential."""
    lowered = name.strip().lower().replace("-", "_")
    return lowered in CREDENTIAL_PARAMS or any(part in lowered for part in CREDENTIAL_PARTS)


def mask_query(raw: bytes | str) -> str | None:
    """The query string with the values of credential parameters masked (``jwt=***``)."""
    if not raw:
        return None
    text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    pairs = parse_qsl(text, keep_blank_values=True)
    return urlencode([(k, MASK if is_credential_param(k) else v) for k, v in pairs], safe="*")


def mask_url(url: str | None) -> str | None:
    """``http://user:pa55@host/x?token=t`` → ``http://***@host/x?token=***``: the userinfo
    (user name too: it is often the key itself) and credential query values masked."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return mask_urls_in(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = (mask_query(parts.query) or "") if parts.query else ""
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def mask_urls_in(text: str) -> str:
    """Every ``scheme://userinfo@`` inside ``text`` with its userinfo masked."""
    return _USERINFO.sub(rf"\1{MASK}@", text)


def url_secrets(url: str | None) -> list[str]:
    """The password (the user name, when there is no password and it is long enough to be
    a token given as user, not a name like ``postgres``) and credential query values of a
    URL, raw and percent-decoded: what a scrubber must know."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found: list[str] = []
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    elif parts.username and len(parts.username) >= TOKEN_AS_USER_MIN:
        found += [parts.username, unquote(parts.username)]
    found += [v for k, v in parse_qsl(parts.query) if is_credential_param(k) and v]
    return found


class SecretScrubber:
    """Replaces known secret values (and URL userinfo) in texts and nested values.

    Built once from the settings (``Settings.secret_values``). Values shorter than
    ``min_length`` are not scrubbed by value: a short password such as ``agent`` would
    turn every ``agentchat`` in the log into ``***chat`` and protect nothing; such values
    are still masked where they stand in a URL (the first rule).
    """

    def __init__(self, values: Iterable[str], *, min_length: int = 8) -> None:
        unique = {v for v in values if v and len(v) >= min_length}
        # Longest first, so a secret containing another is replaced whole.
        ordered = sorted(unique, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None

    @property
    def empty(self) -> bool:
        return self._pattern is None

    def text(self, text: str) -> str:
        masked = mask_urls_in(text)
        return self._pattern.sub(MASK, masked) if self._pattern is not None else masked

    def value(self, value: Any, depth: int = 0) -> Any:
        """A copy of ``value`` (JSON-like) with every string scrubbed."""
        if depth > 20:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v, depth + 1) for v in value]
        return value


def without_url_secrets(text: str, *urls: str | None) -> str:
    """``text`` (a driver's error about ``urls``) with their passwords and userinfo masked.

    libpq quotes the part of a connection URL it cannot parse, the password included
    (``invalid percent-encoded token: "p%zz…"``, ``unexpected spaces found in "…"``),
    and the CLI's one-line errors and ``serve``'s start-up line print that text after
    the log's own scrubber is gone (or where there is none). ``SecretScrubber``'s length
    rule holds: a password as short as ``agent`` (docker-compose's, also its user and
    database names) would mask the names the line is about and protect nothing."""
    return SecretScrubber([v for url in urls for v in url_secrets(url)]).text(text)


__all__ = [
    "MASK",
    "SecretScrubber",
    "is_credential_param",
    "mask_query",
    "mask_url",
    "mask_urls_in",
    "url_secrets",
    "without_url_secrets",
]
