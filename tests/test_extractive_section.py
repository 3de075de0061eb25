"""A passage's section (issue 20 item 4): the heading a chunk sits under, which a chunk
that continues a section no longer says itself.

``knowledge_base_search`` and ``search_text`` show it as ``section`` (over the real
knowledge base: a Markdown page chunked by the real chunker, searched by the real
tools), without the page's one-line summary that heads a first chunk for search; the
offline answerer reads a passage's sentences under that section, so "does npm send any
information about me?" meets a sentence under the heading that asks it, and what the
section says first is found in the next chunk when the heading's own chunk states
nothing quotable. Also here, the answerer's other round-11 changes: a hyphenated name or
an option the question writes counts as a name; a glossary entry for what a "what is"
question asks about is its answer; a how-to is answered by the setting or command named
after what it asks (``llm.extractive_signals``). Each answerer test runs on passages the real search
returned (npm's documentation, the sample knowledge base) and fails without its change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agenttools.core.catalog import build_catalog
from agenttools.core.registry import RunToolState, ToolContext, ToolOutcome, ToolRegistry
from agenttools.core.validation import validate_arguments
from agenttools.rag.corpus_deps import CorpusToolDeps
from agenttools.rag.corpus_tools import register_corpus_tools
from agenttools.rag.keywords import KeywordIndex
from agenttools.rag.tools import KB_SEARCH, RagToolDeps, register_rag_tools
from knowledge import DocumentIn, KnowledgeBase
from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question
from storage.sqlite import open_sqlite_storage
from toolindex.hashing import HashingEmbedder

#: Long enough that the section under the second heading is split over chunks, the
#: later ones without the heading in their text.
FILLER = " ".join(f"Sentence {i} describes the registry protocol in some detail." for i in range(40))
PAGE = (
    "### Description\n\nThe registry resolves packages by name and version.\n\n"
    "### Does npm send any information about me back to the registry?\n\n"
    f"{FILLER}\n\nWhen making requests npm adds two headers with details about your environment.\n"
)
SUMMARY = "The JavaScript Package Registry"


class Rig:
    def __init__(self, registry: ToolRegistry, http: httpx.AsyncClient) -> None:
        self.registry, self.http = registry, http

    async def call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        ctx = ToolContext("u1", None, "c1", "r1", "knowledge", {}, self.http, RunToolState())
        checked = validate_arguments(self.registry.spec(name), args)
        assert checked.ok, checked.error
        handler = self.registry.handler(name)
        assert handler is not None
        return await handler(checked.arguments, ctx)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    storage = await open_sqlite_storage(tmp_path / "agent.db")
    kb = await KnowledgeBase.create(storage.kb_index, HashingEmbedder())
    try:
        doc = DocumentIn(PAGE, "Registry", "registry", metadata={"format": "markdown", "description": SUMMARY})
        report = await kb.ingest_documents([doc])
        assert report.added == 1
        async with httpx.AsyncClient() as http:
            registry = ToolRegistry(build_catalog())
            keywords = KeywordIndex(storage.keywords, storage.external_results)
            register_rag_tools(registry, RagToolDeps(kb, keywords, storage.external_results))
            register_corpus_tools(registry, CorpusToolDeps(knowledge=kb))
            yield Rig(registry, http)
    finally:
        await kb.aclose()
        await storage.close()


def _sections(chunks: list[dict[str, Any]], text_field: str) -> dict[str, str]:
    return {c[text_field]: c.get("section", "") for c in chunks}


async def test_search_results_show_the_section_a_chunk_sits_under(rig: Rig) -> None:
    out = await rig.call(KB_SEARCH, {"query": "two headers environment requests", "top_k": 10})
    assert not out.is_error, out.content
    chunks = out.content["chunks"]
    later = [c for c in chunks if "two headers" in c["text"]]
    assert later and not any("### Does npm send" in c["text"] for c in later)  # the heading is not in its text
    assert later[0]["section"] == "Does npm send any information about me back to the registry?"
    first = await rig.call(KB_SEARCH, {"query": "resolves packages by name and version", "top_k": 10})
    opening = next(c for c in first.content["chunks"] if c["chunk_id"].endswith("#0"))
    # The page's summary heads its first chunk for search; the section is the page's own heading.
    assert opening["section"] == "Description" and SUMMARY not in opening["section"]
    assert opening["metadata"]["description"] == SUMMARY

    read = await rig.call(
        "search_text", {"query": "two headers environment", "bucket": "default", "doc_id": "registry", "top_k": 3}
    )
    assert not read.is_error, read.content
    hit = next(r for r in read.content["results"] if "two headers" in r["snippet"])
    assert hit["section"] == "Does npm send any information about me back to the registry?"


QUESTION = "Does npm send any information about me to the registry?"
#: The chunk continuing the section: its sentence says neither "send" nor "information".
CONTINUED = "When making requests npm adds two headers with details about your environment."
#: Another page's sentence sharing more of the question's own words.
OTHER = "The registry does not correlate information sent in requests with any account."


def test_a_passage_is_read_under_the_section_it_continues() -> None:
    other = Passage("logging#4", "Logging", OTHER, 0.9)
    without = Passage("registry#4", "Registry", CONTINUED, 0.85)
    answer, _, _ = compose_answer(QUESTION, [other, without])
    assert "two headers" not in answer  # without its section the sentence is about nothing asked
    section = "Registry › Does npm send any information about me back to the registry?"
    within = Passage("registry#4", "Registry", CONTINUED, 0.85, section=section)
    answer, sources, _ = compose_answer(QUESTION, [other, within])
    assert answer.startswith(CONTINUED) and sources[0] == "registry#4", answer
    assert "Does npm send" not in answer  # the section is read, not quoted as a sentence


#: The registry page's passages the search and the page-scoped read returned for it (npm 11):
#: the section's heading and its first chunk end on the sentence introducing the list.
REGISTRY_PASSAGES = [
    Passage(
        "registry-aa47c818#3",
        "Registry",
        (
            "### Does npm send any information about me back to the registry?\n"
            "\n"
            "Yes.\n"
            "\n"
            "When making requests of the registry npm adds two headers with information about your "
            "environment:"
        ),
        0.85,
        summary="The JavaScript Package Registry",
        section="Does npm send any information about me back to the registry?",
    ),
    Passage(
        "registry-aa47c818#5",
        "Registry",
        (
            "This is used to gather better metrics on how npm is used by humans, versus build farms.\n"
            "\n"
            "The npm registry does not try to correlate the information in these headers with any "
            "authenticated accounts that may be used in the same requests.\n"
            "\n"
            "### How can I prevent my package from being published in the official registry?\n"
            "\n"
            'Set `"private": true` in your `package.json` to prevent it from being published at all, '
            "or\n"
            '`"publishConfig":{"registry":"http://my-internal-registry.local"}`\n'
            "to force it to be published only to your internal/private registry.\n"
            "\n"
            "See [`package.json`](/configuring-npm/package-json) for more info on what goes in the "
            "package.json file."
        ),
        0.6916,
        summary="The JavaScript Package Registry",
        section="Does npm send any information about me back to the registry?",
    ),
    Passage(
        "registry-aa47c818#0",
        "Registry",
        (
            "### Description\n"
            "\n"
            "To resolve packages by name and version, npm talks to a registry website that implements "
            "the CommonJS Package Registry specification for reading package info.\n"
            "\n"
            "npm is configured to use the **npm public registry** at\n"
            "<https://registry.npmjs.org> by default.\n"
            "Use of the npm public registry is subject to terms of use available at "
            "<https://docs.npmjs.com/policies/terms>.\n"
            "\n"
            "You can configure npm to use any compatible registry you like, and even run your own "
            "registry.\n"
            "Use of someone else's registry may be governed by their terms of use.\n"
            "\n"
            "npm's package registry implementation supports several write APIs as well, to allow for "
            "publishing packages and managing user account information."
        ),
        0.3944,
        summary="The JavaScript Package Registry",
        section="Description",
    ),
    Passage(
        "registry-aa47c818",
        "Registry",
        (
            "Yes.\n"
            "\n"
            "When making requests of the registry npm adds two headers with information about your "
            "environment:\n"
            "\n"
            "* `Npm-Scope` – If your project is scoped, this header will contain its scope.\n"
            "In the future npm hopes to build registry features that use this information to allow you "
            "to customize your experience for your organization.\n"
            '* `Npm-In-CI` – Set to "true" if npm believes this install is running in a continuous '
            'integration environment, "false" otherwise.\n'
            "This is detected by looking for the following environment variables: `CI`, `TDDIUM`,\n"
            "  `JENKINS_URL`, `bamboo.buildKey`.\n"
            "If you'd like to learn more you may find the [original "
            "PR](https://github.com/npm/npm-registry-client/pull/129) interesting.\n"
            "  This is used to gather better metrics on how npm is used by humans, versus build farms."
        ),
        0.3944,
        summary="The JavaScript Package Registry",
        chunk_id="registry-aa47c818#4",
        section="Does npm send any information about me back to the registry?",
    ),
]


def test_what_a_section_says_first_may_be_in_the_next_chunk() -> None:
    """The heading asks the question itself in a word more ("… about me back to the
    registry?"), so it names the section; its own chunk states nothing quotable after it
    (the list's introduction is cut from its list), so the section's first statement is
    the one the next chunk opens with, and it is the answer."""
    answer, sources, _ = compose_answer(QUESTION, REGISTRY_PASSAGES)
    assert answer.startswith("When making requests of the registry npm adds two headers"), answer
    assert "* `Npm-Scope`" in answer and "* `Npm-In-CI`" in answer  # with the list it introduces
    assert sources[0] == "registry-aa47c818"


#: The first four passages the search returned for it over npm's documentation (npm 11).
INSTALL_SCRIPTS_PASSAGES = [
    Passage(
        "scripts-513af995#2",
        "Scripts",
        (
            "### Life Cycle Scripts\n"
            "\n"
            "There are some special life cycle scripts that happen only in certain situations.\n"
            "These scripts happen in addition to the `pre<event>`, `post<event>`, and\n"
            "`<event>` scripts.\n"
            "\n"
            "* `prepare`, `prepublish`, `prepublishOnly`, `prepack`, `postpack`, `dependencies`\n"
            "\n"
            "**prepare** (since `npm@4.0.0`)\n"
            "* Runs BEFORE the package is packed, i.e.\n"
            "during `npm publish` and `npm pack`\n"
            "* Runs on local `npm install` without package arguments (runs with flags like "
            "`--production` or `--omit=dev`, but does not run when installing specific packages like "
            "`npm install express`)\n"
            "* Runs AFTER `prepublishOnly` and `prepack`, but BEFORE `postpack`\n"
            "* Runs for a package if it's being installed as a link through `npm install <folder>`"
        ),
        0.5887,
        section="Life Cycle Scripts",
    ),
    Passage(
        "scripts-513af995#9",
        "Scripts",
        (
            "### Life Cycle Operation Order\n"
            "\n"
            "#### [`npm cache add`](/commands/npm-cache)\n"
            "\n"
            "* `prepare`\n"
            "\n"
            "#### [`npm ci`](/commands/npm-ci)\n"
            "\n"
            "* `preinstall`\n"
            "* `install`\n"
            "* `postinstall`\n"
            "* `prepublish`\n"
            "* `preprepare`\n"
            "* `prepare`\n"
            "* `postprepare`\n"
            "\n"
            "These all run after the actual installation of modules into\n"
            " `node_modules`, in order, with no internal actions happening in between\n"
            "\n"
            "#### [`npm diff`](/commands/npm-diff)\n"
            "\n"
            "* `prepare`"
        ),
        0.483,
        section="Life Cycle Operation Order",
    ),
    Passage(
        "scripts-513af995#0",
        "Scripts",
        (
            "### Description\n"
            "\n"
            'The `"scripts"` property of your `package.json` file supports a number of built-in '
            "scripts and their preset life cycle events as well as arbitrary scripts.\n"
            "These all can be executed by running `npm run <stage>`.\n"
            "*Pre* and *post* commands with matching names will be run for those as well (e.g.\n"
            "`premyscript`,\n"
            "`myscript`, `postmyscript`).\n"
            "Scripts from dependencies can be run with `npm explore <pkg> -- npm run <stage>`."
        ),
        0.2051,
        section="Description",
    ),
    Passage(
        "npm-install-scripts-c0e9b225#2",
        "npm-install-scripts",
        (
            "This command only works inside a project that has a `package.json`. Running\n"
            "it with `--global` (`-g`) fails with an `EGLOBAL` error, since global\n"
            "installs (`npm install -g`) and one-off executions (`npm exec` / `npx`) have\n"
            "no project `package.json` to write to. To allow install scripts in those\n"
            "contexts, use the `--allow-scripts` flag at install time (for example\n"
            "`npm install -g --allow-scripts=canvas,sharp`) or persist the setting with\n"
            "`npm config set allow-scripts=canvas,sharp --location=user`.\n"
            "\n"
            "There are four subcommands:\n"
            "\n"
            "```bash\n"
            "npm install-scripts approve <pkg> [<pkg> ...]\n"
            "npm install-scripts approve --all\n"
            "npm install-scripts deny <pkg> [<pkg> ...]\n"
            "npm install-scripts deny --all\n"
            "npm install-scripts ls\n"
            "npm install-scripts prune\n"
            "```"
        ),
        0.3257,
        section="Description",
    ),
]


def test_a_hyphenated_name_or_an_option_in_the_question_counts_as_a_name() -> None:
    """The life-cycle passages say "run", "install" and "scripts" more often, but not the
    option the question names: the answer is npm-install-scripts' sentence about it."""
    question = "What happens if I run npm install-scripts with --global?"
    assert {"install", "script", "global"} <= Question.of(question).names
    answer, sources, _ = compose_answer(question, INSTALL_SCRIPTS_PASSAGES)
    assert "EGLOBAL" in answer.split("\n\n")[0] and sources[0].startswith("npm-install-scripts"), answer


#: The sample knowledge base's passages the search returned for it (knowledge/sample_kb).
BACKEND_PASSAGES = [
    Passage(
        "agentchat-configuration#2",
        "Configuration variables",
        (
            "## External services\n"
            "\n"
            "- `PERPLEXITY_API_KEY`, `PERPLEXITY_BASE_URL`: the Perplexity web search used when the "
            "knowledge base is not enough.\n"
            "- `AGENT_BACKEND_URL`: the workflow/table backend the tools call. Without it, `make run` "
            "and `make dev` start the reference backend.\n"
            "\n"
            "The `*_BASE_URL` and `*_HOST` variables let tests point every external service at a fake "
            "on loopback.\n"
            "\n"
            "## Agent behaviour"
        ),
        0.56,
        section="Configuration variables › External services",
    ),
    Passage(
        "agentchat-running#0",
        "Running the service (make run, make test, make dev)",
        (
            "# Running the service\n"
            "\n"
            "## make run\n"
            "\n"
            "`make run` installs the service into `.venv` when needed and starts it. On a fresh "
            "machine it works without any model: with `AGENT_LLM_PROVIDER=auto` and neither Ollama nor "
            "Gemini reachable, the offline `extractive` provider answers from this sample knowledge "
            "base, which is ingested on the first start when the knowledge base is empty. Unless "
            "`AGENT_BACKEND_URL` is set, the reference backend starts beside the agent on its own port."
        ),
        0.3465,
        section="Running the service",
    ),
    Passage(
        "agentchat-overview#1",
        "What the agent chat service is",
        (
            "## Main parts\n"
            "\n"
            "- `llm/`: message, tool and stream types and the providers: `gemini`, `ollama` and "
            "`extractive` (offline, no model).\n"
            "- `toolindex/`: embedders (Gemini, Ollama, hashing) and the tool index used for tool "
            "selection.\n"
            "- `agenttools/`: the tool catalog, parameter validation, the backend client, drafts, "
            "previews and the RAG tools.\n"
            "- `knowledge/`: this knowledge base: documents, chunks, full-text and vector search, "
            "buckets with typed metadata, ingestion.\n"
            "- `prompts/`: the prompt texts and the system-prompt builder.\n"
            "- `app/`: configuration, the HTTP routes, SSE encoding, runs, the agent loop, the tool "
            "selector, stores, auth and the CLI.\n"
            "- `backend/`: a reference implementation of the workflow/table REST API for `make dev`, "
            "demos and tests."
        ),
        0.2558,
        section="What the agent chat service is › Main parts",
    ),
]


def test_a_glossary_entry_defines_what_the_question_asks_about() -> None:
    """ "`backend/`: a reference implementation …" defines the folder asked about;
    "`AGENT_BACKEND_URL`: the workflow/table backend …" only mentions it."""
    answer, sources, _ = compose_answer("What is in the backend folder?", BACKEND_PASSAGES)
    assert answer.startswith("`backend/`: a reference implementation"), answer
    assert sources[0] == "agentchat-overview#1"


#: The sample knowledge base's first five passages the search returned for it.
CORS_PASSAGES = [
    Passage(
        "agentchat-configuration#2",
        "Configuration variables",
        (
            "## External services\n"
            "\n"
            "- `PERPLEXITY_API_KEY`, `PERPLEXITY_BASE_URL`: the Perplexity web search used when the "
            "knowledge base is not enough.\n"
            "- `AGENT_BACKEND_URL`: the workflow/table backend the tools call. Without it, `make run` "
            "and `make dev` start the reference backend.\n"
            "\n"
            "The `*_BASE_URL` and `*_HOST` variables let tests point every external service at a fake "
            "on loopback.\n"
            "\n"
            "## Agent behaviour"
        ),
        0.5683,
        section="Configuration variables › External services",
    ),
    Passage(
        "agentchat-overview#0",
        "What the agent chat service is",
        (
            "# What the agent chat service is\n"
            "\n"
            "The agent chat service is an asynchronous Python service built on Starlette and "
            "sse-starlette. A browser (through `EventSource`) or any Server-Sent Events consumer sends "
            "a chat message together with a UI context: `workflow`, `tables` or `knowledge`. An LLM "
            "agent then picks from a small, relevant set of tools, acts on the workflow and "
            "table-configuration backend with the caller's own credentials, answers from the knowledge "
            "base (and from the web through Perplexity when the knowledge base is not enough), and "
            "streams every step back as Server-Sent Events."
        ),
        0.4107,
        section="What the agent chat service is",
    ),
    Passage(
        "agentchat-running#3",
        "Running the service (make run, make test, make dev)",
        (
            "## Trying it\n"
            "\n"
            "Use the playground page at `GET /` in a browser, or `curl -N` against `POST "
            "/v1/agent/chat` to watch the event stream."
        ),
        0.3783,
        section="Running the service › Trying it",
    ),
    Passage(
        "agentchat-overview#2",
        "What the agent chat service is",
        (
            "## Where data lives\n"
            "\n"
            "Everything durable lands in one SQLite file named by `AGENT_DB_PATH`: conversations and "
            "messages, tool calls, run events, drafts, keywords, external results and the knowledge "
            "base. Schema changes go through numbered migrations applied at start-up."
        ),
        0.3577,
        section="What the agent chat service is › Where data lives",
    ),
    Passage(
        "agentchat-configuration#4",
        "Configuration variables",
        (
            "## Server and security\n"
            "\n"
            "- `AGENT_HOST`, `AGENT_PORT`: where the server listens.\n"
            "- `AGENT_CORS_ORIGINS`: allowed browser origins.\n"
            "- `AGENT_AUTH`: `none` for local use or `jwt`, which verifies HS256 bearer tokens signed "
            "with `AGENT_JWT_SECRET` (the `sub` claim is the user)."
        ),
        0.2775,
        section="Configuration variables › Server and security",
    ),
]


def test_a_how_to_is_answered_by_the_setting_named_after_what_it_asks() -> None:
    """ "How do I allow my web page's origin …" says "origin"; the setting for it is
    ``AGENT_CORS_ORIGINS``, whose entry says little else ("allowed browser origins"),
    while other passages share "web" and "service" with the question."""
    answer, sources, _ = compose_answer("How do I allow my web page's origin to call the service?", CORS_PASSAGES)
    assert answer.startswith("`AGENT_CORS_ORIGINS`: allowed browser origins."), answer
    assert sources[0] == "agentchat-configuration#4"


def test_an_overlong_section_keeps_its_nearest_heading_within_the_cap() -> None:
    """A heading path past ``SECTION_CHARS`` is cut from its start (at a word) so the
    result keeps the most specific heading and stays within its budget."""
    from agenttools.rag.kb_search import SECTION_CHARS, chunk_section
    from knowledge.types import ChunkHit

    path = " > ".join(f"Part {i} of a very long heading path" for i in range(40)) + " > Install from a tarball"
    hit = ChunkHit("d", "c", "T", "text", 1.0, {}, "s", None, "default", 0, heading=path)
    section = chunk_section(hit)
    assert section.startswith("… ") and section.endswith("Install from a tarball")
    assert len(section) <= SECTION_CHARS + 2
    assert section[2:].split(" ")[0] in path.split(" ")  # cut at a word, not inside one
    short = ChunkHit("d", "c", "T", "text", 1.0, {}, "s", None, "default", 0, heading="Install")
    assert chunk_section(short) == "Install"
