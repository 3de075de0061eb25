"""Chunking: structure, sizes and overlap; plus the FTS query builder and snippets."""

from __future__ import annotations

import itertools
import sqlite3

import pytest

from knowledge.chunking import chunk_text
from knowledge.ranking import QueryTerms, rrf, snippet
from knowledge.textnorm import content_terms, fold
from storage.sqlite.kb_fts import or_expression


def _para(i: int, words: int = 30) -> str:
    return " ".join(f"w{i}x{j}" for j in range(words)) + "."


def test_short_text_is_one_chunk_with_heading() -> None:
    chunks = chunk_text("# Title\n\n## Intro\n\nHello there.")
    assert len(chunks) == 1
    assert chunks[0].heading == "Title"
    assert "Hello there." in chunks[0].text


def _sentences(i: int, n: int = 5, words: int = 6) -> str:
    return " ".join("S" + " ".join(f"w{i}x{k}y{j}" for j in range(words)) + "." for k in range(n))


def test_long_section_is_split_with_overlap_and_bounded_size() -> None:
    text = "# Doc\n\n## Part\n\n" + "\n\n".join(_sentences(i) for i in range(30))
    chunks = chunk_text(text, target=800, overlap=120)
    assert len(chunks) > 3
    assert [c.position for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert len(c.text) <= 800 + 120 + 4
    for prev, cur in itertools.pairwise(chunks):
        # the start of each later chunk repeats the end of the previous one: whole sentences
        head = cur.text[:60]
        assert head in prev.text, (head, prev.text[-200:])
        assert cur.text.startswith("S"), cur.text[:40]
    assert all(c.heading == "Doc › Part" for c in chunks[1:])


def test_the_carry_is_whole_sentences_or_nothing() -> None:
    """A chunk never starts mid-sentence: a last sentence longer than the overlap is not
    carried at all (issue 20: answers started "is configured through …")."""
    text = "# Doc\n\n" + "\n\n".join(_para(i) for i in range(30))  # one 190-char sentence each
    chunks = chunk_text(text, target=800, overlap=120)
    assert len(chunks) > 3
    for c in chunks[1:]:
        assert c.text.startswith("w") and c.text.split(" ", 1)[0].endswith("x0"), c.text[:40]


def test_a_long_list_is_cut_between_items_and_keeps_its_lines() -> None:
    items = [f"- Item {i} says something about option {i}." for i in range(60)]
    chunks = chunk_text("# Options\n\nThe options are:\n\n" + "\n".join(items), target=400, overlap=80)
    assert len(chunks) > 3
    seen: list[str] = []
    for c in chunks:
        body = [line for line in c.text.split("\n") if line.startswith("- ")]
        assert all(line in items for line in body), c.text  # no item flattened or cut
        seen += body
    assert [i for i in items if i not in seen] == []


def test_a_long_code_block_is_cut_between_lines_and_fenced_again() -> None:
    lines = [f"echo line {i} of the script" for i in range(80)]
    text = "# Script\n\nRun this:\n\n```bash\n" + "\n".join(lines) + "\n```\n"
    chunks = chunk_text(text, target=400, overlap=80)
    code = [c for c in chunks if "echo line" in c.text]
    assert len(code) > 2
    got: list[str] = []
    for c in code:
        assert c.text.count("```") % 2 == 0, c.text
        inner = c.text[c.text.index("```bash\n") + 8 : c.text.rindex("\n```")]
        got += [line for line in inner.split("\n") if line not in got]
    assert got == lines


def test_new_heading_starts_new_chunk_once_current_is_full() -> None:
    body_a = "\n\n".join(_para(i, 12) for i in range(10))  # ~640 chars, over half the target
    body_b = "\n\n".join(_para(100 + i, 12) for i in range(3))
    chunks = chunk_text(f"# A\n\n{body_a}\n\n# B\n\n{body_b}", target=800, overlap=120)
    b_chunk = next(c for c in chunks if c.heading == "B")
    assert b_chunk.text.startswith("# B")
    assert "w0x0" not in b_chunk.text  # no overlap carried across a heading boundary


def test_tiny_sections_are_merged_and_giant_words_cut() -> None:
    chunks = chunk_text("# A\n\nx.\n\n# B\n\ny.\n\n# C\n\n" + "z" * 2000, target=500, overlap=50)
    assert "# A" in chunks[0].text and "# B" in chunks[0].text
    assert all(len(c.text) <= 560 for c in chunks)
    assert sum(c.text.count("z") for c in chunks) >= 2000


def test_code_fences_are_not_headings() -> None:
    chunks = chunk_text("# Real\n\n```\n# not a heading\n```\n")
    assert chunks[0].heading == "Real"


def test_a_long_table_is_cut_between_rows_under_its_header() -> None:
    rows = [f"| `event_{i}` | `{{field_{i}}}` | when thing {i} happens |" for i in range(40)]
    text = "# Events\n\n| event | data | when |\n| --- | --- | --- |\n" + "\n".join(rows)
    chunks = chunk_text(text, target=400, overlap=80)
    tables = [c for c in chunks if "`event_" in c.text]
    assert len(tables) > 2
    seen: list[str] = []
    for c in tables:
        assert "| event | data | when |\n| --- | --- | --- |" in c.text
        seen += [line for line in c.text.split("\n") if line.startswith("| `event_")]
    assert all(row in rows for row in seen) and all(row in seen for row in rows)


NASTY = [
    '"', '""', "'", "*", "AND", "OR NOT", "NEAR(a b)", "a:b", "^start", "-minus", "(((", ")",
    "col:val AND (x OR", "{}", "[]", "\\", "%_", "; DROP TABLE kb_chunks; --", "\x00\x01", "😀 emoji",
    "title:secret*", "Ünïcödé façade", "a" * 5000, "", "   ", "the and of",
]


@pytest.mark.parametrize("query", NASTY)
def test_match_expression_is_always_valid_fts(query: str) -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='unicode61 remove_diacritics 2')")
    db.execute("INSERT INTO t VALUES ('the facade of unicode and secret start')")
    expr = or_expression(content_terms(query, limit=24))
    if expr is not None:
        db.execute("SELECT rowid FROM t WHERE t MATCH ?", (expr,)).fetchall()


