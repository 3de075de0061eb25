"""What the playground shows of tools and answers, in headless Chromium (issue 20 item 6):
each tool's result line under its call, a Markdown table in an answer rendered as a
table (safely), and a reloaded conversation's past source cards with the titles and
files the live page showed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from app.config import Settings
from events import Response
from llm.scripted import ScriptedCall
from llm.types import ChatRequest, ToolDefinition
from tests.browser.cdp import find_chromium, launch
from tests.conftest import running_app
from tests.support.gated_provider import GatedProvider, GatedTurn
from tests.test_browser import (
    ALL,
    HOSTILE,
    NO_ARGS,
    RUN,
    ask,
    last_run,
    open_playground,
    turn_in_run,
    with_playground,
)

SHOTS = Path(os.environ.get("AGENT_TOOLVIEW_SHOTS", "/tmp/toolview_shots"))
TABLE_ANSWER = (
    "The two faces differ like this:\n\n"
    "| Face | Route | Resumes with |\n"
    "| :--- | :---: | ---: |\n"
    "| Native | `POST /v1/agent/runs` | `Last-Event-ID` |\n"
    f"| AI SDK | `POST /v1/agent/ui-stream` | `resumeStream()` \\| GET {HOSTILE} |\n"
    "| OpenAI |\n\n"
    "Pick the one your client speaks."
)
LONG_TITLE = "A document whose title goes on and on about durable runs, resuming and replaying streams"


def registry() -> ToolRegistry:
    answer_args = {"type": "object", "properties": {"answer": {"type": "string"}}}
    reg = ToolRegistry([
        ToolSpec(ToolDefinition("passages_probe", "Test search tool.", NO_ARGS), ALL),
        ToolSpec(ToolDefinition("generate_response", "Test answer tool.", answer_args), ALL),
    ])

    async def passages(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        def chunk(n: int, title: str) -> dict[str, Any]:
            return {"source_id": f"d{n}#1", "doc_id": f"d{n}", "chunk_id": f"d{n}#1", "title": title, "text": "…"}
        chunks = [chunk(1, LONG_TITLE), chunk(2, "Troubleshooting " + HOSTILE), chunk(3, "Compatible faces"),
                  chunk(4, "Operations")]
        return ToolOutcome({"query_id": "q_41b6c0ffee123456", "kb_id": "default_kb", "chunks": chunks,
                            "total_matches": 4})

    async def answer(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        event = {"answer": TABLE_ANSWER, "sources": [], "confidence_score": 0.8, "used_internal_kb": True,
                 "used_external_kb": False}
        return ToolOutcome({"delivered": True, "source_count": 0}, events=[Response.from_dict(event)])

    reg.set_handler("passages_probe", passages)
    reg.set_handler("generate_response", answer)
    return reg


def script(request: ChatRequest, index: int) -> GatedTurn:
    if turn_in_run(request) == 0:
        return GatedTurn(["Searching. "], [ScriptedCall("passages_probe", {})])
    if turn_in_run(request) == 1:
        return GatedTurn([], [ScriptedCall("generate_response", {"answer": TABLE_ANSWER})])
    return GatedTurn([])


async def test_tool_lines_and_a_markdown_table_in_headless_chromium(settings: Settings) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    provider = GatedProvider(script)
    async with running_app(settings, provider=provider, registry=registry(), embedder=None) as (base, app):
        with_playground(app)
        async with launch(binary) as browser:
            page = await browser.new_page()
            await open_playground(page, base)
            await page.click("input[value=workflow]")
            await ask(page, "How do the faces differ?")
            await page.wait_for(f"{RUN} && {RUN}.dataset.status === 'completed'", what="the answer")

            # The tool's result line: what came back, in words, as text (never markup).
            line = await last_run(page, "run.querySelector('.tools li .tool-summary').textContent")
            assert line.startswith("4 passages from 4 documents: \u201cA document whose title goes on"), line
            assert "q_41b6" not in line and "items" not in line
            assert await last_run(page, "run.querySelector('.tools img') === null")
            # One muted line, cut with an ellipsis when too long; a click shows it whole.
            style = await last_run(page, "(s => [s.whiteSpace, s.textOverflow])("
                                         "getComputedStyle(run.querySelector('.tool-summary')))")
            assert style == ["nowrap", "ellipsis"]
            await page.click(".tools li .tool-summary")
            assert await last_run(page, "run.querySelector('.tool-summary').getAttribute('aria-expanded')") == "true"
            assert await last_run(page, "getComputedStyle(run.querySelector('.tool-summary')).whiteSpace") == "normal"
            # Every tool's line has one, the answer tool's too.
            answered = await last_run(page, "[...run.querySelectorAll('.tool-summary')].map(n => n.textContent)")
            assert answered[1:] == ["answer delivered, citing no sources"]

            # The answer's Markdown table is a table: header, alignment, inline code, and a
            # cell's HTML shown as the characters it is.
            heads = await last_run(page, "[...run.querySelectorAll('.answer table th')].map(n => n.textContent)")
            assert heads == ["Face", "Route", "Resumes with"]
            aligns = await last_run(page, "[...run.querySelectorAll('.answer table th')].map(n => n.className)")
            assert aligns == ["align-left", "align-center", "align-right"]
            rows = await last_run(page, "[...run.querySelectorAll('.answer table tbody tr')]"
                                        ".map(r => [...r.cells].map(c => c.textContent))")
            assert rows == [
                ["Native", "POST /v1/agent/runs", "Last-Event-ID"],
                ["AI SDK", "POST /v1/agent/ui-stream", f"resumeStream() | GET {HOSTILE}"],
                ["OpenAI", "", ""],
            ]
            assert await last_run(page, "run.querySelectorAll('.answer table td code').length") == 4
            assert await last_run(page, "run.querySelector('.answer img, .answer script') === null")
            assert await page.evaluate("window.__pwned === undefined")
            paragraphs = await last_run(page, "[...run.querySelectorAll('.answer > p')].map(p => p.textContent)")
            assert paragraphs == ["The two faces differ like this:", "Pick the one your client speaks."]
            assert "|" not in "".join(paragraphs)
            await page.screenshot(SHOTS / "tool-lines-and-table.png")
            assert page.exceptions == [] and page.console_errors == []


async def test_a_reloaded_conversation_shows_its_past_sources_as_the_live_page_did(tmp_path: Path) -> None:
    """The offline default answering from the sample KB: the first turn's source cards
    after a reload (rendered from the stored conversation) read as they did live (from
    the ``response`` event): titles and files, not bare ids."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    offline = Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.db"), "AGENT_EMBEDDER": "hashing",
        "AGENT_LLM_PROVIDER": "extractive", "OLLAMA_HOST": "http://127.0.0.1:9",
    })
    cards = "[...document.querySelector('article.run').querySelectorAll('.sources li.source-card')]"
    async with running_app(offline) as (base, app):
        await app.state.services.rooms.knowledge.tasks[0]  # the sample KB is in
        async with launch(binary) as browser:
            page = await browser.new_page()
            await page.navigate(f"{base}/")
            await page.wait_for("document.querySelector('input[value=knowledge]').checked", what="knowledge")
            await ask(page, "How do I resume a stream after a disconnect?")
            await page.wait_for(f"{RUN} && {RUN}.dataset.status === 'completed'", timeout=60, what="the answer")
            live = await page.evaluate(f"{cards}.map(li => li.textContent)")
            live_titles = await page.evaluate(f"{cards}.map(li => li.querySelector('.source-title').textContent)")
            assert live and all(".md" in card for card in live), live
            await ask(page, "What does the tool selection do?")
            await page.wait_for(
                f"document.querySelectorAll('article.run').length === 2 && {RUN}.dataset.status === 'completed'",
                timeout=60, what="the second answer",
            )
            await page.reload()
            await page.wait_for("document.querySelectorAll('#history article.run.past').length === 1", what="past")
            await page.wait_for(f"{RUN}.dataset.status === 'completed'", what="the replayed last run")
            past = await page.evaluate(f"{cards}.map(li => li.textContent)")
            past_titles = await page.evaluate(f"{cards}.map(li => li.querySelector('.source-title').textContent)")
            assert past_titles == live_titles and past == live, (past, live)
            assert not any("#" in title for title in past_titles)
            await page.screenshot(SHOTS / "reload-past-sources.png")
            assert page.exceptions == [] and page.console_errors == []
