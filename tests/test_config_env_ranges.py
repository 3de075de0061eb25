"""A setting's range in its error names only the bounds it has ("at least 1", not
"between 1 and None")."""

from __future__ import annotations

from app.config_env import EnvReader


def test_one_sided_and_two_sided_ranges_read_as_words() -> None:
    reader = EnvReader({"A": "0", "B": "11", "C": "-1.5", "D": "nan"})
    assert reader.integer("A", 5, lo=1) == 5
    assert reader.integer("B", 5, hi=10) == 5
    assert reader.number("C", 1.0, lo=0.0, hi=2.0) == 1.0
    assert reader.number("D", 1.0, lo=0.0) == 1.0
    assert reader.problems == [
        "A must be at least 1, got 0",
        "B must be at most 10, got 11",
        "C must be a finite number between 0.0 and 2.0, got '-1.5'",
        "D must be a finite number at least 0.0, got 'nan'",
    ]
