"""The playground in a real headless Chromium: ask, stream, previews, reload mid-answer, stop.

The browser runs the page's own JavaScript against the real app on uvicorn: ``fetch``
starts the run, ``EventSource`` reads it, a real ``Page.reload`` drops the connection,
and the page resumes from ``sessionStorage``. The model is a gated script, so "mid-answer"
is a fact (the provider is parked at a gate), not a timing guess.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from app.config import Settings
from app.server.playground import playground_routes
from events import Response, TableConfigPreview, WorkflowPreview
from llm.scripted import ScriptedCall
from llm.types import ChatRequest, ToolDefinition
from tests.browser.cdp import Page, find_chromium, launch
from tests.conftest import running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn, last_user_text

ALL = frozenset({"workflow", "tables", "knowledge"})
ARTIFACTS = Path(__file__).parent / "artifacts"
HOSTILE = '<img src=x onerror="window.__pwned=1">'
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}

WORKFLOW = {
    "name": "Low stock alert",
    "is_active": True,
    "actions": [
        {"name": "Check stock", "action_type": "evaluate_condition"},
        {"name": "Email buyer " + HOSTILE, "action_type": "send_email"},
    ],
    "edges": [
        {"target_action_id": "temp:0", "edge_type": "start", "edge_order": 0},
        {
            "source_action_id": "temp:0",
            "target_action_id": "temp:1",
            "edge_type": "sequence",
            "source_output": "true",
            "edge_order": 1,
        },
    ],
}
TABLE_CONFIG = {
    "data_source": [
        {
            "source": "inventory",
            "type": "query",
            "select": {"columns": [{"name": "sku"}, {"name": "qty", "alias": "Quantity"}]},
            "filters": [{"column": "qty", "operator": "lt", "value": 10}],
            "sort": [{"column": "qty", "direction": "asc"}],
        }
    ]
}
SERVER_PATH = "/srv/agent/knowledge/sample_kb/10-troubleshooting.md"
RESPONSE: dict[str, Any] = {
    "answer": (
        "Your **low-stock** workflow is ready for review [wf-guide#1].\n\n"
        f"- It checks stock {HOSTILE} <script>window.__pwned = 2</script>\n"
        "- It emails the buyer [wf-guide#2][trouble#3]\n\n"
        "See [the guide](https://docs.example.com/workflows) or [this](javascript:alert(1))."
    ),
    "sources": [
        {"id": "wf-guide#1", "title": "Workflow guide", "url": "https://docs.example.com/workflows", "kind": "internal"},
        {"id": "wf-guide#2", "title": "Workflow guide", "url": "https://docs.example.com/workflows", "kind": "internal"},
        {"id": "trouble#3", "title": "Troubleshooting", "kind": "internal", "location": SERVER_PATH},
    ],
    "confidence_score": 0.9,
    "used_internal_kb": True,
    "used_external_kb": False,
}


ANSWER_ARGS = {"answer": RESPONSE["answer"], "sources": [s["id"] for s in RESPONSE["sources"]]}


def registry() -> ToolRegistry:
    names = ("preview_workflow_probe", "preview_table_probe", "failing_probe")
    specs = [ToolSpec(ToolDefinition(n, f"Test tool {n}.", NO_ARGS), ALL) for n in names]
    # The final answer goes through `generate_response`, as with a real model: its
    # arguments are what the conversation stores, so a reload can show the turn again.
    answer_args = {"type": "object", "properties": {"answer": {"type": "string"}, "sources": {"type": "array"}}}
    specs.append(ToolSpec(ToolDefinition("generate_response", "Test answer tool.", answer_args), ALL))
    reg = ToolRegistry(specs)

    async def workflow(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        event = {"description": "Emails the buyer when stock is low.", "workflow": WORKFLOW, "is_update": False}
        return ToolOutcome({"ok": True}, events=[WorkflowPreview.from_dict(event)], model_content={"status": "preview_sent"})

    async def table(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        event = {"description": "Low stock first.", "config": TABLE_CONFIG, "is_update": False, "name": "Stock"}
        return ToolOutcome({"ok": True}, events=[TableConfigPreview.from_dict(event)], model_content={"status": "preview_sent"})

    async def answer(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome({"ok": True}, events=[Response.from_dict(RESPONSE)])

    async def failing(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome.error("backend refused: 401 missing token", status=401)

    reg.set_handler("failing_probe", failing)
    reg.set_handler("preview_workflow_probe", workflow)
    reg.set_handler("preview_table_probe", table)
    reg.set_handler("generate_response", answer)
    return reg


def turn_in_run(request: ChatRequest) -> int:
    """How many model turns this run has had before this request."""
    for i in range(len(request.messages) - 1, -1, -1):
        m = request.messages[i]
        if m.role == "user" and m.content:
            return (len(request.messages) - 1 - i) // 2
    return 0


class Script:
    """Scripts the model by question; the gates let the test act mid-answer."""

    def __init__(self) -> None:
        self.reload_gate = Gate()
        self.stop_gate = Gate()

    def __call__(self, request: ChatRequest, index: int) -> GatedTurn:
        question, turn = last_user_text(request), turn_in_run(request)
        if question.startswith("Build"):
            return [
                GatedTurn(
                    ["Let me draft that. "],
                    [ScriptedCall("preview_workflow_probe", {}), ScriptedCall("preview_table_probe", {})],
                ),
                GatedTurn(["The workflow ", self.reload_gate, "is ready ", "for review."], [ScriptedCall("generate_response", ANSWER_ARGS)]),
                GatedTurn([]),
            ][min(turn, 2)]
        if question.startswith("I accept"):
            return [GatedTurn([], [ScriptedCall("failing_probe", {})]), GatedTurn(["Saved."])][min(turn, 1)]
        if question.startswith("Stop"):
            return GatedTurn(["Working on it", self.stop_gate, " (never sent)"])
        return GatedTurn([f"unexpected question {question!r}"])


def with_playground(app: Any) -> Any:
    """Mount the playground unless the factory already does (it will, once wired)."""
    if not any(getattr(r, "path", None) == "/" for r in app.router.routes):
        app.router.routes.extend(playground_routes())
    return app


def js(value: str) -> str:
    return orjson.dumps(value).decode()


RUN = "[...document.querySelectorAll('article.run')].pop()"


async def last_run(page: Page, expr: str) -> Any:
    return await page.evaluate(f"(() => {{ const run = {RUN}; return run ? {expr} : null; }})()")


async def ask(page: Page, question: str) -> None:
    await page.type_into("#message", question)
    await page.click("#send")


async def open_playground(page: Page, base: str) -> None:
    """Load the playground and wait until its start-up has placed everything: the model
    line comes from /readyz, and offline it brings the banner that moves the form ~180 px
    down - a click aimed before that lands beside the button (a CI flake: the Ask click
    missed and no refusal came)."""
    await page.navigate(f"{base}/")
    await page.wait_for("document.getElementById('provider').textContent !== '…'", what="the model line")


async def test_playground_page_and_static_files_are_served_safely(settings: Settings) -> None:
    provider = GatedProvider([])
    async with running_app(settings, provider=provider, registry=registry(), embedder=None) as (base, app):
        with_playground(app)
        async with httpx.AsyncClient(timeout=10) as client:
            page = await client.get(f"{base}/")
            script = await client.get(f"{base}/static/playground.js")
            style = await client.get(f"{base}/static/playground.css")
            escape = await client.get(f"{base}/static/../playground.py")
            missing = await client.get(f"{base}/static/nope.js")
            icon = await client.get(f"{base}/favicon.ico")
            markdown = await client.get(f"{base}/static/markdown.js")
            source_key = await client.get(f"{base}/static/source_key.js")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"
    assert '<script src="/static/playground.js"' in page.text and "<script>" not in page.text
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "EventSource" in script.text and "innerHTML" not in script.text
    assert script.headers["x-content-type-options"] == "nosniff"
    assert style.status_code == 200 and style.headers["content-type"].startswith("text/css")
    assert escape.status_code == 404 and missing.status_code == 404
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert '<link rel="icon" href="/static/favicon.svg"' in page.text
    # The renderer builds elements; nothing in the page's scripts parses HTML.
    assert source_key.status_code == 200 and "documentKey" in source_key.text
    for source in (script.text, markdown.text, source_key.text):
        assert "innerHTML" not in source and "outerHTML" not in source and "insertAdjacentHTML" not in source
        assert "DOMParser" not in source and "document.write" not in source


async def test_playground_in_headless_chromium(settings: Settings) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    script = Script()
    provider = GatedProvider(script)
    async with running_app(settings, provider=provider, registry=registry(), embedder=None) as (base, app):
        with_playground(app)
        svc = app.state.services
        provider.name, provider.model = "extractive", "sample-kb"  # what /readyz reports offline
        async with launch(binary) as browser:
            page = await browser.new_page()
            await page.navigate(f"{base}/")
            assert await page.evaluate("document.title") == "Agent chat playground"
            # The provider is on screen, with the offline banner.
            await page.wait_for("document.getElementById('provider').textContent.includes('extractive')", what="provider")
            assert await page.evaluate("document.getElementById('provider').textContent") == "extractive · sample-kb"
            assert await page.evaluate("!document.getElementById('offline').hidden")
            banner = await page.evaluate("document.getElementById('offline').textContent")
            assert "extracted from the knowledge base" in banner and "workflows and table configurations needs a model" in banner

            # 1. Ask (in Workflow: offline the page opens in Knowledge): streamed text, tool
            #    calls, selection and previews render while the model is still mid-answer
            #    (parked at the gate).
            await page.click("input[value=workflow]")
            await ask(page, "Build a low-stock alert workflow")
            async with asyncio.timeout(60):
                await script.reload_gate.reached.wait()
            await page.wait_for(
                f"{RUN} && {RUN}.querySelector('.answer').textContent.includes('The workflow ')",
                what="the streamed text before the gate",
            )
            await page.wait_for(f"{RUN}.querySelectorAll('.tools li[data-state=ok]').length === 2", what="2 tools ok")
            run_id = await last_run(page, "run.dataset.runId")
            run = svc.runs.get(run_id)
            assert run is not None and not run.finished
            assert await last_run(page, "run.dataset.status") == "running"
            assert await last_run(page, "run.querySelector('.question').textContent") == "Build a low-stock alert workflow"
            assert await last_run(page, "run.querySelector('.selection').hidden") is False
            assert await last_run(page, "run.querySelector('.spinner') === null")
            actions = await last_run(page, "[...run.querySelectorAll('.workflow-preview .actions li')].map(n => n.textContent)")
            assert actions == ["Check stock — evaluate_condition", f"Email buyer {HOSTILE} — send_email"]
            edges = await last_run(page, "[...run.querySelectorAll('.workflow-preview .edges li')].map(n => n.textContent)")
            assert edges == ["start → Check stock", f"Check stock [true] → Email buyer {HOSTILE}"]
            # Model and tool output is text, never markup.
            assert await page.evaluate("document.querySelector('article.run img') === null && !window.__pwned")
            cells = await last_run(page, "[...run.querySelectorAll('.table-preview td')].map(n => n.textContent)")
            assert cells == ["sku", "", "", "qty", "Quantity", "", "qty", "lt", "10", "qty", "asc", ""]

            # 2. Reload mid-answer: a new document, which resumes the run from sessionStorage.
            await page.evaluate("window.__beforeReload = true")
            await page.reload()
            assert await page.evaluate("window.__beforeReload === undefined")
            await page.wait_for(
                f"{RUN} && {RUN}.dataset.runId === {js(run_id)} && "
                f"{RUN}.querySelector('.answer').textContent.includes('The workflow ')",
                what="the replayed answer after reload",
            )
            await page.wait_for(f"{RUN}.querySelectorAll('.tools li[data-state=ok]').length === 2", what="replayed tools")
            assert await page.evaluate("document.querySelectorAll('article.run').length") == 1
            assert await page.evaluate("document.querySelectorAll('.workflow-preview').length") == 1
            assert not run.finished

            # 3. The rest of the answer arrives on the resumed stream; the final response
            #    replaces the streamed text, so the answer is shown once, as Markdown.
            script.reload_gate.open()
            await page.wait_for(f"{RUN}.dataset.status === 'completed'", what="the run to complete")
            streamed = "".join(orjson.loads(e.data)["chunk"] for e in run.events if e.event == "content_chunk")
            # The answer streams too, as generate_response's arguments arrive: after the
            # turn's own text, as a paragraph of its own (a stream cannot take text back).
            final = next(orjson.loads(e.data)["answer"] for e in run.events if e.event == "response")
            assert streamed == "Let me draft that. The workflow is ready for review.\n\n" + final
            answer = await last_run(page, "run.querySelector('.answer').textContent")
            assert "ready for review" in answer and "Let me draft that" not in answer
            assert answer.count("Your low-stock workflow is ready for review") == 1
            assert await page.evaluate("document.body.innerText.split('ready for review').length - 1") == 1
            assert await last_run(page, "run.querySelector('.answer strong').textContent") == "low-stock"
            assert await last_run(page, "run.querySelectorAll('.answer ul > li').length") == 2
            # Raw HTML from the model is text: no <img>, no <script>, nothing ran.
            assert await last_run(page, "run.querySelector('.answer img, .answer script') === null")
            assert HOSTILE in answer and "<script>window.__pwned = 2</script>" in answer
            assert await page.evaluate("window.__pwned === undefined")
            links = await last_run(page, "[...run.querySelectorAll('.answer a:not(.cite)')].map(a => [a.textContent, a.href])")
            assert links == [["the guide", "https://docs.example.com/workflows"]]  # no javascript: link
            # Citations: numbered links to de-duplicated source cards, no server path.
            cites = await last_run(
                page, "[...run.querySelectorAll('.answer a.cite')].map(a => [a.textContent, a.getAttribute('href')])"
            )
            cards = await last_run(
                page, "[...run.querySelectorAll('.sources li.source-card')].map(li => [li.id, li.textContent])"
            )
            assert [c[0] for c in cites] == ["[1]", "[1]", "[2]"]
            assert [c[1] for c in cites] == [f"#{cards[0][0]}", f"#{cards[0][0]}", f"#{cards[1][0]}"]
            assert len(cards) == 2
            assert cards[0][1].startswith("Workflow guide") and "https://docs.example.com/workflows" in cards[0][1]
            assert cards[1][1].startswith("Troubleshooting") and "10-troubleshooting.md" in cards[1][1]
            assert "/srv/agent" not in await page.evaluate("document.body.innerText")
            link = await last_run(page, "(a => a && [a.textContent, a.href, a.rel])(run.querySelector('.sources a'))")
            assert link == ["Workflow guide", "https://docs.example.com/workflows", "noopener noreferrer"]
            assert await last_run(page, "run.querySelectorAll('.tools li').length") == 3
            # The workflow preview offers Accept / Reject; Reject dismisses it with a note.
            assert await page.evaluate("document.querySelectorAll('.workflow-preview button.decide').length") == 2
            await page.click(".workflow-preview button.reject")
            await page.wait_for("document.querySelector('.workflow-preview').dataset.decision === 'rejected'", what="reject")
            note = await page.evaluate("document.querySelector('.workflow-preview .decision').textContent")
            assert note.startswith("Rejected") and "nothing was saved" in note
            assert await page.evaluate("document.querySelectorAll('article.run').length") == 1  # no new run
            assert await page.evaluate("document.getElementById('stop').disabled") is True
            conversation_id = run.conversation_id
            assert await page.evaluate("document.getElementById('conversation').textContent") == conversation_id

            # 4. Accepting the table preview asks a follow-up in the same conversation.
            await page.click(".table-preview button.accept")
            await page.wait_for(
                f"document.querySelectorAll('article.run').length === 2 && {RUN}.dataset.status === 'completed'",
                what="the follow-up run",
            )
            follow_up = svc.runs.get(await last_run(page, "run.dataset.runId"))
            assert follow_up is not None and follow_up.conversation_id == conversation_id
            assert last_user_text(provider.requests[-1]) == "I accept the proposed table configuration “Stock”."
            assert await page.evaluate("document.querySelector('.table-preview').dataset.decision") == "accepted"
            # A failed tool shows its reason.
            await page.wait_for(f"{RUN}.querySelector('.tools li[data-state=error] .tool-reason[data-pending=false]') !== null",
                                what="the failed tool's reason")
            failed = await last_run(page, "run.querySelector('.tools li[data-state=error]').textContent")
            assert "failing_probe" in failed and "backend refused: 401 missing token" in failed
            await page.screenshot(ARTIFACTS / "playground-answer.png")

            # 4b. A reload restores the whole conversation: the earlier turn from the
            #     conversation, the last run replayed, the context picker as it was.
            await page.evaluate("document.querySelector('input[value=tables]').click()")
            await page.reload()
            await page.wait_for("document.querySelectorAll('#history article.run.past').length === 1", what="past turn")
            await page.wait_for(f"{RUN}.dataset.status === 'completed'", what="the replayed last run")
            past = await page.evaluate("document.querySelector('#history article.run').querySelector('.question').textContent")
            assert past == "Build a low-stock alert workflow"
            past_answer = await page.evaluate("document.querySelector('#history .answer').textContent")
            assert "Your low-stock workflow is ready for review" in past_answer
            assert await page.evaluate("document.querySelector('#history .answer strong') !== null")
            assert await page.evaluate("document.querySelectorAll('article.run').length") == 2
            assert (await last_run(page, "run.querySelector('.question').textContent")).startswith("I accept")
            assert "backend refused" in await last_run(page, "run.querySelector('.tools li[data-state=error]').textContent")
            assert await page.evaluate("document.querySelector('input[value=tables]').checked")
            assert await page.evaluate("document.getElementById('conversation').textContent") == conversation_id
            await page.screenshot(ARTIFACTS / "playground-restored.png")

            # 5. Stop a running answer.
            await ask(page, "Stop right there")
            await within(script.stop_gate.reached.wait(), "the answer to reach the stop gate")
            await page.wait_for(f"{RUN}.querySelector('.answer').textContent === 'Working on it'", what="the held text")
            stopped = svc.runs.get(await last_run(page, "run.dataset.runId"))
            assert stopped is not None and not stopped.finished
            await page.click("#stop")
            await page.wait_for(f"{RUN}.dataset.status === 'cancelled'", what="the cancelled status")
            assert stopped.status == "cancelled"
            assert [e.event for e in stopped.events][-1] == "message_complete"
            assert await last_run(page, "run.querySelector('.answer').textContent") == "Working on it"

            await page.screenshot(ARTIFACTS / "playground.png")
            assert page.exceptions == [] and page.console_errors == []
            assert page.failed_requests == []  # no 404, not even for the favicon
            assert any(url.endswith("/static/favicon.svg") for url in page.requested)
    assert (ARTIFACTS / "playground.png").stat().st_size > 10_000


async def test_offline_the_playground_opens_in_knowledge_and_answers_a_first_question(tmp_path: Path) -> None:
    """What a newcomer sees: the default configuration with no model reachable (provider
    and embedder ``auto``, a fresh database with the sample knowledge base)."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    defaults = Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "agent.db"), "OLLAMA_HOST": "http://127.0.0.1:9"})
    async with running_app(defaults) as (base, app):
        await app.state.services.rooms.knowledge.tasks[0]  # the sample KB is in
        async with launch(binary) as browser:
            page = await browser.new_page()
            await page.navigate(f"{base}/")
            await page.wait_for("document.getElementById('provider').textContent.startsWith('extractive')",
                                what="provider")
            # Offline, the page opens where questions can be answered, with an example of one.
            assert await page.evaluate("document.querySelector('input[value=knowledge]').checked")
            assert await page.evaluate("document.getElementById('context').value") == "{}"
            assert "resume a stream" in await page.evaluate("document.getElementById('message').placeholder")
            # The banner names what configures a model, each as `auto` reads it.
            banner = " ".join((await page.evaluate("document.getElementById('offline').textContent")).split())
            assert "workflows and table configurations needs a model" in banner
            for setting in ("GEMINI_API_KEY", "OLLAMA_MODEL", "make dev", "OPENAI_BASE_URL and OPENAI_API_KEY"):
                assert setting in banner, setting
            assert await page.evaluate("document.querySelector('#offline a').getAttribute('href')") == "/readyz"

            # A first question gets a readable answer from the sample KB, with its sources.
            await ask(page, "How do I resume a stream after a disconnect?")
            await page.wait_for(f"{RUN} && {RUN}.dataset.status === 'completed'", timeout=60, what="the answer")
            answer = await last_run(page, "run.querySelector('.answer').textContent")
            assert len(answer) > 80 and "could not find" not in answer
            assert await last_run(page, "run.querySelectorAll('.sources li.source-card').length") >= 1
            meta = await last_run(page, "run.querySelector('.final-meta').textContent")
            assert meta.startswith("confidence ") and "knowledge base" in meta
            await page.screenshot(Path("/tmp/playground-offline-answer.png"))

            # A workflow request is declined offline: shown without a confidence, which
            # would read as certainty about an answer that is not there.
            await page.click("input[value=workflow]")
            assert await page.evaluate("document.getElementById('context').value") == '{"workflow_id": ""}'
            await ask(page, "Create a workflow that emails me when stock runs low")
            await page.wait_for(
                f"document.querySelectorAll('article.run').length === 2 && {RUN}.dataset.status === 'completed'",
                timeout=60, what="the declined workflow request",
            )
            declined = await last_run(page, "run.innerText")
            assert "language model" in declined and "confidence" not in declined
            assert await last_run(page, "run.querySelector('.final').hidden") is True
            await page.screenshot(Path("/tmp/playground-offline-declined.png"))
            assert page.exceptions == [] and page.console_errors == []


