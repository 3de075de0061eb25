"""The image copies every package the project installs: an operator review found the
Dockerfile without ``events/`` and ``client/``, so ``agentchat serve`` in the image died
with ``ModuleNotFoundError: No module named 'events'`` and docker-compose's replicas
crash-looped. No docker on the test machines: the Dockerfile's ``COPY`` lines are read
against ``pyproject.toml``'s package list, and setuptools' discovery is run on exactly
what the image copies."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import setuptools

ROOT = Path(__file__).resolve().parent.parent


def _copied() -> list[str]:
    """The source paths of the Dockerfile's ``COPY`` lines."""
    out: list[str] = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        m = re.match(r"^COPY\s+(.+)\s+\S+$", line.strip())
        if m:
            out.extend(m.group(1).split())
    return out


def _packages() -> list[str]:
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return [name.rstrip("*") for name in found["include"]]


def test_every_installed_package_is_copied_into_the_image() -> None:
    copied = set(_copied())
    missing = [p for p in _packages() if p not in copied]
    assert not missing, f"Dockerfile does not COPY {missing}"


def test_the_packages_found_in_what_the_image_copies_are_every_package(tmp_path: Path) -> None:
    """setuptools' own discovery (``[tool.setuptools.packages.find]``) run on a tree of
    exactly the image's copies finds every top-level package the project installs."""
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for name in _copied():
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
    packages = setuptools.find_packages(where=str(tmp_path), include=found["include"], exclude=found.get("exclude", ()))
    tops = {p.split(".")[0] for p in packages}
    assert set(_packages()) <= tops, f"the image would install without {set(_packages()) - tops}"


def _healthcheck_code() -> str:
    """The Python the image's ``HEALTHCHECK`` runs (``CMD python -c "..."``)."""
    text = (ROOT / "Dockerfile").read_text()
    m = re.search(r'HEALTHCHECK[^\n]*\\\n\s*CMD python -c "(.+)"\n', text)
    assert m, "no HEALTHCHECK ... CMD python -c line"
    return m.group(1)


def _serve_readyz(status: int) -> tuple[ThreadingHTTPServer, int]:
    class Readyz(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == "/readyz" else 404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Readyz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def test_the_healthcheck_probes_the_port_agent_port_names() -> None:
    """An image run with ``AGENT_PORT=9000`` (the README's way past a taken port) serves
    there; a health check fixed at 8000 marked it unhealthy for ever, and orchestrators
    that act on it restarted a working replica."""
    for status, healthy in ((200, True), (503, False)):
        server, port = _serve_readyz(status)
        try:
            done = subprocess.run([sys.executable, "-c", _healthcheck_code()], capture_output=True,
                                  env={**os.environ, "AGENT_PORT": str(port)}, timeout=30)
        finally:
            server.shutdown()
            server.server_close()
        assert (done.returncode == 0) is healthy, (status, done.stderr[-300:])
