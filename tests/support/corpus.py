"""The labelled standard-library corpus of ``bench/corpus_quality.py``, built once per
test process.

``bench.corpus_quality.stdlib_documents`` parses the docstrings of every standard-library
module: ~1 s idle, ~3 s on a loaded 2-core machine, and the PostgreSQL postings, bulk-vacuum
and engine-comparison tests asked for it eight times per process. The corpus depends only
on the interpreter, so it is read once; each call still hands out its own deep copy, so a
test that changes a document changes nobody else's.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from bench.corpus_quality import stdlib_documents as _read_stdlib_documents


@cache
def _read_once() -> tuple[dict[str, Any], ...]:
    return tuple(_read_stdlib_documents())


def stdlib_documents() -> list[dict[str, Any]]:
    """``bench.corpus_quality.stdlib_documents()``: the same documents, in the same order."""
    return copy.deepcopy(list(_read_once()))


__all__ = ["stdlib_documents"]
