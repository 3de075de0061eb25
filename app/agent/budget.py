"""Keeping prompts inside a token budget.

Two places need it: the history loaded from earlier runs of a conversation, and the
evidence piling up inside one run (seed 004 §context pruning). Both prune tool results
first — largest and oldest — replacing each with a short note so the model knows what
it no longer sees and can fetch it again; whole old exchanges go only if that is not
enough. Pruning never touches the stored conversation: it works on copies.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from llm.types import Message, ToolResult

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def message_tokens(msg: Message) -> int:
    n = estimate_tokens(msg.content) + 4
    for c in msg.tool_calls:
        n += estimate_tokens(c.raw_arguments or orjson.dumps(c.arguments).decode()) + 8
    for r in msg.tool_results:
        n += estimate_tokens(r.content) + 8
    return n


def total_tokens(messages: Sequence[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


def _stub(result: ToolResult) -> ToolResult:
    note = orjson.dumps(
        {
            "pruned": True,
            "note": f"The result of {result.name} ({len(result.content)} characters) was removed to keep "
            "the conversation within its context budget. Call the tool again if you still need it.",
        }
    ).decode()
    return ToolResult(result.tool_call_id, result.name, note, result.is_error)


def _prune_results(messages: list[Message], budget: int, protect_from: int) -> tuple[list[Message], int]:
    """Replace tool results in ``messages[:protect_from]``, largest and oldest first,
    until the estimate fits ``budget``. Returns the new list and how many were pruned."""
    total = total_tokens(messages)
    if total <= budget:
        return messages, 0
    candidates: list[tuple[int, int, int]] = []  # (-size, index, position)
    for i, m in enumerate(messages[:protect_from]):
        for j, r in enumerate(m.tool_results):
            if len(r.content) > 200:
                candidates.append((-len(r.content), i, j))
    # Oldest half first, and within it the largest; then the rest by size.
    half = max(1, protect_from // 2)
    candidates.sort(key=lambda c: (c[1] >= half, c[0], c[1]))
    out = list(messages)
    pruned = 0
    for _neg, i, j in candidates:
        if total <= budget:
            break
        m = out[i]
        old = m.tool_results[j]
        new = _stub(old)
        results = list(m.tool_results)
        results[j] = new
        out[i] = Message(m.role, m.content, m.tool_calls, results, m.replay)
        total -= estimate_tokens(old.content) - estimate_tokens(new.content)
        pruned += 1
    return out, pruned


def prune_in_run(messages: list[Message], budget: int) -> list[Message]:
    """Prune tool results of earlier steps of this run; the latest message stays whole."""
    out, _ = _prune_results(messages, budget, protect_from=max(0, len(messages) - 1))
    return out


def prune_history(history: list[Message], budget: int) -> list[Message]:
    """Fit earlier runs' messages into ``budget``: tool results first, then whole old
    exchanges (an exchange starts at a user text message, so call/result pairs stay intact)."""
    if budget <= 0:
        return []
    out, _ = _prune_results(history, budget, protect_from=len(history))
    starts = [i for i, m in enumerate(out) if m.role == "user" and m.content and not m.tool_results]
    while total_tokens(out) > budget and len(starts) > 1:
        cut = starts[1]
        out = out[cut:]
        starts = [i - cut for i in starts[1:]]
    if total_tokens(out) > budget:
        return []
    # History must start at a user text turn for every provider.
    while out and not (out[0].role == "user" and out[0].content and not out[0].tool_results):
        out = out[1:]
    return out