def test_stop_words_dropped_unless_nothing_else() -> None:
    assert content_terms("What is the retry policy of the agent?") == ["retry", "policy", "agent"]
    assert content_terms("the and of") == ["the", "and", "of"]
    assert fold("Crème Brûlée") == "creme brulee"


def test_rrf_prefers_items_ranked_well_in_both_lists() -> None:
    fused = rrf([[1, 2, 3], [3, 1, 4]])
    assert fused[1] > fused[3] > fused[2]
    assert fused[1] == pytest.approx(1 / 61 + 1 / 62)
    assert 4 in fused and fused[4] == pytest.approx(1 / 63)


def test_snippet_is_cut_around_the_match_with_diacritics() -> None:
    text = ("filler " * 100) + "La crème brûlée est servie toute la journée. " + ("more " * 100)
    q = QueryTerms.of("creme brulee", content_terms("creme brulee"))
    cut = snippet(text, q, 80)
    assert "crème brûlée" in cut
    assert len(cut) <= 82
    assert cut.startswith("…") and cut.endswith("…")
    assert snippet("short", q, 80) == "short"


def test_rerank_early_exit_matches_full_ranking() -> None:
    import random

    from knowledge.ranking import Candidate, rerank

    rng = random.Random(3)
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]

    def cands() -> list[Candidate]:
        out = []
        for i in range(100):
            text = " ".join(rng.choice(words) for _ in range(20))
            out.append(Candidate(i, f"d{i % 17}", i, "T", "", text, "b", "s", None, {}, 1 / (61 + i), cosine=rng.random()))
        return out

    for _ in range(20):
        base = cands()
        q = QueryTerms.of("alpha omega", ["alpha", "omega"])
        full = rerank([Candidate(**{f: getattr(c, f) for f in c.__slots__}) for c in base], q, lists=1, top_k=100)  # type: ignore[attr-defined]
        fast = rerank(base, q, lists=1, top_k=5)
        assert [c.chunk_rowid for c in fast] == [c.chunk_rowid for c in full[:5]]
