"""The engines the storage contract suite runs against.

``store_engine`` yields a whole storage bundle (``.drafts``, ``.keywords``,
``.external_results`` …) on a fresh database. Today only the embedded SQLite engine;
PostgreSQL joins as a second param, and every contract test then runs against both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.storage import opened_storage

ENGINES = ["sqlite"]


@pytest.fixture(params=ENGINES)
async def store_engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        async with opened_storage(tmp_path / "contract.db") as storage:
            yield storage
    else:  # pragma: no cover - a new engine must be wired here
        raise AssertionError(f"unknown storage engine {request.param!r}")
