"""The knowledge-base scope a chat's UI context names, checked before a run starts.

``knowledge_base_search`` searches the buckets the caller's context names
(``context.buckets``, a list, or ``context.bucket``, one name) instead of the configured
default. A name that is not a bucket used to search nothing, and the run answered "I
could not find an answer" as if the knowledge base lacked the fact. So a context naming
an unknown bucket is refused as a ``400 unknown_bucket`` whose detail lists the shared
buckets — on every face that takes a context, since they all start runs through
``app.server.run_start.start_run``, which calls this first. A private bucket (a
conversation's attachments, ``att_…``) is never a name a context takes, the caller's own
included (it is searched in its conversation without being named): it is refused in the
same words as a name that is no bucket (``knowledge.bucket_privacy``), so the answer
tells nobody that another user's bucket exists.

Each refusal names the field at fault as ``param`` for the OpenAI-compatible face, as its
other 400s do (``context.bucket``); the native faces answer error and detail as before.

The names are looked up in the knowledge base's bucket cache (``KnowledgeBase.bucket_schema``,
which reloads the schemas once on a miss), never counted: a run start costs no scan of
the corpus.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from app.server import storage_budget
from app.server.openai_errors import OpenAIProblem
from knowledge.buckets import UnknownBucketError

if TYPE_CHECKING:
    from app.server.services import Services

#: The search tool reads at most this many names from the context (``agenttools/rag/kb_search.py``).
MAX_CONTEXT_BUCKETS = 20
#: "every bucket", as in ``AGENT_KB_DEFAULT_BUCKETS``.
ALL_BUCKETS = "*"


def named_buckets(context: Mapping[str, Any]) -> tuple[str, list[str]] | None:
    """``(key, names)`` the context scopes the search to, or ``None`` when it names none;
    a 400 when ``buckets``/``bucket`` is there but is not a name or a list of names."""
    key = "buckets" if "buckets" in context else "bucket" if "bucket" in context else None
    if key is None or context[key] is None:
        return None
    raw = context[key]
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise OpenAIProblem(
            400, "invalid_field", f"context.{key} must be a bucket name or an array of bucket names", f"context.{key}"
        )
    names = list(dict.fromkeys(v.strip() for v in values if v.strip()))
    if len(names) > MAX_CONTEXT_BUCKETS:
        raise OpenAIProblem(
            400, "invalid_field", f"context.{key} names more than {MAX_CONTEXT_BUCKETS} buckets", f"context.{key}"
        )
    return (key, names) if names else None


async def check_bucket_scope(svc: Services, context: Mapping[str, Any]) -> None:
    """Refuse a context that scopes the knowledge-base search to a bucket that does not
    exist. A name not in the cache rereads the bucket list: within the request's storage
    budget (``storage_budget.bounded``), so a database away answers 503
    ``storage_unavailable`` with ``Retry-After`` after the budget, not after however
    long the read would wait."""
    named = named_buckets(context)
    knowledge = svc.rooms.knowledge
    if named is None or knowledge is None:  # no KB room: no search tool reads the scope
        return
    key, names = named
    kb = knowledge.kb

    def cut() -> None:
        # The budget's backstop cancelled the read: the knowledge base, which counts the
        # bucket list's failed reads (``agentchat_kb_bucket_list_failures_total``), never
        # saw it fail, and this 503 went uncounted.
        kb.status.bucket_list_failures += 1

    await storage_budget.bounded(
        "the knowledge base cannot be read right now",
        _check_names(kb, key, names),
        refused=svc.metrics.admission.storage_refused("bucket_list"),
        on_cut=cut,
    )


async def _check_names(kb: Any, key: str, names: list[str]) -> None:
    for name in names:
        if name == ALL_BUCKETS:
            continue
        try:
            await kb.bucket_schema(name)
        except UnknownBucketError as exc:
            raise OpenAIProblem(400, "unknown_bucket", f"context.{key}: {exc}", f"context.{key}") from None
