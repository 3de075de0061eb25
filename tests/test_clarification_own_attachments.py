"""A clarification about the run's own attachment bucket names it in words, not by its id.

Since a run may search its own conversation's attachment bucket by name (7ac8052: a
``knowledge_base_search`` hit's ``att_…`` bucket followed with ``search_text``), a search
there that matched nothing, or too much, asked the user 'No documents in "att_3f9c…"
matched ...': a hash nobody reads, in the ``clarification`` event and in the tool
result's one-line summary alike. Each clarification now says "this conversation's
attached files" there (``agenttools.rag.clarification.bucket_words``); a shared bucket
keeps its quoted name. The real corpus tools over a real knowledge base on a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from agenttools.core.executor import ToolExecutor
from agenttools.core.result_summary import summarize_result
from agenttools.core.validation import validate_arguments
from agenttools.rag.clarification import OWN_ATTACHMENTS
from app.cli.kb_file import open_kb_file
from knowledge.attachments import attachment_bucket
from knowledge.types import DocumentIn
from tests.test_corpus_tools import Harness, build_registry
from toolindex.hashing import HashingEmbedder

OWN = attachment_bucket("u1", "c1")  # the Harness's run: user u1, conversation c1
NOTES = [
    DocumentIn(text=f"lighthouse bell note {i}", title=f"note {i}", id=f"n{i}", source="notes.md") for i in range(3)
]
#: Each clarification the corpus tools ask, searching the run's own attachment bucket.
ASKED = {
    "nothing matched": ({"query": "zebra quartz"}, {}),
    "a condition matched nothing": ({"query": "lighthouse bell", "filters": {"source": "elsewhere.md"}}, {}),
    "a list of too many": ({"query": "list every lighthouse note"}, {"overload_threshold": 2}),
    "too many alike": ({"query": "lighthouse bell"}, {"overload_threshold": 2, "flat_spread": 1.01}),
}


async def clarified(tmp_path: Path, args: dict[str, Any], deps: dict[str, Any]) -> dict[str, Any]:
    """The clarification outcome's content, with its event's text and its summary line."""
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64))
    try:
        await kb.ingest_documents(NOTES, bucket=OWN, private=True)
        async with httpx.AsyncClient() as http:
            registry = build_registry(kb, conversation_attachments=True, **deps)
            tools = Harness(kb, ToolExecutor(registry, validator=validate_arguments), http)
            outcome, ctx = await tools.call("search_text", {"bucket": OWN, **args})
    finally:
        await kb.aclose()
    assert not outcome.is_error and "clarification_requested" in outcome.content, outcome.content
    assert ctx.state.clarification is not None
    return {
        **outcome.content,
        "event": ctx.state.clarification["missing_info"],
        "summary": summarize_result(outcome.content),
    }


async def test_every_clarification_of_the_own_bucket_names_it_in_words(tmp_path: Path) -> None:
    for n, (case, (args, deps)) in enumerate(ASKED.items()):
        content = await clarified(tmp_path / str(n), args, deps)
        said = {k: content[k] for k in ("missing_info", "event", "summary")}
        assert OWN_ATTACHMENTS in said["missing_info"] and OWN_ATTACHMENTS in said["event"], (case, said)
        assert not [k for k, text in said.items() if "att_" in text], (case, said)
        assert content["bucket"] == OWN  # the model's content keeps the name it can search by


async def test_a_shared_bucket_keeps_its_name(tmp_path: Path) -> None:
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64))
    try:
        await kb.ingest_documents(NOTES, bucket="notes")
        async with httpx.AsyncClient() as http:
            tools = Harness(kb, ToolExecutor(build_registry(kb), validator=validate_arguments), http)
            outcome, _ = await tools.call("search_text", {"bucket": "notes", "query": "zebra quartz"})
    finally:
        await kb.aclose()
    assert outcome.content["missing_info"].startswith('No documents in "notes" matched "zebra quartz"'), outcome.content
