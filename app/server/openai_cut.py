"""An OpenAI client's ``max_tokens`` / ``max_completion_tokens`` and ``stop``, honoured on
the answer the OpenAI-compatible face sends.

The agent's model never sees them (its turns, tools and prompt are the agent's), so the
face cuts the text it streams: at the first stop sequence (``finish_reason: "stop"``,
the sequence itself not sent, as OpenAI does) or at the token limit
(``finish_reason: "length"``). Tokens are the service's estimate, ``CHARS_PER_TOKEN``
characters each (the model's own tokenizer is not known here): the answer ends at
``max_tokens × CHARS_PER_TOKEN`` characters, at a word's end when one falls in the last
part of that room. A stop sequence may arrive split across chunks, so text that could
begin one is held back until the next chunk shows it does not (or the answer ends).
The run itself is not cut: its tools and turns run to the end and its stored
conversation keeps the whole answer.
"""

from __future__ import annotations

from typing import Literal

from app.agent.budget import CHARS_PER_TOKEN

Reason = Literal["stop", "length"]


class AnswerCut:
    """Feed the answer's deltas in order; each returns the part the client may see now."""

    __slots__ = ("_held", "_room", "_stops", "reason")

    def __init__(self, max_tokens: int | None, stops: tuple[str, ...]) -> None:
        self._room = None if max_tokens is None else max_tokens * CHARS_PER_TOKEN
        self._stops = tuple(s for s in stops if s)
        self._held = ""
        #: Why the answer ended early (``None``: it was not cut).
        self.reason: Reason | None = None

    def feed(self, text: str) -> str:
        if self.reason is not None or not text:
            return ""
        buffer = self._held + text
        found = [i for i in (buffer.find(s) for s in self._stops) if i >= 0]
        if found:
            out, self._held, self.reason = buffer[: min(found)], "", "stop"
        else:
            keep = self._may_begin_a_stop(buffer)
            out, self._held = buffer[: len(buffer) - keep], buffer[len(buffer) - keep :]
        return self._within_room(out)

    def finish(self) -> str:
        """What was held back, at the answer's end (it began no stop sequence after all)."""
        if self.reason is not None:
            return ""
        held, self._held = self._held, ""
        return self._within_room(held)

    def _may_begin_a_stop(self, buffer: str) -> int:
        """The length of the longest end of ``buffer`` that is the start of a stop sequence."""
        longest = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:n]):
                    longest = n
                    break
        return longest

    def _within_room(self, out: str) -> str:
        if self._room is None:
            return out
        if len(out) > self._room:
            out = _at_word_end(out, self._room)
            self.reason, self._held = "length", ""
        self._room -= len(out)
        return out


def _at_word_end(text: str, room: int) -> str:
    """``text`` cut to ``room`` characters, back to a word's end when the cut splits a word
    and a space lies in the last quarter of the room (never a long answer cut to little)."""
    cut = text[:room]
    if room < len(text) and cut and not cut[-1].isspace() and not text[room].isspace():
        space = max(cut.rfind(" "), cut.rfind("\n"))
        if space >= room * 3 // 4:
            cut = cut[:space]
    return cut.rstrip()
