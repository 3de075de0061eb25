"""Which files an ingestion reads, and whether what it read is text.

Two questions a librarian asks before trusting an index:

* ``walk_files``: every entry under a folder is either a candidate or skipped *with a
  reason* — hidden, unsupported type, a symbolic link (not followed unless asked),
  larger than the size limit, not a regular file — so the report can count them all.
  Followed links never loop and never ingest one file twice.
* ``decode_text``: bytes that are not text are refused with a reason — a known binary
  signature (ELF, PNG, ZIP …), NUL bytes, or bytes that are not UTF-8 (with the offset
  of the first bad byte) — instead of becoming hundreds of chunks of garbage.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: ``agentchat ingest --max-file-mb`` default.
DEFAULT_MAX_FILE_MB = 5.0
MB = 1024 * 1024

# Skip reasons: the keys of ``IngestReport.skipped_files``.
SKIP_HIDDEN = "hidden"
SKIP_SYMLINK = "symbolic link (not followed; use --follow-links)"
SKIP_TOO_LARGE = "larger than the size limit (--max-file-mb)"
SKIP_SPECIAL = "not a regular file"
SKIP_LOOP = "symbolic link loop or duplicate"
SKIP_UNREADABLE = "unreadable"


def skip_unsupported(suffix: str) -> str:
    return f"unsupported file type {suffix or '(no extension)'}"


# Signatures of common binary formats: (magic, name). A text file cannot start with these.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x7fELF", "an ELF executable"),
    (b"MZ", "a Windows executable"),
    (b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
    (b"\xca\xfe\xba\xbe", "a Mach-O or Java class file"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a ZIP archive (or an Office document)"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"BZh", "a bzip2 archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"%PDF-", "a PDF (name it .pdf)"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"\x00asm", "a WebAssembly module"),
)
_SNIFF = 8192


@dataclass(frozen=True, slots=True)
class Decoded:
    text: str | None
    kind: str = ""
    reason: str = ""


def decode_text(raw: bytes, *, html: bool = False) -> Decoded:
    """UTF-8 text (a BOM is dropped; UTF-16 with a BOM is accepted), or why not. An HTML
    page that declares another charset (``<meta charset>``, ``<?xml encoding>``) is
    decoded with it: that is a document saying what it is, not a guess."""
    for magic, name in _MAGIC:
        if raw.startswith(magic) and not (magic == b"MZ" and _mostly_text(raw)):
            return Decoded(None, "binary", f"binary content: {name}")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return Decoded(raw.decode("utf-16"))
        except UnicodeDecodeError:
            return Decoded(None, "not UTF-8", "not valid UTF-16 text despite its byte-order mark")
    head = raw[:_SNIFF]
    nul = head.find(b"\x00")
    if nul >= 0:
        return Decoded(None, "binary", f"binary content: NUL byte at offset {nul}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not _mostly_text(raw):
            return Decoded(None, "binary", "binary content: mostly non-text bytes")
        declared = _declared_charset(raw) if html else None
        if declared is not None:
            try:
                return _checked(raw.decode(declared))
            except UnicodeDecodeError:
                return Decoded(None, "not UTF-8", f"not valid {declared} text, the charset the page declares")
        return Decoded(
            None,
            "not UTF-8",
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); convert it to UTF-8 first",
        )
    return _checked(text)


def _checked(text: str) -> Decoded:
    text = text.removeprefix("\ufeff")
    controls = sum(1 for ch in text[:_SNIFF] if ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b")
    if controls > max(8, len(text[:_SNIFF]) // 20):
        return Decoded(None, "binary", "binary content: too many control characters")
    return Decoded(text)


_CHARSET = re.compile(rb"""(?:charset|encoding)\s*=\s*["']?([A-Za-z0-9_.:-]{2,40})""", re.IGNORECASE)


def _declared_charset(raw: bytes) -> str | None:
    """The charset an HTML/XML head declares, when Python knows it."""
    m = _CHARSET.search(raw[:4096])
    if m is None:
        return None
    try:
        return codecs.lookup(m.group(1).decode("ascii")).name
    except LookupError:
        return None


