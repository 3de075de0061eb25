"""``/readyz``'s embedder check says what an operator must do when an explicit
``AGENT_EMBEDDER`` failed its start-up probe.

Found by the operator's walk: with ``AGENT_EMBEDDER=ollama`` and Ollama down at start,
``/readyz`` is 503 with ``detail`` "no embedder: knowledge search runs on text only, tool
selection offers all tools" - and stays 503 after Ollama is started, since the embedder
is chosen once, at start-up (``toolindex/factory.py``), and nothing probes it again. An
operator waited for a readiness that only a restart brings. The detail now says so.
"""

from __future__ import annotations

from app.ops.embedder_check import EmbedderCheck

WHY = "AGENT_EMBEDDER=ollama but ollama (nomic-embed-text) failed its start-up probe (unreachable): no vectors"


def test_an_explicit_choice_that_failed_says_a_restart_brings_it_back() -> None:
    ready = EmbedderCheck(None, WHY, "ollama").readiness()
    assert ready["ok"] is False and ready["chosen_because"] == WHY
    detail = ready["detail"]
    assert "AGENT_EMBEDDER=ollama" in detail and "restart" in detail, detail
    assert "AGENT_EMBEDDER=auto" in detail or "AGENT_EMBEDDER=none" in detail, detail


def test_no_embedder_by_choice_or_under_auto_is_ready_and_says_what_it_means() -> None:
    for configured in ("none", "auto"):
        ready = EmbedderCheck(None, "chosen", configured).readiness()
        assert ready["ok"] is True, ready
        assert ready["detail"] == "no embedder: knowledge search runs on text only, tool selection offers all tools"
        assert "restart" not in ready["detail"]
