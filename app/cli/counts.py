"""How every ``agentchat`` command writes a count: ``1 file``, ``2 files``.

One helper rather than a ``'s' if n != 1`` at each line: the reports said ``1 files
read``, ``1 documents added``, ``pruned 1 keywords`` where a copy was forgotten.
"""

from __future__ import annotations


def noun_for(count: float, noun: str, many: str | None = None) -> str:
    """``noun`` for one, else its plural (``many`` when English does not just add an s);
    a float for a number of days (``0.5 days``)."""
    return noun if count == 1 else (many or noun + "s")


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``, ``0 files``."""
    return f"{count} {noun_for(count, noun, many)}"


__all__ = ["noun_for", "plural"]
