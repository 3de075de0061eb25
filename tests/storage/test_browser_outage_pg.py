"""The playground follows a run through a PostgreSQL outage to its ending, in a real headless
Chromium against the real app on a real PostgreSQL behind a cuttable relay.

A run whose writes are given up during an outage is let go and carried on once the
database is back; its stream ends with an id-less ``storage_unavailable`` and the browser's
EventSource reconnects - to a 503 with ``Retry-After`` while the database is away. A
browser gives an EventSource up for good on any answer but 200, so the page said "The
stream could not be opened or resumed" and marked the run's status unknown, though the
run went on and completed a few seconds later. The page now asks the stream again after
the ``Retry-After`` and follows the run on from the last event it showed.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.browser.cdp import find_chromium, launch
from tests.storage.test_postgres_outage_app import relayed_url
from tests.storage.test_postgres_outage_runs_app import let_go, outage_provider, settings_for
from tests.support.deadline import until
from tests.support.gated_provider import Gate
from tests.support.server import serve_app
from tests.support.tcp_cut import CuttableRelay, cuttable_relay
from tests.test_browser import ARTIFACTS, RUN, ask, last_run, open_playground

__all__ = ["relayed_url"]  # the fixture, used by name

pytestmark = pytest.mark.slow


async def test_the_playground_follows_a_run_through_an_outage_to_its_ending(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    from app.factory import create_app

    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    url, relay = relayed_url
    gate = Gate()
    app = create_app(settings_for(url, tmp_path), provider=outage_provider(gate, ending="ended during the outage"))
    async with (
        serve_app(app) as direct,
        cuttable_relay("127.0.0.1", int(direct.rsplit(":", 1)[1])) as web,
        httpx.AsyncClient(base_url=direct, timeout=30) as client,
        launch(binary) as browser,
    ):
        page = await browser.new_page()
        await open_playground(page, f"http://127.0.0.1:{web.port}")
        await ask(page, "Tell me something")
        await until(gate.reached.is_set, "the run mid-answer", 30)
        await page.wait_for(f"{RUN} && {RUN}.querySelector('.answer').textContent.includes('before the outage')",
                            what="the answer's first part")
        run_id = await last_run(page, "run.dataset.runId")

        await let_go(app, relay, gate)  # the answer ends while nothing can be stored
        # The page's connection drops (a proxy's timeout, a network change): the browser's
        # reconnect is refused 503 while the database is away, and the page waits.
        web.cut()
        web.restore()
        await page.wait_for("document.getElementById('conn').textContent.startsWith('reconnecting in')",
                            timeout=60, what="the page waiting to reconnect")
        assert await last_run(page, "run.dataset.status") == "running"
        relay.restore()

        async def completed() -> bool:
            got = await client.get(f"/v1/agent/runs/{run_id}")
            return got.status_code == 200 and got.json()["status"] == "completed"

        await until(completed, "the run carried on to its ending", 60, step=0.1)
        await page.wait_for(f"{RUN}.dataset.status === 'completed'", timeout=60, what="the page showing the ending")
        answer = await last_run(page, "run.querySelector('.answer').textContent")
        await page.screenshot(ARTIFACTS / "playground-outage.png")
        assert "before the outage" in answer and "carried on after the outage" in answer, answer
        assert answer.count("before the outage") == 1, answer
        errors = await last_run(page, "[...run.querySelectorAll('.errors p')].map(n => n.textContent)")
        assert not any("could not be opened" in e for e in errors), errors
        assert page.exceptions == [], page.exceptions
