"""A lock file removed and made again between ``open`` and ``flock``: what a clean-up of
its directory racing a process that takes the lock looks like (``storage.file_lock``)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest


def replace_on_first_flock(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[bool]:
    """Patch ``fcntl.flock`` so that its first call unlinks ``path`` and creates it again
    before locking (the descriptor then names the old, unlinked file). The returned list
    holds ``True`` once that happened; ``monkeypatch.undo()`` or setting ``fcntl.flock``
    back restores the real call."""
    real_flock = fcntl.flock
    replaced: list[bool] = []

    def flock(fd: int, op: int) -> None:
        if not replaced:
            replaced.append(True)
            path.unlink()
            path.touch()
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    return replaced
