"""Splitting a joined query word: the cuts offered (``knowledge.query_terms``) and the one
an index's counts pick (``storage.kb_terms``)."""

from __future__ import annotations

from knowledge.query_terms import split_candidates
from storage.kb_terms import (
    SPLIT_MAX_DF,
    SPLIT_MIN_PART_DF,
    choose_split,
    is_split_phrase,
    may_split,
    plausible_cuts,
    split_phrase,
)


def test_cuts_are_parts_of_three_letters_or_more_two_parts_first() -> None:
    cuts = split_candidates("agentchat")
    assert ("agent", "chat") in cuts
    assert all(len(p) >= 3 for cut in cuts for p in cut)
    assert all("".join(cut) == "agentchat" for cut in cuts)
    sizes = [len(cut) for cut in cuts]
    assert sizes == sorted(sizes) and set(sizes) == {2, 3}
    assert ("health", "check") in split_candidates("healthcheck")
    assert ("keep", "alive") in split_candidates("keepalive")


def test_no_cut_yields_a_stop_word_and_identifiers_are_not_cut() -> None:
    assert all("the" not in cut for cut in split_candidates("therapist"))
    assert split_candidates("abc123def") == []
    assert split_candidates("a" * 5000) == [] and split_candidates("a" * 24)
    assert split_candidates("npm") == [] and split_candidates("agent") == []


def test_the_split_the_documents_write() -> None:
    cuts = split_candidates("filesystem")
    part_df = {"file": 40, "system": 25, "files": 9, "stem": 3, "fil": 1, "esystem": 5}
    plausible = plausible_cuts(cuts, part_df)
    # "fil" is in one chunk only, "ystem" in none.
    assert plausible == [("file", "system")] and part_df["fil"] < SPLIT_MIN_PART_DF
    assert choose_split(plausible, {"file system": 18}) == ("file", "system")
    # Parts the index holds but never writes in sequence: no split.
    assert choose_split(plausible, {"file system": 0}) is None
    # Two parts win over three, then the phrase written most.
    assert choose_split([("abc", "def", "ghi"), ("abcdef", "ghi")], {"abc def ghi": 9, "abcdef ghi": 1}) == (
        "abcdef", "ghi")
    assert choose_split([("lock", "file"), ("lockf", "ile")], {"lock file": 3, "lockf ile": 4}) == ("lockf", "ile")


def test_only_rare_words_are_looked_up_and_a_split_is_one_phrase_term() -> None:
    assert may_split(0) and may_split(SPLIT_MAX_DF - 1) and not may_split(SPLIT_MAX_DF)
    assert split_phrase(("agent", "chat")) == "agent chat"
    assert is_split_phrase("agent chat") and not is_split_phrase("agentchat")
