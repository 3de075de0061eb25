"""The knowledge-base commands of ``agentchat``: ``ingest``, ``buckets``, ``docs``.

They work directly on the service's database (``app.cli.database``: ``AGENT_DATABASE_URL``,
else the file at ``AGENT_DB_PATH``), never through the server.
What a librarian needs to trust an ingestion: every file is either read or counted
under the reason it was skipped; binary and non-UTF-8 files are rejected with a
reason; symbolic links are followed only when asked; files over the size limit are
skipped with a warning; and the exit code is not 0 when anything was rejected
(``--keep-going`` says that is fine). Progress goes to stderr: a ``tqdm`` bar on a
terminal (files, rate, ETA and chunks), plain lines now and then otherwise, so a log
file never gets ``\\r`` frames.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from app.config import Settings

log = logging.getLogger("agentchat.cli")

EXIT_REJECTED = 1
EXIT_USAGE = 2
MAX_LIST_LIMIT = 10_000
#: A plain progress line shows an ETA once this much of the ingestion has been seen -
#: this many seconds, or this share of the files: one file's time times the files left
#: read "ETA 3h45m" on the first line of an ingestion whose first file was a large one.
ETA_AFTER_S = 5.0
ETA_AFTER_SHARE = 0.02
#: Weight of the latest interval's rate in the smoothed rate the ETA divides by (the
#: first is the average so far): a slow or fast stretch moves it, one line does not swing it.
ETA_SMOOTHING = 0.3


# --- progress ------------------------------------------------------------------------------


class IngestProgress:
    """Per-file progress with chunk counts: a ``tqdm`` bar when ``stream`` is a terminal
    (and tqdm is installed), else a plain line every ``interval_s`` seconds and at the end.

    The ingestion calls it after each file and while it embeds a batch; ``ticking()``
    runs beside it so a quiet stretch (a folder being listed, one slow embedding call)
    still gets its line every ``interval_s``: silence means the process is stuck."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interval_s: float = 5.0,
        tty: bool | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval_s = interval_s
        self._clock = clock
        self.started = clock()
        #: The smoothed files/s the ETA divides by, and when (and at how many files) it
        #: was last updated; ``None`` until enough has been seen (``ETA_AFTER_S``).
        self._rate: float | None = None
        self._rate_at = (0.0, 0)
        self.chunks = 0
        self.total = 0
        self.done = 0
        #: What happens besides reading files (``"embedding 128/900 chunks"``), or "".
        self.phase = ""
        self._bar: Any = None
        self._last_line = 0.0
        if self.tty:
            try:
                import tqdm  # noqa: F401
            except ImportError:
                self.tty = False

    def __call__(self, done: int, total: int, label: str) -> None:
        self.done, self.total = done, total
        self.phase = label if label.startswith("embedding ") else ""
        if self.tty:
            if self._bar is None:
                from tqdm import tqdm

                self._bar = tqdm(total=total, unit="file", file=self.stream, dynamic_ncols=True,
                                 smoothing=0.1, desc="ingest", leave=True)
            self._bar.update(done - self._bar.n)
            self._bar.set_postfix_str(self._chunk_text(), refresh=False)
            return
        self.tick()

    def tick(self) -> None:
        """A plain line if none was written for ``interval_s`` (a bar redraws itself)."""
        now = self._clock()
        if self._bar is not None:
            self._bar.set_postfix_str(self._chunk_text())
        elif not self.tty and now - self._last_line >= self.interval_s:
            self._write_line(now)

    async def ticking(self) -> None:
        """Tick every ``interval_s`` until cancelled (run it as a task beside the ingestion)."""
        import asyncio

        while True:
            await asyncio.sleep(self.interval_s)
            self.tick()

    def on_batch(self, report: Any) -> None:
        self.chunks = int(getattr(report, "chunks", 0))
        if self._bar is not None:
            self._bar.set_postfix_str(self._chunk_text())

    def close(self) -> None:
        """The last word: the bar's final state, or one last line (after the last batch
        was written, so its chunks are counted)."""
        self.phase = ""
        if self._bar is not None:
            self._bar.set_postfix_str(self._chunk_text())
            self._bar.close()
            self._bar = None
        elif not self.tty and self.total:
            self._write_line(self._clock())
            self.total = 0

    def _write_line(self, now: float) -> None:
        self._last_line = now
        self.stream.write(self._line(now) + "\n")
        self.stream.flush()

    def _chunk_text(self) -> str:
        elapsed = max(1e-9, self._clock() - self.started)
        text = f"{self.chunks} chunks, {self.chunks / elapsed:.0f} chunks/s"
        return f"{text}, {self.phase}" if self.phase else text

    def _line(self, now: float) -> str:
        elapsed = max(1e-9, now - self.started)
        if not self.total:
            return f"ingest: looking for files ({_duration(elapsed)} so far)"
        rate = self.done / elapsed
        pct = 100.0 * self.done / self.total
        line = (
            f"ingest: {self.done}/{self.total} files ({pct:.0f}%), {self.chunks} chunks, "
            f"{rate:.1f} files/s, {self.chunks / elapsed:.0f} chunks/s"
        )
        eta = self._eta(now, elapsed)
        if eta is not None and self.done < self.total:
            line += f", ETA {_duration(eta)}"
        return f"{line}, {self.phase}" if self.phase else line

    def _eta(self, now: float, elapsed: float) -> float | None:
        """Seconds left at the smoothed rate; ``None`` until enough has been seen
        (``ETA_AFTER_S`` or ``ETA_AFTER_SHARE`` of the files) to say."""
        if self.done <= 0 or (elapsed < ETA_AFTER_S and self.done < ETA_AFTER_SHARE * self.total):
            return None
        at, done_then = self._rate_at
        if self._rate is None:
            self._rate = self.done / elapsed
        elif now > at and self.done >= done_then:
            recent = (self.done - done_then) / (now - at)
            self._rate = ETA_SMOOTHING * recent + (1 - ETA_SMOOTHING) * self._rate
        self._rate_at = (now, self.done)
        return (self.total - self.done) / self._rate if self._rate > 0 else None


