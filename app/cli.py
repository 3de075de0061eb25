"""``agentchat``: serve, ingest, run the reference backend, list buckets, prune keywords."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys
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


# --- serve -------------------------------------------------------------------------------


async def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    from app.factory import create_app

    settings = _settings()
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    servers: list[uvicorn.Server] = []
    if settings.backend_url is None and not args.no_backend:
        from backend.app import create_backend_app

        backend_port = args.backend_port or port + 1
        backend_db = settings.db_path.parent / "backend.sqlite3"
        backend_db.parent.mkdir(parents=True, exist_ok=True)
        servers.append(
            uvicorn.Server(
                uvicorn.Config(create_backend_app(backend_db), host="127.0.0.1", port=backend_port,
                               log_level="warning", lifespan="on")
            )
        )
        settings = settings.with_(backend_url=f"http://127.0.0.1:{backend_port}")
        log.info("reference backend started beside the agent", extra={"url": settings.backend_url})
    agent = uvicorn.Server(
        uvicorn.Config(
            create_app(settings),
            host=host,
            port=port,
            log_level="info",
            lifespan="on",
            timeout_graceful_shutdown=int(args.grace),
            access_log=False,
        )
    )
    print(f"agentchat: serving on http://{host}:{port}  (playground at /, stream at POST /v1/agent/chat)",
          file=sys.stderr)
    servers.insert(0, agent)
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    await _freeze_startup_objects(agent, tasks)
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for s in servers:
        s.should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)
    for t in done:
        if t.exception() is not None:
            raise t.exception()  # type: ignore[misc]


async def _freeze_startup_objects(server: Any, tasks: list[asyncio.Task[None]]) -> None:
    """Once serving, apply the serving GC policy (app/gcpolicy.py)."""
    while not server.started and not any(t.done() for t in tasks):
        await asyncio.sleep(0.05)
    tune_for_serving()


def _serve_reload(args: argparse.Namespace) -> None:
    """``--reload`` for development: uvicorn restarts the app on code changes."""
    settings = _settings()
    port = args.port if args.port is not None else settings.port
    os.environ.setdefault("AGENT_PORT", str(port))
    backend: subprocess.Popen[bytes] | None = None
    if settings.backend_url is None and not args.no_backend:
        # The reloader re-imports the app in a child process; the backend runs beside it
        # in its own process so reloads do not reset it.
        backend_port = args.backend_port or port + 1
        backend = subprocess.Popen([sys.executable, "-m", "app.cli", "backend", "--port", str(backend_port)])
        os.environ["AGENT_BACKEND_URL"] = f"http://127.0.0.1:{backend_port}"
    try:
        _run_reloader(args, settings)
    finally:
        if backend is not None:
            backend.terminate()
            backend.wait(10)


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
    from app.rooms import kb_embedder
    from knowledge.kb import KnowledgeBase

    embedder, why = await kb_embedder(settings)
    log.info("knowledge-base embedder", extra={"reason": why})
    return await KnowledgeBase.open(settings.db_path, embedder)


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
    from agenttools.external_results import ExternalResultStore
    from agenttools.keywords import KeywordStore

    settings = _settings()
    results = await ExternalResultStore.open(settings.db_path)
    store = await KeywordStore.open(settings.db_path, results)
    try:
        removed = await store.prune(min_usage=args.min_usage, older_than_days=args.older_than)
    finally:
        await store.close()
        await results.close()
    print(f"pruned {removed} keywords (usage < {args.min_usage}, unused for more than {args.older_than} days)")
    return 0


async def _backend(args: argparse.Namespace) -> int:
    from backend.app import serve_backend

    settings = _settings()
    db = Path(args.db) if args.db else settings.db_path.parent / "backend.sqlite3"
    db.parent.mkdir(parents=True, exist_ok=True)
    await serve_backend(args.host, args.port, db)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentchat", description="Streaming agent-chat service.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the agent (and the reference backend unless AGENT_BACKEND_URL is set)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--backend-port", type=int, help="port of the embedded reference backend (default: port+1)")
    serve.add_argument("--no-backend", action="store_true", help="do not start the reference backend")
    serve.add_argument("--grace", type=float, default=20.0, help="seconds running streams get on shutdown")
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
        if args.reload:
            _serve_reload(args)
            return 0
        try:
            asyncio.run(_serve(args))
        except KeyboardInterrupt:
            pass
        return 0
    runners = {"ingest": _ingest, "buckets": _buckets, "backend": _backend}
    if args.command == "keywords":
        return asyncio.run(_prune_keywords(args))
    return asyncio.run(runners[args.command](args))


if __name__ == "__main__":
    raise SystemExit(main())
