"""Which files an ingest opens, in order: for tests that an ingest reads a file once, or
not at all (its stamp unchanged, or a repeat settled by the same-page check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from knowledge import ingest as ingest_module
from knowledge import loaders, samepage


def record_opened_files(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the ingest loads and every page the same-page check reads (its cheap
    read of a page's main region, or a load), appended to the returned list as it happens."""
    calls: list[Path] = []
    region_text = samepage.main_region_text

    def counting(path: Path, *args: Any, **kwargs: Any) -> Any:
        calls.append(path)
        return loaders.load_file(path, *args, **kwargs)

    def region(path: Path) -> str | None:
        calls.append(path)
        return region_text(path)

    monkeypatch.setattr(ingest_module, "load_file", counting)
    monkeypatch.setattr(samepage, "load_file", counting)
    monkeypatch.setattr(samepage, "main_region_text", region)
    return calls