def _duration(value: float) -> str:
    seconds = round(value)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


# --- the commands ----------------------------------------------------------------------------


def add_kb_commands(sub: Any) -> None:
    """Register ``ingest``, ``buckets`` and ``docs`` on the ``agentchat`` sub-parsers."""
    from knowledge.filecheck import DEFAULT_MAX_FILE_MB

    ingest = sub.add_parser("ingest", help="ingest files or directories into the knowledge base")
    ingest.add_argument("paths", nargs="+", metavar="PATH",
                        help="files or folders to read (.md .txt .rst .html .json .jsonl .pdf; folders recursively)")
    ingest.add_argument("--bucket", default="default", help="bucket to ingest into (created on the first document)")
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
    ingest.add_argument("--strict", action="store_true", help=argparse.SUPPRESS)  # now the default

    buckets = sub.add_parser("buckets", help="list buckets, their schemas and counts; create or remove one")
    bucket_sub = buckets.add_subparsers(dest="bucket_command")
    create = bucket_sub.add_parser("create", help="create a bucket with typed metadata fields")
    create.add_argument("name", help="bucket name: lowercase letters, digits and _, starting with a letter")
    create.add_argument("fields", nargs="*", metavar="FIELD:TYPE",
                        help="TYPE is TEXT, INTEGER, REAL, DATE or BOOLEAN (e.g. vendor:TEXT amount:REAL)")
    rm = bucket_sub.add_parser("rm", help="remove a bucket and every document in it (no other bucket's)")
    rm.add_argument("name", help="the bucket to remove")
    rm.add_argument("--yes", action="store_true", help="needed when the bucket still holds documents")

    docs = sub.add_parser("docs", help="list or remove knowledge-base documents")
    docs_sub = docs.add_subparsers(dest="docs_command", required=True)
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


