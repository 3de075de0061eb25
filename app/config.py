"""Settings read from the environment once, validated at start-up with clear messages.

Every variable of ARCHITECTURE.md lives here; nothing else in the code reads
``os.environ``. ``Settings.from_env`` collects *all* problems before failing, so an
operator fixes a bad deployment in one go.

Which settings there are, with their defaults and meanings, is ``app.config_fields``; how
a value is parsed, ``app.config_env`` (``EnvReader``); which combinations of settings are
refused, ``app.config_checks``; which settings are credentials or URLs, and what the logs
show of them, ``app.config_redaction``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app import config_redaction
from app.config_checks import combination_problems
from app.config_env import (
    DAYS_BOUNDS,
    KEYWORD_MIN_USAGE_BOUNDS,
    PORT_BOUNDS,
    SHUTDOWN_GRACE_BOUNDS,
    WORKERS_BOUNDS,
    EnvReader,
    approval_tools,
    demo_token,
    opt_path,
)
from app.config_fields import SettingsFields

PROVIDERS = ("auto", "ollama", "gemini", "openai", "extractive")
EMBEDDERS = ("auto", "gemini", "ollama", "openai", "local", "hashing", "none")
SERVER_STACKS = ("auto", "portable")
AUTH_MODES = ("none", "jwt")
#: ``AGENT_CONVERSATION_TITLES``: where a conversation's automatic title comes from.
TITLE_SOURCES = ("auto", "words", "model", "off")
CONTEXT_TYPES = ("workflow", "tables", "knowledge")


class ConfigError(ValueError):
    """One or more environment variables are invalid; the message lists every problem."""


@dataclass(frozen=True, slots=True)
class Settings(SettingsFields):
    """The settings (their fields, defaults and meanings: ``app.config_fields``), read from
    the environment once by ``from_env``."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        return cls._read(EnvReader(os.environ if env is None else env))

    @classmethod
    def _read(cls, reader: EnvReader) -> Settings:
        """The settings through ``reader``, which also records every name asked for
        (``known_variables``: the same table the configuration reference is made from)."""
        env = reader.env
        d = cls()
        s = cls(
            llm_provider=reader.choice("AGENT_LLM_PROVIDER", PROVIDERS, d.llm_provider),
            ollama_host=reader.url("OLLAMA_HOST", d.ollama_host),
            ollama_model=reader.text("OLLAMA_MODEL", d.ollama_model),
            ollama_embed_model=reader.text("OLLAMA_EMBED_MODEL", d.ollama_embed_model),
            ollama_num_ctx=reader.integer("OLLAMA_NUM_CTX", d.ollama_num_ctx, lo=512),
            ollama_keep_alive=reader.text("OLLAMA_KEEP_ALIVE", d.ollama_keep_alive),
            gemini_api_key=reader.optional("GEMINI_API_KEY"),
            gemini_model=reader.text("GEMINI_MODEL", d.gemini_model),
            gemini_embed_model=reader.text("GEMINI_EMBED_MODEL", d.gemini_embed_model),
            gemini_embed_dim=reader.integer("GEMINI_EMBED_DIM", d.gemini_embed_dim, lo=8, hi=3072),
            gemini_base_url=reader.optional_url("GEMINI_BASE_URL"),
            openai_base_url=reader.url("OPENAI_BASE_URL", d.openai_base_url),
            openai_api_key=reader.optional("OPENAI_API_KEY"),
            openai_model=reader.text("OPENAI_MODEL", d.openai_model),
            openai_embed_model=reader.text("OPENAI_EMBED_MODEL", d.openai_embed_model),
            embedder=reader.choice("AGENT_EMBEDDER", EMBEDDERS, d.embedder),
            perplexity_api_key=reader.optional("PERPLEXITY_API_KEY"),
            perplexity_base_url=reader.url("PERPLEXITY_BASE_URL", d.perplexity_base_url),
            perplexity_model=reader.text("PERPLEXITY_MODEL", d.perplexity_model),
            shared_web_answers=reader.boolean("AGENT_SHARED_WEB_ANSWERS", d.shared_web_answers),
            backend_url=reader.optional_url("AGENT_BACKEND_URL"),
            backend_state_file=opt_path(reader.optional("AGENT_BACKEND_STATE_FILE")),
            backend_demo_token=demo_token(reader.text("AGENT_BACKEND_DEMO_TOKEN", d.backend_demo_token or "none")),
            db_path=Path(reader.text("AGENT_DB_PATH", str(d.db_path))),
            database_url=reader.database_url("AGENT_DATABASE_URL"),
            cache_dir=opt_path(reader.optional("AGENT_CACHE_DIR")),
            rag_top_k=reader.integer("AGENT_RAG_TOP_K", d.rag_top_k, lo=0, hi=100),
            rag_min_score=reader.number("AGENT_RAG_MIN_SCORE", d.rag_min_score, lo=-1.0, hi=1.0),
            max_loops=reader.integer("AGENT_MAX_LOOPS", d.max_loops, lo=1, hi=200),
            max_tokens=reader.integer("AGENT_MAX_TOKENS", d.max_tokens, lo=64, hi=1_000_000),
            max_tool_calls=reader.integer("AGENT_MAX_TOOL_CALLS", d.max_tool_calls, lo=1, hi=1000),
            clarify_overload_hits=reader.integer(
                "AGENT_CLARIFY_OVERLOAD_HITS", d.clarify_overload_hits, lo=1, hi=1_000_000
            ),
            context_budget_tokens=reader.integer(
                "AGENT_CONTEXT_BUDGET_TOKENS", d.context_budget_tokens, lo=256
            ),
            history_budget_tokens=reader.integer(
                "AGENT_HISTORY_BUDGET_TOKENS", d.history_budget_tokens, lo=0
            ),
            mandatory_contexts=reader.subset(
                "AGENT_MANDATORY_CONTEXTS", CONTEXT_TYPES, d.mandatory_contexts
            ),
            cors_origins=reader.listing("AGENT_CORS_ORIGINS", d.cors_origins),
            allowed_hosts=reader.host_names("AGENT_ALLOWED_HOSTS", d.allowed_hosts),
            auth=reader.choice("AGENT_AUTH", AUTH_MODES, d.auth),
            jwt_secret=reader.optional("AGENT_JWT_SECRET"),
            jwt_jwks_url=reader.optional_url("AGENT_JWT_JWKS_URL"),
            jwt_public_key=opt_path(reader.optional("AGENT_JWT_PUBLIC_KEY")),
            jwt_audience=reader.optional("AGENT_JWT_AUDIENCE"),
            jwt_issuer=reader.optional("AGENT_JWT_ISSUER"),
            jwt_leeway_s=reader.number("AGENT_JWT_LEEWAY_S", d.jwt_leeway_s, lo=0, hi=3600),
            jwt_allow_no_exp=reader.boolean("AGENT_JWT_ALLOW_NO_EXP", d.jwt_allow_no_exp),
            admin_users=reader.listing("AGENT_ADMIN_USERS", d.admin_users),
            admin_open=reader.boolean("AGENT_ADMIN_OPEN", d.admin_open),
            host=reader.text("AGENT_HOST", d.host),
            port=reader.integer("AGENT_PORT", d.port, lo=PORT_BOUNDS.lo, hi=PORT_BOUNDS.hi),
            llm_timeout_s=reader.number("AGENT_LLM_TIMEOUT_S", d.llm_timeout_s, lo=1),
            tool_timeout_s=reader.number("AGENT_TOOL_TIMEOUT_S", d.tool_timeout_s, lo=0.1),
            backend_timeout_s=reader.number("AGENT_BACKEND_TIMEOUT_S", d.backend_timeout_s, lo=0.1),
            llm_max_connections=reader.integer("AGENT_LLM_MAX_CONNECTIONS", d.llm_max_connections, lo=1,
                                               hi=100_000),
            backend_max_connections=reader.integer("AGENT_BACKEND_MAX_CONNECTIONS", d.backend_max_connections,
                                                   lo=1, hi=100_000),
            embed_max_connections=reader.integer("AGENT_EMBED_MAX_CONNECTIONS", d.embed_max_connections, lo=1,
                                                 hi=100_000),
            perplexity_max_connections=reader.integer("AGENT_PERPLEXITY_MAX_CONNECTIONS",
                                                      d.perplexity_max_connections, lo=1, hi=100_000),
            db_max_connections=reader.integer("AGENT_DB_MAX_CONNECTIONS", d.db_max_connections, lo=2, hi=10_000),
            db_pool_timeout_s=reader.number("AGENT_DB_POOL_TIMEOUT_S", d.db_pool_timeout_s, lo=0.1, hi=3600),
            max_body_bytes=reader.integer("AGENT_MAX_BODY_BYTES", d.max_body_bytes, lo=1024),
            max_message_chars=reader.integer("AGENT_MAX_MESSAGE_CHARS", d.max_message_chars, lo=1, hi=10_000_000),
            header_timeout_s=reader.number("AGENT_HEADER_TIMEOUT_S", d.header_timeout_s, lo=0.1, hi=3600),
            body_timeout_s=reader.number("AGENT_BODY_TIMEOUT_S", d.body_timeout_s, lo=0.1, hi=3600),
            server_stack=reader.choice("AGENT_SERVER_STACK", SERVER_STACKS, d.server_stack),
            chat_reattach_s=reader.number("AGENT_CHAT_REATTACH_S", d.chat_reattach_s, lo=0, hi=3600),
            max_chunk_chars=reader.integer("AGENT_MAX_CHUNK_CHARS", d.max_chunk_chars, lo=64, hi=10_000_000),
            max_answer_chars=reader.integer("AGENT_MAX_ANSWER_CHARS", d.max_answer_chars, lo=256, hi=100_000_000),
            run_grace_s=reader.number("AGENT_RUN_GRACE_S", d.run_grace_s, lo=0),
            run_lease_s=reader.number("AGENT_RUN_LEASE_S", d.run_lease_s, lo=0.5, hi=3600),
            finished_run_memory_s=reader.number(
                "AGENT_FINISHED_RUN_MEMORY_S", d.finished_run_memory_s, lo=0, hi=86400
            ),
            shutdown_grace_s=reader.number("AGENT_SHUTDOWN_GRACE_S", d.shutdown_grace_s,
                                           lo=SHUTDOWN_GRACE_BOUNDS.lo, hi=SHUTDOWN_GRACE_BOUNDS.hi),
            db_write_retry_s=reader.number("AGENT_DB_WRITE_RETRY_S", d.db_write_retry_s, lo=0.05, hi=3600),
            heartbeat_s=reader.number("AGENT_HEARTBEAT_S", d.heartbeat_s, lo=0.05),
            max_runs_per_user=reader.integer("AGENT_MAX_RUNS_PER_USER", d.max_runs_per_user, lo=1),
            max_live_runs=reader.integer("AGENT_MAX_LIVE_RUNS", d.max_live_runs, lo=0),
            approval_tools=approval_tools(reader.optional("AGENT_APPROVAL_TOOLS")),
            approval_ttl_s=reader.number("AGENT_APPROVAL_TTL_S", d.approval_ttl_s, lo=0.05, hi=90 * 86400),
            max_loop_lag_ms=reader.number("AGENT_MAX_LOOP_LAG_MS", d.max_loop_lag_ms, lo=0, hi=600_000),
            workers=reader.integer("AGENT_WORKERS", d.workers, lo=WORKERS_BOUNDS.lo, hi=WORKERS_BOUNDS.hi),
            workers_safety_poll_s=reader.number(
                "AGENT_WORKERS_SAFETY_POLL_S", d.workers_safety_poll_s, lo=0.05, hi=3600
            ),
            workers_dir=opt_path(reader.optional("AGENT_WORKERS_DIR")),
            requests_per_minute=reader.integer("AGENT_REQUESTS_PER_MINUTE", d.requests_per_minute, lo=1),
            stream_token_ttl_s=reader.integer("AGENT_STREAM_TOKEN_TTL_S", d.stream_token_ttl_s, lo=5),
            stream_token_secret=reader.optional("AGENT_STREAM_TOKEN_SECRET"),
            secret_key=reader.optional("AGENT_SECRET_KEY"),
            stream_key_in_database=reader.boolean("AGENT_STREAM_KEY_IN_DATABASE", d.stream_key_in_database),
            otel_enabled=reader.boolean("AGENT_OTEL", d.otel_enabled)
            or bool(reader.optional("OTEL_EXPORTER_OTLP_ENDPOINT")
                    or reader.optional("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")),
            ingest_sample_kb=reader.boolean("AGENT_INGEST_SAMPLE_KB", d.ingest_sample_kb),
            kb_default_buckets=reader.listing("AGENT_KB_DEFAULT_BUCKETS", d.kb_default_buckets) or ("*",),
            kb_reembed_interval_s=reader.number(
                "AGENT_KB_REEMBED_INTERVAL_S", d.kb_reembed_interval_s, lo=1, hi=31_536_000
            ),
            kb_reembed_backoff_max_s=reader.number(
                "AGENT_KB_REEMBED_BACKOFF_MAX_S", d.kb_reembed_backoff_max_s, lo=1, hi=86_400
            ),
            keyword_max_age_days=reader.number(
                "AGENT_KEYWORD_MAX_AGE_DAYS", d.keyword_max_age_days, lo=DAYS_BOUNDS.lo, hi=DAYS_BOUNDS.hi
            ),
            keyword_min_usage=reader.integer("AGENT_KEYWORD_MIN_USAGE", d.keyword_min_usage,
                                             lo=KEYWORD_MIN_USAGE_BOUNDS.lo, hi=KEYWORD_MIN_USAGE_BOUNDS.hi),
            keyword_prune_interval_s=reader.number(
                "AGENT_KEYWORD_PRUNE_INTERVAL_S", d.keyword_prune_interval_s, lo=0.01, hi=31_536_000
            ),
            run_events_retention_days=reader.number(
                "AGENT_RUN_EVENTS_RETENTION_DAYS", d.run_events_retention_days, lo=DAYS_BOUNDS.lo, hi=DAYS_BOUNDS.hi
            ),
            conversation_retention_days=reader.number(
                "AGENT_CONVERSATION_RETENTION_DAYS", d.conversation_retention_days, lo=DAYS_BOUNDS.lo,
                hi=DAYS_BOUNDS.hi
            ),
            retention_interval_s=reader.number(
                "AGENT_RETENTION_INTERVAL_S", d.retention_interval_s, lo=0.01, hi=31_536_000
            ),
            attachment_max_bytes=reader.integer(
                "AGENT_ATTACHMENT_MAX_BYTES", d.attachment_max_bytes, lo=1, hi=50 * 1024 * 1024
            ),
            conversation_titles=reader.choice("AGENT_CONVERSATION_TITLES", TITLE_SOURCES, d.conversation_titles),
        )
        mcp_file = reader.optional("AGENT_MCP_SERVERS")
        if mcp_file:
            # Imported only when servers are configured: agenttools.mcp.config brings the
            # tool catalog and httpx, ~0.2 s of CPU that every CLI command paid to read settings.
            from agenttools.mcp.config import McpConfigError, load_servers

            try:
                s = replace(s, mcp_servers=load_servers(mcp_file, env))
            except McpConfigError as exc:
                reader.problems.append(str(exc))
        for problem in combination_problems(s):  # append, one at a time: docs/config_docs.py's probe counts on it
            reader.problems.append(problem)
        if reader.problems:
            raise ConfigError("invalid configuration:\n  - " + "\n  - ".join(reader.problems))
        return s

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)

    @property
    def outbound_http1(self) -> str:
        """The HTTP/1.1 client under the outbound pools (``llm.pool``): ``httpcore``
        with ``AGENT_SERVER_STACK=portable``, else our ``httptools`` one."""
        return "httpcore" if self.server_stack == "portable" else "httptools"

    @property
    def openai_configured(self) -> bool:
        """``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` is set: ``auto`` tries that server
        (after Gemini, before Ollama) for the chat model and the embedder."""
        default_url = Settings.__dataclass_fields__["openai_base_url"].default
        return bool(self.openai_api_key) or self.openai_base_url != default_url

    def secret_values(self) -> list[str]:
        """Every configured value that is a credential — API keys, signing keys, the
        demo token, passwords inside URLs — for ``app.ops.masking.SecretScrubber``
        (which fields those are: ``app.config_redaction``)."""
        return config_redaction.secret_values(self)

    def redacted(self) -> dict[str, Any]:
        """The settings as a dict safe to log: secrets masked, URLs without userinfo
        (``app.config_redaction``)."""
        return config_redaction.redacted(self)


