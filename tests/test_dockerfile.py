"""The image copies every package the project installs: an operator review found the
Dockerfile without ``events/`` and ``client/``, so ``agentchat serve`` in the image died
with ``ModuleNotFoundError: No module named 'events'`` and docker-compose's replicas
crash-looped. No docker on the test machines: the Dockerfile's ``COPY`` lines are read
against ``pyproject.toml``'s package list, and setuptools' discovery is run on exactly
what the image copies."""

from __future__ import annotations

import re
import shutil
import tomllib
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
