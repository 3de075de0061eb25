"""Node.js packages for tests, installed from a directory's own lock file on demand.

A directory with ``package.json`` + ``package-lock.json`` (``tests/js``,
``clients/typescript``) gets ``npm ci`` when its ``node_modules`` is missing or older
than the lock, the way the browser test installs Chromium: nothing is downloaded that
the lock does not name, and a second call in the same checkout costs a ``stat``. The
install runs under a file lock: pytest-xdist's workers may ask at once, and ``npm ci``
first deletes ``node_modules`` — a second install would pull the packages out from under
a script the first worker already runs.
"""

from __future__ import annotations

import asyncio
import fcntl
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

__all__ = ["NodeScript", "npm_ci"]


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
        with open(package_dir / ".npm-ci.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another worker's install: wait for it (bounded by its timeout)
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


class NodeScript:
    """One running ``node <script>.mjs`` that prints a JSON record a line (the test
    scripts under ``tests/js``); the records arrive in ``records`` as printed, the last
    one ``{"kind": "done"}`` when the script ends well."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.records: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.records.append(orjson.loads(line))
            self._changed.set()
        self._changed.set()

    async def until(self, predicate: Any, what: str, timeout: float = 30) -> None:
        try:
            async with asyncio.timeout(timeout):
                while not predicate(self.records):
                    if self._reader.done():
                        raise AssertionError(f"the client exited before {what}: {self.records}")
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            seen = self.records[-5:]
            raise AssertionError(f"the node client did not see {what} within {timeout} s: {seen}") from None

    async def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def finish(self, timeout: float = 30) -> list[dict[str, Any]]:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        assert self.proc.stderr is not None
        try:
            async with asyncio.timeout(timeout):
                await self._reader
                err = (await self.proc.stderr.read()).decode()
                code = await self.proc.wait()
        except TimeoutError:
            raise AssertionError(f"the node script did not end within {timeout} s: {self.records[-5:]}") from None
        assert code == 0, err
        assert self.records and self.records[-1]["kind"] == "done", (self.records, err)
        return self.records

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