#: Variables read outside ``Settings``: the log set-up's (``app.ops.logs``, read before
#: the settings) and the SQLite writer lock a ``--workers`` supervisor hands its workers
#: (``storage.sqlite.writer_lock.INHERITED_FD_ENV``). tests/test_config_docs.py checks
#: that every variable docs/config_docs.py finds read elsewhere is here.
READ_ELSEWHERE: frozenset[str] = frozenset({"AGENT_LOG_FORMAT", "AGENT_LOG_LEVEL", "AGENT_WRITER_LOCK_FD"})


def known_variables(settings: Settings | None = None) -> frozenset[str]:
    """Every variable this service reads: the names ``Settings.from_env`` asks its reader
    for (the settings' own table, which docs/config_docs.py writes
    docs/configuration.md from; read with no environment, so every name is asked),
    ``READ_ELSEWHERE``, and the names the files ``settings`` read take from the
    environment (``${AGENT_TICKETS_TOKEN}`` in the MCP servers file: read, not a typo).
    ``agentchat serve`` warns of an ``AGENT_*`` variable outside it: ``AGENT_AUTHH=jwt``
    served with no auth and not a word."""
    reader = EnvReader({})
    Settings._read(reader)
    in_files = () if settings is None else (name for server in settings.mcp_servers for name in server.variables)
    return frozenset(reader.asked) | READ_ELSEWHERE | frozenset(in_files)
