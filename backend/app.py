"""The reference backend's app factory and a coroutine to serve it.

``create_backend_app(db_path)`` builds a self-contained Starlette app: its lifespan opens
one aiosqlite connection, applies the numbered migrations, seeds a fresh database once,
and closes the connection on shutdown. Everything lives on ``app.state`` so many apps can
run in one process (tests do exactly that).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.routing import Route

from backend import routes_alerts, routes_core, routes_data, routes_introspection, routes_workflow
from backend.db import Database
from backend.host_check import HostCheck, HostRule, host_rule
from backend.responses import ApiError, JSONResponse, handle_api_error, handle_http_exception
from backend.seed_loader import seed_database

logger = logging.getLogger("backend")


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


def create_backend_app(db_path: str | Path, *, seed: bool = True, hosts: HostRule | None = None) -> Starlette:
    """An Ichor-compatible REST backend over the SQLite file at ``db_path``; ``hosts``:
    the ``Host`` names it answers to (``backend/host_check.py``), ``None`` for any."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        db = await Database.open(db_path)
        try:
            applied = await db.migrate()
            if applied:
                logger.info("backend migrations applied: %s", applied)
            if seed and await seed_database(db):
                logger.info("backend seeded %s", db_path)
            app.state.db = db
            yield
        finally:
            await db.close()

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        *routes_workflow.ROUTES,
        *routes_alerts.ROUTES,
        *routes_core.ROUTES,
        *routes_introspection.ROUTES,
        *routes_data.ROUTES,
    ]
    return Starlette(
        routes=routes,
        middleware=[] if hosts is None else [Middleware(HostCheck, rule=hosts)],
        lifespan=lifespan,
        exception_handlers={ApiError: handle_api_error, HTTPException: handle_http_exception},
    )


class AddressedServer(uvicorn.Server):
    """uvicorn's server, saying its address also when it listens on sockets it was given.

    uvicorn logs ``Uvicorn running on …`` only for the sockets it binds itself, and
    ``agentchat backend`` hands it the ones the CLI bound (a port in use is then one
    line): run alone, the backend never said where it listened. The same line, on the
    same logger, so it follows the log format as uvicorn's own does."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if sockets is not None and self.started:
            host = self.config.host
            shown = f"[{host}]" if ":" in host else host
            port = sockets[0].getsockname()[1] if sockets else self.config.port
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port
            )


async def serve_backend(
    host: str,
    port: int,
    db_path: str | Path,
    *,
    log_level: str = "info",
    allowed_hosts: tuple[str, ...] = ("auto",),
    sockets: list[socket.socket] | None = None,
    log_config: dict[str, Any] | None = None,
) -> None:
    """Run the backend on ``host:port`` until interrupted or cancelled (``python -m backend``);
    ``allowed_hosts``: ``--allowed-hosts`` (``auto``: on loopback, the names of this machine only).
    ``sockets``: sockets already bound to ``host:port``, one per address of ``host``, to listen
    on (``agentchat backend`` binds them first, so a port in use is its one line, not
    uvicorn's traceback after start-up); without them uvicorn binds each address itself.
    ``log_config``: uvicorn's logging (``backend.logs.configure``: the JSON lines);
    ``None``, uvicorn's own.

    Cancelling the calling task shuts the server down gracefully (lifespan shutdown runs,
    the database is closed) before the cancellation propagates, so the backend can run
    as a task beside other work (tests do).
    """
    app = create_backend_app(db_path, hosts=host_rule(allowed_hosts, host))
    # An idle keep-alive connection is kept longer than the agent's pool keeps one (5 s,
    # httpx's expiry): else a tool call can go out on a connection uvicorn is closing.
    logging_given: dict[str, Any] = {} if log_config is None else {"log_config": log_config}
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on", timeout_keep_alive=75, **logging_given
    )
    server = AddressedServer(config)
    task = asyncio.ensure_future(server.serve(sockets=sockets))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        await task
        raise
