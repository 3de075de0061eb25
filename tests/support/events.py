"""Tool outcomes' events as the wire carries them, for tests that assert on the JSON."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from events import Event


def wire(events: Iterable[Event]) -> list[tuple[str, dict[str, Any]]]:
    """``[(name, data)]``: each event's wire name and its ``data`` as JSON values,
    decoded from the very bytes a client would receive."""
    return [(e.name, orjson.loads(e.to_json())) for e in events]
