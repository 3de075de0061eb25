"""Logging set-up: one line per record, with the structured ``extra`` fields appended as JSON."""

from __future__ import annotations

import logging
import os
import sys

import orjson

_STANDARD = set(logging.LogRecord("x", 0, "x", 0, "x", None, None).__dict__) | {"message", "asctime"}


class StructuredFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
        if extra:
            base += " " + orjson.dumps(extra, default=str).decode()
        return base


def configure_logging(level: str | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or os.environ.get("AGENT_LOG_LEVEL") or "INFO").upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)
