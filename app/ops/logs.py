"""Logging set-up: JSON lines (default for ``agentchat serve``) or readable text.

``AGENT_LOG_FORMAT=json`` writes one JSON object per line through python-json-logger's
orjson formatter — chosen over structlog because every module here already logs through
the standard library with ``extra={…}`` fields, which python-json-logger serialises as
they are, with no second logging API to learn or to bridge uvicorn's and the libraries'
records into. ``text`` (``make dev``, the other CLI commands) keeps the one-line form
with the fields appended as JSON. Either way ``app.ops.log_context.ContextFilter`` adds
``run_id``, ``conversation_id``, ``user`` and ``route`` to the lines of a request or a
run. Every JSON line also says which process wrote it: ``pid``, and in a serving
process ``replica`` (``replica_logs``: the id its run leases are stored under), so a line
of ``serve --workers`` or of one PostgreSQL replica is traced to its process; the text
form, for one terminal, leaves both out. ``AGENT_LOG_LEVEL`` sets the level. uvicorn's
loggers go through the same handler
(``uvicorn_log_config``), and its access log stays off: ``app.ops.log_context.AccessLog``
writes ours, without query secrets. ``MaskingFilter`` masks the userinfo of every URL
a line quotes (``http://***@host``), on every handler; while an app runs,
``scrubbed_logs`` adds the configured secret values (API keys, the demo token,
passwords inside URLs) to what it masks, in the message, the fields and tracebacks.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final

import orjson
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.orjson import OrjsonFormatter

from app.ops.log_context import ContextFilter
from app.ops.masking import SecretScrubber

FORMATS: Final = ("json", "text")
#: ``AGENT_LOG_LEVEL``'s values (any case; ``warn`` is ``warning``).
LEVELS: Final = ("debug", "info", "warning", "error", "critical")

#: uvicorn adds ``color_message`` (the message with ANSI colours) to its records.
_NOT_FIELDS = frozenset({"color_message"})
_STANDARD = set(logging.LogRecord("x", 0, "x", 0, "x", None, None).__dict__) | {"message", "asctime"} | _NOT_FIELDS
#: Fields too long for a terminal line, summarised in the text form only: the settings
#: the ready line carries (~2,500 characters) are for log shippers and audits.
_TEXT_SUMMARISED = frozenset({"settings"})
#: The writer's identity (``replica_logs``): on every JSON line, left out of the text form.
REPLICA_FIELD: Final = "replica"


class StructuredFormatter(logging.Formatter):
    """``time LEVEL logger: message {"extra": …}`` — for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extra = {
            k: v
            for k, v in record.__dict__.items()
            if k not in _STANDARD and k != REPLICA_FIELD and not k.startswith("_")
        }
        for name in _TEXT_SUMMARISED.intersection(extra):
            value = extra[name]
            count = len(value) if isinstance(value, dict) else "all"
            extra[name] = f"{count} values, listed in the JSON log format (AGENT_LOG_FORMAT=json)"
        if extra:
            base += " " + orjson.dumps(extra, default=str).decode()
        return base


class JsonLinesFormatter(OrjsonFormatter):
    """One JSON object per record: ``time``, ``level``, ``logger``, ``message``, then the
    context fields and the call's ``extra`` fields, then the writer's ``pid`` and (in a
    serving process, ``replica_logs``) its ``replica``."""

    def __init__(self) -> None:
        super().__init__(
            ["levelname", "name", "message"],
            rename_fields={"levelname": "level", "name": "logger"},
            reserved_attrs=[*RESERVED_ATTRS, *_NOT_FIELDS],
        )

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        # The time first, in UTC with milliseconds: what log shippers sort and parse.
        log_data["time"] = datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")
        super().add_fields(log_data, record, message_dict)
        # Who wrote it, last: the pid the record was made in (``--workers``' supervisor
        # and each worker), and the replica whose leases its runs are under.
        log_data["pid"] = record.process
        if (replica := log_data.pop(REPLICA_FIELD, None)) is not None:
            log_data[REPLICA_FIELD] = replica


class MaskingFilter(logging.Filter):
    """Rewrites a record so no credential it names reaches the output: the message (its
    arguments merged in), every ``extra`` field, and the traceback (formatted here, then
    kept as text). ``scrubber`` decides what is masked."""

    def __init__(self, scrubber: SecretScrubber | None = None) -> None:
        super().__init__()
        self.scrubber = scrubber or SecretScrubber(())

    def filter(self, record: logging.LogRecord) -> bool:
        scrub = self.scrubber
        message = record.getMessage()
        masked = scrub.text(message)
        if masked != message:
            record.msg, record.args = masked, None
        for name, value in list(record.__dict__.items()):
            if name in _STANDARD or name.startswith("_") or not isinstance(value, str | dict | list | tuple):
                continue
            cleaned = scrub.value(value)
            if cleaned != value:
                setattr(record, name, cleaned)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub.text(record.exc_text)
            record.exc_info = None  # both formatters then print the scrubbed text
        if record.stack_info:
            record.stack_info = scrub.text(record.stack_info)
        return True


