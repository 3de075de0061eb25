"""The offline answerer's page-scoped read (``llm.extractive_page_read``): which pages the
first search found are read again, with which query, and how the provider asks for it.
The end-to-end read (a tool call in the stream, the chunk it finds quoted) is
tests/test_extractive_offline.py's."""

from __future__ import annotations

import orjson

from llm.extractive import ExtractiveProvider
from llm.extractive_page_read import PAGE_READ_TOOL, FoundPage, found_pages, page_query, pages_to_read
from llm.types import ChatRequest, Message, ToolDefinition, ToolResult, ToolUseInput, ToolUseStart

NPX_FOUND = (
    "To run a binary _other than_ the named binary, specify one or more `--package` options.\n\n"
    "Run this command to execute a package's binary."
)


def chunk(doc: str, position: int, title: str, text: str, bucket: str = "npm") -> dict[str, object]:
    return {
        "source_id": f"{doc}#{position}",
        "doc_id": doc,
        "chunk_id": f"{doc}#{position}",
        "title": title,
        "text": text,
        "score": 0.5,
        "metadata": {"bucket": bucket, "format": "markdown"},
    }


def test_the_query_leaves_out_the_words_every_chunk_of_the_page_says() -> None:
    page = FoundPage("npx-1", "npm", "npx", NPX_FOUND)
    # "npx" is the page's title: every chunk of it says it, so it tells none apart.
    assert page_query("What happens to the options I put after the package name when using npx?", page) == (
        "options put package name"
    )
    # Nothing is left once the title is said: the first search already read the page's opening.
    assert page_query("What does npx do?", page) is None
    # None of the words left is in what was found of the page: a scoped search could find nothing.
    assert page_query("How does npx treat my shrinkwrap?", page) is None


def test_a_page_holding_only_words_the_text_search_drops_is_not_read_again() -> None:
    # "again" is in the page, but the text search never searches for a stop word: the
    # scoped read would match nothing and end the run asking the user to rephrase.
    page = FoundPage("cache-1", "npm", "npm-cache", "It is filled again when npm starts.")
    assert page_query("How often does the npm cache get wiped again?", page) is None
    # A word the search does search for, held by the page, still makes a read.
    assert page_query("How often does the npm cache get filled again?", page) == "often filled again"
    # Left with stop words only, the search looks for them after all: the page is read.
    assert page_query("What does npm cache show again?", page) == "show again"


def test_the_best_page_and_a_page_the_question_names_are_read_again() -> None:
    pages = found_pages(
        [
            chunk("developers-1", 11, "developers", "publish the package when it installs and works"),
            chunk("developers-1", 10, "developers", "before publishing make sure your package installs"),
            chunk("workspaces-2", 3, "workspaces", "automate the required steps to define a new workspace"),
            chunk("npm-query-3", 0, "npm-query", "the npm query command selects dependencies"),
            chunk("broken", 1, "no bucket", "text", bucket=""),
        ]
    )
    assert [p.doc_id for p in pages] == ["developers-1", "workspaces-2", "npm-query-3"]  # best first, no bucket: out
    assert "before publishing" in pages[0].text and pages[0].bucket == "npm"
    chosen = pages_to_read("How do I select dev dependencies with npm query before publishing?", pages)
    assert [(p.doc_id, q) for p, q in chosen] == [
        ("developers-1", "select dev dependencies npm query publishing"),
        ("npm-query-3", "select dev dependencies publishing"),
    ]


def test_a_page_the_question_names_as_written_is_read_before_one_named_by_scattered_words() -> None:
    # "npm ci" names npm-ci as its title is written; "lock file and package.json" says
    # every word of package-lock.json's title, but here and there. Read in the search's
    # order, the second read went to the lock file's page and npm ci's "will exit with an
    # error" never reached the answerer.
    pages = found_pages(
        [
            chunk("npm-install-1", 2, "npm-install", "how npm install uses package-lock.json and the lock"),
            chunk("package-lock-json-2", 7, "package-lock.json", "lockfileVersion: the lock file format of package"),
            chunk("npm-ci-3", 24, "npm-ci", "install-links: npm ci with a package lock file of links"),
        ]
    )
    question = "What does npm ci do if my lock file and package.json disagree?"
    chosen = pages_to_read(question, pages)
    assert [p.doc_id for p, _ in chosen] == ["npm-install-1", "npm-ci-3"]
    # Named only by scattered words, pages keep the search's order.
    scattered = pages_to_read("What does ci do if my lock file and package.json disagree with npm?", pages)
    assert [p.doc_id for p, _ in scattered] == ["npm-install-1", "package-lock-json-2"]


async def _turn(provider: ExtractiveProvider, messages: list[Message], tools: list[str]) -> list[object]:
    request = ChatRequest("system", messages, [ToolDefinition(t, "", {}) for t in tools])
    return [ev async for ev in provider.stream_chat(request)]


async def test_the_provider_reads_the_page_again_then_quotes_what_that_read_found() -> None:
    tools = ["knowledge_base_search", PAGE_READ_TOOL, "generate_response"]
    question = "What happens to the options I put after the package name when using npx?"
    first = {"chunks": [chunk("npx-1", 4, "npx", NPX_FOUND)]}
    history = [
        Message("user", question),
        Message("user", "", tool_results=[ToolResult("c1", "knowledge_base_search", orjson.dumps(first).decode())]),
    ]
    provider = ExtractiveProvider()
    events = await _turn(provider, history, tools)
    starts = [e for e in events if isinstance(e, ToolUseStart)]
    assert [e.name for e in starts] == [PAGE_READ_TOOL]
    args = orjson.loads(next(e.partial_json for e in events if isinstance(e, ToolUseInput)))
    assert args == {
        "bucket": "npm",
        "query": "options put package name",
        "doc_id": "npx-1",
        "top_k": 5,  # a long page's answering chunk may be its fourth or fifth match (round 14)
        "context_chars": 4000,
    }
    found = {
        "results": [
            {"doc_id": "npx-1", "chunk_id": "npx-1#4", "title": "npx", "snippet": NPX_FOUND, "score": 0.9},
            {
                "doc_id": "npx-1",
                "chunk_id": "npx-1#1",
                "title": "npx",
                "snippet": "Any options and arguments after the package name are passed directly to the executed "
                "command, not to npx itself.",
                "score": 0.8,
            },
        ]
    }
    history.append(Message("user", "", tool_results=[ToolResult("c2", PAGE_READ_TOOL, orjson.dumps(found).decode())]))
    events = await _turn(provider, history, tools)
    call = next(e for e in events if isinstance(e, ToolUseStart))
    assert call.name == "generate_response"
    answer = orjson.loads(next(e.partial_json for e in events if isinstance(e, ToolUseInput)))
    # The chunk the read found is quoted, cited by its document (what search_text registers).
    assert "passed directly to the executed command" in answer["answer"]
    assert "npx-1" in answer["sources"]


async def test_without_the_page_read_tool_the_provider_answers_from_the_first_search() -> None:
    question = "What happens to the options I put after the package name when using npx?"
    first = {"chunks": [chunk("npx-1", 4, "npx", NPX_FOUND)]}
    history = [
        Message("user", question),
        Message("user", "", tool_results=[ToolResult("c1", "knowledge_base_search", orjson.dumps(first).decode())]),
    ]
    events = await _turn(ExtractiveProvider(), history, ["knowledge_base_search", "generate_response"])
    assert [e.name for e in events if isinstance(e, ToolUseStart)] == ["generate_response"]
