"""Builds the app's services from settings: one function per room, called by the factory.

Tests and benchmarks override pieces (a scripted provider, a registry of test tools,
a given embedder) through ``Overrides``; everything else is the real component. Its parts:
``app.model_choice`` (provider and embedder), ``app.tool_offer`` (registry, tool index,
core tools), ``app.coordination`` (leader, periodic jobs, processes sharing a database).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import httpx

from agenttools.core.registry import ApprovalRule, ToolRegistry
from agenttools.rag.policy import FlowPolicy
from app.agent.loop import Agent, AgentSettings
from app.agent.selector import IndexState, ToolSelector
from app.config import Settings
from app.coordination import background_job, leader_for, remote_runs_for, siblings_dir
from app.history import Titler, title_model_wanted, with_titles
from app.key_check import check_shared_keys
from app.keyring import IN_MEMORY_KEYS, resolve_keyring
from app.model_choice import choose_embedder, choose_provider, streams_through_pool
from app.ops.leader import attach as attach_leader
from app.ops.load import ReplicaLoad, StreamCounter
from app.ops.load import attach as attach_load
from app.ops.metrics import AppMetrics
from app.ops.tracing import Tracing
from app.ops.worker_metrics import WorkerMetrics
from app.retention import RetentionPolicy, retain_periodically
from app.rooms import Rooms
from app.runs.manager import RunManager
from app.server.auth import Authenticator
from app.server.limits import Admission
from app.server.run_streams import watch_clients_elsewhere
from app.server.services import Services
from app.tool_offer import build_tool_index, default_registry, flow_core_tools
from knowledge.attachment_store import ConversationAttachments
from llm.pool import PoolWaits, pooled_transport
from llm.provider import Provider
from llm.tls import deferred_tls_context
from storage.open import open_storage
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.runs import SqliteRunStore
from toolindex.embedder import Embedder

log = logging.getLogger("agentchat.wiring")

AUTO = "auto"


@dataclass(slots=True)
class Overrides:
    provider: Provider | None = None
    registry: ToolRegistry | None = None
    embedder: Embedder | str | None = AUTO
    prompts: Any = None
    planner: Any = None
    #: An OpenTelemetry ``TracerProvider`` the spans go to (tests: an in-memory exporter).
    tracer_provider: Any = None


async def build_services(
    settings: Settings, stack: AsyncExitStack, overrides: Overrides, *, replica_id: str
) -> Services:
    """``replica_id``: this process's, from the app factory - its runs' lease owner, named
    by every line of its log (``app.ops.logs.replica_logs``)."""
    # The one storage room: migrated completely before anything else reads or writes.
    storage = await open_storage(
        settings.database_url or settings.db_path,
        write_retry_s=settings.db_write_retry_s,
        max_connections=settings.db_max_connections,
        pool_timeout_s=settings.db_pool_timeout_s,
        # A replica frozen inside a transaction past its leases must not keep the rows
        # of the runs the others take over locked (PostgreSQL ends its session).
        idle_in_transaction_s=settings.run_lease_s,
    )
    stack.push_async_callback(storage.close)
    # Several worker processes on one SQLite file (``agentchat serve --workers``) wake
    # each other's followers and cancels over sockets (the file notifies no one), and
    # one of them — the holder of a file lock — runs the background jobs. On PostgreSQL
    # one process per database does, workers and replicas alike: the holder of an
    # advisory lock (``app/ops/leader.py``).
    leader = await leader_for(settings, storage)
    if leader is not None:
        leader.start()
        stack.push_async_callback(leader.aclose)
    # The stream-token and run-input keys, from where a database copy cannot read them
    # (app/keyring.py); PostgreSQL without a configured key refuses to start here.
    keyring = await resolve_keyring(settings, storage.secrets, engine=storage.engine)
    log.info("keys", extra={"source": keyring.source, "run_input_encrypted": keyring.sealer is not None})
    if keyring.source != IN_MEMORY_KEYS:  # a database no other process opens
        await check_shared_keys(keyring, storage.secrets)
    # Every outbound pool has a stated size; a request that waits for a connection says
    # so (``llm.pool``; the hook reaches the metrics once they exist).
    pool_waits = PoolWaits()
    # One TLS context for both pools, as ``pooled_transport`` shares one among a pool's
    # shards: each would otherwise load the CA bundle again (~30 ms of CPU every start).
    # It reads the bundle in a worker thread when a first https request awaits it, never
    # here nor on the loop (``llm.tls``): many a serve never opens one.
    tls = deferred_tls_context()
    http = httpx.AsyncClient(
        timeout=httpx.Timeout(settings.backend_timeout_s, connect=5.0),
        transport=pooled_transport(
            "backend", settings.backend_max_connections, on_wait=pool_waits, keepalive=50, verify=tls,
            http1=settings.outbound_http1,
        ),
        follow_redirects=False,
    )
    stack.push_async_callback(http.aclose)
    llm_pool = pooled_transport(
        "llm", settings.llm_max_connections, on_wait=pool_waits, verify=tls, http1=settings.outbound_http1
    )
    llm_http = httpx.AsyncClient(
        timeout=httpx.Timeout(settings.llm_timeout_s, connect=10.0),
        transport=llm_pool,
        follow_redirects=False,
    )
    stack.push_async_callback(llm_http.aclose)

    # The model pool caps live runs when the provider streams through it (app/ops/load.py).
    model_pool = 0
    if overrides.provider is not None:
        provider, provider_reason = overrides.provider, "given by the caller"
    else:
        provider, provider_reason = await choose_provider(
            settings, http, llm_http=llm_http, llm_pool=llm_pool, pool_waits=pool_waits
        )
        stack.push_async_callback(provider.aclose)
        model_pool = settings.llm_max_connections if streams_through_pool(provider) else 0
    # Spans for runs, model calls and tool calls; a no-op unless configured (app/ops/tracing.py).
    tracing = Tracing.from_settings(settings.otel_enabled, provider=overrides.tracer_provider)
    stack.push_async_callback(tracing.aclose)
    provider = tracing.wrap_provider(provider)
    # Counts the model streams open now (``/readyz`` load, ``agentchat_model_streams``).
    streams = StreamCounter(provider)
    provider = streams  # type: ignore[assignment]
    log.info("LLM provider", extra={"provider": provider.name, "model": provider.model, "reason": provider_reason})

    if overrides.embedder == AUTO:
        embedder, why = await choose_embedder(settings, http, pool_waits)
    else:
        embedder, why = overrides.embedder, "given by the caller"  # type: ignore[assignment]
    registry = overrides.registry if overrides.registry is not None else default_registry()
    registry.set_approval(ApprovalRule.from_setting(settings.approval_tools))  # MCP tools added later too
    rooms = Rooms()
    if overrides.registry is None:
        from app.rooms import attach_rooms

        rooms = await attach_rooms(settings, registry, http, stack, embedder=embedder, storage=storage,
                                   pool_waits=pool_waits, leader=leader)

    index_state = IndexState()
    background: list[asyncio.Task[Any]] = []
    cache_dir = settings.cache_dir or settings.db_path.parent / "cache"
    if settings.mcp_servers:  # AGENT_MCP_SERVERS: connected in the background, closed at shutdown
        from app.mcp_room import attach_mcp

        rooms.mcp = await attach_mcp(settings.mcp_servers, registry, index_state, embedder, cache_dir)
        stack.push_async_callback(rooms.mcp.aclose)
    if embedder is None:
        index_state.status, index_state.reason = "disabled", why
    else:
        index_state.embedder_name = embedder.name
        on_ready = rooms.mcp.base_ready if rooms.mcp is not None else None
        background.append(
            asyncio.create_task(build_tool_index(index_state, registry, embedder, cache_dir, on_ready=on_ready))
        )
        stack.push_async_callback(embedder.aclose)
    log.info("embedder", extra={"embedder": getattr(embedder, "name", None), "reason": why})
    from app.ops.embedder_check import EmbedderCheck

    embedder_check = EmbedderCheck(embedder, why, settings.embedder if overrides.embedder == AUTO else "given")
    embedder_check.start()
    stack.push_async_callback(embedder_check.aclose)
    if embedder is None and overrides.embedder == AUTO:  # an explicit remote one down at start: probed again
        from app.embedder_adoption import LateEmbedder, probe_again

        late = LateEmbedder(settings, rooms, storage, leader, index_state, registry, cache_dir, background,
                            embedder_check)
        if (recovery := probe_again(settings, http, pool_waits, late, why)) is not None:
            embedder_check.recover(recovery)
            # Stopped with the background, before any room closes: an adoption finishing
            # later would start tasks (the tool index, back-fills) nobody cancels.
            if recovery.task is not None:
                background.append(recovery.task)

    warm = getattr(provider, "warm", None)
    if warm is not None:
        background.append(asyncio.create_task(warm()))

    from agenttools.core.catalog import tools_for_context
    from agenttools.core.catalog_discovery import FIND_TOOLS
    from agenttools.core.context_ids import inject_context_ids
    from agenttools.core.executor import ToolExecutor
    from agenttools.core.validation import validate_arguments
    from app.agent.find_tools import FindTools

    selector = ToolSelector(
        registry=registry,
        index_state=index_state,
        core_tools=flow_core_tools(settings.mandatory_contexts),
        context_filter=tools_for_context,
        top_k=settings.rag_top_k,
        min_score=settings.rag_min_score,
    )
    executor = ToolExecutor(
        registry, validator=validate_arguments, injector=inject_context_ids, timeout_s=settings.tool_timeout_s
    )
    if FIND_TOOLS in registry:  # the search over the context's whole catalog (app/agent/find_tools.py)
        registry.set_handler(FIND_TOOLS, FindTools(registry, index_state, tools_for_context))
    if overrides.prompts is not None:
        prompts = overrides.prompts
    else:
        from app.agent.prompting import PromptService

        prompts = PromptService()
    conversations = storage.conversations
    tool_log = storage.tool_calls
    # This app's own Prometheus registry; the agent loop records run outcomes in it.
    metrics = AppMetrics(tool_names=registry)
    pool_waits.attach(metrics.pool_waited)
    from app.ops.embedder_metrics import EmbedderRecoveryCollector

    metrics.registry.register(EmbedderRecoveryCollector(embedder_check))  # the embedder probed again, or not
    agent = Agent(
        provider=provider,
        registry=registry,
        executor=executor,
        selector=selector,
        prompts=prompts,
        conversations=conversations,
        tool_log=tool_log,
        http=http,
        settings=AgentSettings(
            max_loops=settings.max_loops,
            max_tokens=settings.max_tokens,
            max_tool_calls=settings.max_tool_calls,
            context_budget_tokens=settings.context_budget_tokens,
            history_budget_tokens=settings.history_budget_tokens,
            mandatory_contexts=settings.mandatory_contexts,
            idle_timeout_s=settings.llm_timeout_s,
            max_chunk_chars=settings.max_chunk_chars,
            max_answer_chars=settings.max_answer_chars,
            approval_ttl_s=settings.approval_ttl_s,
        ),
        metrics=metrics.runs,
        policy=FlowPolicy(),
        planner=overrides.planner if overrides.planner is not None else _default_planner(provider, rooms),
    )
    agent.tools.tracing = tracing
    # Several worker processes on one SQLite file (``agentchat serve --workers``) are
    # replicas of each other: none takes every unfinished run at start-up, runs on a
    # sibling are followed from the log, rate limits are counted in the file.
    shared_file = storage.engine != "postgres" and settings.workers > 1
    if shared_file and isinstance(storage.runs, SqliteRunStore):
        storage.runs.guard_leases = True  # a sibling may take a run over: every step checks
    runs = RunManager(
        store=storage.runs,
        agent=tracing.wrap_run(agent.run),
        grace_s=settings.run_grace_s,
        finished_memory_s=settings.finished_run_memory_s,
        lease_s=settings.run_lease_s,
        # One process per SQLite file: at start-up every unfinished run is this one's.
        exclusive=storage.engine != "postgres" and not shared_file,
        on_take_over=metrics.take_over_latency.observe,
        # Cancels asked for on another replica arrive through the feed (PostgreSQL).
        feed=storage.run_feed,
        input_sealer=keyring.sealer,
        max_live=settings.max_live_runs,
        model_pool=model_pool,
        owner_id=replica_id,
    )
    _attach_titles(runs, storage, metrics, provider, settings, stack)
    svc = Services(
        settings=settings,
        storage=storage,
        http=http,
        # stream_url tokens are signed with a key every replica on the database shares.
        auth=Authenticator.from_settings(settings, http, stream_secret=keyring.stream_secret),
        runs=runs,
        run_store=storage.runs,
        conversations=conversations,
        tool_log=tool_log,
        provider=provider,
        provider_reason=provider_reason,
        agent=agent,
        index_state=index_state,
        # Requests per minute are counted in the database when replicas share it
        # (PostgreSQL); concurrent runs are always counted from the runs table.
        limits=Admission(
            settings.requests_per_minute,
            store=storage.limits if storage.engine == "postgres" or shared_file else None,
            runs_store=storage.limits,
        ),
        metrics=metrics,
        rooms=rooms,
        background=background,
        remote=remote_runs_for(storage, shared_file, settings.workers_safety_poll_s),
        embedder_check=embedder_check,
        leader=leader,
    )
    if leader is not None:
        attach_leader(leader, metrics.registry)
    if svc.remote is not None and svc.remote.presence is not None:
        # A chat whose client reads it through another replica is not cancelled as left.
        watch_clients_elsewhere(svc)
        presence = svc.remote.presence
        runs.held_elsewhere = lambda run_id: presence.held_until(run_id) is not None  # nor swept as abandoned
        background.append(asyncio.create_task(svc.remote.presence.beat_forever(), name="follower-presence"))
    siblings = siblings_dir(settings, storage)
    if siblings is not None:  # workers on one port: a scrape answers for all of them
        worker_metrics = WorkerMetrics(siblings, svc.metrics_body, label=runs.owner_id)
        await worker_metrics.start()
        stack.push_async_callback(worker_metrics.aclose)
        svc.worker_metrics = worker_metrics
    background.append(asyncio.create_task(_sweep(runs)))
    retention = RetentionPolicy(
        settings.run_events_retention_days, settings.conversation_retention_days, settings.retention_interval_s
    )
    if retention.active:  # issue 25: compaction and idle conversations, one replica at a time on PostgreSQL
        background.append(background_job(
            leader,
            lambda: retain_periodically(storage.retention, storage.history, retention, metrics.history,
                                        _forget_conversation(runs, rooms)),
            name="retention",
        ))
    # Live runs, model streams and the event loop's lag: admission refuses new runs
    # while the replica is past what it can serve (``app/ops/load.py``).
    load = ReplicaLoad(
        live_runs=lambda: len(runs.active()),
        max_live_runs=settings.max_live_runs,
        max_loop_lag_s=settings.max_loop_lag_ms / 1000,
        model_streams=lambda: streams.open,
        model_connections=lambda: llm_pool.in_flight,
        max_model_connections=model_pool,
    )
    svc.load = load
    attach_load(load, metrics.registry)
    background.append(load.monitor.start())
    if isinstance(storage.db, SqliteDatabase):  # its file removed or replaced: live runs end now
        storage.db.on_lost.append(lambda exc: end_live_runs(runs, exc))
    metrics.attach_live(svc.live_metric_sources())
    keywords = rooms.keywords
    if keywords is not None:
        from app.keyword_pruning import KeywordPrunePolicy, prune_keywords_periodically

        prune_policy = KeywordPrunePolicy(
            max_age_days=settings.keyword_max_age_days,
            min_usage=settings.keyword_min_usage,
            interval_s=settings.keyword_prune_interval_s,
        )
        background.append(
            background_job(leader, lambda: prune_keywords_periodically(keywords, prune_policy), name="keyword-prune")
        )
    return svc


def _forget_conversation(runs: RunManager, rooms: Rooms) -> Callable[[str, str], Awaitable[None]]:
    """What follows a conversation deleted for idleness: the run manager forgets it and
    its attachments (a private KB bucket, not rows of the conversation) go too."""

    async def forget(user_id: str, conversation_id: str) -> None:
        runs.forget_conversation(user_id, conversation_id)
        knowledge = rooms.named("knowledge")
        if knowledge is not None:
            await ConversationAttachments(knowledge.kb).delete_all(user_id, conversation_id)

    return forget


def _attach_titles(
    runs: RunManager, storage: Any, metrics: AppMetrics, provider: Provider, settings: Settings, stack: AsyncExitStack
) -> None:
    """Conversations get a title once their first run ends (``app/history.py``), unless
    the client sent one: the run's admission stored it (counted here)."""
    runs.on_client_title = metrics.history.titles.labels(source="client").inc
    if settings.conversation_titles == "off":
        return
    model = provider if title_model_wanted(settings.conversation_titles, provider.name) else None
    titler = Titler(storage.history, metrics.history, model)
    stack.push_async_callback(titler.aclose)
    runs.agent = with_titles(runs.agent, titler)


def end_live_runs(runs: RunManager, exc: BaseException) -> None:
    """The database went away under the server (``storage/sqlite/file_guard.py``): every
    live run ends now (its followers get an id-less ``error`` ``storage_unavailable``: its
    ending cannot be stored), not when it next writes — a run waiting on a slow model would otherwise stream on."""
    for run in runs.active():
        run.storage_lost(exc)


def _default_planner(provider: Provider, rooms: Rooms) -> Any:
    """Query decomposition needs a model and a knowledge base with typed buckets; the
    planner itself skips (no model call) when no bucket declares fields."""
    knowledge = rooms.knowledge
    if knowledge is None or provider.name == "extractive":
        return None
    from app.agent.planner import QueryPlanner

    return QueryPlanner(provider, knowledge.kb)


async def _sweep(runs: RunManager) -> None:
    while True:
        await asyncio.sleep(30)
        runs.sweep()
