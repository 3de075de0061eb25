"""The final answer streamed as it is written, when the model writes it as a tool call.

The knowledge flow's prompt tells the model to put its final answer in the
``generate_response`` call's ``answer`` argument and never as plain text, so with a
well-behaved model the answer arrives as tool-call argument deltas, not as text. Shown only
through the ``response`` event, it would appear all at once at the end of the turn: every
face (native ``content_chunk``, OpenAI content deltas, AI SDK text deltas) promises tokens
live. ``AnswerReader`` reads the ``answer`` string out of the argument deltas as they come,
and ``ShownText`` decides what of it the client has not seen yet, so the turn can emit it
as ``content_chunk`` events (stored like every event) before the call ends.

The rule for one answer on screen: a stream cannot take text back, so the answer streams
unless it repeats what the run already showed — the offline answerer, and models, write the
answer as text and then send the same text to ``generate_response``; a model told to use
the tool after answering in text repeats it in the next turn. While the answer read so far
is contained (whitespace-insensitive) in the text the run streamed, it is held; once it
says something new it is released whole and streams on live. That is the faces' own test
for the ``response`` event (``compat_runs.AnswerText.owed``), so a streamed answer is never
followed by a second copy. Text a model wrote beside a different answer stays shown (a
draft no stream can retract); the answer then starts a new paragraph.

The answer is streamed as the tool will keep it (``generate_response`` strips it): leading
whitespace is dropped and trailing whitespace held until more text follows, so the chunks
add up to the ``response`` event's ``answer`` exactly.

Why ``jiter`` (pydantic's JSON parser, already installed with ``openai``): its partial mode
reads a truncated document, a trailing string included, and drops an escape cut in two
(``\\u00`` of ``\\u00e9``, the first half of a surrogate pair) until it is complete, so
each read is a prefix of the next. Each delta re-reads the call's arguments from the
start; jiter reads a 20,000-character answer sent in 5,000 pieces in ~10 ms in all, less
than hand-written incremental state would cost in Python per delta.
"""

from __future__ import annotations

from collections.abc import Sequence

import jiter

from agenttools.core.registry import RunToolState
from agenttools.rag.policy import missing_prerequisite


def streamed_answer_tool(offered: Sequence[str], tools: RunToolState, answer_tool: str) -> str | None:
    """The answer tool whose ``answer`` streams as text this turn: offered, and able to run
    now (an answer before the knowledge search is refused, so it is not shown either)."""
    if answer_tool not in offered or missing_prerequisite(answer_tool, tools):
        return None
    return answer_tool


def normalized(text: str) -> str:
    """Whitespace-insensitive form, for "was this already shown" checks: the hold here and
    the faces' own (``app.server.compat_runs.AnswerText.owed``)."""
    return " ".join(text.split())


class AnswerReader:
    """The ``answer`` string of one call, read from its argument deltas as they arrive.

    ``feed`` returns the answer text that became readable with this delta ('' while the
    field has not begun, an escape is cut in two, or the JSON cannot be read). A document
    whose ``answer`` stops being a prefix of what was read (the field sent twice) stops
    the reading: what was already streamed stands, the ``response`` event has the rest."""

    __slots__ = ("_raw", "_read", "_started", "_trailing", "stopped")

    def __init__(self) -> None:
        self._raw = bytearray()
        self._read = ""  # the answer as decoded so far
        self._started = False  # past the leading whitespace
        self._trailing = ""  # whitespace held until text follows it
        self.stopped = False

    def feed(self, piece: str) -> str:
        if self.stopped or not piece:
            return ""
        self._raw += piece.encode()
        try:
            value = jiter.from_json(bytes(self._raw), partial_mode="trailing-strings", cache_mode=False)
        except ValueError:
            return ""  # not readable (yet): the call's own parse reports a malformed one
        answer = value.get("answer") if isinstance(value, dict) else None
        if not isinstance(answer, str) or len(answer) <= len(self._read):
            return ""
        if not answer.startswith(self._read):
            self.stopped = True
            return ""
        new, self._read = answer[len(self._read) :], answer
        return self._visible(new)

    def _visible(self, new: str) -> str:
        text = self._trailing + new
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        self._trailing = text[len(body) :]
        return body


class ShownText:
    """The text a run has streamed (``content_chunk``), and the hold on an answer that
    repeats it. One per run, across its turns; ``answer_begins`` once per answer call.

    The hold is checked per delta, so it is kept linear: the held text's normalized form
    grows by the delta alone, and where it matched in the shown text is remembered, so a
    delta costs one comparison at that place (a new search only when it stops matching
    there) — a 20,000-character answer repeated in 4-character pieces costs ~0.03 s, not
    the ~0.8 s of normalizing the whole held text again per delta."""

    __slots__ = ("_at", "_gap", "_held", "_held_norm", "_norm", "_parts", "_releasing", "_turn_had_text")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._norm: str | None = ""
        self._held: list[str] = []
        self._held_norm = ""
        self._gap = False  # the held text ends in whitespace
        self._at = -1  # where the held text matched in the shown text
        self._releasing = True
        self._turn_had_text = False

    def new_turn(self) -> None:
        self._turn_had_text = False

    def text(self, chunk: str) -> None:
        """Plain text the turn streamed."""
        if chunk:
            self._parts.append(chunk)
            self._norm = None
            self._turn_had_text = True

    def answer_begins(self) -> None:
        """A new answer call: held while it repeats what was shown (nothing shown: live)."""
        self._held, self._held_norm, self._gap, self._at = [], "", False, -1
        self._releasing = not any(not part.isspace() for part in self._parts)

    def answer(self, piece: str) -> str:
        """What of the answer's ``piece`` to stream now ('' while it repeats shown text)."""
        if not piece:
            return ""
        if self._releasing:
            return self._record(piece)
        self._held.append(piece)
        self._grow(piece)
        if self._repeats():
            return ""
        self._releasing = True
        held, self._held = "".join(self._held), []
        if self._turn_had_text and not "".join(self._parts).endswith("\n\n"):
            held = "\n\n" + held  # beside this turn's own text: a paragraph of its own
        return self._record(held)

    def _grow(self, piece: str) -> None:
        """``_held_norm`` becomes ``normalized(held)`` with ``piece`` added."""
        words = piece.split()
        if words:
            joined = bool(self._held_norm) and not self._gap and not piece[0].isspace()
            self._held_norm += ("" if joined or not self._held_norm else " ") + " ".join(words)
        self._gap = piece[-1].isspace() or (self._gap and not words)

    def _repeats(self) -> bool:
        if self._norm is None:
            self._norm = normalized("".join(self._parts))
        if self._at >= 0 and self._norm.startswith(self._held_norm, self._at):
            return True
        self._at = self._norm.find(self._held_norm)
        return self._at >= 0

    def _record(self, text: str) -> str:
        self._parts.append(text)
        self._norm = None
        self._turn_had_text = True
        return text
