"""The app's small shared types: what a chat asks for and who asks, how a run's
input is stored, and the fingerprint of a request stored with its ``Idempotency-Key``.
No behaviour beyond those encodings."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from storage.records import MultitaskPolicy

#: What a run id can be: the manager makes ``run_<32 hex digits>``; any id of letters,
#: digits and ``_ . : -`` (at most 128) is looked up. Anything else — a NUL, a control
#: character, a path's worth of text — is no run's id, and is never sent to the store:
#: PostgreSQL refuses a NUL in a text parameter with an error, not with "no such row".
_RUN_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}\Z")


def could_be_run_id(value: object) -> bool:
    """Whether ``value`` may name a run (``_RUN_ID``); a caller answers "no such run" otherwise."""
    return isinstance(value, str) and _RUN_ID.match(value) is not None


@dataclass(frozen=True, slots=True)
class ChatInput:
    message: str
    context_type: str
    context: dict[str, Any]
    conversation_id: str | None = None
    multitask: MultitaskPolicy = "enqueue"
    #: The conversation's title as the client named it: stored with the run's admission
    #: when the conversation has none yet, and then no model call writes one.
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Caller:
    user_id: str
    authorization: str | None = None


class Sealer(Protocol):
    """Encrypts a stored run input (``app.keyring.RunInputSealer``)."""

    def seal(self, plain: bytes) -> bytes: ...

    def open(self, stored: bytes) -> bytes: ...


def encode_run_input(chat: ChatInput, caller: Caller, sealer: Sealer | None = None) -> bytes:
    """What a run needs to be carried on by another process: the question, its context
    and the caller's credentials — encrypted when a key is configured, and forgotten
    (the column cleared) when the run ends, however it ends."""
    plain = orjson.dumps(
        {
            "message": chat.message,
            "context_type": chat.context_type,
            "context": chat.context,
            "authorization": caller.authorization,
        }
    )
    return sealer.seal(plain) if sealer is not None else plain


def request_fingerprint(chat: ChatInput) -> str:
    """The sha256 (hex) of what defines a request for its ``Idempotency-Key``: the
    message, the context type, the context and the conversation (``null`` when the
    client named none), canonically encoded (keys sorted at every depth). Stored beside
    the key — the run's input cannot be the comparison: it is cleared when the run ends —
    so a repeat of the key with another request is told apart from a retry (422). Only
    the hash is kept, never the text; the caller's credentials are no part of it (a
    retry may carry a refreshed token), nor are ``multitask`` and ``title`` (how to
    queue a run and what to call its conversation do not make it another request)."""
    canonical = orjson.dumps(
        [chat.message, chat.context_type, chat.context, chat.conversation_id], option=orjson.OPT_SORT_KEYS
    )
    return hashlib.sha256(b"agentchat.request.v1\0" + canonical).hexdigest()


def decode_run_input(
    raw: bytes, *, conversation_id: str, user_id: str, sealer: Sealer | None = None
) -> tuple[ChatInput, Caller]:
    """The stored input; ``ValueError`` when it was encrypted under a key not configured."""
    if sealer is not None:
        raw = sealer.open(raw)
    elif not raw.startswith(b"{"):
        raise ValueError("the run's stored input is encrypted and no key is configured")
    d = orjson.loads(raw)
    chat = ChatInput(
        message=str(d["message"]),
        context_type=str(d["context_type"]),
        context=dict(d.get("context") or {}),
        conversation_id=conversation_id,
    )
    return chat, Caller(user_id, d.get("authorization"))
