"""Which files a re-ingest can skip without opening them (issue 24 item 4).

Why: re-ingesting a folder that barely changed used to open, decode and hash every file.
A document read from a file now keeps that file's *stamp* — its size and modification
time (ns), the path it is shown as, the chunking — and a file whose stamp is the one
stored with all its documents in the bucket is not opened at all, unless one of them has
no vectors and this process has an embedder (vectors of another embedder are kept:
``knowledge.ingest_docs.keeps_vectors``). A touched file whose content hash did not change only gets its new stamp
(``knowledge.ingest``); a file with a rejected document is never left stamped
(read, and its rejections reported, every time); ``rehash`` (``agentchat ingest --rehash``) reads every file, for
filesystems whose times cannot be trusted.

An HTML page skipped as the repeat of a Markdown file (``knowledge.samepage``) stores no
document of its own: its stamp rides on the Markdown document's, one ``\\n<path>\\t<stamp>``
line per repeat, so an unchanged pair is not read again to compare them either. A
Markdown file counts as unchanged only if its repeats are too.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from knowledge.chunking import older_than_ours
from knowledge.ingest_docs import keeps_vectors
from knowledge.loaders import HTML_SUFFIXES
from knowledge.md_links import READ_RULES
from knowledge.samepage import MARKDOWN_SUFFIXES, SamePage
from knowledge.types import KBConfig, Rejection
from storage.interfaces import KBIndex


@dataclass(slots=True)
class Unchanged:
    """What the stored stamps say of this ingestion's files."""

    #: Files to skip unopened, with the ids of their documents.
    documents: dict[Path, list[str]] = field(default_factory=dict)
    #: HTML files known to repeat one of those (a Markdown file): skipped unopened too.
    repeats: dict[Path, Path] = field(default_factory=dict)


def file_stamp(size: int, mtime_ns: int, shown: str, config: KBConfig) -> str:
    """What must be unchanged for a file to be skipped unread: its size and modification
    time, and what else its documents' content hash covers without reading it (the
    chunking, the rules the loader reads it by, the source it is shown as)."""
    return f"{size}:{mtime_ns}:{config.chunk_target}:{config.chunk_overlap}:r{READ_RULES}:{shown}"


def with_repeats(stamp: str, repeats: Iterable[Path], stamps: Mapping[Path, str]) -> str:
    """A Markdown file's stamp and those of the HTML pages that repeat it."""
    return stamp + "".join(f"\n{p}\t{stamps[p]}" for p in sorted(repeats) if p in stamps)


async def unchanged_files(
    index: KBIndex,
    bucket: str,
    roots: Sequence[Path],
    stamps: Mapping[Path, str],
    embedder: tuple[str | None, int | None],
) -> Unchanged:
    """The files of ``stamps`` whose documents in ``bucket`` all carry their current stamp
    (and their repeats' current stamps), vectors kept by ``embedder`` (``(key, dim)``:
    ``keeps_vectors``) and
    chunks cut by today's rules or newer ones (``older_than_ours``: a file is unchanged,
    its cut is not; a newer release's cut is left to it)."""
    docs: dict[str, list[str]] = {}
    fresh: dict[str, bool] = {}
    repeats: dict[str, list[Path]] = {}
    for root in roots:
        prefix = root.is_dir()
        origin = str(root).rstrip(os.sep) + os.sep if prefix else str(root)
        for d in await index.file_documents(bucket, origin, prefix=prefix):
            if d.id in docs.get(d.origin, ()):
                continue
            docs.setdefault(d.origin, []).append(d.id)
            ok = d.file_stamp is not None and keeps_vectors((d.embed_model, d.embed_dim), embedder)
            ok = ok and not older_than_ours(d.chunk_rules)
            if ok and d.file_stamp is not None:
                own, *lines = d.file_stamp.split("\n")
                twins = [line.rpartition("\t") for line in lines]
                ok = own == stamps.get(Path(d.origin)) and all(stamps.get(Path(p)) == s for p, _, s in twins)
                repeats[d.origin] = [Path(p) for p, _, _ in twins]
            fresh[d.origin] = fresh.get(d.origin, True) and ok
    out = Unchanged()
    for o, ok in fresh.items():
        if ok and Path(o) in stamps:
            out.documents[Path(o)] = docs[o]
            out.repeats.update((html, Path(o)) for html in repeats.get(o, ()))
    return out


async def unstamp_rejected(
    index: KBIndex, bucket: str, files: Sequence[tuple[Path, str]], rejected: Iterable[Rejection]
) -> None:
    """Clear the stamps of the documents of a file some of whose documents were rejected
    while being stored (an empty text, a typed field's value): a later ingest must read
    the file again and report them again, not skip it as unchanged."""
    by_shown = {shown: path for path, shown in files}
    for path in sorted({by_shown[r.source] for r in rejected if r.source in by_shown}):
        ids = [d.id for d in await index.file_documents(bucket, str(path), prefix=False) if d.file_stamp]
        await index.set_file_stamps([(i, None) for i in ids])


def pages_to_compare(files: Sequence[tuple[Path, str]], unchanged: Unchanged) -> list[tuple[Path, str]]:
    """The files the same-page check must still look at: not the known repeats, and not
    an unchanged HTML page (no repeat last time) unless a Markdown file of its name changed."""
    changed_md = {
        p.stem.casefold() for p, _ in files if p.suffix.lower() in MARKDOWN_SUFFIXES and p not in unchanged.documents
    }
    return [
        (p, s)
        for p, s in files
        if p not in unchanged.repeats
        and not (p in unchanged.documents and p.suffix.lower() in HTML_SUFFIXES and p.stem.casefold() not in changed_md)
    ]


def all_repeats(found: Iterable[SamePage], unchanged: Unchanged, shown: Mapping[Path, str]) -> dict[Path, SamePage]:
    """The HTML files to skip as repeats: those found now and those known unchanged. A
    Markdown file with a repeat found now is read again (dropped from ``unchanged``), so
    that its stored stamp names the repeat."""
    out = {html: SamePage(html, md, shown.get(md, md.name)) for html, md in unchanged.repeats.items()}
    for s in found:
        out[s.html] = s
        unchanged.documents.pop(s.markdown, None)
    return out


__all__ = [
    "Unchanged",
    "all_repeats",
    "file_stamp",
    "pages_to_compare",
    "unchanged_files",
    "unstamp_rejected",
    "with_repeats",
]