class ReplicaFilter(logging.Filter):
    """Names the replica on each record (``REPLICA_FIELD``) that does not name one itself."""

    def __init__(self, replica_id: str) -> None:
        super().__init__()
        self.replica_id = replica_id

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, REPLICA_FIELD):
            setattr(record, REPLICA_FIELD, self.replica_id)
        return True


@contextmanager
def replica_logs(replica_id: str) -> Iterator[None]:
    """While the block runs (an app's life), every line of the root logger's handlers
    names ``replica_id``: set once per process by the app factory, with the id the
    process's run leases are stored under, so an ERROR is traced to its worker and a
    run's lease owner to its lines. Removed afterwards, as ``scrubbed_logs``'s filter."""
    with _on_root_handlers(ReplicaFilter(replica_id)):
        yield


@contextmanager
def scrubbed_logs(secret_values: Iterable[str]) -> Iterator[None]:
    """While the block runs, the root logger's handlers also mask ``secret_values``
    (``Settings.secret_values``); the filter is removed afterwards, so apps built one
    after another in a process each mask their own."""
    scrubber = SecretScrubber(secret_values)
    if scrubber.empty:
        yield
        return
    with _on_root_handlers(MaskingFilter(scrubber)):
        yield


@contextmanager
def _on_root_handlers(log_filter: logging.Filter) -> Iterator[None]:
    """``log_filter`` on each of the root logger's handlers for the block: every line of
    the process passes it, and it is gone afterwards (apps built one after another)."""
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(log_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(log_filter)


def log_format(explicit: str | None = None, *, default: str = "json") -> str:
    """``explicit``, else ``AGENT_LOG_FORMAT``, else ``default``; a ``ValueError`` names
    the allowed values."""
    value = (explicit or os.environ.get("AGENT_LOG_FORMAT") or default).strip().lower()
    if value not in FORMATS:
        raise ValueError(f"AGENT_LOG_FORMAT must be one of {', '.join(FORMATS)}; got {value!r}")
    return value


def log_level(explicit: str | None = None) -> str:
    """``explicit``, else ``AGENT_LOG_LEVEL``, else ``INFO``; a ``ValueError`` names the
    variable and the allowed values (``logging``'s own "Unknown level: 'VERBOSE'" named
    neither)."""
    raw = explicit or os.environ.get("AGENT_LOG_LEVEL") or "INFO"
    value = raw.strip().lower()
    value = "warning" if value == "warn" else value
    if value not in LEVELS:
        raise ValueError(f"AGENT_LOG_LEVEL must be one of {', '.join(LEVELS)}; got {raw.strip()!r}")
    return value.upper()


def make_handler(fmt: str = "json", stream: Any = None) -> logging.Handler:
    """The one handler: stderr, the chosen format, the context fields."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonLinesFormatter())
    else:
        handler.setFormatter(StructuredFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(ContextFilter())
    handler.addFilter(MaskingFilter())
    return handler


def configure_logging(level: str | None = None, *, fmt: str | None = None, default_format: str = "json") -> str:
    """Install the handler on the root logger; returns the format in use."""
    chosen = log_format(fmt, default=default_format)
    root = logging.getLogger()
    root.handlers[:] = [make_handler(chosen)]
    root.setLevel(log_level(level))
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return chosen


def uvicorn_log_config(fmt: str, level: str | None = None) -> dict[str, Any]:
    """uvicorn's ``log_config``: its loggers propagate to our handler on the root logger
    (also in the ``--reload`` child, which configures logging from this dict), and its
    own access log has no handler."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"agentchat": {"()": "app.ops.logs.make_handler", "fmt": fmt}},
        "root": {"handlers": ["agentchat"], "level": log_level(level)},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": False},
            "httpx": {"level": "WARNING"},
        },
    }


def announce(line: str, logger: str = "agentchat.cli") -> None:
    """A line for the operator (where the service listens): a record of its own in JSON
    mode, so the output stays JSON lines, printed otherwise; shown at any log level."""
    root = logging.getLogger()
    if any(isinstance(h.formatter, JsonLinesFormatter) for h in root.handlers):
        log = logging.getLogger(logger)
        log.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, line, (), None))
    else:
        print(line, file=sys.stderr, flush=True)
