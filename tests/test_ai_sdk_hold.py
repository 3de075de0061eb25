"""``UIChunks.hold``: a resumed AI SDK stream holds back the model turn the stored log
ended inside until the next logged event says whether the turn stands.

The end-to-end case (a worker SIGKILLed, the resume made before the take-over) is
``tests/test_ai_sdk_restart.py``; here the other outcomes, which a kill cannot time: the
owner goes on (its next event flushes the turn, in order, ahead of it), a take-over that
keeps the turn (a checkpoint with no event of its own was stored after the resume read
the row: its ``run_resumed`` discards nothing held), and a stream that ends while holding.
"""

from __future__ import annotations

from typing import Any

import orjson

import events
from app.runs.follow import Followed
from app.server.ai_sdk_chunks import UIChunks
from storage.records import RunEvent


def _logged(*evs: events.AnyEvent) -> list[Followed]:
    """``evs`` as a follower reads them from the log: ids 1.., typed event decoded on demand."""
    return [Followed(RunEvent(seq, ev.name, ev.to_json().decode())) for seq, ev in enumerate(evs, 1)]


def _resumed(discarded: tuple[int, int] | None) -> events.RunResumed:
    cut = None if discarded is None else events.Discarded(from_seq=discarded[0], to_seq=discarded[1], reason="cut")
    return events.RunResumed(run_id="r1", reason="its replica stopped", checkpoint_seq=2, discarded=cut,
                             pending_tool_calls=0)


def _chunks(wire: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in wire.split(b"\n") if line.startswith(b"data: ")]


def _text(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


#: A run whose log ends inside its first model turn: ids 3 and 4 come after its checkpoint (2).
HEAD = (
    events.RunStarted(run_id="r1", conversation_id="c1"),
    events.ToolSelection(context_type="knowledge", core=[], rag=[], fallback=None, tools=["knowledge_base_search"]),
    events.MessageStart(turn=0),
    events.ContentChunk(chunk="partial "),
)


def _read(ui: UIChunks, items: list[Followed]) -> list[list[dict[str, Any]]]:
    """The chunks sent for each item, one list per item (empty: nothing sent then)."""
    return [_chunks(ui.wire(item)) for item in items]


def test_the_owner_going_on_flushes_the_held_turn_ahead_of_its_next_event() -> None:
    items = _logged(*HEAD, events.ContentChunk(chunk="and more"))
    sent = _read(UIChunks("r1", "c1", hold=(3, 4)), items)
    assert sent[2] == sent[3] == []  # held: the owner may be dead
    assert _text(sent[4]) == "partial and more"  # a newer event: the turn stands, in order
    assert [c["type"] for c in sent[4]][:2] == ["start-step", "text-start"]


def test_a_take_over_that_discards_the_held_turn_drops_it() -> None:
    items = _logged(*HEAD, _resumed((3, 4)), events.MessageStart(turn=0), events.ContentChunk(chunk="whole answer"))
    sent = _read(UIChunks("r1", "c1", hold=(3, 4)), items)
    assert _text([c for s in sent for c in s]) == "whole answer"
    assert [c["type"] for c in sent[4]] == ["data-run-resumed"]


def test_a_take_over_that_keeps_the_held_turn_sends_it() -> None:
    # A checkpoint stored after the resume read the row (a step with no event of its own):
    # the take-over discards nothing, so the held text is the run's own.
    items = _logged(*HEAD, _resumed(None), events.ContentChunk(chunk=" next"))
    sent = _read(UIChunks("r1", "c1", hold=(3, 4)), items)
    assert sent[2] == sent[3] == []
    assert _text(sent[4]) == "partial " and sent[4][-1]["type"] == "data-run-resumed"
    assert _text([c for s in sent for c in s]) == "partial  next"


def test_a_stream_that_ends_while_holding_never_sends_the_turn() -> None:
    ui = UIChunks("r1", "c1", hold=(3, 4))
    sent = _read(ui, _logged(*HEAD))
    unlogged = events.Error(message="cannot read the log", code="storage_unavailable")
    tail = _chunks(ui.wire(Followed(RunEvent(0, unlogged.name, unlogged.to_json().decode()), unlogged)))
    assert _text([c for s in sent for c in s]) == ""
    assert [c["type"] for c in tail] == ["error"]  # an event not in the log settles nothing
    assert ui.hold == (3, 4)


def test_without_a_hold_the_turn_streams_as_it_comes() -> None:
    sent = _read(UIChunks("r1", "c1"), _logged(*HEAD))
    assert _text(sent[3]) == "partial "
