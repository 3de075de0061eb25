"""Node.js packages for tests, installed from a directory's own lock file on demand.

A directory with ``package.json`` + ``package-lock.json`` (``tests/js``,
``clients/typescript``) gets ``npm ci`` when its ``node_modules`` is missing or older
than the lock, the way the browser test installs Chromium: nothing is downloaded that
the lock does not name, and a second call in the same checkout costs a ``stat``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["npm_ci"]


def _installed(package_dir: Path) -> bool:
    marker = package_dir / "node_modules" / ".package-lock.json"  # written by npm ci / npm install
    lock = package_dir / "package-lock.json"
    return marker.exists() and marker.stat().st_mtime >= lock.stat().st_mtime


def npm_ci(package_dir: Path) -> str:
    """The path of ``node``, with ``package_dir``'s locked packages installed. Fails the
    test (never skips it) when Node.js or npm is missing or the install fails."""
    node_bin, npm_bin = shutil.which("node"), shutil.which("npm")
    if node_bin is None or npm_bin is None:
        pytest.fail(
            "these tests need Node.js >= 18 and npm (Debian: apt-get install nodejs npm; .ci/run installs them)",
            pytrace=False,
        )
    if not _installed(package_dir):
        done = subprocess.run(
            [npm_bin, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=package_dir,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci in {package_dir} failed:\n{done.stdout}\n{done.stderr}", pytrace=False)
    return node_bin
