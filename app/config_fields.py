"""Every setting: its field, its default and what it means (the ``#:`` comment above
it, which docs/config_docs.py writes into docs/configuration.md when the notes have none).

Why apart from ``app.config``: the fields with their meanings are one long table, and how
each is read from the environment (``Settings._read``) another; together they were one
module past 400 lines. ``app.config.Settings`` is this class with the reading, and the
only name the rest of the code uses: nothing else imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agenttools.mcp.config import McpServerConfig


@dataclass(frozen=True, slots=True)
class SettingsFields:
    llm_provider: str = "auto"
    ollama_host: str = "http://127.0.0.1:11434"
    ollama_model: str = "qwen3:4b"
    ollama_embed_model: str = "nomic-embed-text"
    ollama_num_ctx: int = 16384
    ollama_keep_alive: str = "10m"
    gemini_api_key: str | None = None
    gemini_model: str = "gemini-2.5-flash"
    gemini_embed_model: str = "gemini-embedding-001"
    gemini_embed_dim: int = 768
    gemini_base_url: str | None = None
    #: Any OpenAI-compatible server (``AGENT_LLM_PROVIDER=openai``, ``AGENT_EMBEDDER=openai``).
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: str | None = None
    openai_model: str = "gpt-4o-mini"
    openai_embed_model: str = "text-embedding-3-small"
    embedder: str = "auto"
    perplexity_api_key: str | None = None
    perplexity_base_url: str = "https://api.perplexity.ai"
    perplexity_model: str = "sonar"
    #: ``AGENT_SHARED_WEB_ANSWERS``: saved web answers and their keywords are one pool for
    #: every user (single-tenant deployments); off, each user finds only their own.
    shared_web_answers: bool = False
    backend_url: str | None = None
    #: Set by ``agentchat serve`` for the app beside the reference backend it started:
    #: where its keeper says whether it runs (``app/ops/backend_state.py``), for ``/readyz``.
    backend_state_file: Path | None = None
    #: ``AGENT_AUTH=none``: the reference backend's demo user the tools call as when the
    #: caller sends no ``Authorization`` (``AGENT_BACKEND_DEMO_TOKEN``; ``none`` turns it off).
    backend_demo_token: str | None = "demo-alice"
    db_path: Path = Path("data/agentchat.sqlite3")
    #: ``postgresql://…``: every store on PostgreSQL (with pgvector) instead of ``db_path``.
    database_url: str | None = None
    cache_dir: Path | None = None
    rag_top_k: int = 6
    rag_min_score: float = 0.0
    max_loops: int = 20
    max_tokens: int = 4096
    max_tool_calls: int = 8
    #: Seed 004 §10.2: a list-all request covering at least this many documents asks the
    #: user to narrow it (``clarification`` ``overload``) instead of returning a few hits.
    clarify_overload_hits: int = 100
    context_budget_tokens: int = 24000
    history_budget_tokens: int = 8000
    #: Where the RAG flow is mandatory (search first, end with generate_response): the
    #: seeds' RAG system, the ``knowledge`` context. Elsewhere it runs on demand.
    mandatory_contexts: tuple[str, ...] = ("knowledge",)
    cors_origins: tuple[str, ...] = ()
    #: The ``Host`` names the service answers to (``app/server/host_check.py``), against DNS
    #: rebinding: ``auto`` checks only when it listens on loopback alone.
    allowed_hosts: tuple[str, ...] = ("auto",)
    auth: str = "none"
    jwt_secret: str | None = None
    #: RS256/ES256 bearer tokens: keys from a JWKS URL (cached, refreshed on an unknown
    #: ``kid``) or a PEM public key file; ``aud`` / ``iss`` checked when set.
    jwt_jwks_url: str | None = None
    jwt_public_key: Path | None = None
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    jwt_leeway_s: float = 30.0
    #: A bearer token without ``exp`` would be valid forever: refused (401) unless this
    #: is set (``AGENT_JWT_ALLOW_NO_EXP``, for an identity provider that cannot add one).
    jwt_allow_no_exp: bool = False
    admin_users: tuple[str, ...] = ()
    #: ``AGENT_AUTH=none`` refuses the admin routes unless this is set (local use only).
    admin_open: bool = False
    host: str = "127.0.0.1"
    port: int = 8000
    llm_timeout_s: float = 120.0
    tool_timeout_s: float = 30.0
    #: MCP servers whose tools join the catalog, read from the ``AGENT_MCP_SERVERS`` file.
    mcp_servers: tuple[McpServerConfig, ...] = ()
    backend_timeout_s: float = 15.0
    #: Outbound pool sizes, per replica: model streams (a streamed answer holds one
    #: connection for its whole length), and everything else on the shared client
    #: (backend, Perplexity, Gemini embeddings). A request beyond them waits, and says
    #: so (a log line and ``agentchat_pool_wait_seconds``); while the model pool is
    #: full a new run is refused instead (503 ``replica_busy``, ``app/ops/load.py``).
    #: 512: above what one 2-core process serves well (about 300-500 paced runs,
    #: ``docs/scaling.md``), so on such hardware the loop-lag refusal comes first, and
    #: within Ollama's default queue (``OLLAMA_MAX_QUEUE`` 512).
    llm_max_connections: int = 512
    backend_max_connections: int = 200
    embed_max_connections: int = 32
    #: Perplexity's own pool: slow paid searches never hold the backend's connections.
    perplexity_max_connections: int = 16
    #: PostgreSQL pool per replica: the writer, reads, leases. Followers of runs on other
    #: replicas take their events from notifications, not from a connection each, so 20
    #: serves hundreds of them, and three replicas stay under PostgreSQL's default 100.
    db_max_connections: int = 20
    #: PostgreSQL: how long a request waits for a pooled connection before it is answered
    #: 503 ``storage_unavailable`` (an outage longer than this is a 503, never a hang).
    #: Either engine: a request not yet acknowledged (no run id handed out) waits at most
    #: this in total across its storage steps — rate count, transcript import, admission
    #: write (``app/server/storage_budget.py``) — not ``db_write_retry_s`` per step.
    db_pool_timeout_s: float = 10.0
    max_body_bytes: int = 1024 * 1024
    #: The longest question a chat takes, in characters (400 ``invalid_field`` above it), on
    #: every face: the native ``message``, the last user message of the OpenAI-compatible
    #: and AI SDK faces; the OpenAPI description's ``maxLength``. A body over
    #: ``AGENT_MAX_BODY_BYTES`` is refused (413) before its message is read.
    max_message_chars: int = 32000
    #: A request's headers must arrive within this (then the connection is closed), its
    #: body within ``body_timeout_s`` (408).
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    #: ``auto``: uvicorn on uvloop with the httptools parser when both are installed (a
    #: fraction of the CPU per streamed token), and the outbound pools' HTTP/1.1 answers
    #: parsed by httptools too (llm/h1transport.py); ``portable``: asyncio's own loop, the
    #: pure-Python h11 parser (app/cli/serving.py) and httpx's own HTTP/1.1 (httpcore) for
    #: the model, backend, embedder and Perplexity connections.
    server_stack: str = "auto"
    #: A chat without an Idempotency-Key is cancelled when its client leaves and does not
    #: re-attach (a retried POST with Last-Event-ID) within this many seconds.
    chat_reattach_s: float = 3.0
    #: Caps on model output: one streamed chunk, and the text of one assistant message.
    max_chunk_chars: int = 16_384
    max_answer_chars: int = 200_000
    run_grace_s: float = 600.0
    #: A run is leased by the process executing it for this long (renewed every third of
    #: it); when that process dies, another takes the run over within about this time.
    run_lease_s: float = 10.0
    #: A finished run's events stay in memory this long; later replays read the store.
    finished_run_memory_s: float = 60.0
    #: SIGTERM: how long live runs may go on before they are released as interrupted.
    shutdown_grace_s: float = 20.0
    #: How long a storage write retries a busy or failing database before the runs
    #: waiting on it end with ``storage_unavailable``: what acknowledged work (a run's
    #: events, its leases) rides out. Requests not yet acknowledged wait only
    #: ``db_pool_timeout_s`` in total.
    db_write_retry_s: float = 10.0
    heartbeat_s: float = 15.0
    max_runs_per_user: int = 8
    #: Live runs one replica carries at most; past it a new run is 503 with
    #: ``Retry-After`` instead of a slower stream for everyone (0: no cap).
    max_live_runs: int = 0
    #: Tools whose calls wait for the user's decision (``AGENT_APPROVAL_TOOLS``): ``None``
    #: is each tool's own default (``ToolSpec.asks_approval``: a direct backend write, the
    #: MCP tools not annotated read-only or annotated destructive), ``()`` none.
    approval_tools: tuple[str, ...] | None = None
    #: An approval not decided within this many seconds ends its run ``cancelled``.
    approval_ttl_s: float = 86_400.0
    #: New runs are refused (503) while the event loop's scheduling delay stays above
    #: this (``app/ops/load.py``); 0: never.
    max_loop_lag_ms: float = 250.0
    #: ``agentchat serve`` processes on this machine (``--workers``): each a replica of
    #: its own on the same database (SQLite file or PostgreSQL).
    workers: int = 1
    #: Workers on one SQLite file wake each other's followers over sockets
    #: (``storage/sqlite/worker_feed.py``); a followed run's log is also read after this
    #: long without news, a safety net only.
    workers_safety_poll_s: float = 1.0
    #: Set by the supervisor of ``--workers`` for its workers (a private directory of
    #: its own): where they meet to merge ``/metrics`` when no SQLite feed is there.
    workers_dir: Path | None = None
    requests_per_minute: int = 60
    stream_token_ttl_s: int = 300
    #: Signs ``stream_url`` tokens; unset, a random key generated once is kept in the
    #: database (``app_secrets``), so every replica accepts every other one's links.
    stream_token_secret: str | None = None
    #: Encrypts what the database keeps of a caller's credentials (a live run's
    #: ``Authorization``) and, when ``stream_token_secret`` is unset, derives the stream
    #: key — a key the database never holds (``app.keyring``).
    secret_key: str | None = None
    #: PostgreSQL without ``stream_token_secret`` / ``secret_key``: keep the generated
    #: stream key in the database in plain text anyway (refused at start-up otherwise).
    stream_key_in_database: bool = False
    #: OpenTelemetry spans (run, model calls, tool calls): on with ``AGENT_OTEL=1`` or
    #: when ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``…_TRACES_ENDPOINT`` is set (needs the
    #: ``otel`` extra; the exporter reads the standard ``OTEL_*`` variables itself).
    otel_enabled: bool = False
    ingest_sample_kb: bool = True
    #: Buckets ``knowledge_base_search`` covers when the model names none
    #: (``AGENT_KB_DEFAULT_BUCKETS``, comma-separated; ``*`` = every bucket).
    kb_default_buckets: tuple[str, ...] = ("default",)
    #: Documents without vectors of the embedder are re-embedded in the background
    #: (``knowledge.backfill``): a pass every ``kb_reembed_interval_s`` (and at start,
    #: after a failed ingest); while the embedder fails, retries back off up to
    #: ``kb_reembed_backoff_max_s``.
    kb_reembed_interval_s: float = 300.0
    kb_reembed_backoff_max_s: float = 30.0
    #: FR-008 automatic pruning: keywords used fewer than ``keyword_min_usage`` times and
    #: idle for longer than ``keyword_max_age_days`` are removed every
    #: ``keyword_prune_interval_s`` seconds; a max age of 0 turns the pruning off.
    keyword_max_age_days: float = 90.0
    keyword_min_usage: int = 2
    keyword_prune_interval_s: float = 3600.0
    #: Retention (issue 25): the event logs of runs finished more than this many days ago
    #: are compacted (each stretch of text chunks folded into one event; replay yields
    #: the same text); 0 turns it off.
    run_events_retention_days: float = 30.0
    #: Conversations idle (no new message, no run in progress) for more than this many
    #: days are deleted with everything of theirs; 0 (the default) keeps them forever.
    conversation_retention_days: float = 0.0
    #: How often the retention pass runs (also once shortly after start-up).
    retention_interval_s: float = 3600.0
    #: The largest file ``POST /v1/agent/conversations/{id}/attachments`` takes (413 past it).
    attachment_max_bytes: int = 5 * 1024 * 1024
    #: How a conversation gets its title from its first question: ``auto`` (the model
    #: when the provider is a real LLM — Gemini, Ollama, OpenAI-compatible — else the
    #: words), ``words`` (its first words, cut on a word boundary), ``model`` (a short
    #: call to whatever provider is configured, even a scripted one, after the run; the
    #: words when it fails or the provider is the offline answerer), ``off``.
    conversation_titles: str = "auto"
    extra: Mapping[str, str] = field(default_factory=dict)


__all__ = ["SettingsFields"]
