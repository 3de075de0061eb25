"""The reference backend's logs in the agent's format: ``text``, or ``json`` — one JSON
object per line with ``time`` (UTC, milliseconds), ``level``, ``logger``, ``message``,
as ``AGENT_LOG_FORMAT=json`` makes the agent's (``app/ops/logs.py``).

Why its own: the backend imports nothing of ours (docs/ARCHITECTURE.md), so it cannot
use the agent's handler; ``agentchat serve`` and ``agentchat backend`` pass the format
the agent chose (``--log-format``). Under ``json`` every uvicorn line is such an object
too — a log shipper reading the agent's JSON lines choked on uvicorn's
``INFO:     127.0.0.1:59048 - "GET / HTTP/1.1" 404 Not Found`` — and uvicorn's access
line carries the fields the agent's access log has (``method``, ``path``, ``status``,
``client_ip``), so one query finds a request in either service.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

FORMATS = ("text", "json")
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"


class JsonLines(logging.Formatter):
    """One JSON object per record (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, _version, status = record.args
            line.update(method=method, path=path, status=status, client_ip=str(client).rsplit(":", 1)[0])
            line["message"] = f"{method} {path} {status}"
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def make_handler(fmt: str = "text") -> logging.Handler:
    """stderr, in the chosen format (a ``logging.config`` factory: uvicorn builds it)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    return handler


def configure(level: str, fmt: str) -> dict[str, Any] | None:
    """Install the handler on the root logger; uvicorn's ``log_config``: ``None`` (its own
    default, unchanged) for ``text``, and for ``json`` its loggers, access log included,
    through the root's JSON handler."""
    root = logging.getLogger()
    root.handlers[:] = [make_handler(fmt)]
    root.setLevel(level.upper())
    if fmt != "json":
        return None
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"backend": {"()": "backend.logs.make_handler", "fmt": fmt}},
        "root": {"handlers": ["backend"], "level": level.upper()},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": True},
        },
    }
