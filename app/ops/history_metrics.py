"""Metrics of a user's history (issue 25): feedback on runs, conversation titles and
deletions, and the retention passes. Registered on the app's registry by ``AppMetrics``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class HistoryMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.feedback = Counter(
            "agentchat_run_feedback_total",
            "Feedback posted on runs, by score (1 up, -1 down); a replaced feedback counts again.",
            ["score"],
            registry=registry,
        )
        self.titles = Counter(
            "agentchat_conversation_titles_total",
            "Conversation titles set, by source: client (the chat request's title; no model call), model, "
            "words (the question's first words), words_after_model_failed (the model call failed or timed "
            "out: a visible fallback).",
            ["source"],
            registry=registry,
        )
        self.conversations_deleted = Counter(
            "agentchat_conversations_deleted_total",
            "Conversations deleted, by why: user (DELETE route) or retention (idle past "
            "AGENT_CONVERSATION_RETENTION_DAYS).",
            ["reason"],
            registry=registry,
        )
        self.retention_passes = Counter(
            "agentchat_retention_passes_total",
            "Retention passes, by outcome: done, skipped (another replica held the lock), failed.",
            ["outcome"],
            registry=registry,
        )
        self.runs_compacted = Counter(
            "agentchat_retention_runs_compacted_total",
            "Finished runs whose event log was compacted (AGENT_RUN_EVENTS_RETENTION_DAYS).",
            registry=registry,
        )
        self.events_removed = Counter(
            "agentchat_retention_events_removed_total",
            "Event-log rows removed by compaction (text chunks folded into one per stretch).",
            registry=registry,
        )
