"""The playground's attachments (issue 25 item 4) in headless Chromium: a file dropped on
the composer and one chosen through the paperclip become chips of the conversation; the
next knowledge question is answered from the dropped file, citing it; a chip's × removes
its file on the server."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from app.config import Settings
from tests.browser.cdp import find_chromium, launch
from tests.conftest import running_app
from tests.test_attachments import NOTE, QUESTION
from tests.test_browser import ARTIFACTS, RUN, ask, js, last_run, open_playground, with_playground

CHIPS = "[...document.querySelectorAll('#attachment-chips .chip-name')].map(c => c.textContent)"


def drop(name: str, text: str, media_type: str) -> str:
    """JavaScript dropping a file on the composer, as a drag from the desktop does."""
    return (
        "(() => { const dt = new DataTransfer();"
        f" dt.items.add(new File([{js(text)}], {js(name)}, {{type: {js(media_type)}}}));"
        " const form = document.getElementById('ask');"
        " form.dispatchEvent(new DragEvent('dragover', {dataTransfer: dt, bubbles: true, cancelable: true}));"
        " form.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));"
        " return true; })()"
    )


async def test_playground_attaches_dropped_and_chosen_files_in_headless_chromium(
    settings: Settings, tmp_path: Path
) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    chosen = tmp_path / "harbour.html"
    chosen.write_text("<html><body><h1>Harbour</h1><p>The harbour tide tables are posted weekly.</p></body></html>")
    async with running_app(settings) as (base, app), launch(binary) as browser:
        with_playground(app)
        page = await browser.new_page()
        await open_playground(page, base)
        await page.click("input[value=knowledge]")
        assert await page.evaluate(CHIPS) == []

        await page.evaluate(drop("lighthouse notes.md", NOTE, "text/markdown"))
        await page.wait_for(f"{CHIPS}.length === 1", what="the dropped file's chip")
        assert await page.evaluate(CHIPS) == ["lighthouse notes.md"]
        conversation = await page.evaluate("document.getElementById('conversation').textContent")
        assert conversation.startswith("c-")

        # The paperclip's file input, given a file as a user's choice would.
        doc = await page.send("DOM.getDocument", {"depth": 0})
        node = await page.send("DOM.querySelector", {"nodeId": doc["root"]["nodeId"], "selector": "#attach-file"})
        await page.send("DOM.setFileInputFiles", {"files": [str(chosen)], "nodeId": node["nodeId"]})
        await page.wait_for(f"{CHIPS}.length === 2", what="the chosen file's chip")

        await ask(page, QUESTION)
        await page.wait_for(f"{RUN} && {RUN}.dataset.status === 'completed'", what="the answer", timeout=30)
        answer = await last_run(page, "run.querySelector('.answer').textContent")
        sources = await last_run(page, "run.querySelector('.sources').textContent")
        assert "seven minutes past dawn" in answer, answer
        assert "lighthouse notes.md" in sources, sources
        await page.screenshot(ARTIFACTS / "playground-attachments.png")

        async with httpx.AsyncClient(base_url=base, timeout=10) as http:
            url = f"/v1/agent/conversations/{conversation}/attachments"
            stored = (await http.get(url)).json()["attachments"]
            assert [a["filename"] for a in stored] == ["lighthouse notes.md", "harbour.html"]
            await page.click("#attachment-chips li:last-child .chip-remove")
            await page.wait_for(f"{CHIPS}.length === 1", what="the removed chip")
            assert [a["filename"] for a in (await http.get(url)).json()["attachments"]] == ["lighthouse notes.md"]
        assert page.exceptions == [] and page.console_errors == [] and page.failed_requests == []
