"""Caps on what a model may put in a run: one streamed chunk, and one assistant message.

A model (or a fake, or a proxy gone wrong) can send a 5 MB line in one chunk, or stream
without end. Each chunk is cut at ``AGENT_MAX_CHUNK_CHARS`` and the text of one
assistant turn at ``AGENT_MAX_ANSWER_CHARS``; what is cut is replaced by one short
notice, so the client, the stored conversation and the next model turn all see the same
bounded text, and nobody mistakes the cut for the model's own words.

The agent loop keeps one ``TurnTextCap`` per model turn and passes every text delta
through ``admit`` before it is streamed or kept; ``cap_text`` bounds a whole message
that did not come through a turn (a partial answer, a ``response``'s ``answer``).
"""

from __future__ import annotations

from dataclasses import dataclass


def chunk_notice(limit: int) -> str:
    return f" […cut: a single chunk of the model's answer was longer than {limit} characters]"


def answer_notice(limit: int) -> str:
    return f" […cut: the answer was longer than {limit} characters]"


def cap_chunk(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit`` and a notice."""
    if len(text) <= limit:
        return text
    return text[:limit] + chunk_notice(limit)


def cap_text(text: str, limit: int) -> str:
    """A whole message bounded to ``limit`` characters plus a notice."""
    if len(text) <= limit:
        return text
    return text[:limit] + answer_notice(limit)


@dataclass(slots=True)
class TurnTextCap:
    """The text budget of one model turn: every chunk at most ``max_chunk_chars``, the
    turn's text at most ``max_answer_chars`` (notices not counted)."""

    max_chunk_chars: int
    max_answer_chars: int
    used: int = 0
    #: Set once the answer reached its cap: later chunks are dropped.
    full: bool = False
    chunks_cut: int = 0
    chars_dropped: int = 0

    def admit(self, text: str) -> str:
        """What to stream and keep of a text delta: the delta, a cut delta with a notice,
        or ``""`` (drop it: the answer is already at its cap)."""
        if self.full:
            self.chars_dropped += len(text)
            return ""
        out = text
        if len(text) > self.max_chunk_chars:
            self.chunks_cut += 1
            self.chars_dropped += len(text) - self.max_chunk_chars
            text = text[: self.max_chunk_chars]
            out = text + chunk_notice(self.max_chunk_chars)
        room = self.max_answer_chars - self.used
        if len(text) > room:
            self.full = True
            self.chars_dropped += len(text) - room
            self.used = self.max_answer_chars
            return text[:room] + answer_notice(self.max_answer_chars)
        self.used += len(text)
        return out

    @property
    def cut(self) -> bool:
        return self.full or self.chunks_cut > 0
