"""Offline answers over the bigger sample knowledge base (issue 20, pages 11-20 added):
what a passage is *about* (``llm.extractive_about``) and two reading fixes. More pages
offer more passages sharing the question's words; each rule tells the passage about
the asked thing from one that mentions it. Each is tested on the passages the real
search returned for an earlier set's question over the new sample
(tests/data/extractive_samplekb_passages.json) and on small passages of its own, and
each test fails without its rule.

* A code span is one word to the sentence splitter: ``agentchat ingest PATH... [--bucket
  B]`` does not end a sentence at its "...".
* "-es" is "-e" + "s" unless after ch / sh / x / ss / o: "files" meets "file".
* A heading saying the whole question ("The run ends with error code
  mandatory_tool_missing") names its section (``heading_states_question``).
* A heading repeating its page's title words the question does not ask ("MCP servers and
  readiness" on "Connecting MCP servers") is about the page's subject, not named by the
  question (``heading_about_page``); "which parts …" is answered by a unit listing
  several things (``generic_focus``).
* A path ``backend/`` is "the backend folder" (``folder_terms``), and a name in code says
  the words it clips: ``AGENT_AUTH`` is the authentication setting (``clipped_terms``).
* A named page's opening answers a how-to only when it shows what to do, a name in code
  or the synopsis above it (``opening_shows_how``): "how do I connect an MCP server?" is
  the section setting ``AGENT_MCP_SERVERS``, not "Tools of … MCP servers join the tool
  catalog …".
* "The request body is …" answers "what do I send in the body of a chat request?"
  (``says_what_asked_is``).
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_about import (
    clipped_terms,
    folder_terms,
    generic_focus,
    heading_about_page,
    heading_states_question,
    opening_shows_how,
    says_what_asked_is,
)
from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question, stems
from llm.extractive_read import opening_block, read_passage
from llm.markdown_blocks import split_sentences
from tests.support.offline_answers import assert_clean, captured_passages, carries

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_samplekb_passages.json"


def _answer(question: str) -> tuple[str, list[str]]:
    answer, sources, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    return answer, sources


def test_a_code_span_ends_no_sentence() -> None:
    text = "`agentchat ingest PATH... [--bucket B]` reads the supported files. It ends with a report."
    assert split_sentences(text) == [
        "`agentchat ingest PATH... [--bucket B]` reads the supported files.",
        "It ends with a report.",
    ]


def test_es_plurals_of_words_in_e_meet_their_singular() -> None:
    assert stems("files") == stems("file")
    assert stems("names") == stems("name")
    assert stems("types") == stems("type")
    assert stems("matches") == stems("match")
    assert stems("boxes") == stems("box")
    assert stems("stores") == stems("store") == stems("stored")


def test_the_formats_sentence_answers_which_formats_on_the_captured_cli_page() -> None:
    answer, sources = _answer("Which file formats does agentchat ingest accept?")
    assert carries(answer, "JSONL") and "`agentchat ingest PATH... [--bucket B]` reads" in answer, answer
    assert sources[0].startswith("agentchat-knowledge-cli")


def test_a_heading_stating_the_question_names_its_section_on_the_captured_pages() -> None:
    answer, _ = _answer("Why does a run end with mandatory_tool_missing?")
    assert carries(answer, "did not call"), answer


def test_heading_states_question_wants_the_whole_question_and_mostly_it() -> None:
    q = Question.of("Why does a run end with mandatory_tool_missing?")
    title = stems("Troubleshooting")
    assert heading_states_question(q, "The run ends with error code mandatory_tool_missing", title) == 1.0
    assert heading_states_question(q, "Why a run ends", title) == 0.0  # not every word
    long = "A run ends with mandatory_tool_missing, a provider timeout, a rate limit or a storage error code"
    assert heading_states_question(q, long, title) == 0.0  # mostly about other things


def test_the_readiness_entry_answers_which_parts_on_the_captured_pages() -> None:
    answer, _ = _answer("Which parts of the service does the readiness check cover?")
    assert carries(answer, "tool index and the database"), answer
    assert answer.index("GET /readyz") < answer.index("[agentchat-http-api"), answer


def test_a_heading_repeating_its_title_is_about_the_page_subject() -> None:
    q = Question.of("Which parts of the service does the readiness check cover?")
    assert heading_about_page(q, "MCP servers and readiness", stems("Connecting MCP servers"))
    assert not heading_about_page(q, "Readiness", stems("Connecting MCP servers"))
    named = Question.of("How do MCP servers affect readiness?")
    assert not heading_about_page(named, "MCP servers and readiness", stems("Connecting MCP servers"))


def test_which_parts_is_answered_by_a_list_of_things() -> None:
    assert generic_focus(Question.of("Which parts of the service does the readiness check cover?"))
    assert generic_focus(Question.of("Which kinds of documents can be ingested?"))
    assert not generic_focus(Question.of("Which events does a run stream?"))
    passages = [
        Passage(
            "ops#1",
            "Operations",
            "## Probes\n\nThe readiness check runs at start-up and then every few seconds.\n\n"
            "- `GET /readyz`: the readiness check of the provider, the embedder, the index and the database.\n",
            0.6,
        )
    ]
    answer, _, _ = compose_answer("Which parts does the readiness check cover?", passages)
    assert answer.startswith("`GET /readyz`: the readiness check"), answer


def test_the_backend_path_answers_the_backend_folder_on_the_captured_pages() -> None:
    answer, sources = _answer("What is in the backend folder?")
    assert carries(answer, "reference implementation"), answer
    assert sources[0].startswith("agentchat-overview")


def test_folder_terms_reads_a_path_as_the_folder_the_question_names() -> None:
    q = Question.of("What is in the backend folder?")
    assert folder_terms(q, "- `backend/`: a reference implementation of the REST API.") == stems("folder")
    assert folder_terms(q, "- `llm/`: message and stream types.") == frozenset()
    assert folder_terms(Question.of("What is the backend?"), "- `backend/`: a reference implementation.") == (
        frozenset()
    )


def test_the_sentence_saying_what_the_body_is_answers_on_the_captured_pages() -> None:
    answer, sources = _answer("What do I send in the body of a chat request?")
    assert carries(answer, "{message, context_type"), answer
    assert sources[0].startswith("agentchat-http-api")


def test_says_what_asked_is_wants_the_asked_thing_as_subject() -> None:
    q = Question.of("What do I send in the body of a chat request?")
    assert says_what_asked_is(q, "The request body is `{message, context_type}`.")
    assert not says_what_asked_is(q, "`AGENT_MAX_BODY_BYTES` (1 MiB): the largest chat request body.")
    assert not says_what_asked_is(q, "The body is JSON.")  # one word of the question
    keep = Question.of("What does the knowledge base keep for each document?")
    assert not says_what_asked_is(keep, "The knowledge base is one corpus curated by administrators.")
    how = Question.of("How do I send the body of a chat request?")
    assert not says_what_asked_is(how, "The request body is `{message, context_type}`.")


def test_a_clipped_setting_name_answers_turning_on_authentication_on_the_captured_pages() -> None:
    answer, sources = _answer("How do I turn on authentication?")
    assert answer.startswith("`AGENT_AUTH` chooses how callers are identified."), answer
    assert sources[0].startswith("agentchat-authentication")


def test_clipped_terms_reads_a_name_in_code_by_the_words_it_clips() -> None:
    q = Question.of("How do I turn on authentication?")
    assert clipped_terms(q, "`AGENT_AUTH` chooses how callers are identified.") == stems("authentication")
    assert clipped_terms(q, "AGENT_AUTH chooses how callers are identified.") == stems("authentication")
    assert clipped_terms(q, "the auth header is forwarded") == frozenset()  # prose as written
    assert clipped_terms(Question.of("How do I set the maximum size?"), "`AGENT_MAX_BODY_BYTES`") == frozenset()


def test_a_how_to_is_answered_by_what_to_set_not_the_named_pages_opening_on_the_captured_page() -> None:
    answer, sources = _answer("How do I connect an MCP server?")
    assert carries(answer, "AGENT_MCP_SERVERS") and "join the tool catalog" not in answer, answer
    assert sources[0].startswith("agentchat-mcp-servers")


def test_opening_shows_how_wants_a_name_in_code_or_a_synopsis_for_a_how_to() -> None:
    how = Question.of("How do I connect an MCP server?")
    plain = read_passage(
        Passage("mcp#0", "Connecting MCP servers", "# MCP\n\nTools of MCP servers join the catalog.\n", 0.5)
    )
    named = read_passage(
        Passage("mcp#0", "Connecting MCP servers", "# MCP\n\nSet `AGENT_MCP_SERVERS` to a servers file.\n", 0.5)
    )
    synopsis = read_passage(
        Passage("pack#0", "npm-pack", "# npm-pack\n\n```bash\nnpm pack\n```\n\nCreate a tarball.\n", 0.5)
    )
    assert not opening_shows_how(how, plain, opening_block(plain))
    assert opening_shows_how(how, named, opening_block(named))
    assert opening_shows_how(how, synopsis, opening_block(synopsis))
    assert opening_shows_how(Question.of("What are MCP servers?"), plain, opening_block(plain))
    login = read_passage(Passage("login#0", "npm-login", "Verify a user in the registry.", 0.5))
    assert opening_shows_how(Question.of("How do I log in?"), login, opening_block(login))  # named by it
