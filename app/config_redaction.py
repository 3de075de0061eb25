"""Which settings are credentials or URLs, and the settings as logs may show them:
``secret_values`` (every credential, for ``app.ops.masking.SecretScrubber``) and
``redacted`` (secrets masked, URLs without userinfo), behind ``Settings``' methods of
those names.

Why apart: a new setting that holds a key or a URL is added to ``SECRET_FIELDS`` or
``URL_FIELDS`` here, one place next to the only code that reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.ops.masking import mask_url, url_secrets

if TYPE_CHECKING:
    # The settings are typed by shape, not by ``app.config.Settings``: that module
    # imports this one.
    from _typeshed import DataclassInstance

#: Settings whose whole value is a credential (never logged, never served).
SECRET_FIELDS = frozenset(
    {
        "gemini_api_key",
        "perplexity_api_key",
        "jwt_secret",
        "openai_api_key",
        "stream_token_secret",
        "secret_key",
        "backend_demo_token",
    }
)
#: Settings that are URLs, whose userinfo may hold a password or a key.
URL_FIELDS = frozenset(
    {
        "ollama_host",
        "gemini_base_url",
        "openai_base_url",
        "perplexity_base_url",
        "backend_url",
        "jwt_jwks_url",
        "database_url",
    }
)


def without_password(url: str) -> str:
    """``postgresql://user:pw@host/db`` → ``postgresql://user:***@host/db`` (for the logs)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def secret_values(settings: DataclassInstance) -> list[str]:
    """Every configured value that is a credential — API keys, signing keys, the
    demo token, passwords inside URLs — for ``app.ops.masking.SecretScrubber``."""
    values = [getattr(settings, name) for name in SECRET_FIELDS]
    for name in URL_FIELDS:
        values += url_secrets(getattr(settings, name))
    return [v for v in values if isinstance(v, str) and v]


def redacted(settings: DataclassInstance) -> dict[str, Any]:
    """The settings as a dict safe to log: secrets masked, URLs without userinfo."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        if f.name in SECRET_FIELDS:
            value = "***" if value else None
        elif f.name == "database_url" and value:
            value = without_password(value)
        elif f.name in URL_FIELDS and value:
            value = mask_url(value)
        elif f.name == "mcp_servers":
            value = [f"{m.name}: {m.describe()}" for m in value]
        elif isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            continue
        out[f.name] = value
    return out


__all__ = ["SECRET_FIELDS", "URL_FIELDS", "redacted", "secret_values", "without_password"]
