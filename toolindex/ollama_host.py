"""An Ollama host as a base URL: the one rule the embedder and ``auto``'s reachability
probe (``toolindex.factory``) share.

Apart from ``toolindex.ollama`` because that module imports the ``ollama`` client
library (its pydantic types, and a module-level ``httpx.Client`` that loads a CA bundle:
~0.3 s of CPU), which the probe does not need: every ``agentchat serve`` in ``auto`` asks
Ollama's ``/api/tags`` over the app's shared client, and most find no Ollama there.
"""

from __future__ import annotations


def normalise_host(host: str) -> str:
    """``localhost:11434`` → ``http://localhost:11434``; no trailing slash."""
    host = (host or "http://127.0.0.1:11434").strip().rstrip("/")
    if "://" not in host:
        host = "http://" + host
    return host
