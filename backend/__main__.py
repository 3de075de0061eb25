"""``python -m backend [--host H] [--port P] [--db FILE] [--allowed-hosts NAMES] [--log-level L] [--log-format F]``:
serve the reference backend.

Its own process, so the agent never runs this app (it imports only ``backend.table_rules``,
the table-configuration rules both run): ``agentchat serve`` starts it
beside the agent (and stops it on exit), ``agentchat backend`` execs it. SIGINT and
SIGTERM shut it down gracefully (the lifespan closes the database).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sqlite3
import sys
from pathlib import Path

from backend.app import serve_backend
from backend.host_check import parse_allowed_hosts
from backend.logs import FORMATS, configure

DEFAULT_DB = Path("data/backend.sqlite3")
#: The port ``agentchat serve`` starts the backend on by default (its own 8000, plus one)
#: and ``agentchat backend``'s: one port for the reference backend wherever it is started.
DEFAULT_PORT = 8001


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m backend",
        description="The bundled reference backend: the workflow and table-configuration REST service "
        "agentchat's workflow and table tools call with the caller's own token, with seed data for demos "
        "and tests.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"SQLite file (default: {DEFAULT_DB})")
    parser.add_argument("--allowed-hosts", type=_allowed_hosts, default=("auto",),
                        help="Host names answered, comma-separated (*.domain for a domain's, * for any); default "
                             "auto: on a loopback address only this machine's names (localhost, IP addresses), "
                             "elsewhere any. agentchat passes AGENT_ALLOWED_HOSTS")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                        help="log level (default info)")
    parser.add_argument("--log-format", default="text", choices=FORMATS,
                        help="text, or json: one JSON object per line, uvicorn's lines and access log "
                             "included, as the agent's AGENT_LOG_FORMAT=json (default text; agentchat passes "
                             "the agent's)")
    parser.add_argument("--fd", type=int, action="append", default=None,
                        help="listen on this inherited socket, already bound to --host and --port; once per "
                             "socket, one for each address of --host (`agentchat backend` binds them, and says "
                             "in one line when the port is taken)")
    args = parser.parse_args(argv)
    log_config = configure(args.log_level, args.log_format)
    unusable = _unusable_database(args.db)
    if unusable is not None:
        print(unusable, file=sys.stderr)
        return 1
    with contextlib.suppress(KeyboardInterrupt):
        sockets = None if args.fd is None else [socket.socket(fileno=fd) for fd in args.fd]
        asyncio.run(serve_backend(args.host, args.port, args.db, log_level=args.log_level,
                                  allowed_hosts=args.allowed_hosts, sockets=sockets, log_config=log_config))
    return 0


def _unusable_database(db: Path) -> str | None:
    """Why the backend cannot open ``db``, in one line, or ``None`` when it can.

    Checked before serving: else a folder that cannot be made was ``mkdir``'s traceback,
    and a file SQLite cannot open uvicorn's start-up traceback naming no file - for an
    operator whose ``serve`` runs where it may not write (a systemd unit without
    ``WorkingDirectory`` runs in ``/``, and the backend's file goes beside
    ``AGENT_DB_PATH``, ``data/`` there by default, on PostgreSQL too)."""
    where = db.absolute()
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        sqlite3.connect(db).close()  # opens (or creates) the file as the backend will
    except OSError as exc:
        why = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    except sqlite3.Error as exc:
        why = str(exc)
    else:
        return None
    return (f"the reference backend cannot open its database {where}: {why} (it is --db, or beside "
            "AGENT_DB_PATH when agentchat serve starts it: a file in a folder this user may write)")


def _allowed_hosts(raw: str) -> tuple[str, ...]:
    try:
        return parse_allowed_hosts(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


if __name__ == "__main__":
    raise SystemExit(main())
