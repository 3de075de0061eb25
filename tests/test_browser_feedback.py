"""The playground's thumbs (issue 25 item 5) in headless Chromium: under a finished
answer, a thumb stores the feedback on the run (read back through the API), a second
one replaces it, and the pressed thumb is marked."""

from __future__ import annotations

import httpx
import pytest

from app.config import Settings
from tests.browser.cdp import find_chromium, launch
from tests.conftest import running_app
from tests.support.gated_provider import GatedProvider, GatedTurn
from tests.test_browser import ARTIFACTS, RUN, ask, last_run, open_playground, with_playground


async def test_playground_thumbs_store_feedback_in_headless_chromium(settings: Settings) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    provider = GatedProvider([GatedTurn(["Here is ", "the answer."])])
    async with running_app(settings, provider=provider, embedder=None) as (base, app), launch(binary) as browser:
        with_playground(app)
        page = await browser.new_page()
        await open_playground(page, base)
        await page.click("input[value=workflow]")
        await ask(page, "Tell me something")
        await page.wait_for(f"{RUN} && {RUN}.dataset.status === 'completed'", what="the answer")
        run_id = await last_run(page, "run.dataset.runId")
        labels = await last_run(page, "[...run.querySelectorAll('.feedback button')].map(b => b.title)")
        assert labels == ["Good answer", "Bad answer"]
        await page.click(".feedback button[data-score='-1']")
        await page.wait_for(f"{RUN}.querySelector('.feedback-note').textContent === 'thanks'", what="the feedback")
        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            stored = (await http.get(f"/v1/agent/runs/{run_id}")).json()
            assert stored["feedback"]["score"] == -1
            assert (
                await last_run(
                    page, "run.querySelector('.feedback button[data-score=\"-1\"]').getAttribute('aria-pressed')"
                )
                == "true"
            )
            await page.click(".feedback button[data-score='1']")
            await page.wait_for(
                f"{RUN}.querySelector('.feedback button[data-score=\"1\"]').getAttribute('aria-pressed') === 'true'",
                what="the replaced feedback",
            )
            assert (await http.get(f"/v1/agent/runs/{run_id}")).json()["feedback"]["score"] == 1
        assert (
            await last_run(
                page, "run.querySelector('.feedback button[data-score=\"-1\"]').getAttribute('aria-pressed')"
            )
            == "false"
        )
        await page.screenshot(ARTIFACTS / "playground-feedback.png")
        assert page.exceptions == [] and page.console_errors == []
