"""Shared fixtures: build a real app on a temp SQLite file and serve it on loopback."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from inspect import unwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.factory import create_app
from tests.support.postgres import PostgresUnavailable, TestPostgres
from tests.support.server import serve_app
from tests.support.sqlite_templates import SqliteTemplates, build_sqlite_templates
from tests.support.sse import SSEEvent, iter_sse

#: Names the ``agentchat-*`` directories a session left in the temporary directory; deals the
#: longest modules out to xdist workers first (and writes the table it deals by).
pytest_plugins = ["tests.support.runtime_leaks", "tests.support.module_order"]

#: How long one ``collect_sse`` read may take, at most (a guard, never a measure of speed).
SSE_GUARD_S = 240.0


@pytest.fixture(scope="session", autouse=True)
def _one_ca_bundle_load() -> Iterator[None]:
    """Every HTTP client (httpx's transports, the app's pools, google-genai's clients) loads
    the CA bundle into a new SSL context: ~50 ms each, several per app a test serves, and
    no test talks TLS. A verifying context for a given bundle is built once and shared."""
    import ssl

    build = ssl.create_default_context
    built: dict[tuple[Any, Any], ssl.SSLContext] = {}

    def shared(
        purpose: Any = ssl.Purpose.SERVER_AUTH, *, cafile: Any = None, capath: Any = None, cadata: Any = None
    ) -> ssl.SSLContext:
        if purpose != ssl.Purpose.SERVER_AUTH or cadata is not None:
            return build(purpose, cafile=cafile, capath=capath, cadata=cadata)
        key = (cafile, capath)
        if key not in built:
            built[key] = build(purpose, cafile=cafile, capath=capath)
        return built[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ssl, "create_default_context", shared)
        yield


@pytest.fixture(scope="session")
def sqlite_templates(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplates:
    """An empty migrated agent database and a seeded reference backend's, made once a
    session (of each xdist worker): a test copies them instead of migrating (and seeding)
    fresh files (``tests/support/sqlite_templates.py``)."""
    return build_sqlite_templates(tmp_path_factory.mktemp("sqlite-templates"))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TestPostgres]:
    """One PostgreSQL (with pgvector) for the whole session (each xdist worker's own), with
    the migrated template; every test takes a fresh database of it (``server.database()``).
    The suites outside ``tests/storage`` (replicas, workers, migrate-db, the engine
    comparison) use it too instead of starting a server per module: an ``initdb``, a start
    and a template migration each, ~3.5 s apiece on a loaded 2-core machine."""
    try:
        server = TestPostgres().start()
    except PostgresUnavailable as exc:
        pytest.fail(f"the PostgreSQL tests need a server: {exc}", pytrace=False)
    try:
        server.prepare_template()
        yield server
    finally:
        server.stop()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings for an isolated app: the defaults (provider and embedder ``auto``, the
    flow mandatory in ``knowledge``) on a fresh temp DB, without the sample KB. Ollama
    points at a closed port, so ``auto`` finds no model whatever runs on this machine:
    the extractive answerer and the hashing (or, when installed, the local) embedder."""
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "OLLAMA_HOST": "http://127.0.0.1:9",
        }
    )


@pytest.fixture
def offline(tmp_path: Path) -> Settings:
    """``offline_settings`` in the test's own folder."""
    return offline_settings(tmp_path)


def offline_settings(folder: Path) -> Settings:
    """The default configuration (provider and embedder ``auto``, the flow mandatory in
    ``knowledge``, on demand in ``workflow`` and ``tables``) with no model reachable: the
    extractive answerer and the embedder ``auto`` falls back to; no sample KB, and an
    open admin route so a test can ingest its own documents. Its database is in ``folder``
    (a module-scoped server's own, from ``tmp_path_factory``)."""
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(folder / "agent.sqlite3"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_ADMIN_OPEN": "true",  # POST /v1/kb/documents in `none` mode
            "OLLAMA_HOST": "http://127.0.0.1:9",
        }
    )


@asynccontextmanager
async def running_app(settings: Settings, **overrides: Any) -> AsyncIterator[tuple[str, Any]]:
    """Serve ``create_app(settings, **overrides)``; yield (base_url, app)."""
    app = create_app(settings, **overrides)
    async with serve_app(app) as base_url:
        yield base_url, app


async def collect_sse(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    stop: Callable[[SSEEvent], bool] | None = None,
    deadline_s: float = SSE_GUARD_S,
    **kwargs: Any,
) -> list[SSEEvent]:
    """Read an SSE response to its end (or until ``stop`` says so), as a browser parses it.

    ``deadline_s`` bounds the whole read: heartbeats keep a stream that never ends from
    ever hitting the client's read timeout, so without it a run that never finishes
    would hang the test instead of failing it with the events seen so far."""
    events: list[SSEEvent] = []
    guard = asyncio.timeout(deadline_s)
    try:
        async with guard, client.stream(method, url, **kwargs) as response:
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            async for ev in iter_sse(response.aiter_lines()):
                events.append(ev)
                if stop is not None and stop(ev):
                    break
    except TimeoutError:
        if not guard.expired():
            raise
        seen = [e.event for e in events if e.event != "heartbeat"]
        raise AssertionError(
            f"the SSE stream of {method} {url} did not end within {deadline_s} s; events so far: {seen[-30:]}"
        ) from None
    return events


def names(events: list[SSEEvent]) -> list[str]:
    return [e.event for e in events if e.event != "heartbeat"]


# --- markers (registered in pyproject.toml; `make test-fast` leaves these four out) ------------
# ``slow`` is written in the slow modules themselves (``pytestmark = pytest.mark.slow``).
# The other three come from what a test uses, so a new test carries them without anyone
# thinking of it: the names its function, or a fixture it depends on, calls.
_USES = {
    "postgres": {"TestPostgres"},  # tests/support/postgres.py: starts a server
    "browser": {"find_chromium"},  # tests/browser/cdp.py
    "node": {"npm_ci", "NodeScript", "npm_docs"},  # tests/support/node.py, Node's npm docs
}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection left alive (``gc.freeze()``), as ``agentchat serve`` does after
    start-up (``app/cli/gcpolicy.py``): every module, test item and fixture definition lives
    until the process ends, so full collections need never walk them again. An xdist worker
    collects the whole suite (~400,000 tracked objects, modules and items; nothing a test
    file leaves grows it much) and each full collection walked all of them: on 25 files of
    one worker's share, 14 full collections took 3.5-3.9 s, frozen 28 took 2.9-3.0 s.
    Objects made later, by the tests, are collected as before; objects freed by their
    reference count are freed frozen or not."""
    gc.collect()
    gc.freeze()


def _names_called(item: pytest.Item) -> set[str]:
    """The global names read by the test function and by every fixture in its closure."""
    functions = [getattr(item, "obj", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if defs:
            functions.append(defs[-1].func)
    names: set[str] = set()
    for function in functions:
        code = getattr(unwrap(function), "__code__", None) if function is not None else None
        if code is not None:
            names.update(code.co_names)
    return names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        called = _names_called(item)
        for marker, names in _USES.items():
            if called & names:
                item.add_marker(marker)
        # The engine-parametrised fixtures (tests/storage/conftest.py …) reach the session's
        # PostgreSQL through request.getfixturevalue("pg_server"): only their postgres cases.
        callspec = getattr(item, "callspec", None)
        if "pg_server" in getattr(item, "fixturenames", ()) or (
            callspec is not None and any(v == "postgres" for v in callspec.params.values() if isinstance(v, str))
        ):
            item.add_marker("postgres")
