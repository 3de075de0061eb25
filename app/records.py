"""The app's small shared types: what a chat asks for and who asks. No behaviour."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from storage.records import MultitaskPolicy


@dataclass(frozen=True, slots=True)
class ChatInput:
    message: str
    context_type: str
    context: dict[str, Any]
    conversation_id: str | None = None
    multitask: MultitaskPolicy = "enqueue"


@dataclass(frozen=True, slots=True)
class Caller:
    user_id: str
    authorization: str | None = None


def encode_run_input(chat: ChatInput, caller: Caller) -> bytes:
    """What a run needs to be carried on by another process: the question, its context
    and the caller's credentials (forgotten when the run ends)."""
    return orjson.dumps(
        {
            "message": chat.message,
            "context_type": chat.context_type,
            "context": chat.context,
            "authorization": caller.authorization,
        }
    )


def decode_run_input(raw: bytes, *, conversation_id: str, user_id: str) -> tuple[ChatInput, Caller]:
    d = orjson.loads(raw)
    chat = ChatInput(
        message=str(d["message"]),
        context_type=str(d["context_type"]),
        context=dict(d.get("context") or {}),
        conversation_id=conversation_id,
    )
    return chat, Caller(user_id, d.get("authorization"))
