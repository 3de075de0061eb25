"""The knowledge-base commands of ``agentchat``: ``ingest``, ``buckets``, ``docs``.

They work directly on the service's database (``app.cli.database``: ``AGENT_DATABASE_URL``,
else the file at ``AGENT_DB_PATH``), never through the server.
What a librarian needs to trust an ingestion: every file is either read or counted
under the reason it was skipped; binary and non-UTF-8 files are rejected with a
reason; symbolic links are followed only when asked; files over the size limit are
skipped with a warning; and the exit code is not 0 when anything was rejected
(``--keep-going`` says that is fine). Progress goes to stderr
(``app/cli/ingest_progress.py``); the report's words are ``app/cli/ingest_report.py``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from app.cli.counts import plural
from app.cli.groups import command_group

if TYPE_CHECKING:  # the rest is imported by the command that runs, never by its --help
    from app.config import Settings
    from knowledge.types import BucketInfo

log = logging.getLogger("agentchat.cli")

EXIT_REJECTED = 1
EXIT_USAGE = 2
MAX_LIST_LIMIT = 10_000
#: ``ingest``'s default file size limit: ``knowledge.filecheck.DEFAULT_MAX_FILE_MB``
#: (``tests/test_cli_kb.py`` keeps them equal), named here because every ``agentchat``
#: command builds this parser - ``serve --workers``' supervisor included - and importing
#: anything of ``knowledge`` loads the whole knowledge base with numpy (~20 MB, ~1 s).
DEFAULT_MAX_FILE_MB = 5.0


# --- the commands ----------------------------------------------------------------------------


def add_kb_commands(sub: Any) -> None:
    """Register ``ingest``, ``buckets`` and ``docs`` on the ``agentchat`` sub-parsers."""
    ingest = sub.add_parser(
        "ingest", help="ingest files or directories into the knowledge base",
        description="Read the supported files under the paths into a bucket of the knowledge base: new and "
        "changed files are chunked, embedded and stored, unchanged ones skipped, and the report counts every "
        "file it did not read by reason. Exit code 1 when anything was rejected (--keep-going: 0).",
    )
    ingest.add_argument("paths", nargs="+", metavar="PATH",
                        help="files or folders to read (.md .txt .rst .html .json .jsonl .pdf; folders recursively)")
    ingest.add_argument("--bucket", default="default",
                        help="bucket to ingest into (default: default, the bucket of the sample knowledge base that "
                        "chats search unless told otherwise: AGENT_KB_DEFAULT_BUCKETS; created on the first document)")
    ingest.add_argument("--quiet", action="store_true", help="no progress")
    ingest.add_argument("--follow-links", action="store_true",
                        help="follow symbolic links below the named paths (skipped and counted by default)")
    ingest.add_argument("--max-file-mb", type=_positive_float, default=DEFAULT_MAX_FILE_MB,
                        help=f"skip (and count) files larger than this (default {DEFAULT_MAX_FILE_MB:g} MB)")
    ingest.add_argument("--keep-going", action="store_true",
                        help="exit 0 even when files or records were rejected")
    ingest.add_argument("--rehash", action="store_true",
                        help="read every file and compare its content hash, even one whose size and modification "
                             "time are those stored at the last ingest (skipped unread by default); for filesystems "
                             "whose modification times cannot be trusted (some network and FUSE mounts, restored "
                             "backups that keep old times)")
    ingest.add_argument("--text-only", action="store_true",
                        help="go on when the embedder AGENT_EMBEDDER names is not available: new and changed "
                             "documents are stored for text search only (unchanged ones keep their vectors) and "
                             "the service embeds them later; without it, such an ingest stops with exit code 2")
    ingest.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)  # now the default

    buckets = sub.add_parser(
        "buckets", help="list buckets, their schemas and counts; create or remove one",
        description="The knowledge base's buckets: each holds its own documents, searched together or alone. "
        "`agentchat buckets` alone lists them, as `buckets list` does.",
    )
    bucket_sub = command_group(buckets, dest="bucket_command", required=False)
    bucket_sub.add_parser("list", help="list buckets, their schemas and counts (as `agentchat buckets` alone)")
    create = bucket_sub.add_parser("create", help="create a bucket with typed metadata fields")
    create.add_argument("name", help="bucket name: lowercase letters, digits and _, starting with a letter")
    # default=[]: without one, Python 3.11's argparse lists an empty "*" as a required argument.
    create.add_argument("fields", nargs="*", default=[], metavar="FIELD:TYPE",
                        help="TYPE is TEXT, INTEGER, REAL, DATE or BOOLEAN (e.g. vendor:TEXT amount:REAL)")
    rm = bucket_sub.add_parser("rm", help="remove a bucket and every document in it (no other bucket's)")
    rm.add_argument("name", help="the bucket to remove")
    rm.add_argument("--yes", action="store_true", help="needed when the bucket still holds documents")

    docs = sub.add_parser(
        "docs", help="list or remove knowledge-base documents",
        description="The knowledge base's documents by id: list them (a page at a time), or remove some. "
        "`agentchat ingest` adds and updates them.",
    )
    docs_sub = command_group(docs, dest="docs_command")
    ls = docs_sub.add_parser("list", help="list documents by id (no text)")
    ls.add_argument("--bucket", help="only this bucket")
    ls.add_argument("--limit", type=_limit, default=100, help=f"at most this many (1..{MAX_LIST_LIMIT}, default 100)")
    ls.add_argument("--after", help="start after this document id (the next page)")
    drm = docs_sub.add_parser("rm", help="remove documents by id")
    drm.add_argument("ids", nargs="+", metavar="DOC_ID", help="document ids, as `agentchat docs list` shows them")


def _positive_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not 0 < value <= 100_000:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 100000")
    return value


def _limit(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {raw!r}") from None
    if not 1 <= value <= MAX_LIST_LIMIT:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_LIST_LIMIT}")
    return value


async def run_kb_command(args: argparse.Namespace, settings: Settings) -> int:
    runner = {"ingest": _ingest, "buckets": _buckets, "docs": _docs}[args.command]
    return await runner(args, settings)


async def _open_kb(settings: Settings, command: str, *, create: bool, embedder: Any = None) -> Any:
    """The KB on the service's database (``app.cli.database``) and that database, for the
    command's last line (``CliDatabase.line``: which file, and whether this command made
    it). Only ``ingest`` embeds, so only it passes an ``embedder``; listing and
    removing need no model. Only commands that write (``create``) may create the
    database; the others on a machine without one say so. ``None`` after printing why
    the database could not be opened."""
    from app.cli.database import StorageUnavailable, cli_database, open_cli_kb

    where = cli_database(settings)  # before opening, which may create the file
    try:
        return await open_cli_kb(settings, embedder, create=create), where
    except StorageUnavailable as exc:
        print(f"agentchat {command}: {exc}", file=sys.stderr)
        return None


async def _ingest(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from knowledge.names import check_bucket_name

    try:
        check_bucket_name(args.bucket)
    except ValueError as exc:
        print(f"agentchat ingest: {exc}", file=sys.stderr)
        return EXIT_USAGE
    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"agentchat ingest: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return EXIT_USAGE
    from app.cli.ingest_report import EXPLICIT_EMBEDDERS, embedder_line, refusal_text
    from app.rooms import kb_embedder

    embedder, why = await kb_embedder(settings)  # only ingest embeds, so only it chooses (and probes) one
    log.info(embedder_line(embedder, why))
    if embedder is None and settings.embedder in EXPLICIT_EMBEDDERS and not args.text_only:
        print(refusal_text(settings.embedder, why), file=sys.stderr)
        return EXIT_USAGE
    opened = await _open_kb(settings, "ingest", create=True, embedder=embedder)
    if opened is None:
        return EXIT_REJECTED
    kb, where = opened
    try:
        return await _ingest_into(kb, args, paths, settings.kb_default_buckets)
    finally:  # also after an interruption: the batches stored before it are in this database
        print(where.line())


async def _ingest_into(kb: Any, args: argparse.Namespace, paths: list[Any], default_buckets: tuple[str, ...]) -> int:
    import asyncio

    from app.cli.ingest_progress import IngestProgress
    from app.cli.ingest_report import interrupted_text, other_vectors_line, report_text, unsearched_bucket_note
    from knowledge.filecheck import MB

    try:
        # Said before anything is read: documents whose vectors another embedder made keep them.
        ours = (kb.embed_key, kb.embedder.dim if kb.embedder is not None else None)
        note = other_vectors_line(ours, await kb.index.vector_embedders())
    except BaseException:
        await kb.aclose()
        raise
    if note is not None:
        log.warning(note)
    progress = None if args.quiet else IngestProgress()

    ticker = asyncio.create_task(progress.ticking()) if progress is not None else None
    report = None
    try:
        async with kb.bulk_load():  # PostgreSQL: a new HNSW index is built once, at the end
            report = await kb.ingest_paths(
                paths,
                bucket=args.bucket,
                progress=progress,
                on_batch=progress.on_batch if progress is not None else None,
                on_stage=progress.on_stage if progress is not None else None,
                follow_links=args.follow_links,
                max_file_bytes=int(args.max_file_mb * MB),
                rehash=args.rehash,
            )
    except asyncio.CancelledError:  # Ctrl-C or SIGTERM: ``main`` then says which, no traceback
        if ticker is not None:
            ticker.cancel()
        if progress is not None:
            progress.close()
        if report is not None:
            print(report_text(report, args.bucket, args.max_file_mb))
        print(interrupted_text(report is not None), file=sys.stderr)
        raise
    finally:
        if ticker is not None:
            ticker.cancel()
        if progress is not None:
            progress.close()
        await kb.aclose()
    print(report_text(report, args.bucket, args.max_file_mb))
    stored = report.added or report.updated or report.skipped  # else the bucket may not exist
    note = unsearched_bucket_note(args.bucket, default_buckets) if stored else None
    if note is not None:
        print(note)
    if report.rejected and not args.keep_going:
        print(f"agentchat ingest: {len(report.rejected)} rejected; exit code {EXIT_REJECTED} "
              "(--keep-going to exit 0)", file=sys.stderr)
        return EXIT_REJECTED
    if report.queued_for_embedding and not args.keep_going:
        print(f"agentchat ingest: {plural(report.queued_for_embedding, 'document')} not embedded; "
              f"exit code {EXIT_REJECTED} (--keep-going to exit 0)", file=sys.stderr)
        return EXIT_REJECTED
    return 0


async def _buckets(args: argparse.Namespace, settings: Settings) -> int:
    command = getattr(args, "bucket_command", None)
    name = f"buckets {command}" if command and command != "list" else "buckets"
    opened = await _open_kb(settings, name, create=command == "create")
    if opened is None:
        return EXIT_REJECTED
    kb, where = opened
    try:
        return await _bucket_command(kb, args, command)
    finally:
        print(where.line())


def _created_line(name: str, fields: dict[str, str], before: BucketInfo | None) -> str:
    """What ``buckets create`` did: made the bucket, or - when it existed - added the
    fields it did not have yet, or nothing (it said "created" for an existing bucket)."""
    def typed(kinds: dict[str, str]) -> str:
        return ", ".join(f"{k}:{v}" for k, v in kinds.items())

    if before is None:
        return f"created bucket {name!r} ({typed(fields) or 'no typed fields'})"
    added = {k: v for k, v in fields.items() if k not in before.fields}
    if not added:
        return f"bucket {name!r} already exists{' with ' + typed(fields) if fields else ''}: nothing changed"
    filled = (
        f", read from the metadata of its {plural(before.documents, 'document')} where it fits"
        if before.documents else ""
    )
    return f"bucket {name!r} already exists: added {typed(added)}{filled}"


def _removing_line(name: str, documents: int, chunks: int) -> str:
    """Said before it happens: a bucket holds only its own documents (a document belongs
    to one bucket), and this is how many of them go - or that none do, in words (an
    empty bucket read ``0 documents, 0 chunks``)."""
    if not documents:
        return f"removing bucket {name!r} (it holds no documents)"
    return (f"removing bucket {name!r}: {plural(documents, 'document')}, "
            f"{plural(chunks, 'chunk')}; other buckets are not touched")


def _removed_line(name: str, gone: int) -> str:
    """What went with the bucket; an empty one said ``and its 0 documents``."""
    if not gone:
        return f"removed bucket {name!r} (it held no documents)"
    return f"removed bucket {name!r} and its {plural(gone, 'document')}"


async def _bucket_command(kb: Any, args: argparse.Namespace, command: str | None) -> int:
    try:
        if command == "create":
            fields: dict[str, str] = {}
            for spec in args.fields:
                name, _, kind = spec.partition(":")
                if not name or not kind:
                    print(f"agentchat buckets create: field {spec!r} must be NAME:TYPE", file=sys.stderr)
                    return EXIT_USAGE
                fields[name] = kind.upper()
            before = {b.name: b for b in await kb.list_buckets()}.get(args.name)
            try:
                await kb.create_bucket(args.name, fields)
            except ValueError as exc:
                print(f"agentchat buckets create: {exc}", file=sys.stderr)
                return EXIT_USAGE
            print(_created_line(args.name, fields, before) + "; every bucket now:")
        elif command == "rm":
            if not await _known_bucket(kb, args.name, "buckets rm"):
                return EXIT_REJECTED
            info = {b.name: b for b in await kb.list_buckets()}[args.name]
            if info.documents and not args.yes:
                them = "it" if info.documents == 1 else "them"
                print(f"agentchat buckets rm: bucket {args.name!r} holds {plural(info.documents, 'document')}; "
                      f"add --yes to remove {them} with the bucket", file=sys.stderr)
                return EXIT_USAGE
            print(_removing_line(args.name, info.documents, info.chunks), flush=True)
            gone = await kb.delete_bucket(args.name)
            print(_removed_line(args.name, gone or 0))
            return 0
        buckets = await kb.list_buckets()
    finally:
        await kb.aclose()
    if not buckets:
        print("no buckets")
    for b in buckets:
        schema = ", ".join(f"{k}:{v}" for k, v in (b.fields or {}).items()) or "(no typed fields)"
        print(f"{b.name:<20} documents={b.documents:<8} chunks={b.chunks:<8} {schema}")
    return 0


async def _remove_documents(kb: Any, ids: list[str]) -> int:
    """``docs rm``: how many went, then every id that named no document, as ``ingest``
    lists its rejections (report on stdout, the count and exit code on stderr). It said
    only "some ids were not found", and the user could not tell which had gone."""
    found = set(await kb.remove_documents(ids))
    missing = [i for i in ids if i not in found]
    if not missing:
        print(f"removed {plural(len(found), 'document')}")
        return 0
    print(f"removed {len(found)} of {plural(len(ids), 'document')}")
    print(f"not found {len(missing)}:")
    for doc_id in missing:
        print(f"  {doc_id}")
    print(f"agentchat docs rm: {plural(len(missing), 'id')} not found (listed above); exit code {EXIT_REJECTED}",
          file=sys.stderr)
    return EXIT_REJECTED


async def _known_bucket(kb: Any, name: str, command: str) -> bool:
    """Whether ``name`` is a bucket; if not, says so naming those there are - the words
    of a search or a run's context naming one (``UnknownBucketError``). ``docs list
    --bucket nosuch`` said "no documents" and exit 0, as for an empty bucket."""
    from knowledge.buckets import UnknownBucketError

    try:
        await kb.bucket_schema(name)
    except UnknownBucketError as exc:
        print(f"agentchat {command}: {exc}", file=sys.stderr)
        return False
    return True


async def _docs(args: argparse.Namespace, settings: Settings) -> int:
    opened = await _open_kb(settings, f"docs {args.docs_command}", create=False)
    if opened is None:
        return EXIT_REJECTED
    kb, where = opened
    try:
        return await _docs_command(kb, args)
    finally:
        print(where.line())


async def _docs_command(kb: Any, args: argparse.Namespace) -> int:
    try:
        if args.docs_command == "rm":
            return await _remove_documents(kb, list(dict.fromkeys(args.ids)))
        if args.bucket is not None and not await _known_bucket(kb, args.bucket, "docs list"):
            return EXIT_REJECTED
        docs = await kb.list_documents(bucket=args.bucket, limit=args.limit, after=args.after)
    finally:
        await kb.aclose()
    if not docs:
        print("no documents")
        return 0
    width = min(60, max(len(d["doc_id"]) for d in docs))
    for d in docs:
        print(f"{d['doc_id']:<{width}}  {d['bucket']:<16} chunks={d['chunks']:<6} {d['title'][:50]!r}  {d['source']}")
    if len(docs) == args.limit:
        print(f"(more may follow: --after {docs[-1]['doc_id']})")
    return 0


__all__ = ["add_kb_commands", "run_kb_command"]
