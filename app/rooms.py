"""Attaches the tool rooms to the registry: knowledge base + RAG tools, backend tools.

Each room gets exactly what it needs (paths, the shared HTTP client, settings values)
and registers its handlers; the agent never learns which module runs which tool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.knowledge_component import KnowledgeComponent, sample_turns
from app.ops.backend_state import read_state, readiness_of
from app.ops.close_budget import (
    KB_READYZ_COUNT_STOP_S,
    KB_REEMBED_STOP_S,
    KB_TASKS_STOP_S,
    KB_UNREADABLE_COUNT_STOP_S,
)
from app.ops.leader import Leader
from app.ops.masking import mask_url
from app.ops.stopping import cancel_and_wait
from llm.pool import WaitHook
from toolindex.embedder import Embedder

if TYPE_CHECKING:
    from agenttools.core.resolution import ResolutionCache
    from agenttools.rag.keywords import KeywordIndex
    from app.mcp_room import McpRoom
    from storage.interfaces import StorageBundle

log = logging.getLogger("agentchat.rooms")

async def kb_embedder(
    settings: Settings, http: httpx.AsyncClient | None = None, *, pool_waits: WaitHook | None = None
) -> tuple[Embedder | None, str]:
    """The knowledge base's embedder: the configured one (``AGENT_EMBEDDER``), its HTTP
    client on a pool of ``AGENT_EMBED_MAX_CONNECTIONS`` whose waits are reported."""
    from toolindex.factory import choose_embedder

    return await choose_embedder(
        settings.embedder,
        gemini_api_key=settings.gemini_api_key,
        gemini_model=settings.gemini_embed_model,
        gemini_base_url=settings.gemini_base_url,
        gemini_dim=settings.gemini_embed_dim,
        ollama_host=settings.ollama_host,
        ollama_model=settings.ollama_embed_model,
        http_client=http,
        openai_base_url=settings.openai_base_url,
        openai_api_key=settings.openai_api_key,
        openai_model=settings.openai_embed_model,
        openai_configured=settings.openai_configured,
        max_connections=settings.embed_max_connections,
        on_pool_wait=pool_waits,
        pool_http1=settings.outbound_http1,
    )


@dataclass(slots=True)
class Rooms:
    """The rooms an app attached, typed: what the routes, ``/readyz`` and ``/metrics`` may
    reach. A room the app runs without (tests with their own registry) is ``None``."""

    knowledge: KnowledgeComponent | None = None
    keywords: KeywordIndex | None = None
    resolution_cache: ResolutionCache | None = None
    backend: BackendComponent | None = None
    #: ``AGENT_MCP_SERVERS``: the MCP servers' connections and tools (``app.mcp_room``).
    mcp: McpRoom | None = None

    def named(self, name: str) -> Any:
        """A room by name, for routes that say which one they need; None when absent."""
        return getattr(self, name, None) if name in self.__slots__ else None  # type: ignore[attr-defined]

    def with_readiness(self) -> list[tuple[str, Any]]:
        """Rooms that report their own readiness, by name."""
        out = []
        for name in ("knowledge", "keywords", "backend", "mcp"):
            room = getattr(self, name)
            if room is not None and hasattr(room, "readiness"):
                out.append((name, room))
        return out


async def attach_rooms(
    settings: Settings,
    registry: ToolRegistry,
    http: httpx.AsyncClient,
    stack: AsyncExitStack,
    *,
    embedder: Embedder | None,
    storage: StorageBundle,
    pool_waits: WaitHook | None = None,
    leader: Leader | None = None,
) -> Rooms:
    from agenttools.rag.corpus_deps import CorpusToolDeps
    from agenttools.rag.corpus_tools import register_corpus_tools
    from agenttools.rag.deps import RagToolDeps, RagToolSettings
    from agenttools.rag.keywords import KeywordIndex
    from agenttools.rag.perplexity import PerplexityClient
    from agenttools.rag.tools import register_rag_tools
    from knowledge.kb import KnowledgeBase
    from knowledge.saved_answers import SavedAnswerVectors
    from knowledge.stemmer import Stemmer
    from knowledge.types import KBConfig

    rooms = Rooms()
    config = KBConfig(
        reembed_interval_s=settings.kb_reembed_interval_s,
        reembed_backoff_max_s=settings.kb_reembed_backoff_max_s,
        overload_threshold=settings.clarify_overload_hits,  # the corpus tools' rule too (OverloadRule)
        reembed_stop_s=KB_REEMBED_STOP_S,  # a step of the close budget
        unreadable_count_stop_s=KB_UNREADABLE_COUNT_STOP_S,  # another
        readyz_count_stop_s=KB_READYZ_COUNT_STOP_S,  # and another
    )
    kb = await KnowledgeBase.create(storage.kb_index, embedder, config=config, schema_version=storage.schema_version)
    stack.push_async_callback(kb.aclose)
    # This room's tasks, cancelled together before the knowledge base closes, within
    # one step of the close budget (a task that swallows its cancel is named and left).
    tasks: list[asyncio.Task[Any]] = []
    stack.push_async_callback(_stop, tasks)
    # Documents stored without vectors of this embedder (an ingest whose embedder failed,
    # or another embedder's) get them in the background: a pass now, after each failed
    # ingest, and on a slow timer; stopped by ``kb.aclose``.
    # With sibling workers on one file, or any processes on PostgreSQL, only the leading
    # one back-fills, and stops when it no longer leads (``app/ops/leader``).
    if (backfill := start_backfill(kb, leader)) is not None and leader is not None:
        tasks.append(backfill)
    knowledge = KnowledgeComponent(kb, turns=sample_turns(storage), default_buckets=settings.kb_default_buckets)
    rooms.knowledge = knowledge
    if settings.ingest_sample_kb:
        knowledge.sample = "ingesting"
        task = asyncio.create_task(knowledge.ingest_sample(), name="sample-kb")
        knowledge.tasks.append(task)
        tasks.append(task)
    # A default bucket that is no bucket is warned of once the sample (``default``) is in.
    tasks.append(asyncio.create_task(knowledge.warn_missing_default_buckets(), name="kb-default-buckets"))

    # Saved external answers are found again by their keywords' terms and, with an
    # embedder, by meaning, in the KB's vector space (SC-006).
    semantic = (
        SavedAnswerVectors(storage.external_vectors, embedder, embed_query=kb.embed_query)
        if embedder is not None
        else None
    )
    # The keywords' and questions' word stems are memoised for this app's life, in an
    # object it owns (``knowledge.stemmer.Stemmer``), not in module state.
    keywords = KeywordIndex(
        storage.keywords,
        storage.external_results,
        semantic=semantic,
        shared=settings.shared_web_answers,
        stemmer=Stemmer(),
    )
    rooms.keywords = keywords
    tasks.append(start_keyword_backfill(keywords, leader))
    perplexity = (
        PerplexityClient(
            await perplexity_http(settings, stack, pool_waits),
            settings.perplexity_api_key,
            base_url=settings.perplexity_base_url,
            model=settings.perplexity_model,
        )
        if settings.perplexity_api_key
        else None
    )
    register_rag_tools(
        registry,
        RagToolDeps(
            knowledge=kb,
            keywords=keywords,
            external_results=storage.external_results,
            perplexity=perplexity,
            settings=RagToolSettings(default_buckets=settings.kb_default_buckets, conversation_attachments=True),
        ),
    )
    register_corpus_tools(
        registry,
        CorpusToolDeps(
            knowledge=kb,
            overload_threshold=settings.clarify_overload_hits,
            max_tool_calls=settings.max_tool_calls,
            conversation_attachments=True,
        ),
    )

    if settings.backend_url:
        from agenttools.core.drafts import Drafts
        from agenttools.core.tool_support import WorkflowToolDeps
        from agenttools.tables.tools import register_table_tools
        from agenttools.workflow.tools import register_workflow_tools

        backend = BackendComponent.of(settings, http)
        deps = WorkflowToolDeps(
            backend_url=settings.backend_url,
            drafts=Drafts(storage.drafts),
            timeout_s=settings.backend_timeout_s,
            fallback_authorization=backend.fallback_authorization,
        )
        register_workflow_tools(registry, deps)
        register_table_tools(registry, deps)
        rooms.resolution_cache = deps.resolution_cache
        rooms.backend = backend
        log.info("workflow/table backend", extra={"url": mask_url(backend.url), "auth": backend.auth_mode})
    else:
        rooms.backend = BackendComponent.of(settings, http)
        log.warning("AGENT_BACKEND_URL is not set: workflow and table tools are listed but cannot run")
    return rooms


@dataclass(slots=True)
class BackendComponent:
    """Where the workflow/table tools go and as whom, for the log and ``/readyz``.

    With ``AGENT_AUTH=none`` a caller usually sends no ``Authorization``; the tools then
    call as the reference backend's demo user (``AGENT_BACKEND_DEMO_TOKEN``, default
    ``demo-alice``) instead of failing with 401. With ``jwt`` the caller's token goes.
    """

    url: str | None
    http: httpx.AsyncClient
    fallback_authorization: str | None
    auth_mode: str
    #: The reference backend ``agentchat serve`` started and keeps running: its keeper's
    #: state file (``AGENT_BACKEND_STATE_FILE``); ``None`` for a backend of your own.
    state_file: Path | None = None

    @classmethod
    def of(cls, settings: Settings, http: httpx.AsyncClient) -> BackendComponent:
        token = settings.backend_demo_token if settings.auth == "none" else None
        if settings.auth != "none":
            mode = "the caller's Authorization (AGENT_AUTH=jwt)"
        elif token:
            # The token is a credential: named by its variable, never shown.
            mode = "the demo user of AGENT_BACKEND_DEMO_TOKEN when the caller sends no Authorization"
        else:
            mode = "the caller's Authorization only (AGENT_BACKEND_DEMO_TOKEN=none)"
        return cls(settings.backend_url, http, f"Bearer {token}" if token else None, mode, settings.backend_state_file)

    async def readiness(self) -> dict[str, Any]:
        """Informational: an unreachable backend fails workflow/table tools only, so it
        never makes the service unready."""
        out: dict[str, Any] = {"ok": True, "url": mask_url(self.url), "auth": self.auth_mode}
        if self.url is None:
            out["detail"] = "AGENT_BACKEND_URL is not set: workflow and table tools cannot run"
            return out
        try:
            response = await self.http.get(self.url + "/healthz", timeout=1.5)
            out["reachable"] = response.status_code < 500
            if response.status_code >= 400:
                out["detail"] = f"GET /healthz answered HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            out["reachable"] = False
            out["detail"] = f"not reachable ({type(exc).__name__}): workflow and table tools will fail"
        kept = None if self.state_file is None else await asyncio.to_thread(read_state, self.state_file)
        if kept is not None:
            # Whether serve is starting it again after it exited, or gave up (then what to do).
            out["kept_by_serve"], given_up = readiness_of(kept)
            if given_up is not None and not out["reachable"]:
                out["detail"] = given_up
        return out


async def perplexity_http(
    settings: Settings, stack: AsyncExitStack, pool_waits: WaitHook | None
) -> httpx.AsyncClient:
    """Perplexity's own client and pool (``AGENT_PERPLEXITY_MAX_CONNECTIONS``): slow paid
    searches wait for each other, never for (or instead of) the backend's connections."""
    from llm.pool import pooled_transport

    client = httpx.AsyncClient(
        transport=pooled_transport(
            "perplexity", settings.perplexity_max_connections, on_wait=pool_waits, http1=settings.outbound_http1
        ),
        follow_redirects=False,
    )
    stack.push_async_callback(client.aclose)
    return client


