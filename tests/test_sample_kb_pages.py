"""The sample knowledge base says what the code does: its answers are what a newcomer
reads first (the offline answerer quotes these pages)."""

from __future__ import annotations

from knowledge.sample import SAMPLE_KB_DIR


def test_the_running_page_gives_autos_provider_order() -> None:
    """``AGENT_LLM_PROVIDER=auto`` tries Gemini (a key), then an OpenAI-compatible server
    (``OPENAI_BASE_URL`` or ``OPENAI_API_KEY``), then Ollama, then ``extractive``
    (``app/model_choice.py``, docs/configuration.md). The page said "neither Ollama nor
    Gemini reachable" and left the OpenAI-compatible server out."""
    text = (SAMPLE_KB_DIR / "08-running.md").read_text(encoding="utf-8")
    make_run = text.split("## make run", 1)[1].split("\n## ", 1)[0]
    order = ["`GEMINI_API_KEY`", "OpenAI-compatible server", "`OPENAI_BASE_URL`", "Ollama", "`extractive`"]
    places = [make_run.find(word) for word in order]
    assert -1 not in places, dict(zip(order, places, strict=True))
    assert places == sorted(places), dict(zip(order, places, strict=True))
