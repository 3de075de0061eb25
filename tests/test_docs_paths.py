"""Every repository path the docs quote exists.

``docs/security.md`` sent a reader to ``agenttools/log_redaction.py``,
``agenttools/untrusted.py`` and ``app/masking.py`` long after those modules moved to
``agenttools/core/`` and ``app/ops/``: a newcomer checking a claim found no such file.
A quoted path is one in backticks whose first folder is one of the repository's
top-level folders; a ``*`` in it must match at least one file, and a ``module.name``
(a function named by its module's path) must name a module that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
QUOTED_PATH = re.compile(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.*-]+)+)`")
#: Folders a running service makes (not in the repository).
MADE_AT_RUN_TIME = {"data"}


def _top_level_folders() -> set[str]:
    return {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))} - MADE_AT_RUN_TIME


def _exists(quoted: str) -> bool:
    if "*" in quoted:
        return any(ROOT.glob(quoted))
    path = ROOT / quoted
    if path.exists():
        return True
    module, _, _name = quoted.rpartition(".")  # app/server/history_routes.delete_conversation
    return bool(module) and (ROOT / f"{module}.py").is_file()


def test_every_repository_path_in_the_docs_exists() -> None:
    top = _top_level_folders()
    assert {"app", "docs", "tests"} <= top
    missing = [
        f"{doc.relative_to(ROOT)}: {quoted}"
        for doc in DOCS
        for quoted in QUOTED_PATH.findall(doc.read_text())
        if quoted.split("/")[0] in top and not _exists(quoted)
    ]
    assert missing == []
