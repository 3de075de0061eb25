"""``/readyz``'s embedder check says what an operator can expect when an explicit
``AGENT_EMBEDDER`` failed at start-up.

Found by the operator's walk: with ``AGENT_EMBEDDER=ollama`` and Ollama down at start,
``/readyz`` was 503 with "no embedder: knowledge search runs on text only, tool selection
offers all tools" and nothing probed it again. A remote embedder is now probed again in
the background (``app.ops.embedder_recovery``; the service itself:
``tests/test_embedder_late.py``), and the detail says so; one that lacks a setting
(Gemini without a key, ``local`` without its packages) still needs a restart, and says so.
"""

from __future__ import annotations

from app.ops.embedder_check import EmbedderCheck
from app.ops.embedder_recovery import EmbedderRecovery
from toolindex.embedder import Embedder

WHY = "AGENT_EMBEDDER=ollama but ollama (nomic-embed-text) failed its start-up probe (unreachable): no vectors"


async def _never(*_: object) -> tuple[Embedder | None, str]:
    raise AssertionError("not started in this test")


async def _no_adopt(_: Embedder, __: str) -> None:
    raise AssertionError("not started in this test")


def test_a_remote_choice_that_failed_says_it_is_probed_again() -> None:
    check = EmbedderCheck(None, WHY, "ollama")
    check.recovery = EmbedderRecovery("ollama", WHY, _never, _no_adopt)  # not started: its state only
    ready = check.readiness()
    assert ready["ok"] is False and ready["chosen_because"] == WHY
    assert "probed again in the background" in ready["detail"], ready
    assert "until agentchat is restarted" not in ready["detail"], ready
    assert ready["recovery"] == {**ready["recovery"], "state": "probing", "tries": 0, "last_reason": WHY}


def test_a_choice_that_lacks_a_setting_says_a_restart_brings_it_back() -> None:
    why = "AGENT_EMBEDDER=gemini but GEMINI_API_KEY is not set: tool search disabled"
    ready = EmbedderCheck(None, why, "gemini").readiness()
    assert ready["ok"] is False and "recovery" not in ready
    detail = ready["detail"]
    assert "AGENT_EMBEDDER=gemini" in detail and "restart" in detail, detail
    assert "AGENT_EMBEDDER=auto" in detail or "AGENT_EMBEDDER=none" in detail, detail


def test_no_embedder_by_choice_or_under_auto_is_ready_and_says_what_it_means() -> None:
    for configured in ("none", "auto"):
        ready = EmbedderCheck(None, "chosen", configured).readiness()
        assert ready["ok"] is True, ready
        assert ready["detail"] == "no embedder: knowledge search runs on text only, tool selection offers all tools"
        assert "restart" not in ready["detail"]
