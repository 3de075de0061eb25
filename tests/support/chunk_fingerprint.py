"""The fingerprint of the chunks today's rules cut a fixed corpus into, checked in as
``tests/data/chunk_rules_fingerprint.json`` beside the version of the rules
(``knowledge.chunking.CHUNK_RULES``) it was taken under.

Why: a stored document records the rules version that cut it, and one cut by another is
re-made; that works only if whoever changes what the chunker makes bumps the version.
``tests/test_chunk_rules_fingerprint.py`` compares today's chunks with the fingerprint
and fails when they differ under the same version.

The corpus is ``tests/data/chunking_corpus/``: the sample knowledge base as it was when
the fingerprint began (its text moves with the service; a fixed copy moves only with
the chunker), and ``21-long-blocks.md``, a block of each kind longer than a chunk (a
code block, a table, a list, a sentence and a word: the sample has no code block or
sentence that long, so a change of their cut went unseen), read by the ingest's own
loader, cut at the ingest's default target and overlap, each page summary put on as
stored (``with_summary``); and once more as one paged text (its files as pages) so that
page numbers count too.

Refresh after bumping ``CHUNK_RULES``: ``.venv/bin/python -m tests.support.chunk_fingerprint --write``.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import orjson

from knowledge.chunking import CHUNK_RULES, PAGE_BREAK, Chunk, chunk_text
from knowledge.ingest_docs import with_summary
from knowledge.loaders import load_file
from knowledge.types import KBConfig

DATA = Path(__file__).resolve().parent.parent / "data"
CORPUS = DATA / "chunking_corpus"
FINGERPRINT = DATA / "chunk_rules_fingerprint.json"
#: The fingerprint's entry for the whole corpus cut as one paged text.
PAGED = "(all files as pages of one paged text)"


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value)).hexdigest()


def _chunks(chunks: list[Chunk]) -> list[list[Any]]:
    return [[c.position, c.heading, c.text, c.page, c.page_end] for c in chunks]


def fingerprint() -> dict[str, Any]:
    """``chunk_rules``, the cut's settings, and for each corpus file the digest of the
    text the loader read from it, of its chunks, and their count."""
    config = KBConfig()
    target, overlap = config.chunk_target, config.chunk_overlap
    files: dict[str, dict[str, Any]] = {}
    pages: list[str] = []
    for path in sorted(CORPUS.iterdir()):
        loaded, rejected = load_file(path, path.name, bucket="default")
        assert len(loaded) == 1 and not rejected, (path, rejected)
        doc = loaded[0].doc
        cut = with_summary(chunk_text(doc.text, target=target, overlap=overlap, paged=doc.paged), doc.metadata)
        files[path.name] = {"text": _digest(doc.text), "chunks": _digest(_chunks(cut)), "count": len(cut)}
        pages.append(doc.text)
    paged = chunk_text(PAGE_BREAK.join(pages), target=target, overlap=overlap, paged=True)
    files[PAGED] = {"text": _digest(pages), "chunks": _digest(_chunks(paged)), "count": len(paged)}
    return {"chunk_rules": CHUNK_RULES, "chunk_target": target, "chunk_overlap": overlap, "files": files}


def main(argv: list[str]) -> int:
    if argv != ["--write"]:
        print(f"usage: python -m tests.support.chunk_fingerprint --write  (writes {FINGERPRINT})", file=sys.stderr)
        return 2
    FINGERPRINT.write_bytes(orjson.dumps(fingerprint(), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    print(f"wrote {FINGERPRINT} (chunk_rules {CHUNK_RULES})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
