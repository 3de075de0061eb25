"""Folding a finished run's text events into one per stretch, and reading them back
(retention, issue 25). Pure functions: no database here.

Why this shape: every streamed token of every run is one ``content_chunk`` row, which is
most of the database. Once a run is long finished, each stretch of consecutive
``content_chunk`` events (a turn's text between its tool events) becomes one event
carrying the stretch's whole text, stored under the stretch's **last** id; every other
event keeps its id and its data. So:

* a replay from the start (or from any id that was kept) yields the same events with the
  same text, only in fewer pieces;
* a client resuming from an id that was folded away (it had seen part of a stretch) is
  served the folded event cut to the text it had not seen yet, under the same last id:
  the folded row keeps, in ``folded``, the stretch's first id and the length of each
  replaced chunk (``"<first>:<len>,<len>,…"``, lengths in characters; the ids are
  consecutive, so this is all it takes, in a few bytes per token).

A stretch never crosses a non-text event, nor the first id of a model turn that a
restart discarded (``run_resumed``'s ``discarded.from_seq``): text a client is told to
take back must not merge with text it keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

TEXT_EVENT = "content_chunk"
_RESUMED = "run_resumed"


@dataclass(frozen=True, slots=True)
class Fold:
    """One stretch ``first..last`` folded into the row ``last``."""

    first: int
    last: int
    data: str  # the folded event's data: {"chunk": <the stretch's text>}
    folded: str  # "<first>:<len>,<len>,…" for the chunks first..last-1


def _chunk(data: str) -> str | None:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    chunk = value.get("chunk") if isinstance(value, dict) else None
    return chunk if isinstance(chunk, str) and len(value) == 1 else None


def _breaks(events: Sequence[tuple[int, str, str]]) -> set[int]:
    """Ids where a stretch must start afresh (a discarded turn's first id)."""
    out: set[int] = set()
    for _, name, data in events:
        if name == _RESUMED:
            try:
                discarded = orjson.loads(data).get("discarded")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if isinstance(discarded, dict) and isinstance(discarded.get("from_seq"), int):
                out.add(int(discarded["from_seq"]))
    return out


def folds(events: Sequence[tuple[int, str, str]]) -> list[Fold]:
    """The stretches of ``events`` (``(seq, event, data)`` in id order) worth folding:
    two or more consecutive text events with consecutive ids."""
    breaks = _breaks(events)
    out: list[Fold] = []
    stretch: list[tuple[int, str]] = []

    def close() -> None:
        if len(stretch) > 1:
            text = "".join(chunk for _, chunk in stretch)
            lengths = ",".join(str(len(chunk)) for _, chunk in stretch[:-1])
            out.append(
                Fold(
                    stretch[0][0], stretch[-1][0], orjson.dumps({"chunk": text}).decode(), f"{stretch[0][0]}:{lengths}"
                )
            )
        stretch.clear()

    for seq, name, data in events:
        chunk = _chunk(data) if name == TEXT_EVENT else None
        if chunk is None or seq in breaks or (stretch and seq != stretch[-1][0] + 1):
            close()
        if chunk is not None:
            stretch.append((seq, chunk))
    close()
    return out


def unfold_after(after: int, data: str, folded: str | None) -> str:
    """The data to serve for a folded row to a reader resuming after id ``after``: the
    whole stretch, or — when ``after`` is one of the ids folded into it — the text after
    that id's chunk."""
    if not folded:
        return data
    first, _, lengths = folded.partition(":")
    if after < int(first):
        return data
    seen = [int(n) for n in lengths.split(",")][: after - int(first) + 1]
    text = _chunk(data) or ""
    return orjson.dumps({"chunk": text[sum(seen) :]}).decode()


__all__ = ["TEXT_EVENT", "Fold", "folds", "unfold_after"]