async def _open_kb(settings: Settings, command: str, *, embed: bool = False) -> Any:
    """The KB on the service's database (``app.cli.database``). Only ``ingest`` embeds,
    so only it chooses (and probes) an embedder; listing and removing need no model.
    ``None`` after printing why the database could not be opened."""
    from app.cli.database import StorageUnavailable, open_cli_kb

    embedder = None
    if embed:
        from app.rooms import kb_embedder

        embedder, why = await kb_embedder(settings)
        log.info(embedder_line(embedder, why))
    try:
        return await open_cli_kb(settings, embedder)
    except StorageUnavailable as exc:
        print(f"agentchat {command}: {exc}", file=sys.stderr)
        return None


def embedder_line(embedder: Any, why: str) -> str:
    """One short line on what ``ingest`` embeds with and why: the chooser's reason
    without its install hints (in parentheses), so a fallback is seen, not a paragraph."""
    import re

    reason = why
    while True:
        shorter = re.sub(r"\s*\([^()]*\)", "", reason)
        if shorter == reason:
            break
        reason = shorter
    reason = " ".join(reason.split())
    if len(reason) > 200:
        reason = reason[:199] + "…"
    if embedder is None:
        return f"embedder: none, documents are stored for text search only ({reason})"
    return f"embedder: {embedder.name} {embedder.model} ({reason})"


