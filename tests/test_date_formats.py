"""A column's date format: one check (``backend.table_rules.date_formats``) answered the same by both faces.

The agent's tools check a table config before they call the backend, and the backend
checks it again on write. They used to carry two copies of the date-format check that
disagreed (the tool accepted an unterminated quote the backend refused; their messages
differed), so a config could be previewed as valid and then refused on save. Here every
case goes through both: the tools (``preview_table_config``, ``validate_table_config``)
and the backend's REST write (``POST /v1/data``), over a real loopback server.
"""

from __future__ import annotations

import asyncio
import copy
import random
import re
import string
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from agenttools.backend_tools import register_backend_tools
from agenttools.core.catalog import build_catalog
from agenttools.core.drafts import Drafts
from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry
from agenttools.core.tool_support import WorkflowToolDeps
from agenttools.tables.tools import TABLE_REFERENCE
from backend import create_backend_app
from backend.seed import ALICE_ID, TABLE_CONFIGS
from backend.table_rules import date_format_problem
from storage.sqlite import open_sqlite_storage
from tests.support.events import wire
from tests.support.node import NodeScript, npm_ci
from tests.support.server import serve_app

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")  # the async tests share the module's backend

ORACLE_DIR = Path(__file__).parent / "date_fns"
FIELD = "visual_settings.columns.updated_date.format.format"

# What date-fns' format accepts: its tokens, quoted text ('' a quote), any other
# character printed as it is (the two old copies refused "(", non-Latin text and P/p).
ACCEPTED = [
    "yyyy-MM-dd HH:mm",
    "yyyy-MM-dd'T'HH:mm:ss",
    "dd/MM/yyyy (EEE)",
    "yyyy年M月d日",
    "PPpp",
    "h 'o''clock' a",
    "do 'of' MMMM yyyy",
]
# (format, what the message must say): refused by date-fns itself, or a mistake date-fns
# would print without complaint.
REFUSED = [
    ("yyyy-MM-dd 'at HH:mm", "the quote at position 11 is never closed"),  # the tool used to accept it
    ("2006-01-02 15:04", "looks like a Go time layout ('2006'); use date-fns tokens instead: yyyy-MM-dd HH:mm"),
    ("02.01.06", "use date-fns tokens instead: dd.MM.yy"),
    ("yyyy-MM-ddTHH:mm", "the unquoted 'T' at position 10 is date-fns' Unix timestamp"),
    ("YYYY-MM-DD", "YYYY is the week-numbering year in date-fns, which refuses it; use yyyy"),
    ("%d/%m/%Y", "looks like a strftime pattern ('%d')"),
    ("Jan dd", "'J' at position 0 is not a date-fns token; put literal text in single quotes"),
    ("'today'", "has no date-fns token"),
]


