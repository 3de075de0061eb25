"""The embedder's part of ``/readyz``: which one, why, and whether it has answered.

An Ollama embedder is probed at start-up through ``/api/show`` (its dimension, without
loading the model), so it has not embedded anything yet: one real embedding runs in the
background (loading the model before the first question needs it), and until it has
answered the service does not say ready — a restarted service over a filled knowledge
base would otherwise be "ready" while every ingest fails (issue 20). A failed attempt is
retried on the next ``/readyz`` call, so the service becomes ready when the server recovers.
Every other remote embedder answered a real embedding when it was probed.

An explicit remote choice that failed its start-up probe is probed again in the
background (``app.ops.embedder_recovery``, ``recover``): ``/readyz`` is 503 meanwhile,
says so under ``recovery``, and turns ready once it answered (``adopt``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from app.ops.close_budget import EMBEDDER_CHECK_STOP_S
from app.ops.embedder_recovery import EmbedderRecovery
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
        #: Probing again an explicit choice that failed at start-up (``recover``).
        self.recovery: EmbedderRecovery | None = None

    def recover(self, recovery: EmbedderRecovery) -> None:
        """Probe the configured embedder again in the background until it answers."""
        self.recovery = recovery
        recovery.start()

    def adopt(self, embedder: Embedder, reason: str) -> None:
        """The configured embedder answered after start-up: shown, and checked as at start."""
        self.embedder, self.reason = embedder, reason
        needs_answer = callable(getattr(embedder, "learn_dimension", None))
        self.status = "waiting for a first embedding" if needs_answer else "answered"
        self.start()

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
        if self.recovery is not None:
            out["recovery"] = self.recovery.status()
        if e is None and not ok and self.recovery is not None:
            out["detail"] = (
                f"no embedder yet: AGENT_EMBEDDER={self.configured} failed its start-up probe (chosen_because "
                "says why) and is probed again in the background (recovery): knowledge search runs on text "
                "only and tool selection offers all tools until it answers, then both use it without a restart"
            )
        elif e is None and not ok:  # a setting is missing (gemini without a key, local without its packages)
            out["detail"] = (
                f"no embedder: AGENT_EMBEDDER={self.configured} cannot be used (chosen_because says why), so "
                "knowledge search runs on text only and tool selection offers all tools; this stays so until "
                "agentchat is restarted with what it lacks (or AGENT_EMBEDDER=auto to take the best one "
                "reachable, none for text only)"
            )
        elif e is None:
            out["detail"] = "no embedder: knowledge search runs on text only, tool selection offers all tools"
        elif self.status != "answered":
            out["detail"] = self.detail or "the embedding model is loading"
        return out

    async def aclose(self) -> None:
        """Cancel the first embedding if it is still out, and the probing again with it;
        past ``EMBEDDER_CHECK_STOP_S`` they are named in the log and left (the close must
        not hang on an embedder). The embedder the probing found is closed here."""
        tasks = [t for t in (self._task, self.recovery.task if self.recovery else None) if t is not None]
        await cancel_and_wait(tasks, EMBEDDER_CHECK_STOP_S)
        if self.recovery is not None:
            await self.recovery.close()
