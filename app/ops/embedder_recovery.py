"""An explicit remote ``AGENT_EMBEDDER`` that failed its start-up probe, probed again in
the background until it answers, then put to work without a restart.

Why: the everyday docker-compose start has the agent and Ollama start together, and
Ollama answers a few seconds after the agent's probe (an OpenAI-compatible or Gemini
endpoint may be down for a moment too). The embedder was chosen once, at start-up
(``toolindex.factory.choose_embedder``): a failed probe left no embedder, text-only
search, every tool offered and ``/readyz`` 503 until someone restarted the service.

``EmbedderRecovery`` asks the same question again (``choose``: the start-up's own choice,
probe included) after 1 s, then after pauses doubling up to 30 s, for ever; the log says
when it starts, when the reason changes and when the embedder answered — one line per
change, never one per try. Once one answers, ``adopt`` hands it to the parts that use
it (``app.embedder_adoption``); an ``adopt`` that fails closes it and the probing goes
on. ``status()`` is ``/readyz``'s ``checks.embedder.recovery``. ``auto`` never gets
here: it takes what answers at start-up (the hashing embedder at worst) and says so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toolindex.embedder import Embedder

log = logging.getLogger("agentchat.embedder")

#: The first pause before probing again, and the longest (doubled after each failure).
RECOVERY_FIRST_S = 1.0
RECOVERY_MAX_S = 30.0

Choose = Callable[[], Awaitable[tuple[Embedder | None, str]]]
Adopt = Callable[[Embedder, str], Awaitable[None]]


class EmbedderRecovery:
    """Probes the configured embedder again until it answers, then adopts it (once)."""

    def __init__(
        self,
        configured: str,
        reason: str,
        choose: Choose,
        adopt: Adopt,
        *,
        first_s: float = RECOVERY_FIRST_S,
        max_s: float = RECOVERY_MAX_S,
    ) -> None:
        self.configured = configured
        self._choose = choose
        self._adopt = adopt
        self._first_s = first_s
        self._max_s = max_s
        #: ``probing`` until an answer, ``adopting`` while the parts take it, ``recovered``.
        self.state = "probing"
        #: Probes since start-up's (which failed), and why the last one failed.
        self.tries = 0
        self.last_reason = reason
        self._began = time.monotonic()
        self._next_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        #: The embedder found, once it answered: this object's to close (``close``).
        self.embedder: Embedder | None = None

    def start(self) -> asyncio.Task[None]:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="embedder-recovery")
        return self._task

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def close(self) -> None:
        """Close the embedder found (after the task was stopped: ``EmbedderCheck.aclose``)."""
        embedder, self.embedder = self.embedder, None
        if embedder is not None:
            await embedder.aclose()

    def status(self) -> dict[str, Any]:
        """For ``/readyz``: what the probing does, how often it tried, why it failed."""
        out: dict[str, Any] = {"state": self.state, "tries": self.tries}
        if self.state != "recovered":
            out["last_reason"] = self.last_reason
            out["probing_for_s"] = round(time.monotonic() - self._began, 1)
        if self._next_at is not None and self.state == "probing":
            out["next_try_in_s"] = round(max(0.0, self._next_at - time.monotonic()), 1)
        return out

    async def _run(self) -> None:
        log.warning(
            "the embedder failed its start-up probe: probing it again in the background",
            extra={"configured": self.configured, "reason": self.last_reason, "max_pause_s": self._max_s},
        )
        pause = self._first_s
        while True:
            self._next_at = time.monotonic() + pause
            await asyncio.sleep(pause)
            self._next_at = None
            pause = min(self._max_s, pause * 2)
            self.tries += 1
            embedder, why = await self._choose()
            if embedder is None:
                if why != self.last_reason:
                    log.warning("the embedder still fails its probe, for another reason", extra={"reason": why})
                self.last_reason = why
                continue
            self.state, self.embedder = "adopting", embedder
            try:
                await self._adopt(embedder, why)
            except Exception as exc:  # the knowledge base's vectors could not be loaded: try again later
                self.embedder = None
                await embedder.aclose()
                self.state, self.last_reason = "probing", f"answered, but taking it failed: {type(exc).__name__}: {exc}"
                log.exception("the embedder answered but could not be put to work; probing again")
                continue
            self.state = "recovered"
            log.info(
                "the embedder answers: in use now, without a restart",
                extra={"configured": self.configured, "reason": why, "tries": self.tries},
            )
            return


__all__ = ["RECOVERY_FIRST_S", "RECOVERY_MAX_S", "EmbedderRecovery"]