@dataclass
class Faces:
    registry: ToolRegistry
    http: httpx.AsyncClient
    base_url: str

    async def tool(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        ctx = ToolContext(
            user_id=ALICE_ID,
            authorization="Bearer demo-alice",
            conversation_id="c",
            run_id="r",
            context_type="tables",
            context={},
            http=self.http,
        )
        return await self.registry.handler(name)(args, ctx)  # type: ignore[misc]

    async def create(self, name: str, config: dict[str, Any]) -> httpx.Response:
        return await self.http.post(
            f"{self.base_url}/v1/data",
            json={"name": name, "config": config},
            headers={"Authorization": "Bearer demo-alice"},
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def faces(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Faces]:
    tmp = tmp_path_factory.mktemp("date_formats")
    async with serve_app(create_backend_app(str(tmp / "backend.db"))) as base_url, httpx.AsyncClient() as http:
        storage = await open_sqlite_storage(tmp / "agent.db")
        try:
            registry = ToolRegistry(build_catalog())
            register_backend_tools(registry, WorkflowToolDeps(backend_url=base_url, drafts=Drafts(storage.drafts)))
            yield Faces(registry, http, base_url)
        finally:
            await storage.close()


def config_with(fmt: str) -> dict[str, Any]:
    """A seeded, valid config whose datetime column ``updated_date`` has the format ``fmt``."""
    seeded = next(c for c in TABLE_CONFIGS if c["name"] == "inventory_items_overview")
    config: dict[str, Any] = copy.deepcopy(seeded["config"])
    config["visual_settings"]["columns"]["updated_date"]["format"] = {"type": "datetime", "format": fmt}
    return config


@MODULE_LOOP
@pytest.mark.parametrize("fmt", ACCEPTED)
async def test_both_faces_accept(faces: Faces, fmt: str) -> None:
    assert date_format_problem(fmt) is None
    config = config_with(fmt)
    preview = await faces.tool("preview_table_config", {"config": config, "description_of_changes": "Date format."})
    assert [name for name, _ in wire(preview.events)] == ["table_config_preview"], preview.content
    checked = await faces.tool("validate_table_config", {"config": config, "name": "accepted format"})
    assert checked.content["valid"] is True and "backend_errors" not in checked.content, checked.content
    created = await faces.create(f"accepted {ACCEPTED.index(fmt)}", config)
    assert created.status_code == 201, created.text
    assert created.json()["config"]["visual_settings"]["columns"]["updated_date"]["format"]["format"] == fmt


@MODULE_LOOP
@pytest.mark.parametrize(("fmt", "says"), REFUSED)
async def test_both_faces_refuse_with_the_same_message(faces: Faces, fmt: str, says: str) -> None:
    message = date_format_problem(fmt)
    assert message is not None and says in message
    config = config_with(fmt)

    preview = await faces.tool("preview_table_config", {"config": config, "description_of_changes": "Date format."})
    assert wire(preview.events) == [("table_config_validation_error", {"errors": [f"{FIELD}: {message}"]})]

    checked = await faces.tool("validate_table_config", {"config": config, "name": "refused format"})
    assert checked.content["valid"] is False
    assert checked.content["errors"] == [{"field": FIELD, "message": message, "code": "INVALID_FORMAT"}]
    assert [message in e for e in checked.content["backend_errors"]] == [True]  # the backend's own answer

    created = await faces.create("refused format", config)
    assert created.status_code == 400, created.text
    body = created.json()
    assert body["code"] == "invalid_argument"
    assert body["errors"] == [{"field": FIELD, "message": message, "code": "INVALID_FORMAT"}]


async def test_the_agent_loads_the_check_without_the_backend_app() -> None:
    """The tools import ``backend.table_rules`` only; the backend's routes and seed data
    stay out of the agent's processes (a fresh interpreter: this one has loaded them)."""
    probe = (
        "import sys, agenttools.tables.config_rules; "
        "print(' '.join(sorted(m for m in sys.modules if m == 'backend' or m.startswith('backend.'))))"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", probe, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert out.decode().split() == [
        "backend",
        "backend.table_rules",
        "backend.table_rules.date_formats",
        "backend.table_rules.reader",
        "backend.table_rules.validation",
    ]


def random_formats(count: int) -> list[str]:
    """Formats made of every Latin letter, digits, punctuation, quotes and common tokens,
    the same ones every run."""
    rng = random.Random(20261127)
    pieces = [*string.ascii_letters, *"0123456789-/.:, _'()%年", "yyyy", "MM", "dd", "HH", "mm", "''", "'at'", "do"]
    return sorted({"".join(rng.choice(pieces) for _ in range(rng.randint(1, 7))) for _ in range(count)})


async def test_date_fns_itself_accepts_what_the_check_accepts() -> None:
    """The real date-fns (tests/date_fns, pinned) is the oracle: no format accepted here
    makes its ``format`` throw, and every one refused as "not a date-fns token" or as a
    token date-fns refuses does make it throw. (Refused mistakes date-fns would print —
    Go layouts, timestamps, open quotes — are left out; so is a long format followed by
    ``o``, which English expands into ``…yo``, a valid ordinal.)"""
    node = npm_ci(ORACLE_DIR)
    formats = random_formats(6000)
    proc = await asyncio.create_subprocess_exec(
        node, str(ORACLE_DIR / "format_check.mjs"), cwd=ORACLE_DIR,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    script = NodeScript(proc)
    try:
        await script.send(orjson.dumps(formats).decode())
        records = await script.finish(timeout=60)
    finally:
        script.kill()
    verdicts = {r["format"]: r for r in records if r["kind"] == "result"}
    assert sorted(verdicts) == formats
    accepted_but_throws: list[tuple[str, str]] = []
    refused_but_formats: list[tuple[str, str]] = []
    for fmt in formats:
        problem, verdict = date_format_problem(fmt), verdicts[fmt]
        if problem is None and not verdict["ok"]:
            accepted_but_throws.append((fmt, verdict["error"]))
        refused_as_date_fns = problem is not None and ("is not a date-fns token" in problem or "refuses it" in problem)
        if refused_as_date_fns and verdict["ok"] and not re.search(r"[Pp]o", fmt):
            refused_but_formats.append((fmt, str(problem)))
    assert not accepted_but_throws, accepted_but_throws[:20]
    assert not refused_but_formats, refused_but_formats[:20]
    assert sum(date_format_problem(f) is None for f in formats) > 500  # the sample holds valid formats too


def test_the_examples_the_model_reads_pass_the_check() -> None:
    """The date formats shown to the model (discover_table_reference, the tables prompt)
    are ones the check accepts, so following them never earns a refusal."""
    shown = list(TABLE_REFERENCE["date_format_examples"].values())
    rules = " ".join(TABLE_REFERENCE["validation_rules"])
    prompt = (Path(__file__).parent.parent / "prompts" / "texts" / "tables_reference.md").read_text(encoding="utf-8")
    line = next(line for line in prompt.splitlines() if line.startswith("- Date formats"))
    shown += re.findall(r"`([^`]+)`", line)
    shown += re.findall(r"(yyyy-MM-dd'T'HH:mm|dd\.MM\.yyyy 'at' HH:mm)", rules)
    assert len(shown) >= 10, shown
    assert {fmt: date_format_problem(fmt) for fmt in shown} == dict.fromkeys(shown)
