"""Whoever changes what the chunker makes bumps ``knowledge.chunking.CHUNK_RULES``: the
chunks of a fixed corpus (``tests.support.chunk_fingerprint``) must be those of the
checked-in fingerprint while the version is the fingerprint's.

A stored document records the version that cut it and is re-made when it differs; a
change of the cut without a bump would leave every upgraded installation on its older
chunks, which the offline answerer quotes while our tests measure today's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from knowledge import chunking
from knowledge.chunking import CHUNK_RULES
from tests.support import chunk_fingerprint
from tests.support.chunk_fingerprint import FINGERPRINT, PAGED, fingerprint

#: The corpus's file of blocks longer than a chunk, one of each kind.
LONG_BLOCKS = "21-long-blocks.md"

REFRESH = "python -m tests.support.chunk_fingerprint --write"


def recorded() -> dict[str, Any]:
    return dict(orjson.loads(FINGERPRINT.read_bytes()))


def changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(files whose loaded text differs, files whose chunks alone differ)."""
    names = sorted(set(old["files"]) | set(new["files"]))
    texts = [n for n in names if old["files"].get(n, {}).get("text") != new["files"].get(n, {}).get("text")]
    cuts = [n for n in names if n not in texts and old["files"][n]["chunks"] != new["files"][n]["chunks"]]
    return texts, cuts


def test_the_chunks_of_the_fixed_corpus_change_only_with_the_rules_version() -> None:
    old, new = recorded(), fingerprint()
    assert old["chunk_rules"] == CHUNK_RULES, (
        f"CHUNK_RULES is {CHUNK_RULES} but the fingerprint was taken under {old['chunk_rules']}: "
        f"refresh it ({REFRESH}) in the commit that bumps the version"
    )
    assert (old["chunk_target"], old["chunk_overlap"]) == (new["chunk_target"], new["chunk_overlap"]), (
        "the ingest's default chunk target or overlap changed: stored documents are re-made by their stamps and "
        f"content hashes (which carry both), so refresh the fingerprint ({REFRESH})"
    )
    texts, cuts = changes(old, new)
    assert not texts, (
        f"the loader reads {texts} of tests/data/chunking_corpus differently now; that is no chunking change "
        f"(the corpus must not be edited: it is fixed). Refresh the fingerprint ({REFRESH})"
    )
    assert not cuts, (
        f"the chunks of {cuts} changed while CHUNK_RULES stayed {CHUNK_RULES}: bump CHUNK_RULES in "
        f"knowledge/chunking.py (stored documents cut by the older rules are then re-made) and refresh the "
        f"fingerprint ({REFRESH})"
    )
    assert old == new


def test_a_change_of_the_cut_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: the corpus cut with a smaller target differs from the
    fingerprint in the chunks, never in the text, and the paged text counts."""
    real = chunk_fingerprint.chunk_text

    def other_cut(text: str, *, target: int = 800, overlap: int = 120, paged: bool = False) -> Any:
        return real(text, target=target - 200, overlap=overlap, paged=paged)

    monkeypatch.setattr(chunk_fingerprint, "chunk_text", other_cut)
    texts, cuts = changes(recorded(), fingerprint())
    assert texts == [] and PAGED in cuts and len(cuts) > len(recorded()["files"]) // 2, cuts


def _never(pattern: re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(r"(?!x)x")


def _whole(block: str, target: int) -> list[str]:
    return [block]


#: Each way the chunker cuts a block longer than a chunk, and a change of it.
OTHER_BLOCK_CUTS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "a code block between lines": ("_fenced_pieces", lambda real: _whole),
    "a table between rows": ("_table_pieces", lambda real: _whole),
    "a list between items": ("_ITEM_RE", _never),
    "a sentence (and a word) longer than a chunk": ("_wrap_words", lambda real: lambda t, n: real(t, n // 2)),
}


@pytest.mark.parametrize("cut", sorted(OTHER_BLOCK_CUTS))
def test_each_way_of_cutting_a_long_block_is_seen(cut: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The corpus holds a block of each kind longer than a chunk (``21-long-blocks.md``:
    the sample has no code block or sentence that long), so a change of how the chunker
    cuts any of them changes the fingerprint. Before that file, a code block kept whole
    or a long sentence cut elsewhere left every digest as it was."""
    name, other = OTHER_BLOCK_CUTS[cut]
    monkeypatch.setattr(chunking, name, other(getattr(chunking, name)))
    texts, cuts = changes(recorded(), fingerprint())
    assert texts == [] and LONG_BLOCKS in cuts, (cut, cuts)
