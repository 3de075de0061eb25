"""Issue 20 item 4, round 28: an introduction whose code block or list is in the next
chunk is quoted with it (``llm.extractive_next``).

Node's readline page ends a chunk with "A common use case for `readline` is to consume an
input file one line at a time. The easiest way to do so is leveraging the
[`fs.ReadStream`](…) API as well as a `for await...of` loop:", and the next chunk of the
page is the code block. "How do I read a file line by line with readline?" was answered
with the first sentence alone: the introduction, ending the chunk, was dropped, and the
code never shown. Now the answer reads the next chunk (position + 1, same section) —
from the passages it has, or else through one more page-scoped ``search_text`` — and
quotes the introduction with its code block; if the chunk cannot be read, the
introduction is dropped as before (no dangling "…:").
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from llm.extractive import ExtractiveProvider
from llm.extractive_answer import Passage, compose, compose_answer
from llm.extractive_next import attach_next
from llm.extractive_page_read import PAGE_READ_TOOL
from llm.extractive_read import next_block, read_passage
from llm.types import ChatRequest, Message, ToolCall, ToolDefinition, ToolResult, ToolUseInput, ToolUseStart
from tests.conftest import collect_sse, running_app
from tests.support.offline_answers import assert_clean

QUESTION = "How do I read a file line by line with readline?"
SECTION = "Readline \u203a Example: Read file stream line-by-Line"
INTRO = (
    "The easiest way to do so is leveraging the [`fs.ReadStream`](fs.md#class-fsreadstream) API as\n"
    "well as a `for await...of` loop:"
)
ENDS_INTRODUCING = (
    "## Example: Read file stream line-by-Line\n\n"
    "A common use case for `readline` is to consume an input file one line at a\n"
    f"time. {INTRO}"
)
CODE = (
    "```mjs\n"
    "import { createReadStream } from 'node:fs';\n"
    "import { createInterface } from 'node:readline';\n\n"
    "async function processLineByLine() {\n"
    "  const rl = createInterface({ input: createReadStream('input.txt'), crlfDelay: Infinity });\n"
    "  for await (const line of rl) {\n"
    "    console.log(`Line from file: ${line}`);\n"
    "  }\n"
    "}\n"
    "```"
)


def _chunk58(**extra: Any) -> Passage:
    return Passage("readline-1#58", "Readline", ENDS_INTRODUCING, 0.8, section=SECTION, **extra)


def _chunk(position: int, text: str, section: str = SECTION) -> Passage:
    """A chunk as a page-scoped read returns it: cited by its document, placed by ``chunk_id``."""
    return Passage("readline-1", "Readline", text, 0.0, chunk_id=f"readline-1#{position}", section=section)


def test_the_introduction_is_quoted_with_the_code_block_the_next_chunk_opens_with() -> None:
    # Before: "… one line at a time." alone, the introduction and its code left out.
    answer, sources, _ = compose_answer(QUESTION, [_chunk58()], following=[_chunk(59, CODE)])
    assert_clean(answer)
    assert "as well as a `for await...of` loop:" in answer, answer
    assert "for await (const line of rl)" in answer, answer
    assert answer.index("loop:") < answer.index("```mjs"), answer
    assert sources == ["readline-1#58"]


def test_the_next_chunk_among_the_passages_is_read_too() -> None:
    # The page-scoped read often brings the next chunk already: no further read is needed.
    composed = compose(QUESTION, [_chunk58(), _chunk(59, CODE)])
    assert "for await (const line of rl)" in composed.answer, composed.answer
    assert composed.wants == []
    assert_clean(composed.answer)


def test_without_the_next_chunk_the_introduction_is_dropped_and_the_chunk_wanted() -> None:
    composed = compose(QUESTION, [_chunk58()])
    assert_clean(composed.answer)  # no dangling "… loop:"
    assert "one line at a time." in composed.answer and "loop:" not in composed.answer, composed.answer
    [wanted] = composed.wants
    assert (wanted.doc_id, wanted.position) == ("readline-1", 59)
    # The heading's and the introduction's words (link targets left out): the next chunk
    # sits under that heading, and the chunk with the introduction says them all.
    assert "Example: Read file stream line-by-Line" in wanted.query and "fs.ReadStream" in wanted.query
    assert "class-fsreadstream" not in wanted.query


def test_only_the_next_chunk_of_the_same_section_continues_the_introduction() -> None:
    read = read_passage(_chunk58())
    last = len(read.blocks) - 1
    # Two chunks on, or a chunk of another document: not what follows.
    attach_next([read], [_chunk(60, CODE), Passage("fs-2#59", "File system", CODE, 0.5, section=SECTION)])
    assert next_block(read, last) is None
    # The next chunk under another heading starts something else.
    attach_next([read], [_chunk(59, CODE, section="Readline \u203a Example: Tiny CLI")])
    assert next_block(read, last) is None
    # A chunk opening with a paragraph of its own does not go on with the code.
    attach_next([read], [_chunk(59, "Alternatively, one could use the `'line'` event.\n\n" + CODE)])
    assert next_block(read, last) is None
    attach_next([read], [_chunk(59, CODE)])
    block = next_block(read, last)
    assert block is not None and block.kind == "code"


def test_sentences_the_next_chunk_carries_over_are_not_said_twice() -> None:
    # The chunker carries a chunk's last sentences into the next one of its section.
    carried = f"{INTRO}\n\n{CODE}"
    answer, _, _ = compose_answer(QUESTION, [_chunk58()], following=[_chunk(59, carried)])
    assert_clean(answer)
    assert answer.count("as well as a `for await...of` loop:") == 1, answer
    assert "for await (const line of rl)" in answer, answer


def test_a_list_item_ending_the_chunk_brings_the_list_the_next_chunk_opens_with() -> None:
    text = (
        "## Scripts\n\nThe package's scripts run with the package's own binaries on the PATH.\n\n"
        "* Run the test script of every workspace at once with this command:"
    )
    passages = [Passage("ws-1#3", "Workspaces", text, 0.7, section="Workspaces \u203a Scripts")]
    following = [
        Passage(
            "ws-1", "Workspaces", "```bash\nnpm test --workspaces\n```", 0.0, "", "ws-1#4", "Workspaces \u203a Scripts"
        )
    ]
    answer, _, _ = compose_answer("How do I run the test script of every workspace?", passages, following=following)
    assert "npm test --workspaces" in answer, answer
    assert_clean(answer)


def _search_result(position: int, text: str) -> dict[str, Any]:
    return {
        "source_id": f"readline-1#{position}",
        "doc_id": "readline-1",
        "chunk_id": f"readline-1#{position}",
        "title": "Readline",
        "section": SECTION,
        "text": text,
        "score": 0.8,
        "metadata": {"bucket": "node", "format": "markdown"},
    }


def _read_result(*chunks: tuple[int, str]) -> str:
    hits = [
        {
            "doc_id": "readline-1",
            "chunk_id": f"readline-1#{p}",
            "title": "Readline",
            "section": SECTION,
            "snippet": text,
            "score": 0.5,
        }
        for p, text in chunks
    ]
    return orjson.dumps({"results": hits}).decode()


async def _turn(provider: ExtractiveProvider, messages: list[Message]) -> list[object]:
    tools = ["knowledge_base_search", PAGE_READ_TOOL, "generate_response"]
    request = ChatRequest("system", messages, [ToolDefinition(t, "", {}) for t in tools])
    return [ev async for ev in provider.stream_chat(request)]


def _calls(events: list[object]) -> list[tuple[str, str, dict[str, Any]]]:
    starts = [e for e in events if isinstance(e, ToolUseStart)]
    args = [orjson.loads(e.partial_json) for e in events if isinstance(e, ToolUseInput)]
    return [(start.id, start.name, arguments) for start, arguments in zip(starts, args, strict=True)]


def _asked(calls: list[tuple[str, str, dict[str, Any]]]) -> Message:
    """The assistant turn that made ``calls``, as the conversation keeps it."""
    return Message("assistant", tool_calls=[ToolCall(i, name, arguments) for i, name, arguments in calls])


async def test_the_provider_reads_the_next_chunk_with_the_page_then_quotes_the_code() -> None:
    provider = ExtractiveProvider()
    first = orjson.dumps({"chunks": [_search_result(58, ENDS_INTRODUCING)]}).decode()
    history = [
        Message("user", QUESTION),
        Message("user", "", tool_results=[ToolResult("c1", "knowledge_base_search", first)]),
    ]
    calls = _calls(await _turn(provider, history))
    # The page read, as before, and in the same turn (the review closes the search tools
    # after a round of corpus searches) chunk 59, which the introduction the first
    # search's answer would end on introduces.
    [(page_id, page_tool, page), (next_id, next_tool, following)] = calls
    assert page_tool == next_tool == PAGE_READ_TOOL
    assert page["query"] == "read file line"
    assert following["doc_id"] == "readline-1" and following["bucket"] == "node"
    assert "fs.ReadStream" in following["query"] and "Example: Read file stream" in following["query"]
    history += [
        _asked(calls),
        Message(
            "user",
            "",
            tool_results=[
                ToolResult(page_id, PAGE_READ_TOOL, _read_result((58, ENDS_INTRODUCING))),
                ToolResult(next_id, PAGE_READ_TOOL, _read_result((58, ENDS_INTRODUCING), (59, CODE))),
            ],
        ),
    ]
    [(_, name, args)] = _calls(await _turn(provider, history))
    assert name == "generate_response"
    assert "for await (const line of rl)" in args["answer"] and "loop:" in args["answer"], args["answer"]
    assert_clean(args["answer"])


async def test_when_the_next_chunk_is_not_found_the_introduction_is_dropped() -> None:
    provider = ExtractiveProvider()
    first = orjson.dumps({"chunks": [_search_result(58, ENDS_INTRODUCING)]}).decode()
    history = [
        Message("user", QUESTION),
        Message("user", "", tool_results=[ToolResult("c1", "knowledge_base_search", first)]),
    ]
    calls = _calls(await _turn(provider, history))
    [(page_id, _, _), (next_id, _, _)] = calls
    # The reads found other chunks of the page, not the next one: nothing is asked again.
    history += [
        _asked(calls),
        Message(
            "user",
            "",
            tool_results=[
                ToolResult(page_id, PAGE_READ_TOOL, _read_result((58, ENDS_INTRODUCING))),
                ToolResult(next_id, PAGE_READ_TOOL, _read_result((61, CODE))),
            ],
        ),
    ]
    [(_, name, args)] = _calls(await _turn(provider, history))
    assert name == "generate_response"
    assert "one line at a time." in args["answer"] and "loop:" not in args["answer"], args["answer"]
    assert_clean(args["answer"])


async def test_chunks_read_for_a_next_chunk_are_never_quoted_for_themselves() -> None:
    # What a next chunk's read finds besides that chunk is not a passage of the answer:
    # only the page's reads are (they rank below the first search's passages).
    provider = ExtractiveProvider()
    first = orjson.dumps({"chunks": [_search_result(58, ENDS_INTRODUCING)]}).decode()
    history = [
        Message("user", QUESTION),
        Message("user", "", tool_results=[ToolResult("c1", "knowledge_base_search", first)]),
    ]
    calls = _calls(await _turn(provider, history))
    [(page_id, _, _), (next_id, _, _)] = calls
    other = "To read a file line by line, open it with readline and read each line of the file in turn."
    history += [
        _asked(calls),
        Message(
            "user",
            "",
            tool_results=[
                ToolResult(page_id, PAGE_READ_TOOL, _read_result((58, ENDS_INTRODUCING))),
                ToolResult(next_id, PAGE_READ_TOOL, _read_result((40, other), (59, CODE))),
            ],
        ),
    ]
    [(_, _, args)] = _calls(await _turn(provider, history))
    assert "open it with readline" not in args["answer"], args["answer"]
    assert "for await (const line of rl)" in args["answer"], args["answer"]


@pytest.mark.slow  # a served answer over a knowledge base
async def test_a_served_answer_shows_the_code_the_next_chunk_holds(offline: Settings) -> None:
    """Over a real service: a page whose chunk ends introducing a code block that the next
    chunk holds is answered with the introduction and the code."""
    filler = " ".join(f"The reader keeps piece {n} in its buffer until the consumer takes it." for n in range(6))
    intro = (
        "A common use of the line reader is to read a file line by line. The easiest way to do so, whatever "
        "the size of the file, is to hand a file stream to the line reader and to walk over it with a loop:"
    )
    # Code saying none of the question's words under a heading saying none either: neither
    # the first search nor the page's read finds its chunk (the page's other sections say
    # "read", "file" and "line" more), which the answer then reads as the next chunk.
    code = "```js\n" + "\n".join(f"for await (const item{n} of rl) show(item{n}); // step {n}" for n in range(9))
    others = "\n\n".join(
        f"## {topic}\n\n"
        + " ".join(f"To read a file, the reader reads line {n} and the {topic} file lines after it." for n in range(8))
        for topic in ("Buffers", "Encodings", "Errors")
    )
    text = f"# Line reader\n\n## Walking through input\n\n{filler}\n\n{intro}\n\n{code}\n```\n\n{others}\n"
    doc = {"id": "line-reader", "title": "Line reader", "text": text}
    async with (
        running_app(offline, provider=ExtractiveProvider()) as (base, _),
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert (await client.post(f"{base}/v1/kb/documents", json={"documents": [doc]})).status_code == 200
        body = {"message": "How do I read a file line by line with the line reader?", "context_type": "knowledge"}
        events = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)
    assert events[-1].json()["status"] == "completed"
    calls = [e.json() for e in events if e.event == "tool_call_result"]
    # The page read and the next chunk's, in one turn: logged tool calls, scoped to the page.
    # Read-only calls of one turn run together, so their results come in the order they end.
    assert [c["name"] for c in calls] == ["knowledge_base_search", "search_text", "search_text", "generate_response"]
    next_read = [c for c in calls[1:3] if "Walking through input" in c["arguments"]["query"]]
    assert len(next_read) == 1 and next_read[0]["arguments"]["doc_id"] == "line-reader", calls[1:3]
    answer = next(e.json() for e in events if e.event == "response")["answer"]
    assert "to walk over it with a loop:" in answer, answer
    assert "show(item8)" in answer, answer
    assert_clean(answer)