def start_backfill(kb: Any, leader: Leader | None) -> asyncio.Task[Any] | None:
    """The knowledge base's re-embedding, started here or as the leader's job (at
    start-up, or once an embedder found late was adopted: ``app.embedder_adoption``);
    either way ``kb.aclose`` or the leader's close stops it."""
    if leader is None:
        return kb.backfill.start()
    return leader.when_leading(_backfill_while_leading(kb), name="kb-backfill")


def start_keyword_backfill(keywords: KeywordIndex, leader: Leader | None) -> asyncio.Task[Any]:
    """Terms and vectors for the keywords and saved answers stored before they existed,
    here or as the leader's job."""
    if leader is None:
        return asyncio.create_task(_backfill_keywords(keywords), name="keyword-backfill")
    return leader.when_leading(lambda: _backfill_keywords(keywords), name="keyword-backfill")


def _backfill_while_leading(kb: Any) -> Callable[[], Awaitable[None]]:
    """The KB's back-fill as a leader's job: started when this process leads, stopped
    (so it can start again) when the lead is lost."""

    async def run() -> None:
        task = kb.backfill.start()
        if task is None:  # no embedder: nothing to back-fill
            return
        try:
            await task
        finally:
            await kb.backfill.aclose()

    return run


async def _backfill_keywords(keywords: KeywordIndex) -> None:
    """Terms and vectors for keywords and external answers stored before they existed."""
    try:
        done = await keywords.backfill()
    except Exception:  # lookups still work with what is there
        log.exception("back-filling keyword terms and saved-answer vectors failed")
        return
    if any(done.values()):
        log.info("keyword index back-filled", extra=done)


async def _stop(tasks: list[asyncio.Task[Any]]) -> None:
    await cancel_and_wait(tasks, KB_TASKS_STOP_S)
