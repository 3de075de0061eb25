"""The reference backend says in one line which database it cannot open, and why.

Found by the operator's walk (PostgreSQL, ``serve --workers 2`` from a folder the service
user may not write, as a systemd unit without ``WorkingDirectory`` runs it from ``/``):
``serve`` starts the backend on ``backend.sqlite3`` beside ``AGENT_DB_PATH`` (``data/``
under the working directory by default, also on PostgreSQL), and the backend died with
``mkdir``'s traceback (``OSError: [Errno 30] Read-only file system: 'data'``), then
``serve`` guessed ``is http://127.0.0.1:8001 already in use?``. A folder it can make but
a file SQLite cannot open was uvicorn's start-up traceback ending ``unable to open
database file``, naming no file. Now either is one line naming the absolute path, the
reason and where the path comes from, and exit code 1.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.reference_backend import reference_backend
from app.config import Settings
from tests.support.server import free_port


def _backend(db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", "backend", "--port", str(free_port()), "--db", str(db)],
                          capture_output=True, text=True, timeout=120)


def test_a_database_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file where the folder would go\n")
    db = tmp_path / "taken" / "backend.sqlite3"
    done = _backend(db)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"the reference backend cannot open its database {db}: "), line
    assert "Not a directory" in line or "File exists" in line, line
    assert "--db" in line and "AGENT_DB_PATH" in line, line


def test_a_file_sqlite_cannot_open_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "a-folder.sqlite3"
    db.mkdir()
    done = _backend(db)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"the reference backend cannot open its database {db}: unable to open database file"), line


def test_serve_shows_the_backend_s_reason(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """``serve``'s own start of it: the line comes before serve's exit, with the path made
    absolute (a relative ``data/`` says nothing about the directory serve runs in)."""
    (tmp_path / "taken").write_text("")
    settings = Settings(db_path=tmp_path / "taken" / "agentchat.sqlite3")
    args = argparse.Namespace(no_backend=False, backend_port=free_port())
    with pytest.raises(SystemExit) as exited, reference_backend(settings, args, 0, "info"):
        pass
    assert exited.value.code == 1
    said = capfd.readouterr().err
    assert f"the reference backend cannot open its database {tmp_path / 'taken' / 'backend.sqlite3'}: " in said
    assert "Traceback" not in said
    # serve's own line no longer guesses a taken port (it checked the port free just before):
    # it points at the backend's reason above it.
    assert "already in use" not in said, said
    assert "the reference backend exited with code 1 before answering" in said, said
