"""Offline answers (issue 20 item 3/4), round 16 of the answerer: five rules, four for a
kind of unit that answers but says the question's words no more often than one beside
it that does not, one for a quote that opens pointing back. Each is tested on the
passages the real search returned for a round16 question
(tests/data/extractive_round16_passages.json) or on small passages of its own, and each
test fails without its rule.

* A table row is about what its first cell names (``row_about_asked``): "what does the
  message_complete event carry?" is the ``message_complete`` row, not the ``error`` row
  that names ``message_complete`` among its values.
* "Which <kind> …" is answered by a unit calling a thing of that kind by its name
  (``names_kind``): "An FTS5 full-text index", not "BM25 over the full-text index".
* A plural in "-ies" (and a past in "-ied") is its word in "-y" again: "retries" meets
  "retry" (a short stem "retr" met nothing); and a setting's paragraph after the list of
  its properties ("Default: 2", "Type: Number") opens its section for a question naming
  the setting by two words or more (``after_properties``): ``fetch-retries``, not
  ``fetch-retry-factor``.
* "clear" and "rm" remove, as "delete" does (``SYNONYMS``): npm dist-tag's "rm: Clear a
  tag that is no longer in use" answers "how do I remove a distribution tag I no longer
  use?".
* A sentence opening with a connective of contrast or consequence ("However, …") points
  back as "This …" does: quoted with what it turns from, and counted as a dangling
  opening by the checks (``tests/support/offline_answers.py``) when it is not.
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question, coverage, stems
from llm.extractive_signals import names_kind
from tests.support.offline_answers import assert_clean, captured_passages, dangling_openings

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round16_passages.json"


def _captured(question: str) -> list[Passage]:
    return captured_passages(CAPTURED, question)


def _first(answer: str) -> str:
    return answer.split("\n\n[", 1)[0] if answer.startswith("|") else answer.split("\n\n", 1)[0]


def test_the_row_about_the_asked_event_answers_on_the_captured_sse_page() -> None:
    question = "What does the message_complete event carry?"
    answer, sources, _ = compose_answer(question, _captured(question))
    assert_clean(answer)
    first = _first(answer)
    assert "turns, usage" in first and "`error`" not in first, answer
    assert sources[0].startswith("agentchat-sse-events")


def test_a_row_naming_the_term_among_its_values_is_not_about_it() -> None:
    table = (
        "| setting | effect |\n| --- | --- |\n"
        "| `cache_dir` | where the cache lives; cleared by `purge_cache` on request |\n"
        "| `purge_cache` | empties the cache folder and resets every counter |\n"
    )
    answer, _, _ = compose_answer("What does purge_cache do?", [Passage("conf#0", "Settings", table, 0.6)])
    assert_clean(answer)
    assert "empties the cache folder" in answer and "where the cache lives" not in answer, answer


def test_a_thing_called_by_its_name_answers_which_on_the_captured_kb_page() -> None:
    question = "Which full-text engine does the knowledge base index use?"
    answer, sources, _ = compose_answer(question, _captured(question))
    assert_clean(answer)
    assert "FTS5" in _first(answer), answer
    assert sources[0].startswith("agentchat-knowledge-base")


def test_names_kind_reads_the_name_right_before_the_asked_kind() -> None:
    q = Question.of("Which full-text engine does the knowledge base index use?")
    assert q.kind == stems("full-text engine")
    assert names_kind(q, "An FTS5 full-text index (unicode61 tokenizer) is kept in sync by triggers.")
    assert not names_kind(q, "A query runs BM25 over the full-text index and a vector search.")
    tokenizer = Question.of("Which tokenizer does the full-text index use?")
    assert names_kind(tokenizer, "An FTS5 full-text index (unicode61 tokenizer, diacritics removed).")
    # A name the question says itself is not the answer.
    assert not names_kind(Question.of("Which BM25 index does search use?"), "BM25 index over the chunks")
    assert Question.of("How does the search rank chunks?").kind == frozenset()


def test_names_kind_takes_a_name_as_its_whole_token() -> None:
    """A name starts where its token starts (after a space, or after the dashes of a
    flag). The rule scans a long token once instead of from each of its dots and dashes
    (a table rule of 3,000 dashes took ~80 ms on the event loop, now ~0.2 ms); this test
    holds what it reads the same as before that change, not the time."""
    q = Question.of("Which full-text engine does the knowledge base index use?")
    assert names_kind(q, "Built on FTS5 full-text index support.")
    assert names_kind(q, "Pass --fts5 full-text index to the build.")
    assert names_kind(q, "The sqlite.fts5 full-text index is used.")
    assert not names_kind(q, "-" * 3000 + " full-text index")
    assert not names_kind(q, "a1." * 1000)


def test_retries_is_retry_again() -> None:
    assert stems("retries") == stems("retry") == {"retry"}
    assert stems("dependencies") == stems("dependency")
    assert stems("applied") == stems("applies")
    assert coverage(stems("fetch-retries"), stems("retry more often when fetching")) == 1.0


def test_the_named_settings_paragraph_answers_on_the_captured_config_page() -> None:
    question = "How can I make npm retry more often when fetching a package fails?"
    answer, sources, _ = compose_answer(question, _captured(question))
    assert_clean(answer)
    first = _first(answer)
    assert "fetch-retries" in first and "factor" not in first, answer
    assert sources[0].startswith("config-")


def _settings() -> list[Passage]:
    text = (
        "#### `upload-timeout-factor`\n\n* Default: 10\n* Type: Number\n\n"
        "The growth factor of the wait between two upload tries.\n\n"
        "#### `upload-timeout`\n\n* Default: 30000\n* Type: Number\n\n"
        "How long an upload may take before it is abandoned, in milliseconds.\n\n"
        "#### `versions`\n\n* Default: false\n* Type: Boolean\n\n"
        "Show every version of an upload and its size instead of the latest one.\n"
    )
    return [Passage("settings#3", "Settings", text, 0.6)]


def test_a_setting_named_by_the_question_is_answered_by_its_paragraph() -> None:
    answer, _, _ = compose_answer("How long can an upload take before its timeout?", _settings())
    assert_clean(answer)
    assert "before it is abandoned" in _first(answer), answer


def test_a_one_word_setting_is_not_named_by_a_word_of_the_question() -> None:
    # npm's ``versions`` setting ("If true, output the npm version as well as node's
    # `process.versions` map …") is not what "which versions of Node …" asks about: the
    # package.json ``engines`` paragraph stays first (it went second when any setting's
    # paragraph opened its section).
    question = "How do I say which versions of Node my package works with?"
    answer, sources, _ = compose_answer(question, _captured(question))
    assert_clean(answer)
    assert '"engines"' in answer, answer
    assert "process.versions" not in answer or answer.index('"engines"') < answer.index("process.versions"), answer
    assert sources[0].startswith("package-json-"), sources


def test_rm_clear_is_remove_on_the_captured_dist_tag_page() -> None:
    question = "How do I remove a distribution tag I no longer use?"
    answer, sources, _ = compose_answer(question, _captured(question))
    assert_clean(answer)
    first = _first(answer)
    assert first.startswith("rm: Clear a tag"), answer
    assert "npm dist-tag rm <package-spec> <tag>" in answer
    assert sources[0].startswith("npm-dist-tag-")


def test_clear_and_rm_meet_remove() -> None:
    assert coverage(stems("remove"), stems("Clear a tag that is no longer in use")) == 1.0
    assert coverage(stems("remove"), stems("rm: drop it")) == 1.0
    assert coverage(stems("delete"), stems("clears the key")) == 1.0


def test_a_lead_opening_with_however_comes_with_what_it_answers() -> None:
    # "However, …" says nothing without the sentence it turns from: the quote starts
    # there (as for "This …"), and the checks count such an opening as dangling.
    text = (
        "Older releases removed every scoped name from the uploaded report, to keep private "
        "names from leaking. However, in practice, this made the upload checks fail whenever "
        "a private dependency was missing from the report."
    )
    passages = [Passage("audit#4", "npm-audit", text + " " + "Later releases keep the names. " * 12, 0.6)]
    answer, _, _ = compose_answer("Why did the upload checks fail with a private dependency?", passages)
    assert_clean(answer)
    assert answer.startswith("Older releases removed every scoped name"), answer
    assert dangling_openings("However, this made the checks fail. [audit#4]") != []
