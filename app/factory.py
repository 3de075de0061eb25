"""The app factory: one call builds a complete, independent service."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route

from app.config import Settings
from app.ops.close_budget import BACKGROUND_STOP_S
from app.ops.log_context import AccessLog
from app.ops.logs import replica_logs, scrubbed_logs
from app.ops.stopping import cancel_and_wait
from app.runs.manager import new_replica_id
from app.server import (
    admin_routes,
    ai_sdk_stream,
    approval_routes,
    attachment_routes,
    error_handlers,
    history_routes,
    http,
    kb_routes,
    openai_compat,
)
from app.server.auth import JwksPrefetch
from app.server.host_check import HostCheck, host_rule
from app.server.openapi import openapi_routes
from app.server.origin_check import OriginCheck, origin_rule
from app.server.playground import playground_routes
from app.server.problems import HTTPProblem
from app.server.storage_budget import StorageScope
from app.wiring import AUTO, Overrides, build_services
from storage.errors import StorageUnavailable

log = logging.getLogger("agentchat")

#: The response headers the docs tell clients to read (docs/http-api.md,
#: docs/compatible-faces.md), exposed to cross-origin JavaScript with AGENT_CORS_ORIGINS.
EXPOSED_HEADERS = ("X-Conversation-Id", "X-Run-Id", "Retry-After", "WWW-Authenticate")


def create_app(
    settings: Settings | None = None,
    *,
    provider: Any = None,
    registry: Any = None,
    embedder: Any = AUTO,
    prompts: Any = None,
    planner: Any = None,
    shutdown_deadline_s: float | None = None,
    tracer_provider: Any = None,
) -> Starlette:
    """Build the Starlette app. ``provider``, ``registry``, ``embedder`` and ``prompts``
    replace the configured components (tests, benchmarks); everything else is real."""
    settings = settings or Settings.from_env()
    grace_s = settings.shutdown_grace_s if shutdown_deadline_s is None else shutdown_deadline_s
    overrides = Overrides(provider=provider, registry=registry, embedder=embedder, prompts=prompts, planner=planner,
                          tracer_provider=tracer_provider)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            # The configured secrets never reach a log line of this app (app.ops.logs).
            stack.enter_context(scrubbed_logs(settings.secret_values()))
            # Every line of this app names its replica: the id its run leases are stored
            # under (and /readyz's load.replica), so a line is traced to its process.
            replica_id = new_replica_id()
            stack.enter_context(replica_logs(replica_id))
            svc = await build_services(settings, stack, overrides, replica_id=replica_id)
            app.state.services = svc
            # Runs the last process left unfinished (SIGTERM or SIGKILL) are carried on
            # before the first request is served.
            await svc.runs.recover()
            log.info("agentchat ready", extra={"settings": settings.redacted()})
            try:
                yield
            finally:
                await svc.runs.shutdown(grace_s)
                await cancel_and_wait(svc.background, BACKGROUND_STOP_S)

    routes = [
        Route("/v1/agent/chat", http.chat, methods=["POST"]),
        Route("/v1/agent/runs", http.create_run, methods=["POST"]),
        Route("/v1/agent/runs/{run_id}/events", http.run_events, methods=["GET"]),
        Route("/v1/agent/runs/{run_id}/cancel", http.cancel_run, methods=["POST"]),
        Route("/v1/agent/runs/{run_id}/approvals/{tool_use_id}", approval_routes.decide, methods=["POST"]),
        Route("/v1/agent/conversations/{conversation_id}", http.get_conversation, methods=["GET"]),
        Route("/v1/agent/conversations", history_routes.list_conversations, methods=["GET"]),
        Route("/v1/agent/conversations/{conversation_id}", history_routes.rename_conversation, methods=["PATCH"]),
        Route("/v1/agent/conversations/{conversation_id}", history_routes.delete_conversation, methods=["DELETE"]),
        Route("/v1/agent/conversations/{conversation_id}/attachments", attachment_routes.upload, methods=["POST"]),
        Route(
            "/v1/agent/conversations/{conversation_id}/attachments", attachment_routes.list_attachments, methods=["GET"]
        ),
        Route(
            "/v1/agent/conversations/{conversation_id}/attachments/{attachment_id}",
            attachment_routes.delete_attachment,
            methods=["DELETE"],
        ),
        Route("/v1/agent/runs", history_routes.list_runs, methods=["GET"]),
        Route("/v1/agent/runs/{run_id}", history_routes.get_run, methods=["GET"]),
        Route("/v1/agent/runs/{run_id}/feedback", history_routes.post_feedback, methods=["POST"]),
        Route("/v1/kb/documents", admin_routes.ingest_documents, methods=["POST"]),
        Route("/v1/kb/documents", kb_routes.list_documents, methods=["GET"]),
        Route("/v1/kb/documents/{doc_id}", kb_routes.delete_document, methods=["DELETE"]),
        Route("/v1/kb/buckets", kb_routes.list_buckets, methods=["GET"]),
        Route("/v1/kb/buckets/{name}", kb_routes.delete_bucket, methods=["DELETE"]),
        Route("/v1/admin/keywords/prune", admin_routes.prune_keywords, methods=["POST"]),
        Route("/healthz", http.healthz, methods=["GET"]),
        Route("/readyz", http.readyz, methods=["GET"]),
        Route("/metrics", http.metrics, methods=["GET"]),
        Route("/v1/models", openai_compat.list_models, methods=["GET"]),
        Route("/v1/models/{model}", openai_compat.get_model, methods=["GET"]),
        Route("/v1/chat/completions", openai_compat.chat_completions, methods=["POST"]),
        Route("/v1/agent/ui-stream", ai_sdk_stream.ui_stream, methods=["POST"]),
        Route("/v1/agent/ui-stream/{chat_id}/stream", ai_sdk_stream.ui_stream_resume, methods=["GET"]),
        *playground_routes(),
    ]
    # /openapi.json and /docs describe every route above (``_describe_api``), built at
    # their first request.
    routes += openapi_routes(lambda: _describe_api(settings), _render_docs)
    # Outermost: every request's log fields, and its access-log line (app/ops/log_context.py).
    middleware = [Middleware(AccessLog)]
    # Then the Host guard against DNS rebinding (AGENT_ALLOWED_HOSTS; app/server/host_check.py),
    # before CORS and every route: none when every Host is answered.
    rule = host_rule(settings.allowed_hosts, settings.host)
    if rule is not None:
        middleware.append(Middleware(HostCheck, rule=rule))
    # Then the guard against cross-site request forgery (app/server/origin_check.py): an
    # unsafe request from another origin's page, unless AGENT_CORS_ORIGINS trusts it; before
    # CORS (preflights are OPTIONS, never refused) and every route, in every auth mode.
    origins = origin_rule(settings.cors_origins)
    if origins is not None:
        middleware.append(Middleware(OriginCheck, rule=origins))
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
                # Any request header: browser SDKs add their own (the openai JS SDK's
                # ``x-stainless-*``, an app's ``x-`` headers), and a fixed list turned their
                # preflight into a 400. Starlette echoes the requested headers back.
                allow_headers=["*"],
                # What the docs tell clients to read; cross-origin JS sees no others.
                expose_headers=list(EXPOSED_HEADERS),
                max_age=86400,
            )
        )
    # JWKS keys are fetched (async) before the routes verify tokens synchronously.
    middleware.append(Middleware(JwksPrefetch))
    # Innermost, so the route runs in its task: each of the request's waits for the
    # database at most AGENT_DB_POOL_TIMEOUT_S, statements on a frozen PostgreSQL included
    # (app/server/storage_budget.py, storage/request_scope.py).
    middleware.append(Middleware(StorageScope, wait_s=settings.db_pool_timeout_s))
    return Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            HTTPProblem: error_handlers.problem,
            StorageUnavailable: error_handlers.storage_unavailable,
            404: error_handlers.not_found,
            405: error_handlers.method_not_allowed,
            500: error_handlers.server_error,
        },
    )


def _describe_api(settings: Settings) -> dict[str, Any]:
    """The OpenAPI document of ``create_app``'s routes: a module adding routes adds its
    ApiContribution to this list (tests/test_openapi.py fails on an undescribed route).
    Its modules are imported here, with the first request for the document."""
    from app.server.compat_openapi import ai_sdk_api, openai_api
    from app.server.openapi import build_openapi
    from app.server.openapi_paths import builtin_api

    return build_openapi([*builtin_api(settings), openai_api(), ai_sdk_api()], auth_mode=settings.auth)


def _render_docs(document: dict[str, Any]) -> bytes:
    from app.server.docs_page import render_docs

    return render_docs(document)