def _mostly_text(raw: bytes) -> bool:
    """No NUL and under 1% control bytes in the first 8 KiB: text, whatever its encoding
    (random or compressed bytes have about 12% control bytes)."""
    head = raw[:_SNIFF]
    if not head:
        return True
    if b"\x00" in head:
        return False
    bad = sum(1 for b in head if (b < 32 and b not in (9, 10, 12, 13, 27)) or b == 127)
    return bad / len(head) < 0.01


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry met while walking: a file to read (``skip`` is ``None``) or why not.

    ``path`` is absolute and under the root (a followed link keeps its own path, so the
    document's ``source`` is where it sits in the tree); ``shown`` is the path readers
    see: relative to the root's parent (``docs/guide/intro.md``).
    """

    path: Path
    shown: str
    skip: str | None = None
    detail: str = ""
    #: A file to read: its size in bytes and modification time in ns, from the stat the
    #: walk made anyway (how a re-ingest tells an unchanged file without opening it).
    size: int | None = None
    mtime_ns: int | None = None


def shown_path(root: Path, path: Path) -> str:
    """``path`` relative to ``root``'s parent, with ``/``; just the name for a file root."""
    base = root.parent
    try:
        rel = path.relative_to(base)
    except ValueError:
        rel = Path(path.name)
    return rel.as_posix()


def walk_files(
    root: Path,
    supported: frozenset[str] | set[str],
    *,
    follow_links: bool = False,
    max_file_bytes: int | None = None,
) -> Iterator[Entry]:
    """The entries under ``root`` (itself if a file), sorted. ``root`` is taken as given
    (the caller named it, so a link there is followed); below it, links are followed
    only with ``follow_links``, and each real file and directory is visited once."""
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[tuple[int, int]] = set()
    if not root.is_dir():
        yield _file_entry(root, root, supported, max_file_bytes, seen_files, link=False)
        return
    try:
        st = root.stat()
        seen_dirs.add((st.st_dev, st.st_ino))
    except OSError:
        pass
    yield from _walk_dir(root, root, supported, follow_links, max_file_bytes, seen_dirs, seen_files)


def _walk_dir(
    root: Path,
    directory: Path,
    supported: frozenset[str] | set[str],
    follow_links: bool,
    max_file_bytes: int | None,
    seen_dirs: set[tuple[int, int]],
    seen_files: set[tuple[int, int]],
) -> Iterator[Entry]:
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        yield Entry(directory, shown_path(root, directory), SKIP_UNREADABLE, f"cannot list: {exc.strerror or exc}")
        return
    for e in entries:
        path = Path(e.path)
        shown = shown_path(root, path)
        if e.name.startswith("."):
            yield Entry(path, shown, SKIP_HIDDEN, "hidden " + ("directory" if e.is_dir() else "file"))
            continue
        is_link = e.is_symlink()
        if is_link and not follow_links:
            yield Entry(path, shown, SKIP_SYMLINK, f"symbolic link to {_target(path)} (use --follow-links)")
            continue
        try:
            is_dir = e.is_dir(follow_symlinks=True)
        except OSError:
            is_dir = False
        if is_dir:
            try:
                st = path.stat()
            except OSError as exc:
                yield Entry(path, shown, SKIP_UNREADABLE, f"cannot read: {exc.strerror or exc}")
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen_dirs:
                yield Entry(path, shown, SKIP_LOOP, "directory already visited (a link loop or a second link to it)")
                continue
            seen_dirs.add(key)
            yield from _walk_dir(root, path, supported, follow_links, max_file_bytes, seen_dirs, seen_files)
            continue
        yield _file_entry(root, path, supported, max_file_bytes, seen_files, link=is_link)


def _file_entry(
    root: Path,
    path: Path,
    supported: frozenset[str] | set[str],
    max_file_bytes: int | None,
    seen_files: set[tuple[int, int]],
    *,
    link: bool,
) -> Entry:
    shown = shown_path(root, path)
    try:
        st = path.stat()
    except OSError as exc:
        return Entry(path, shown, SKIP_UNREADABLE, f"cannot read: {exc.strerror or exc}")
    if not stat.S_ISREG(st.st_mode):
        return Entry(path, shown, SKIP_SPECIAL, "not a regular file (a device, socket or pipe)")
    suffix = path.suffix.lower()
    if suffix not in supported:
        reason = skip_unsupported(suffix)
        return Entry(path, shown, reason, reason)
    key = (st.st_dev, st.st_ino)
    if key in seen_files:
        return Entry(path, shown, SKIP_LOOP, "file already ingested through another link")
    seen_files.add(key)
    if max_file_bytes is not None and st.st_size > max_file_bytes:
        return Entry(
            path, shown, SKIP_TOO_LARGE,
            f"{st.st_size / MB:.1f} MB, over the {max_file_bytes / MB:g} MB limit (raise --max-file-mb)",
        )
    return Entry(path, shown, None, "link" if link else "", st.st_size, st.st_mtime_ns)


def _target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


__all__ = [
    "DEFAULT_MAX_FILE_MB",
    "Decoded",
    "Entry",
    "decode_text",
    "shown_path",
    "skip_unsupported",
    "walk_files",
]
