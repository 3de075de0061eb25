"""Fixtures the run-manager unit tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from storage.open import open_storage


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[Any]:
    """A fresh SQLite storage in the test's directory, closed after it."""
    opened = await open_storage(tmp_path / "agent.sqlite3")
    try:
        yield opened
    finally:
        await opened.close()
