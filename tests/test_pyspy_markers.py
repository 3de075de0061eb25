"""The profile's phases (``bench/_pyspy.py``) name code that exists. A phase is matched
by a marker naming a project file, or ``function@file``; when the code it names moves (a
module split), the marker matches nothing and its samples silently land in another phase
("run log / durable writer" took a run's history load once ``Agent._prepare`` became
``app/agent/prepare.py``'s ``RunPreparation.prepare``), so a profile misreads where the
CPU went without any error.
"""

from __future__ import annotations

import ast
from pathlib import Path

from bench import _pyspy

ROOT = Path(__file__).resolve().parents[1]


def _defined(path: Path) -> set[str]:
    """The names of every function and method defined in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def test_every_marker_into_the_project_names_existing_code() -> None:
    markers = [m for _, ms in _pyspy.PHASES for m in ms]
    checked = 0
    for marker in markers:
        function, _, part = marker.rpartition("@")
        top = part.split("/", 1)[0]
        if not (ROOT / top).is_dir() or top == "bench":
            continue  # a library's path (uvicorn/, logging/__init__.py): not the project's
        checked += 1
        target = ROOT / part
        assert target.exists(), f"{marker}: no {part} in the project"
        if function:
            assert target.is_file(), marker
            assert function in _defined(target), f"{marker}: {part} defines no {function}"
    assert checked >= 10