class ApprovalScript:
    """A call that needs approval, then the answer once its result is back."""

    def __call__(self, request: ChatRequest, index: int) -> GatedTurn:
        if turn_in_run(request) == 0:
            call = ScriptedCall("clear_stock_probe", {"table": "stock"})
            return GatedTurn(["I will clear the stock table. "], [call])
        return GatedTurn(["Cleared."])


async def test_playground_approves_a_call_in_headless_chromium(settings: Settings) -> None:
    """A call that needs approval shows Approve / Edit / Reject; Approve runs it once and
    the page follows the run on to its end."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    schema = {"type": "object", "properties": {"table": {"type": "string"}}, "required": ["table"],
              "additionalProperties": False}
    reg = ToolRegistry([ToolSpec(ToolDefinition("clear_stock_probe", "Test write tool.", schema), ALL,
                                 asks_approval=True)])
    calls: list[dict[str, Any]] = []

    async def clear(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        calls.append(args)
        return ToolOutcome({"cleared": args["table"]})

    reg.set_handler("clear_stock_probe", clear)
    async with running_app(settings, provider=GatedProvider(ApprovalScript()), registry=reg, embedder=None) as (
        base, app,
    ):
        with_playground(app)
        async with launch(binary) as browser:
            page = await browser.new_page()
            await open_playground(page, base)
            await page.click("input[value=workflow]")
            await ask(page, "Clear the stock table")
            await page.wait_for(f"{RUN} && {RUN}.querySelector('.approval button.approve') !== null",
                                what="the approval box")
            await page.wait_for(f"{RUN}.dataset.status === 'waiting'", what="the waiting status")
            assert await last_run(page, "[...run.querySelectorAll('.approval button')].map(b => b.textContent)") == [
                "Approve", "Edit", "Reject"]
            shown = await last_run(page, "JSON.parse(run.querySelector('.approval-arguments').value)")
            assert shown == {"table": "stock"}
            assert calls == []  # nothing ran while it waited
            assert "waiting for approval" in await last_run(page, "run.querySelector('.tools li').textContent")
            await page.screenshot(ARTIFACTS / "playground-approval.png")
            await page.click(".approval button.approve")
            await page.wait_for(f"{RUN}.dataset.status === 'completed'", what="the run to complete")
            assert await page.evaluate("document.querySelector('.approval').dataset.decision") == "approve"
            assert (await last_run(page, "run.querySelector('.answer').textContent")).endswith("Cleared.")
            assert await last_run(page, "run.querySelectorAll('.tools li[data-state=ok]').length") == 1
            await page.screenshot(ARTIFACTS / "playground-approved.png")
            assert page.exceptions == [] and page.console_errors == []
    assert calls == [{"table": "stock"}]
