"""Offline answers, round 36: a word the question asks that a passage says only inside a
file's path counts less. The folders of `deploy/mcp-servers.example.toml` name a file;
they do not say the paragraph is about deploying, yet "deploy" met there made the MCP
servers paragraph the answer to "How do I deploy this on Heroku?" (best unit 0.72, so the
name the knowledge base never mentions did not decline it) and to "How do I deploy the
service with Docker?", over the docker-compose section the search ranked first.

The passages are what the default service's searches returned for these questions over
the sample knowledge base (tests/data/extractive_round36_passages.json).
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive import not_found_message, reply_of
from llm.extractive_answer import compose
from llm.extractive_words import apart_from_paths
from tests.support.offline_answers import captured_passages

PASSAGES = Path(__file__).resolve().parent / "data" / "extractive_round36_passages.json"


def _said(question: str) -> str:
    """What the provider says of ``question`` from its captured passages."""
    return reply_of(compose(question, captured_passages(PASSAGES, question))).answer


def test_a_question_whose_only_match_is_in_a_path_is_declined_for_the_name_it_asks_about() -> None:
    # The question's set item expects this decline (round35, tests/data/offline_questions.json).
    assert _said("How do I deploy this on Heroku?") == not_found_message(("Heroku",))
    # "How do I deploy?" says too little to ask alone: it asks with the sentence before it.
    assert _said("I use Heroku. How do I deploy?") == not_found_message(("Heroku",))


def test_a_section_saying_the_word_leads_over_a_path_holding_it() -> None:
    # Before, the MCP servers paragraph led alone; it now follows as a second passage,
    # for its "the service starts (and restarts) its process" ("service": not a path's).
    answer = _said("How do I deploy the service with Docker?")
    assert answer.startswith("`docker-compose.yml` runs PostgreSQL"), answer
    assert "run `docker compose up --build`" in answer, answer


def test_a_question_about_the_file_is_still_answered_with_its_path() -> None:
    answer = _said("Where is the example file for configuring MCP servers?")
    assert "`deploy/mcp-servers.example.toml` is a commented example" in answer, answer


def test_only_paths_of_folders_to_a_file_are_taken_apart() -> None:
    text, paths = apart_from_paths(
        "Set `AGENT_MCP_SERVERS=/etc/agentchat/mcp-servers.toml`; `deploy/mcp-servers.example.toml` is an example."
    )
    assert paths == "/etc/agentchat/mcp-servers.toml deploy/mcp-servers.example.toml"
    assert "deploy" not in text and "AGENT_MCP_SERVERS" in text and "is an example" in text
    # A route, a folder, a bare file name and a URL are often what is asked: kept.
    for kept in (
        "open `GET /v1/agent/runs/{run_id}/events` to resume",
        "Cache files are stored in `~/.npm` on Posix",
        "the name and version in `package.json`",
        "see https://docs.npmjs.com/cli/v10/configuring-npm/package-json.html",
        "read/write access",
    ):
        assert apart_from_paths(kept) == (kept, ""), kept
