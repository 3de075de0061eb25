"""The one private bucket a run's knowledge tools may name: its own conversation's
attachments (``knowledge.attachments``).

Why a module of its own: the rule is the privacy of every attached file, and every tool
that takes a bucket or a document id (``knowledge_base_search``, ``search_text``,
``search_semantic``, ``get_document_metadata``) must apply the same one. The bucket is
derived from the run's user and conversation, never taken from the name a model sent:
``knowledge_base_search`` searches it without being told, and a hit's ``bucket`` (this
one) can be followed by name; any other private bucket — the same user's other
conversation's, another user's — is refused by ``knowledge.bucket_privacy`` exactly as a
bucket that does not exist.
"""

from __future__ import annotations

from agenttools.core.registry import ToolContext
from knowledge.attachments import attachment_bucket


def own_private_buckets(ctx: ToolContext, attachments: bool) -> tuple[str, ...]:
    """The run's own private buckets, for the knowledge base's ``private``: its
    conversation's attachment bucket, or none when conversations take no attachments."""
    return (attachment_bucket(ctx.user_id, ctx.conversation_id),) if attachments else ()


__all__ = ["own_private_buckets"]
