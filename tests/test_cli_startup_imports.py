"""What an ``agentchat`` process imports before its command does anything, read from
``python -X importtime`` (every module the process imported, by name).

Every ``agentchat`` process paid ~0.65 CPU-s of imports: ``--help`` of any command
imported asyncio, the settings, logging's JSON formatter and the reference backend's
keeper, and ``buckets``, ``docs`` or ``compact`` on a machine with no database yet
imported the whole knowledge base with numpy to say so in one line. The user waits for
it at every command, and the test suite in every CLI subprocess. The parser is built
from the standard library and ``app.cli``'s own small modules; the rest is imported by
the command that runs (``app/cli/commands.py``)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.support.deadline import reap, within
from tests.support.procs import REPO, child_env

pytestmark = pytest.mark.slow  # `agentchat` CLI subprocesses

#: Imported by no command that runs in any process - a one-off command never serves.
NEVER_FOR_A_ONE_OFF = (
    "starlette", "uvicorn", "httpx", "mcp", "psycopg", "app.factory", "app.cli.serving",
    "app.cli.backend_keeper", "app.cli.reloader",
)
#: What only a command that runs needs: its settings, event loop, log formatters, storage.
NOT_FOR_THE_PARSER = (
    *NEVER_FOR_A_ONE_OFF, "asyncio", "app.config", "app.ops.logs", "pythonjsonlogger", "orjson", "ssl",
    "numpy", "knowledge", "storage", "aiosqlite", "llm", "pydantic",
)
#: What saying "no database yet" needs none of: the storage and the knowledge base.
NOT_WITHOUT_A_DATABASE = (
    *NEVER_FOR_A_ONE_OFF, "numpy", "knowledge", "storage.sqlite", "storage.interfaces", "storage.kb_records",
    "aiosqlite", "llm", "pydantic",
)


async def imports_of(env: dict[str, str], *argv: str) -> tuple[int, str, str, set[str]]:
    """``python -X importtime -m app.cli ARGV``: exit code, stdout, stderr without the
    import lines, and the modules the process imported."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-X", "importtime", "-m", "app.cli", *argv, cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await within(proc.communicate(), f"agentchat {' '.join(argv)}", 120)
    finally:
        await reap(proc, "agentchat", grace=5)
    assert proc.returncode is not None
    modules: set[str] = set()
    said: list[str] = []
    for line in err.decode().splitlines():
        if not line.startswith("import time:"):
            said.append(line)
        elif "imported package" not in line:  # the header of importtime's table
            modules.add(line.rsplit("|", 1)[1].strip())
    return proc.returncode, out.decode(), "\n".join(said), modules


def among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """Those of ``modules`` that are one of ``names`` or inside one of those packages."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize(
    "argv",
    [("--help",), ("serve", "--help"), ("ingest", "--help"), ("buckets", "list", "--help"),
     ("docs", "list", "--help"), ("keywords", "prune", "--help"), ("compact", "--help"), ("backend", "--help")],
    ids=lambda argv: " ".join(argv),
)
async def test_help_is_the_parser_alone(tmp_path: Path, argv: tuple[str, ...]) -> None:
    code, out, err, modules = await imports_of(child_env({"AGENT_DB_PATH": str(tmp_path / "kb.db")}), *argv)
    assert (code, err) == (0, ""), err
    assert out.startswith(f"usage: agentchat {' '.join(argv[:-1])}".rstrip() + " "), out
    assert "app.cli.commands" in modules  # the parser was built, and its imports seen
    assert among(modules, NOT_FOR_THE_PARSER) == []


@pytest.mark.parametrize(
    "argv",
    [("buckets",), ("docs", "list"), ("compact",), ("keywords", "prune", "--min-usage", "2", "--older-than", "30")],
    ids=lambda argv: " ".join(argv[:2]),
)
async def test_no_database_yet_is_said_without_the_knowledge_base(tmp_path: Path, argv: tuple[str, ...]) -> None:
    code, out, err, modules = await imports_of(child_env({"AGENT_DB_PATH": str(tmp_path / "kb.db")}), *argv)
    assert (code, out) == (1, "")
    assert err.startswith(f"agentchat {' '.join(argv[:2])}: no database yet at {tmp_path / 'kb.db'};"), err
    assert not (tmp_path / "kb.db").exists()
    assert among(modules, NOT_WITHOUT_A_DATABASE) == []


async def test_listing_buckets_starts_no_server_parts(tmp_path: Path) -> None:
    """``buckets`` on a database opens the knowledge base (numpy and all) but nothing of
    serving: no web framework, HTTP client, MCP SDK, reloader or backend keeper."""
    from app.cli.kb_file import kb_file

    async with kb_file(tmp_path / "kb.db", None) as kb:
        await kb.create_bucket("invoices", {"vendor": "TEXT"})
    code, out, err, modules = await imports_of(child_env({"AGENT_DB_PATH": str(tmp_path / "kb.db")}), "buckets")
    assert (code, err) == (0, ""), err
    assert out.splitlines()[0].split() == ["invoices", "documents=0", "chunks=0", "vendor:TEXT"]
    assert "knowledge.kb" in modules
    assert among(modules, NEVER_FOR_A_ONE_OFF) == []
