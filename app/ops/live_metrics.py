"""Live values read at scrape time from the objects that keep them: the run census and
counters, storage write stats, the tool index, the resolution cache, leases and
approvals, the knowledge base's fallbacks and re-embedding.

Apart from the recorded metrics because nothing here is recorded: each value already
lives elsewhere, and ``LiveSources`` hands it over as a callable so this module depends
on no other app module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

RUN_STATUSES: Final = ("queued", "running", "completed", "failed", "cancelled", "interrupted")


@dataclass(slots=True)
class LiveSources:
    """Where the live values are read at scrape time (each a zero-argument callable, so
    this module depends on no other app module)."""

    census: Callable[[], Mapping[str, int]]
    run_counters: Callable[[], Any]  # .started .resumed .interrupted .storage_failures
    write_stats: Callable[[], Any]  # .batches .retries .failures
    index_ready: Callable[[], bool]
    resolution_cache: Callable[[], Any | None]  # None, or an object with stats.to_dict()
    #: The model and the embedder in use: ``(role, name, configured)`` each, where
    #: ``configured`` is the setting (``auto`` picks the best reachable; ``None``: not shown).
    model_choice: Callable[[], Iterable[tuple[str, str, str]]] | None = None
    #: Query plans made and skipped, by outcome (``None``: no planner).
    query_plans: Callable[[], Mapping[str, int]] | None = None
    #: Runs offered every tool of their context, by why (``None``: not counted).
    tool_selection_fallbacks: Callable[[], Mapping[str, int]] | None = None
    #: Searches of the ready tool index that failed (``None``: not counted).
    tool_search_failures: Callable[[], int] | None = None
    #: Runs this process holds a lease on (``None``: no leases, the gauge is left out).
    leases_held: Callable[[], int] | None = None
    #: Knowledge searches that asked for vectors and ran on text (``None``: no KB).
    kb_text_fallbacks: Callable[[], int] | None = None
    #: ``(documents waiting for vectors, documents re-embedded since start)`` of the KB's
    #: re-embedding in the background (``None``: no KB).
    kb_reembedding: Callable[[], tuple[int, int]] | None = None
    #: Hybrid knowledge searches ranked on one side, by ``(the side that did not count,
    #: why)`` (``None``: no KB).
    kb_fusion_drops: Callable[[], Mapping[tuple[str, str], int]] | None = None
    #: Reloads of the KB's in-memory state after another process changed the stored KB
    #: (``None``: no KB).
    kb_reloads: Callable[[], int] | None = None
    #: Reloads of the KB's in-memory vectors that failed (``None``: no KB).
    kb_reload_failures: Callable[[], int] | None = None
    #: Stored KB vectors the in-memory load could not read, left out of searches by
    #: meaning until re-embedded (``None``: no KB; the callable's ``None``: not counted
    #: yet - PostgreSQL counts in the background after the start - and the gauge is left
    #: out rather than saying 0).
    kb_unreadable_vectors: Callable[[], int | None] | None = None
    #: Reads of the KB's bucket list that failed (``None``: no KB).
    kb_bucket_list_failures: Callable[[], int] | None = None
    #: The KB engine's graph builds run serially for want of shared memory (``None``:
    #: no KB, or an engine without graphs).
    kb_graph_serial_builds: Callable[[], int] | None = None
    #: How many ``AGENT_KB_DEFAULT_BUCKETS`` names are no bucket, as last read (``None``: no KB).
    kb_default_buckets_missing: Callable[[], int] | None = None
    #: Saved web answers' lookups and writes that fell back, by why (``lookup_failed``,
    #: ``meaning_failed``, ``not_embedded``; ``None``: no saved answers).
    saved_answer_fallbacks: Callable[[], Mapping[str, int]] | None = None
    #: MCP servers by connection state (``None``: no MCP servers configured).
    mcp_servers: Callable[[], Mapping[str, int]] | None = None
    #: MCP servers whose tools are not in the tool index (``None``: no MCP servers).
    mcp_unranked: Callable[[], int] | None = None
    #: Requests per minute counted by this replica alone because the shared count (the
    #: database) was away (``None``: one process, always counted here).
    rate_limit_fallbacks: Callable[[], int] | None = None
    #: PostgreSQL's run-event listener (``{"listening": bool, "reconnects": int}``;
    #: ``None``: no listener).
    run_feed: Callable[[], Mapping[str, Any]] | None = None
    #: PostgreSQL known away (``(unreachable now, requests refused at once since start)``;
    #: ``None``: an engine without a pool).
    db_unreachable: Callable[[], tuple[bool, int]] | None = None
    #: SQLite's live-log settles (``.settles .failures .reconciled_runs .dropped_rows``;
    #: ``None``: PostgreSQL, no live log).
    live_log: Callable[[], Any] | None = None


class LiveCollector:
    """Metrics whose values already live in other objects: read them at scrape time."""

    def __init__(self, sources: LiveSources) -> None:
        self._s = sources

    def describe(self) -> Iterable[Metric]:
        return ()  # names are unknown to the registry's duplicate check; none collide

    def collect(self) -> Iterable[Metric]:
        s = self._s
        counters = s.run_counters()
        yield _counter("agentchat_runs_started", "Runs started since the process started.", counters.started)
        by_status = s.census()
        runs = GaugeMetricFamily("agentchat_runs", "Runs held in memory, by status.", labels=["status"])
        for status in (*RUN_STATUSES, *sorted(set(by_status) - set(RUN_STATUSES))):
            runs.add_metric([status], by_status.get(status, 0))
        yield runs
        yield _counter(
            "agentchat_runs_resumed",
            "Unfinished runs whose work was carried on after a restart or a take-over: from a checkpoint, from "
            "their request again, or begun when admitted but never started (not a run found already ended, "
            "whose status alone was written).",
            counters.resumed,
        )
        yield _counter(
            "agentchat_runs_not_resumable",
            "Unfinished runs found at a start or a take-over that could not be carried on (restarted too often "
            "without progress, an unreadable checkpoint, an input sealed under another key): ended run_interrupted.",
            getattr(counters, "not_resumable", 0),
        )
        yield _counter(
            "agentchat_runs_interrupted", "Runs released at shutdown for the next process.", counters.interrupted
        )
        yield from _lease_metrics(counters, s.leases_held)
        yield _counter(
            "agentchat_runs_storage_failed",
            "Runs ended because their events could not be stored.",
            counters.storage_failures,
        )
        yield _counter(
            "agentchat_runs_outage_suspended",
            "Runs whose events could not be stored while PostgreSQL was away, let go without an ending: their "
            "lease lapses and a claim carries them on from their last checkpoint once the database is back.",
            getattr(counters, "outage_suspended", 0),
        )
        stats = s.write_stats()
        yield _counter(
            "agentchat_storage_write_retries",
            "Storage writes retried: the database was busy or failing.",
            stats.retries,
        )
        yield _counter(
            "agentchat_storage_write_failures", "Storage writes given up after the retry window.", stats.failures
        )
        yield _counter(
            "agentchat_storage_write_batches",
            "Transactions of the ordered background writer: group commit turns a burst of "
            "queued steps (streamed tokens of many runs) into one; compare with the events written.",
            stats.batches,
        )
        if s.db_unreachable is not None:
            down, refused = s.db_unreachable()
            yield GaugeMetricFamily(
                "agentchat_storage_unreachable",
                "1 while this replica knows its database is away (two connection attempts in a row failed and no "
                "idle connection is left): requests that need it are answered 503 at once while a probe reconnects.",
                value=1 if down else 0,
            )
            yield _counter(
                "agentchat_storage_refused_at_once",
                "Requests answered 503 storage_unavailable at once because the database was known away, "
                "instead of after the pool's timeout.",
                refused,
            )
        if s.live_log is not None:
            settles = s.live_log()
            yield _counter(
                "agentchat_run_log_settles", "Settles of SQLite's live log of run events.", settles.settles
            )
            yield _counter(
                "agentchat_run_log_settle_failures",
                "Settles of SQLite's live log that failed (the timer tries again).",
                settles.failures,
            )
            yield _counter(
                "agentchat_run_log_reconciled_runs",
                "Runs whose live-log rows repeated a seq, settled keeping the first-written row of each.",
                settles.reconciled_runs,
            )
            yield _counter(
                "agentchat_run_log_dropped_rows",
                "Live-log rows left out of a reconciled run (a seq already written, or after its first ending).",
                settles.dropped_rows,
            )
        if s.run_feed is not None:
            feed = s.run_feed()
            yield GaugeMetricFamily(
                "agentchat_run_feed_listening",
                "Whether this replica hears other replicas' run events and cancels now (1), or follows runs "
                "elsewhere at the quiet poll and takes their cancels at the lease-claim pace (0).",
                value=1 if feed.get("listening") else 0,
            )
            yield _counter(
                "agentchat_run_feed_reconnects",
                "Reconnects of the run-event listener after it lost its connection.",
                int(feed.get("reconnects") or 0),
            )
        if s.rate_limit_fallbacks is not None:
            yield _counter(
                "agentchat_rate_limit_shared_fallbacks",
                "Requests whose rate limit this replica counted alone: the shared count (the database) was away.",
                s.rate_limit_fallbacks(),
            )
        yield GaugeMetricFamily(
            "agentchat_tool_index_ready",
            "Whether the tool index is ready (1) or selection falls back (0).",
            value=1 if s.index_ready() else 0,
        )
        if s.model_choice is not None:
            chosen = GaugeMetricFamily(
                "agentchat_model_chosen",
                "The model (role provider) and the embedder (role embedder) this process uses, 1 each, with the "
                "setting that chose it: under auto a name such as extractive or hashing means nothing better was "
                "reachable at start-up (/readyz says what was passed over and why).",
                labels=["role", "name", "configured"],
            )
            for role, name, configured in s.model_choice():
                chosen.add_metric([role, name, configured], 1)
            yield chosen
        if s.query_plans is not None:
            plans = CounterMetricFamily(
                "agentchat_query_plans",
                "Query plans (the model's routing of a knowledge question to typed buckets and their filters), by "
                "outcome: planned, or skipped - timeout, rejected (an answer that does not fit the schema), failed "
                "(the model call failed); a skipped plan leaves the run searching without its filters.",
                labels=["outcome"],
            )
            for outcome, n in sorted(s.query_plans().items()):
                plans.add_metric([outcome], n)
            yield plans
        if s.tool_selection_fallbacks is not None:
            selection = CounterMetricFamily(
                "agentchat_tool_selection_fallbacks",
                "Runs offered every tool of their context instead of the selected ones, by why: index_disabled "
                "(no embedder), index_building, index_failed, search_failed (the index's search raised or timed "
                "out), empty_message.",
                labels=["reason"],
            )
            for reason, n in sorted(s.tool_selection_fallbacks().items()):
                selection.add_metric([reason], n)
            yield selection
        if s.tool_search_failures is not None:
            yield _counter(
                "agentchat_tool_search_failures",
                "Searches of the ready tool index that failed (its embedder failed or timed out): a run's "
                "selection then offers every context tool, find_tools ranks by shared words.",
                s.tool_search_failures(),
            )
        if s.mcp_servers is not None:
            servers = GaugeMetricFamily(
                "agentchat_mcp_servers",
                "Configured MCP servers by connection state (up, connecting, down, closed): a server that is "
                "not up has its tools absent while it is retried.",
                labels=["state"],
            )
            for state, n in sorted(s.mcp_servers().items()):
                servers.add_metric([state], n)
            yield servers
        if s.mcp_unranked is not None:
            yield GaugeMetricFamily(
                "agentchat_mcp_servers_unranked",
                "MCP servers whose tools are not in the tool index (their embedding failed, or its dimension "
                "differs): selection never ranks them; only a fallback offers them.",
                value=s.mcp_unranked(),
            )
        if s.kb_text_fallbacks is not None:
            yield _counter(
                "agentchat_kb_semantic_fallbacks",
                "Knowledge searches that asked for vectors and ran on text (no vectors, or the embedder failed).",
                s.kb_text_fallbacks(),
            )
        if s.kb_reloads is not None:
            yield _counter(
                "agentchat_kb_reloads",
                "Reloads of the knowledge base's in-memory vectors after another process (the CLI, "
                "a sibling worker, a replica) changed the stored knowledge base.",
                s.kb_reloads(),
            )
        if s.kb_reload_failures is not None:
            yield _counter(
                "agentchat_kb_reload_failures",
                "Reloads of the knowledge base's in-memory vectors after another process's change that failed: "
                "searches by meaning ran on the older vectors (and said so) until one succeeded.",
                s.kb_reload_failures(),
            )
        if s.kb_unreadable_vectors is not None and (unreadable := s.kb_unreadable_vectors()) is not None:
            yield GaugeMetricFamily(
                "agentchat_kb_vectors_unreadable",
                "Stored knowledge-base vectors (chunks) that cannot be read - the wrong length, or none for a "
                "chunk of an embedded document (on PostgreSQL counted after start, in the background - absent "
                "until then - and by the back-fill pass): out "
                "of searches by meaning until their documents "
                "are re-embedded in the background.",
                value=unreadable,
            )
        if s.kb_bucket_list_failures is not None:
            yield _counter(
                "agentchat_kb_bucket_list_failures",
                "Reads of the knowledge base's bucket list that failed (the storage) or outlasted a request's "
                "storage budget: a run whose context names "
                "buckets was answered 503 storage_unavailable, a corpus tool's error said the list could not be "
                "read - never that a bucket is unknown or that there are none.",
                s.kb_bucket_list_failures(),
            )
        if s.kb_graph_serial_builds is not None:
            yield _counter(
                "agentchat_kb_graph_builds_serial",
                "Knowledge-base graph (HNSW) builds that failed in parallel for want of shared memory (/dev/shm "
                "smaller than maintenance_work_mem: raise the container's shm_size) and were built serially, slower.",
                s.kb_graph_serial_builds(),
            )
        if s.kb_default_buckets_missing is not None:
            yield GaugeMetricFamily(
                "agentchat_kb_default_buckets_missing",
                "Buckets AGENT_KB_DEFAULT_BUCKETS names that do not exist (as last read): searches without "
                "a named bucket find nothing there.",
                value=s.kb_default_buckets_missing(),
            )
        if s.kb_fusion_drops is not None:
            drops = CounterMetricFamily(
                "agentchat_kb_fusion_side_dropped",
                "Hybrid knowledge searches whose ranking rested on one side: the side that did not "
                "count (text | semantic) and why (no_candidates, not_confident, heads_disagree, no_weight).",
                labels=["side", "reason"],
            )
            for (side, reason), n in sorted(s.kb_fusion_drops().items()):
                drops.add_metric([side, reason], n)
            yield drops
        if s.saved_answer_fallbacks is not None:
            saved = CounterMetricFamily(
                "agentchat_saved_answer_fallbacks",
                "Lookups and writes of saved web answers that fell back, by why: lookup_failed (none was "
                "searched), meaning_failed (found by keyword terms only), not_embedded (an answer or its "
                "keywords stored without vectors: found by terms only until the next start's back-fill), "
                "backfill_failed (that back-fill failed: what it fills in stays missing until the start after).",
                labels=["reason"],
            )
            for reason, n in sorted(s.saved_answer_fallbacks().items()):
                saved.add_metric([reason], n)
            yield saved
        if s.kb_reembedding is not None:
            pending, reembedded = s.kb_reembedding()
            yield GaugeMetricFamily(
                "agentchat_kb_documents_pending_vectors",
                "Knowledge-base documents without vectors of the embedder (found by text only), as last counted.",
                value=pending,
            )
            yield _counter(
                "agentchat_kb_documents_reembedded",
                "Knowledge-base documents given vectors by the re-embedding in the background.",
                reembedded,
            )
        cache = s.resolution_cache()
        if cache is not None:
            cache_stats = cache.stats.to_dict()
            family = CounterMetricFamily(
                "agentchat_resolution_cache",
                "Name-to-UUID resolution cache lookups, by outcome.",
                labels=["outcome"],
            )
            family.add_metric(["hit"], cache_stats.get("hits", 0))
            family.add_metric(["miss"], cache_stats.get("misses", 0))
            yield family


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _lease_metrics(counters: Any, leases_held: Callable[[], int] | None) -> Iterator[Metric]:
    """Run ownership across replicas (issue 13): leases held, renewals that failed, runs
    lost to and taken over from other replicas, leases handed back at shutdown."""
    if leases_held is not None:
        yield GaugeMetricFamily(
            "agentchat_run_leases_held", "Runs this replica holds a lease on (it executes them).", value=leases_held()
        )
    yield _counter(
        "agentchat_run_lease_renewals_failed",
        "Lease renewals that failed (the database was away); the runs are lost if it stays away past the lease.",
        getattr(counters, "lease_renewals_failed", 0),
    )
    yield _counter(
        "agentchat_run_leases_lost",
        "Runs abandoned here because another replica took them over (this one was paused past its lease).",
        getattr(counters, "leases_lost", 0),
    )
    yield _counter(
        "agentchat_run_stale_copies_stopped",
        "Copies of a run stopped here because another claim came between this replica's lapsed lease and its "
        "taking it back: the run resumed from its checkpoint under the new claim (counted in leases_lost too).",
        getattr(counters, "stale_copies_stopped", 0),
    )
    yield _counter(
        "agentchat_runs_taken_over",
        "Runs taken over from another replica whose lease expired (it died), carried on here.",
        getattr(counters, "taken_over", 0),
    )
    yield _counter(
        "agentchat_run_leases_released",
        "Leases handed back at shutdown so another replica takes the runs at once.",
        getattr(counters, "leases_released", 0),
    )
    yield _counter(
        "agentchat_runs_refused_replica_full",
        "New runs refused with 503 because this replica carried AGENT_MAX_LIVE_RUNS live runs.",
        getattr(counters, "refused_full", 0),
    )
    yield from _approval_metrics(counters)


def _approval_metrics(counters: Any) -> Iterator[Metric]:
    """Approvals (issue 25): runs parked here for a decision, decisions taken here by
    kind, and approvals this replica found expired (their runs end cancelled)."""
    yield _counter(
        "agentchat_runs_parked_for_approval",
        "Runs that parked here waiting for a user's decision on a tool call (held by no replica meanwhile).",
        getattr(counters, "parked", 0),
    )
    decisions = CounterMetricFamily(
        "agentchat_approval_decisions", "Decisions on waiting tool calls taken on this replica.", labels=["decision"]
    )
    for decision, count in sorted(dict(getattr(counters, "approval_decisions", {}) or {}).items()):
        decisions.add_metric([decision], count)
    yield decisions
    yield _counter(
        "agentchat_approvals_expired",
        "Approvals not decided within AGENT_APPROVAL_TTL_S, found here; their runs end cancelled.",
        getattr(counters, "approvals_expired", 0),
    )