async def _ingest(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from knowledge.filecheck import MB
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
    kb = await _open_kb(settings, "ingest", embed=True)
    if kb is None:
        return EXIT_REJECTED
    progress = None if args.quiet else IngestProgress()
    import asyncio

    ticker = asyncio.create_task(progress.ticking()) if progress is not None else None
    report = None
    try:
        async with kb.bulk_load():  # PostgreSQL: a new HNSW index is built once, at the end
            report = await kb.ingest_paths(
                paths,
                bucket=args.bucket,
                progress=progress,
                on_batch=progress.on_batch if progress is not None else None,
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
    if report.rejected and not args.keep_going:
        print(f"agentchat ingest: {len(report.rejected)} rejected; exit code {EXIT_REJECTED} "
              "(--keep-going to exit 0)", file=sys.stderr)
        return EXIT_REJECTED
    if report.queued_for_embedding and not args.keep_going:
        print(f"agentchat ingest: {report.queued_for_embedding} documents not embedded; exit code {EXIT_REJECTED} "
              "(--keep-going to exit 0)", file=sys.stderr)
        return EXIT_REJECTED
    return 0


def interrupted_text(stored: bool) -> str:
    """What an interrupted ingest leaves: every batch stored before the interruption
    stays (each commits on its own), and an index not built yet is built later — a
    bucket's graph by the next open's repair (``agentchat serve`` or the next ingest),
    its searches exact meanwhile. ``stored``: every file was stored (the report was
    printed), the indexes were being built at the load's end."""
    if stored:
        return (
            "agentchat ingest: stopped while building the indexes: the documents above are stored, and an "
            "index not built yet is built when the knowledge base is next opened"
        )
    return (
        "agentchat ingest: the documents stored before the interruption stay; the same command again stores "
        "the rest (unchanged files are skipped)"
    )


def report_text(report: Any, bucket: str, max_file_mb: float, *, examples: int = 20) -> str:
    """The final report: what was stored, then every skipped and rejected file by reason."""
    lines = [
        f"bucket {bucket!r}: {report.files - report.unread_files} files read"
        + (f" ({report.unread_files} more unchanged, not opened)" if report.unread_files else "")
        + f", {report.added} documents added, {report.updated} updated, "
        f"{report.skipped} unchanged, {report.deleted} deleted, {report.chunks} chunks "
        f"({report.elapsed_seconds:.1f} s)"
    ]
    if report.added == report.updated == 0 and report.skipped == 0:
        lines.append(f"nothing was stored; bucket {bucket!r} was not created if it did not exist")
    skipped = sum(report.skipped_files.values())
    if skipped:
        lines.append(f"skipped {_n(skipped, 'file')}:")
        for reason, n in sorted(report.skipped_files.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {n:>7}  {reason}")
    rejected = report.rejected_by_kind()
    if rejected:
        lines.append(f"rejected {len(report.rejected)}:")
        for kind, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {n:>7}  {kind}")
        for r in report.rejected[:examples]:
            where = f"{r.source} line {r.line}" if r.line else r.source
            lines.append(f"  rejected: {where}: {r.reason}")
        if len(report.rejected) > examples:
            lines.append(f"  … and {len(report.rejected) - examples} more")
    if report.queued_for_embedding:
        lines.append(
            f"warning: {_n(report.queued_for_embedding, 'document')} stored for text search only, the embedder "
            f"failed ({report.embedding_error}); the server re-embeds them in the background "
            "(agentchat serve over this database), or run this ingest again"
        )
    from knowledge.filecheck import SKIP_TOO_LARGE

    large = [r for r in report.skipped_examples if r.kind == SKIP_TOO_LARGE]
    if large:
        n = report.skipped_files.get(SKIP_TOO_LARGE, len(large))
        lines.append(f"warning: {_n(n, 'file')} over the {max_file_mb:g} MB limit skipped (raise --max-file-mb):")
        lines.extend(f"  {r.source}: {r.reason}" for r in large[:examples])
    return "\n".join(lines)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


async def _buckets(args: argparse.Namespace, settings: Settings) -> int:
    kb = await _open_kb(settings, "buckets")
    if kb is None:
        return EXIT_REJECTED
    try:
        command = getattr(args, "bucket_command", None)
        if command == "create":
            fields: dict[str, str] = {}
            for spec in args.fields:
                name, _, kind = spec.partition(":")
                if not name or not kind:
                    print(f"agentchat buckets create: field {spec!r} must be NAME:TYPE", file=sys.stderr)
                    return EXIT_USAGE
                fields[name] = kind.upper()
            try:
                await kb.create_bucket(args.name, fields)
            except ValueError as exc:
                print(f"agentchat buckets create: {exc}", file=sys.stderr)
                return EXIT_USAGE
        elif command == "rm":
            info = {b.name: b for b in await kb.list_buckets()}.get(args.name)
            if info is None:
                print(f"agentchat buckets rm: no bucket {args.name!r}", file=sys.stderr)
                return EXIT_REJECTED
            if info.documents and not args.yes:
                print(f"agentchat buckets rm: bucket {args.name!r} holds {info.documents} documents; "
                      "add --yes to remove them with it", file=sys.stderr)
                return EXIT_USAGE
            # Said before it happens: a bucket holds only its own documents (a document
            # belongs to one bucket), and this is how many of them go.
            print(f"removing bucket {args.name!r}: {_n(info.documents, 'document')}, "
                  f"{_n(info.chunks, 'chunk')}; other buckets are not touched", flush=True)
            gone = await kb.delete_bucket(args.name)
            print(f"removed bucket {args.name!r} and its {_n(gone or 0, 'document')}")
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


async def _docs(args: argparse.Namespace, settings: Settings) -> int:
    kb = await _open_kb(settings, "docs")
    if kb is None:
        return EXIT_REJECTED
    try:
        if args.docs_command == "rm":
            ids = list(dict.fromkeys(args.ids))
            gone = await kb.delete_documents(ids)
            print(f"removed {gone} of {len(ids)} documents")
            if gone < len(ids):
                print("agentchat docs rm: some ids were not found", file=sys.stderr)
                return EXIT_REJECTED
            return 0
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


__all__ = ["IngestProgress", "add_kb_commands", "report_text", "run_kb_command"]
