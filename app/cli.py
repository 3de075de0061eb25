"""``agentchat``: serve, ingest, run the reference backend, list buckets, prune keywords.

The reference backend (``backend/``) always runs in its own process (``python -m backend``):
the agent talks to it over HTTP only, as it would to the real one, and never imports it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.config import ConfigError, Settings
from app.gcpolicy import tune_for_serving
from app.logs import configure_logging

log = logging.getLogger("agentchat.cli")


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        print(f"agentchat: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


# --- the reference backend, in its own process ----------------------------------------------

BACKEND_START_TIMEOUT_S = 30.0


def _backend_db(settings: Settings, explicit: str | None = None) -> Path:
    """The backend's SQLite file: ``explicit``, else beside ``AGENT_DB_PATH``."""
    return Path(explicit) if explicit else settings.db_path.parent / "backend.sqlite3"


def _backend_argv(host: str, port: int, db: Path, *, log_level: str = "info") -> list[str]:
    return [sys.executable, "-m", "backend", "--host", host, "--port", str(port), "--db", str(db),
            "--log-level", log_level]


def _wait_until_up(proc: subprocess.Popen[bytes], url: str, timeout_s: float = BACKEND_START_TIMEOUT_S) -> None:
    """Block until ``url/healthz`` answers 200; exit with a message if the process dies or never answers."""
    import httpx

    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while (code := proc.poll()) is None:
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                print(f"agentchat: the reference backend did not answer at {url} within {timeout_s:g} s",
                      file=sys.stderr)
                raise SystemExit(1)
            time.sleep(0.05)
    print(f"agentchat: the reference backend exited with code {code} (is {url} already in use?)", file=sys.stderr)
    raise SystemExit(1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()  # SIGTERM: uvicorn shuts down gracefully and the database is closed
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _reference_backend(settings: Settings, args: argparse.Namespace, port: int, log_level: str) -> Iterator[str | None]:
    """Start ``python -m backend`` beside the agent unless ``AGENT_BACKEND_URL`` or
    ``--no-backend`` says otherwise; yield its URL once it answers; stop it on the way out."""
    if settings.backend_url is not None or args.no_backend:
        yield None
        return
    backend_port = args.backend_port or port + 1
    url = f"http://127.0.0.1:{backend_port}"
    proc = subprocess.Popen(
        _backend_argv("127.0.0.1", backend_port, _backend_db(settings), log_level=log_level),
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )
    try:
        _wait_until_up(proc, url)
        log.info("reference backend started beside the agent", extra={"url": url, "pid": proc.pid})
        yield url
    finally:
        _stop(proc)


def _die_with_parent() -> None:
    """In the backend child, before exec (Linux): SIGTERM it when the agent dies, even by SIGKILL."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # uvicorn handles SIGTERM while it serves, then restores this handler and re-raises the
    # signal; the default action would kill the process before the backend is stopped.
    raise SystemExit(128 + signum)


# --- serve -------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> None:
    settings = _settings()
    port = args.port if args.port is not None else settings.port
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if args.reload:
        os.environ.setdefault("AGENT_PORT", str(port))
        # The reloader re-imports the app in a child process; the backend keeps running
        # in its own, so reloads do not reset it.
        with _reference_backend(settings, args, port, "info") as url:
            if url is not None:
                os.environ["AGENT_BACKEND_URL"] = url
            _run_reloader(args, settings)
        return
    with _reference_backend(settings, args, port, "warning") as url:
        if url is not None:
            settings = settings.with_(backend_url=url)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve_agent(args, settings, port))


async def _serve_agent(args: argparse.Namespace, settings: Settings, port: int) -> None:
    import uvicorn

    from app.factory import create_app
    from app.serving import DrainingServer

    host = args.host or settings.host
    grace_s = settings.shutdown_grace_s if args.grace is None else args.grace
    app = create_app(settings, shutdown_deadline_s=grace_s)

    async def drain() -> None:
        svc = getattr(app.state, "services", None)
        if svc is not None:
            await svc.runs.shutdown(grace_s)

    agent = DrainingServer(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="info",
            lifespan="on",
            timeout_graceful_shutdown=5,
            access_log=False,
        ),
        drain,
    )
    print(f"agentchat: serving on http://{host}:{port}  (playground at /, stream at POST /v1/agent/chat)",
          file=sys.stderr)
    task = asyncio.create_task(agent.serve())
    await _freeze_startup_objects(agent, [task])
    await task


async def _freeze_startup_objects(server: Any, tasks: list[asyncio.Task[None]]) -> None:
    """Once serving, apply the serving GC policy (app/gcpolicy.py)."""
    while not server.started and not any(t.done() for t in tasks):
        await asyncio.sleep(0.05)
    tune_for_serving()


def _run_reloader(args: argparse.Namespace, settings: Settings) -> None:
    import uvicorn

    uvicorn.run(
        "app.factory:create_app",
        factory=True,
        host=args.host or settings.host,
        port=args.port if args.port is not None else settings.port,
        reload=True,
        reload_dirs=[str(Path(__file__).resolve().parent.parent)],
        log_level="info",
        access_log=False,  # stream URLs carry tokens
    )


# --- knowledge base ------------------------------------------------------------------------


async def _open_kb(settings: Settings) -> Any:
    from app.kb_file import open_kb_file
    from app.rooms import kb_embedder

    embedder, why = await kb_embedder(settings)
    log.info("knowledge-base embedder", extra={"reason": why})
    return await open_kb_file(settings.db_path, embedder)


def _progress_bar(done: int, total: int, label: str) -> None:
    width = 30
    filled = int(width * done / total) if total else width
    bar = "#" * filled + "-" * (width - filled)
    tail = label if len(label) <= 40 else "…" + label[-39:]
    sys.stderr.write(f"\r[{bar}] {done}/{total} {tail:<40}")
    sys.stderr.flush()
    if done >= total:
        sys.stderr.write("\n")


async def _ingest(args: argparse.Namespace) -> int:
    settings = _settings()
    kb = await _open_kb(settings)
    try:
        paths = [Path(p) for p in args.paths]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            print(f"agentchat ingest: no such file or directory: {', '.join(missing)}", file=sys.stderr)
            return 2
        report = await kb.ingest_paths(
            paths, bucket=args.bucket, progress=None if args.quiet else _progress_bar
        )
    finally:
        await kb.aclose()
    print(_report_text(report))
    return 1 if getattr(report, "rejected", None) and args.strict else 0


def _report_text(report: Any) -> str:
    parts = []
    for name in ("added", "updated", "skipped", "deleted", "chunks"):
        if hasattr(report, name):
            parts.append(f"{name}={getattr(report, name)}")
    rejected = getattr(report, "rejected", []) or []
    lines = ["ingested: " + " ".join(parts) + f" rejected={len(rejected)}"]
    for r in rejected[:50]:
        where = f"{r.source} line {r.line}" if getattr(r, "line", None) else str(getattr(r, "source", ""))
        lines.append(f"  rejected: {where}: {getattr(r, 'reason', r)}")
    return "\n".join(lines)


async def _buckets(args: argparse.Namespace) -> int:
    settings = _settings()
    kb = await _open_kb(settings)
    try:
        if getattr(args, "bucket_command", None) == "create":
            fields: dict[str, str] = {}
            for spec in args.fields:
                name, _, kind = spec.partition(":")
                if not name or not kind:
                    print(f"agentchat buckets create: field {spec!r} must be NAME:TYPE", file=sys.stderr)
                    return 2
                fields[name] = kind.upper()
            try:
                await kb.create_bucket(args.name, fields)
            except ValueError as exc:
                print(f"agentchat buckets create: {exc}", file=sys.stderr)
                return 2
        buckets = await kb.list_buckets()
    finally:
        await kb.aclose()
    if not buckets:
        print("no buckets")
    for b in buckets:
        schema = ", ".join(f"{k}:{v}" for k, v in (b.fields or {}).items()) or "(no typed fields)"
        print(f"{b.name:<20} documents={b.documents:<8} chunks={b.chunks:<8} {schema}")
    return 0


async def _prune_keywords(args: argparse.Namespace) -> int:
    from agenttools.keywords import KeywordIndex
    from storage.sqlite import open_sqlite_storage

    settings = _settings()
    storage = await open_sqlite_storage(settings.db_path)
    try:
        index = KeywordIndex(storage.keywords, storage.external_results)
        removed = await index.prune(min_usage=args.min_usage, older_than_days=args.older_than)
    finally:
        await storage.close()
    print(f"pruned {removed} keywords (usage < {args.min_usage}, unused for more than {args.older_than} days)")
    return 0


def _backend(args: argparse.Namespace) -> int:
    """``agentchat backend``: become ``python -m backend`` (same pid, signals and exit code)."""
    argv = _backend_argv(args.host, args.port, _backend_db(_settings(), args.db))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentchat", description="Streaming agent-chat service.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the agent (and the reference backend unless AGENT_BACKEND_URL is set)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--backend-port", type=int, help="port of the embedded reference backend (default: port+1)")
    serve.add_argument("--no-backend", action="store_true", help="do not start the reference backend")
    serve.add_argument("--grace", type=float, default=None,
                       help="seconds live runs may go on after SIGTERM before they are released "
                            "for the next process (default AGENT_SHUTDOWN_GRACE_S, 20)")
    serve.add_argument("--reload", action="store_true", help="restart on code changes (development)")

    ingest = sub.add_parser("ingest", help="ingest files or directories into the knowledge base")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--bucket", default="default")
    ingest.add_argument("--quiet", action="store_true", help="no progress bar")
    ingest.add_argument("--strict", action="store_true", help="exit 1 when any record was rejected")

    buckets = sub.add_parser("buckets", help="list buckets, their schemas and counts")
    bucket_sub = buckets.add_subparsers(dest="bucket_command")
    create = bucket_sub.add_parser("create", help="create a bucket with typed metadata fields")
    create.add_argument("name")
    create.add_argument("fields", nargs="*", metavar="FIELD:TYPE",
                        help="TYPE is TEXT, INTEGER, REAL, DATE or BOOLEAN (e.g. vendor:TEXT amount:REAL)")

    kw = sub.add_parser("keywords", help="keyword index maintenance")
    kw_sub = kw.add_subparsers(dest="kw_command", required=True)
    prune = kw_sub.add_parser("prune", help="delete rarely used, stale keywords")
    prune.add_argument("--min-usage", type=int, required=True, help="delete keywords used fewer times than this")
    prune.add_argument("--older-than", type=float, required=True, help="…and unused for more than this many days")

    backend = sub.add_parser("backend", help="run the reference Ichor-compatible backend alone")
    backend.add_argument("--host", default="127.0.0.1")
    backend.add_argument("--port", type=int, default=8081)
    backend.add_argument("--db", help="SQLite file (default: beside AGENT_DB_PATH)")

    args = parser.parse_args(argv)
    # numpy work (query embeddings, vector scans) runs in worker threads beside the event
    # loop; multi-threaded BLAS on top of that fights the loop for the cores. Must be set
    # before numpy is first imported, which nothing above has done.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    configure_logging()
    if args.command == "serve":
        with contextlib.suppress(KeyboardInterrupt):
            _serve(args)
        return 0
    if args.command == "backend":
        return _backend(args)
    runners = {"ingest": _ingest, "buckets": _buckets}
    if args.command == "keywords":
        return asyncio.run(_prune_keywords(args))
    return asyncio.run(runners[args.command](args))


if __name__ == "__main__":
    raise SystemExit(main())
