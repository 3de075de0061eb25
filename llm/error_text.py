"""The provider's own words in an error body, for the error a user reads.

Client libraries format a failed call for a developer: the openai SDK's message is
``Error code: 500 - {'error': {'message': ...}}`` (a Python dict repr), Ollama's client
keeps an ``error`` member that is an object when a proxy answers in OpenAI's shape, and
google-genai's message is empty when the body has none. The user of a chat wants the
sentence the provider wrote, so the providers take it from the parsed body here and fall
back to the library's text only when the body has none.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Where error bodies keep their sentence: OpenAI and Google ``{"error": {"message"}}``
#: (the openai SDK hands over the inner object), Ollama ``{"error": "..."}``, and
#: ``{"detail": "..."}`` of many HTTP frameworks in front of a model server.
_KEYS = ("message", "error", "detail")
#: A provider's sentence, cut for an event a user reads.
MAX_CHARS = 500


def provider_message(body: object, fallback: object = "") -> str:
    """The message in ``body`` (a parsed error body or its text), else ``fallback`` as text."""
    found = _message(body, depth=0)
    return (found or str(fallback or "").strip())[:MAX_CHARS]


def _message(body: object, depth: int) -> str | None:
    if isinstance(body, str):
        return body.strip() or None
    if isinstance(body, Mapping) and depth < 3:
        for key in _KEYS:
            found = _message(body.get(key), depth + 1)
            if found:
                return found
    return None
