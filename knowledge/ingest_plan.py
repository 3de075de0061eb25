"""Which files an ingest of some paths reads: listed, stamped, compared, repeats left out.

Why apart from ``knowledge.ingest``: deciding what to read (walking the roots, the
skipped and protected files, the stamps that let an unchanged file stay unopened, the
HTML pages that repeat a Markdown file) touches the file system and the stored stamps
but never writes; reading, chunking, embedding and storing what was decided is the
ingest's job. The plan also hands over the files the same-page check already loaded,
so the ingest does not load them twice.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowledge.filecheck import SKIP_TOO_LARGE, SKIP_UNREADABLE, walk_files
from knowledge.filestamps import Unchanged, all_repeats, file_stamp, pages_to_compare, unchanged_files
from knowledge.ingest_stages import STAGE_COMPARE, StageHook
from knowledge.loaders import SUPPORTED_SUFFIXES
from knowledge.samepage import SKIP_SAME_PAGE, Comparison, compare_pages
from knowledge.types import IngestReport, KBConfig, Rejection
from storage.interfaces import KBIndex

#: Skipped files whose old documents stay: the file is still there, it just was not read.
_KEEP_DOCUMENTS_OF = {SKIP_TOO_LARGE, SKIP_UNREADABLE}


@dataclass(slots=True)
class FilePlan:
    """The files to go through, in order, with what is known of them before reading."""

    #: ``(path, shown)`` of every file to go through (repeats left out).
    files: list[tuple[Path, str]] = field(default_factory=list)
    #: Each file's current stamp (``knowledge.filestamps.file_stamp``).
    stamps: dict[Path, str] = field(default_factory=dict)
    #: Origins whose stored documents must stay even if no document of them is seen.
    protected: set[str] = field(default_factory=set)
    #: The roots that exist.
    roots: list[Path] = field(default_factory=list)
    #: What the stored stamps say (files to skip unopened).
    unchanged: Unchanged = field(default_factory=Unchanged)
    #: The same-page check's findings and the files it loaded.
    compared: Comparison = field(default_factory=Comparison)
    #: A Markdown file → the HTML pages that repeat it (their stamps ride on its documents).
    repeated: dict[Path, list[Path]] = field(default_factory=dict)


async def plan_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    index: KBIndex,
    config: KBConfig,
    bucket: str,
    embedder: tuple[str | None, int | None],
    report: IngestReport,
    follow_links: bool,
    max_file_bytes: int | None,
    rehash: bool,
    on_stage: StageHook | None,
) -> FilePlan:
    """List ``paths``' files, note the skipped and missing ones in ``report``, and decide
    which are unchanged and which HTML pages repeat a Markdown file (skipped, counted)."""
    plan = FilePlan()
    files: list[tuple[Path, str]] = []
    for root in (Path(p).expanduser().resolve() for p in paths):
        if not root.exists():
            report.rejected.append(Rejection(str(root), "path does not exist", kind="missing path"))
            continue
        plan.roots.append(root)

        def walk(r: Path = root) -> list[Any]:
            return list(walk_files(r, SUPPORTED_SUFFIXES, follow_links=follow_links, max_file_bytes=max_file_bytes))

        for entry in await asyncio.to_thread(walk):
            if entry.skip is None:
                files.append((entry.path, entry.shown))
                if entry.size is not None and entry.mtime_ns is not None:
                    plan.stamps[entry.path] = file_stamp(entry.size, entry.mtime_ns, entry.shown, config)
                continue
            report.skip_file(str(entry.path), entry.skip, entry.detail)
            if entry.skip in _KEEP_DOCUMENTS_OF:
                plan.protected.add(str(entry.path))
    if not rehash:
        plan.unchanged = await unchanged_files(index, bucket, plan.roots, plan.stamps, embedder)
    plan.compared = await compare_pages(
        pages_to_compare(files, plan.unchanged),
        bucket=bucket,
        on_page=None if on_stage is None else lambda k, n: on_stage(STAGE_COMPARE, k, n),
    )
    repeats = all_repeats(plan.compared.found, plan.unchanged, dict(files))
    for page in repeats.values():
        plan.repeated.setdefault(page.markdown, []).append(page.html)
    for path, shown in files:
        if path in repeats:
            report.skip_file(str(path), SKIP_SAME_PAGE, f"{shown}: same page as {repeats[path].shown}")
        else:
            plan.files.append((path, shown))
    return plan
