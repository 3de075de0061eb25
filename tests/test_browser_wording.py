"""The playground's words where a newcomer used to meet jargon, in a real headless Chromium
against the real app on uvicorn: a question refused for want of a token says where the
token goes (and opens that field), and a search ranked on one side of the hybrid ranking
says so in plain words, not "(semantic side dropped)"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.config import Settings
from tests.browser.cdp import find_chromium, launch
from tests.conftest import running_app
from tests.test_browser import RUN, ask, open_playground
from tests.test_compat_faces_owners import bearer, env

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).parent / "artifacts"  # ignored by git: look at them after a run
ERROR = "document.querySelector('#form-error').textContent"


def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    return binary


async def test_a_question_refused_for_its_token_says_where_the_token_goes(tmp_path: Path) -> None:
    binary = chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with running_app(Settings.from_env(env(tmp_path))) as (base, _), launch(binary) as browser:
        page = await browser.new_page()
        await open_playground(page, base)
        assert await page.evaluate("document.querySelector('details.settings').open") is False
        await ask(page, "What is a bucket?")
        await page.wait_for(f"{ERROR}.length > 0", what="the refusal")
        said = await page.evaluate(ERROR)
        assert said == (
            "The run was not started — this server needs a bearer token (AGENT_AUTH=jwt): "
            "paste yours in Settings → “Bearer token”, below."
        ), said
        # Settings is opened with the cursor in the token field.
        assert await page.evaluate("document.querySelector('details.settings').open") is True
        assert await page.evaluate("document.activeElement.id") == "token"
        await page.screenshot(ARTIFACTS / "playground-sign-in.png")

        await page.type_into("#token", "not-a-token")
        await page.click("#send")
        await page.wait_for(f"{ERROR}.includes('was refused')", what="the refused token")
        said = await page.evaluate(ERROR)
        assert said.startswith("The run was not started — the bearer token in Settings → “Bearer token” was refused")
        assert said.endswith(": paste a valid one there."), said

        # With a valid token the same question runs.
        token = bearer("alice")["Authorization"].removeprefix("Bearer ")
        await page.evaluate(f"document.querySelector('#token').value = {token!r}")
        await page.click("#send")
        await page.wait_for(f"{RUN} && {RUN}.dataset.status === 'completed'", timeout=60, what="the answer")
        assert await page.evaluate(ERROR) == ""
        assert page.exceptions == [] and page.console_errors == []


async def test_a_search_ranked_by_words_only_says_so_in_plain_words(tmp_path: Path) -> None:
    """The default hashing embedder against BM25: for this question the meaning-based
    ranking finds no close match, so the passages are ranked by their words alone."""
    binary = chromium()
    offline = Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.db"), "AGENT_EMBEDDER": "hashing",
        "AGENT_LLM_PROVIDER": "extractive", "OLLAMA_HOST": "http://127.0.0.1:9",
    })
    async with running_app(offline) as (base, app), launch(binary) as browser:
        await app.state.services.rooms.knowledge.tasks[0]  # the sample KB is in
        page = await browser.new_page()
        await page.navigate(f"{base}/")
        await page.wait_for("document.querySelector('input[value=knowledge]').checked", what="knowledge")
        await ask(page, "How do I resume a stream after a disconnect?")
        await page.wait_for(f"{RUN} && {RUN}.dataset.status === 'completed'", timeout=60, what="the answer")
        lines = await page.evaluate(f"[...{RUN}.querySelectorAll('.tool-summary')].map(n => n.textContent)")
        plain = re.compile(r"\d+ passages? from \d+ documents? \(ranked by matching words only: [a-z ]+\): “")
        assert plain.match(lines[0]), lines
        assert not any("side dropped" in line for line in lines), lines
        await page.screenshot(ARTIFACTS / "playground-search-line.png")
        assert page.exceptions == [] and page.console_errors == []
