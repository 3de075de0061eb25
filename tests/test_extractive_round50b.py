"""Offline answers (issue 20 item 4), round 50b: a newcomer's walkthrough of the default
service in plain words (the ``walkthrough50`` set), on passages the service's searches
returned (tests/data/extractive_round50b_passages.json).

- A title or section heading is read as the unit's own words are
  (``Question.terms``): "What the OpenAI-compatible face sends back" said the "back" of
  "How do I back up my data?" (a phrasal verb without its particle) and led the answer,
  while "Backups", which says it as one word, did not name its section.
- A capitalised name the question asks about counts as a name
  (``llm.extractive_subject.proper_names_asked``, ``Question.naming``): "How do I connect
  Gemini?" quoted the MCP servers' ``connect_timeout_s``, which says "connect" and
  nothing of Gemini.
- A passage from another document joins only when the search scored it at least
  ``SECOND_SEARCH_SHARE`` of the passage the answer opens with: "Is my data sent
  anywhere?" ended with tool selection's "the result is sent as the `tool_selection`
  event".
- A reciprocal pronoun ("each other's", "one another") holds no content word: "Can two
  users see each other's conversations?" ended with the hybrid search's "The two score
  lists are each min-max normalised …".
"""

from __future__ import annotations

import re
from pathlib import Path

from llm.extractive_answer import compose
from llm.extractive_words import Words
from tests.support.offline_answers import assert_clean, captured_passages, carries

PASSAGES = Path(__file__).resolve().parent / "data" / "extractive_round50b_passages.json"
_CITATION = re.compile(r"\[([^\]\s]+)\]")


def _answer(question: str) -> tuple[str, list[str]]:
    """The answer composed from the question's captured passages, and the source ids it
    cites in order."""
    composed = compose(question, captured_passages(PASSAGES, question), Words())
    assert_clean(composed.answer)
    return composed.answer, _CITATION.findall(composed.answer)


def test_a_heading_is_read_as_the_units_own_words() -> None:
    answer, cited = _answer("How do I back up my data?")
    assert cited[0] == "agentchat-running#6" and carries(answer, "VACUUM INTO"), answer
    # "log in" is not the Logs section's "logs", in its heading either.
    answer, cited = _answer("How do I log in as a different user?")
    assert "agentchat-running#4" not in cited and carries(answer, "AGENT_AUTH=jwt"), answer


def test_a_capitalised_name_asked_about_outweighs_the_verb_beside_it() -> None:
    answer, cited = _answer("How do I connect Gemini?")
    assert carries(answer, "GEMINI_API_KEY") and not any(c.startswith("agentchat-mcp-servers") for c in cited), answer
    # A possessive's lower-case owner is no name: the score's range still leads.
    answer, cited = _answer("What range is a search result's score in?")
    assert carries(answer, "0 to 1"), answer


def test_a_page_the_search_found_far_less_relevant_does_not_join() -> None:
    answer, cited = _answer("Is my data sent anywhere?")
    assert cited == ["agentchat-overview#3"] and carries(answer, "send nothing anywhere"), answer
    answer, cited = _answer("How do I make someone an administrator?")
    assert cited == ["agentchat-authentication#3"] and carries(answer, "AGENT_ADMIN_USERS"), answer


def test_a_reciprocal_pronoun_is_no_content_word() -> None:
    answer, cited = _answer("Can two users see each other's conversations?")
    assert cited == ["agentchat-authentication#2"] and carries(answer, "Another user's conversation"), answer
