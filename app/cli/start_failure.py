"""Why ``agentchat serve`` did not start, in one line.

A failure of the app's start-up (its lifespan) reached the operator only as uvicorn's
ERROR record holding the whole traceback (a JSON line of 30-odd frames), then a bare
"the service did not start": the database unreachable or missing, no key for
PostgreSQL, pgvector not installable. The other commands already say such things in one
line ("agentchat docs: cannot open the PostgreSQL …: Connection refused"); ``serve``
now does too, with the same words for the database (``app.cli.database``), and keeps
the traceback at DEBUG (``AGENT_LOG_LEVEL=debug``). The exit code is unchanged (3).

``StartupWatch`` is the app as uvicorn sees it: every connection's scope goes straight
to the app (no frame of ours per request); only the lifespan passes through here, so
that its failure is kept and its traceback kept out of uvicorn's ERROR log.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.cli.database import describe_target, storage_target
from app.config import Settings

log = logging.getLogger("agentchat.cli")


class StartupWatch:
    """The ASGI app with its start-up failure kept (``failure``); serve it with
    ``interface="asgi3"`` (``__call__`` is a plain function returning the app's awaitable)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        #: What the lifespan's start-up raised (``None``: it did not fail).
        self.failure: BaseException | None = None

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] != "lifespan":
            return self.app(scope, receive, send)
        return self._lifespan(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        failed: list[str] = []

        async def quiet(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed":
                failed.append(str(message.get("message") or ""))
                log.debug("the service's start-up failed:\n%s", failed[0])
                message = {**message, "message": ""}  # uvicorn would log it at ERROR
            await send(message)

        try:
            await self.app(scope, receive, quiet)
        except BaseException as exc:
            if failed and self.failure is None:
                self.failure = exc
            raise


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:400]


def explain(exc: BaseException, settings: Settings) -> str:
    """One line saying why the start-up failed and, where it is known, what to do."""
    from app.keyring import KeyringError

    if isinstance(exc, KeyringError):
        return _first_line(exc)
    target = describe_target(storage_target(settings))
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None and isinstance(exc, psycopg.errors.InsufficientPrivilege) and "extension" in str(exc):
        return (
            f"the {target} does not let this user create the vector extension (pgvector): {_first_line(exc)}; "
            "have a superuser run CREATE EXTENSION vector in that database once, then start again"
        )
    if psycopg is not None and _statement_failed(exc):
        return (
            f"a start-up statement failed on the {target}: {_first_line(exc)} "
            f"(SQLSTATE {getattr(exc, 'sqlstate', None)}; its traceback follows)"
        )
    if psycopg is not None and isinstance(exc, psycopg.Error):
        return f"cannot open the {target}: {_first_line(exc)}"
    if _sqlite_busy(exc):
        # Said before only as "OperationalError: database is locked", no file named (the
        # start-up's WARNING before it named it, lines above); SQLite cannot tell who holds
        # a lock, so the likely holders are named instead.
        return (
            f"the {target} stayed locked by another process writing it ({_first_line(exc)}; the start-up "
            f"waited up to AGENT_DB_WRITE_RETRY_S, {settings.db_write_retry_s:g} s): a one-off command "
            "(agentchat ingest, compact), an sqlite3 shell or a backup; start again once it is done, "
            "or give it longer with AGENT_DB_WRITE_RETRY_S"
        )
    if isinstance(exc, OSError):
        return f"{_first_line(exc)} ({type(exc).__name__})"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def _sqlite_busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" once the start-up's wait for the file is spent
    (``storage.sqlite.engine._when_free``)."""
    from storage.sqlite.connections import busy

    return busy(exc)


def _statement_failed(exc: BaseException) -> bool:
    """Whether the server refused a statement of the start-up (a ``psycopg`` error with a
    SQLSTATE outside the connection's): the database was opened, so it is not "cannot
    open" - a migration's SQL of ours, or a database not in the state it expects. A
    connection's failure is an ``OperationalError``; a URL libpq cannot parse has no
    SQLSTATE; a right the user lacks (the pgvector extension's, the schema's) is the
    operator's to grant, said in one line as before (``explain``)."""
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        return False
    operators = psycopg.OperationalError | psycopg.errors.InsufficientPrivilege
    if not isinstance(exc, psycopg.Error) or isinstance(exc, operators):
        return False
    return exc.sqlstate is not None


def report(watch: StartupWatch, settings: Settings, code: Any) -> None:
    """The start-up failed: one line, the traceback only at DEBUG - but at ERROR after the
    line when a statement failed on an opened database (``_statement_failed``): that is
    no operator's setting to fix but a statement to find, perhaps a bug of ours."""
    if watch.failure is None:
        log.error("the service did not start", extra={"code": code})
        return
    from app.ops.masking import SecretScrubber, without_url_secrets

    if not _statement_failed(watch.failure):
        log.debug("the start-up's exception", exc_info=watch.failure)
    # Logged after the app's scrubber is gone: its credentials are masked here (a URL
    # libpq could not parse is quoted in its error, the password with it).
    said = SecretScrubber(settings.secret_values()).text(
        without_url_secrets(explain(watch.failure, settings), settings.database_url)
    )
    log.error(
        f"the service did not start: {said}",
        extra={"code": code, "error_type": type(watch.failure).__name__},
    )
    if _statement_failed(watch.failure):
        log.error("the start-up statement's traceback", exc_info=watch.failure)


__all__ = ["StartupWatch", "explain", "report"]
