"""The embedder's part of ``/readyz``: which one, why, and whether it has answered.

An Ollama embedder is probed at start-up through ``/api/show`` (its dimension, without
loading the model), so it has not embedded anything yet: one real embedding runs in the
background (loading the model before the first question needs it), and until it has
answered the service does not say ready — a restarted service over a filled knowledge
base would otherwise be "ready" while every ingest fails (issue 20). A failed attempt is
retried on the next ``/readyz`` call, so the service becomes ready when the server recovers.
Every other remote embedder answered a real embedding when it was probed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from app.ops.close_budget import EMBEDDER_CHECK_STOP_S
from app.ops.stopping import cancel_and_wait
from toolindex.embedder import Embedder, EmbeddingError

log = logging.getLogger("agentchat.embedder")


class EmbedderCheck:
    """The chosen embedder (or ``None``), why it was chosen, and its first answer."""

    def __init__(self, embedder: Embedder | None, reason: str, configured: str) -> None:
        self.embedder = embedder
        self.reason = reason
        self.configured = configured
        needs_answer = embedder is not None and callable(getattr(embedder, "learn_dimension", None))
        self.status = "waiting for a first embedding" if needs_answer else "answered"
        self.detail: str | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> asyncio.Task[None] | None:
        """Ask for one real embedding in the background (when one is still needed)."""
        if self.embedder is None or self.status == "answered" or (self._task is not None and not self._task.done()):
            return None
        self._task = asyncio.create_task(self._first_answer(self.embedder), name="embedder-first-answer")
        return self._task

    async def _first_answer(self, embedder: Embedder) -> None:
        self.status = "waiting for a first embedding"
        try:
            await embedder.embed("warm-up", task="query")
        except EmbeddingError as exc:
            self.status, self.detail = "failed", str(exc)[:400]
            log.warning("the embedder did not answer its first embedding", extra={"reason": self.detail})
            return
        self.status, self.detail = "answered", None

    def readiness(self) -> dict[str, Any]:
        """Not ok while an explicit choice failed its probe, or before the first answer."""
        e = self.embedder
        if self.status == "failed":
            self.start()  # try again: the server may be back
        if e is None:  # ok unless an explicit AGENT_EMBEDDER choice could not be satisfied
            ok = self.configured in ("none", "auto", "given")
        else:
            ok = self.status == "answered"
        out: dict[str, Any] = {
            "ok": ok,
            "configured": self.configured,
            "name": e.name if e is not None else None,
            "model": e.model if e is not None else None,
            "dim": e.dim if e is not None else None,
            "status": self.status if e is not None else "none",
            "chosen_because": self.reason,
        }
        if e is None and not ok:  # chosen once, at start-up: nothing probes it again
            out["detail"] = (
                f"no embedder: AGENT_EMBEDDER={self.configured} could not be used at start-up (chosen_because "
                "says why), so knowledge search runs on text only and tool selection offers all tools; this "
                "stays so until agentchat is restarted with that embedder reachable (or AGENT_EMBEDDER=auto "
                "to take the best one reachable, none for text only)"
            )
        elif e is None:
            out["detail"] = "no embedder: knowledge search runs on text only, tool selection offers all tools"
        elif self.status != "answered":
            out["detail"] = self.detail or "the embedding model is loading"
        return out

    async def aclose(self) -> None:
        """Cancel the first embedding if it is still out; past ``EMBEDDER_CHECK_STOP_S``
        it is named in the log and left (the close must not hang on an embedder)."""
        await cancel_and_wait([self._task] if self._task is not None else [], EMBEDDER_CHECK_STOP_S)
