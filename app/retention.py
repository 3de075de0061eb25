"""Retention (issue 25): nothing a user stored should grow forever unasked.

Two jobs, one pass: compact the event logs of runs finished more than
``AGENT_RUN_EVENTS_RETENTION_DAYS`` ago (``storage.event_folding``: replay keeps its
text, tool events stay) and, when ``AGENT_CONVERSATION_RETENTION_DAYS`` is set, delete
conversations idle for longer (the same delete as the user's ``DELETE``). The pass runs
in the background every ``AGENT_RETENTION_INTERVAL_S`` (built in the app factory) and by
hand (``agentchat compact``). On PostgreSQL each batch takes the retention advisory lock
first: while another replica is in a pass, this one skips (counted as ``skipped``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.ops.history_metrics import HistoryMetrics
from storage.errors import ConversationBusy
from storage.history_records import RetentionPass
from storage.interfaces import HistoryStore, RetentionStore

log = logging.getLogger("agentchat.retention")

DAY_S = 86_400.0
#: Runs compacted per transaction, conversations deleted per look.
BATCH = 100


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    run_events_days: float = 30.0
    conversation_days: float = 0.0
    interval_s: float = 3600.0
    batch: int = BATCH

    @property
    def active(self) -> bool:
        return self.run_events_days > 0 or self.conversation_days > 0


async def retention_pass(
    retention: RetentionStore,
    history: HistoryStore,
    policy: RetentionPolicy,
    *,
    now: float | None = None,
    metrics: HistoryMetrics | None = None,
    forget: Callable[[str, str], object] | None = None,
) -> RetentionPass:
    """One pass, in batches, until nothing old is left (or another replica holds the lock)."""
    now = time.time() if now is None else now
    compacted = removed = deleted = 0
    if policy.run_events_days > 0:
        cutoff = now - policy.run_events_days * DAY_S
        while ids := await retention.compactable(cutoff, policy.batch):
            held, rows = await retention.compact(ids)
            if not held:
                if metrics is not None:
                    metrics.retention_passes.labels(outcome="skipped").inc()
                return RetentionPass(compacted, removed, deleted, ran=False)
            compacted, removed = compacted + len(ids), removed + rows
            if metrics is not None:
                metrics.runs_compacted.inc(len(ids))
                metrics.events_removed.inc(rows)
            await asyncio.sleep(0)  # let requests in between batches
    if policy.conversation_days > 0:
        idle_before = now - policy.conversation_days * DAY_S
        seen: set[tuple[str, str]] = set()
        while batch := [c for c in await history.idle_conversations(idle_before, policy.batch) if c not in seen]:
            for user_id, conversation_id in batch:
                seen.add((user_id, conversation_id))
                try:
                    gone = await history.delete_conversation(user_id, conversation_id)
                except ConversationBusy:  # a run started meanwhile: no longer idle
                    continue
                if gone is not None:
                    deleted += 1
                    if forget is not None:
                        done = forget(user_id, conversation_id)
                        if inspect.isawaitable(done):  # e.g. its attachments going too
                            await done
                    if metrics is not None:
                        metrics.conversations_deleted.labels(reason="retention").inc()
    if metrics is not None:
        metrics.retention_passes.labels(outcome="done").inc()
    return RetentionPass(compacted, removed, deleted)


async def retain_periodically(
    retention: RetentionStore,
    history: HistoryStore,
    policy: RetentionPolicy,
    metrics: HistoryMetrics,
    forget: Callable[[str, str], object] | None = None,
    *,
    first_delay_s: float = 30.0,
) -> None:
    """The background task: a pass shortly after start-up, then every ``interval_s``. A
    failed pass is logged and counted; the next one tries again."""
    await asyncio.sleep(min(first_delay_s, policy.interval_s))
    while True:
        try:
            done = await retention_pass(retention, history, policy, metrics=metrics, forget=forget)
            if done.runs_compacted or done.conversations_deleted:
                log.info(
                    "retention pass",
                    extra={
                        "runs_compacted": done.runs_compacted,
                        "events_removed": done.events_removed,
                        "conversations_deleted": done.conversations_deleted,
                    },
                )
        except asyncio.CancelledError:
            raise
        except Exception:
            metrics.retention_passes.labels(outcome="failed").inc()
            log.warning("retention pass failed; the next one tries again", exc_info=True)
        await asyncio.sleep(policy.interval_s)


__all__ = ["RetentionPolicy", "retain_periodically", "retention_pass"]
