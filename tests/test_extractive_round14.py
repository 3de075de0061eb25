"""Offline answers (issue 20 item 3/4), round 14 of the answerer: what a line introduces
comes with it, an entry naming several subcommands shows the one asked, a section's
opening may follow its form, and a reader's verb meets the document's. Each rule is
tested on the passages the real search returned for a round14 question (npm 11's
documentation, tests/data/extractive_round14_passages.json) and on a small passage of
its own, and each test fails without its rule.

* A list item ending with a colon ("* See what org packages a team member can access:")
  is quoted with the code block, table or nested items it introduces; an item that
  introduces what the passage does not hold is never a lead (``item_shows``) — the
  reader is never promised what the answer does not show (``dangling_introductions``).
* An entry naming several subcommands ("create / destroy: Create a new team, or destroy
  an existing one.") shows the synopsis line of the one the question asks
  (``with_command_line``), and quoted alone it stays a list item: it opens with
  lower-case names, not as a sentence.
* A paragraph right after the code block a section opens with (``#### delete``,
  ``npm config delete key [key ...]``, "Deletes the specified keys …") is what the
  section says first, as a paragraph right under its heading is (``after_form``).
* A reader's verb meets the document's verb for the same action (``SYNONYMS``: "remove"
  is "delete").
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import coverage, stems
from llm.extractive_quote import item_shows
from llm.extractive_read import read_passage
from llm.extractive_score import after_form
from tests.support.offline_answers import assert_clean, captured_passages

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round14_passages.json"


def _captured(question: str) -> list[Passage]:
    return captured_passages(CAPTURED, question)


def test_an_item_introducing_a_code_block_is_quoted_with_it() -> None:
    answer, sources, _ = compose_answer(
        "How can I see which packages a team has access to?",
        _captured("How can I see which packages a team has access to?"),
    )
    assert_clean(answer)
    assert "npm access list packages" in answer, answer
    assert sources[0].startswith("orgs-")


def test_an_item_introducing_what_the_passage_lacks_is_no_lead() -> None:
    """The item's code block is cut from the passage (the next item follows): the item
    would promise the reader a command the answer cannot show, so another unit answers."""
    text = (
        "### Monitor your package access\n\n"
        "* See what org packages a team member can access:\n"
        "* Teams are listed by the org admin for every member of the org.\n\n"
        "Package access of a team is granted with the access command."
    )
    passage = Passage("orgs#2", "Organizations", text, 0.8)
    read = read_passage(passage)
    listing = next(b for b, block in enumerate(read.blocks) if block.kind == "list")
    assert item_shows(read, listing, 0) == ""
    answer, _, _ = compose_answer("How can I see which org packages a team member can access?", [passage])
    assert "See what org packages" not in answer, answer
    assert_clean(answer)


def test_an_item_is_quoted_with_the_items_nested_under_it() -> None:
    text = (
        "* `npm profile enable-2fa [mode]`: Enables two-factor authentication. Modes are:\n"
        "  * `auth-only`: Require an OTP when logging in.\n"
        "  * `auth-and-writes`: Require an OTP at login and when publishing.\n"
        "* `npm profile disable-2fa`: Disables two-factor authentication."
    )
    read = read_passage(Passage("npm-profile#2", "npm-profile", text, 0.8))
    shown = item_shows(read, 0, 0)
    assert "auth-only" in shown and "auth-and-writes" in shown and "disable-2fa" not in shown


def test_an_entry_of_several_subcommands_shows_the_one_asked() -> None:
    answer, _, _ = compose_answer(
        "How do I create a new team in my organization?", _captured("How do I create a new team in my organization?")
    )
    assert_clean(answer)
    assert "npm team create <scope:team>" in answer, answer
    assert "npm team destroy" not in answer, answer  # the one asked, not every one the entry names
    assert answer.startswith("* create / destroy:"), answer  # an entry, not a paragraph cut mid-sentence


def test_a_paragraph_after_a_sections_form_opens_the_section() -> None:
    text = (
        "#### delete\n\n"
        "```bash\n"
        "npm config delete key [key ...]\n"
        "```\n\n"
        "Deletes the specified keys from all configuration files.\n\n"
        "Keys are matched exactly."
    )
    read = read_passage(Passage("npm-config#3", "npm-config", text, 0.4))
    prose = [b for b, block in enumerate(read.blocks) if block.kind == "prose"]
    assert after_form(read, prose[0]) and not after_form(read, prose[1])


def test_a_page_summary_after_the_synopsis_is_not_a_sections_opening() -> None:
    text = (
        "### Synopsis\n\n```bash\nnpm uninstall [<@scope>/]<pkg>...\n```\n\n"
        "### Description\n\nThis uninstalls a package."
    )
    read = read_passage(Passage("npm-uninstall#0", "npm-uninstall", text, 0.9, "Remove a package"))
    assert read.summary >= 0 and not after_form(read, read.summary)


def test_a_readers_verb_meets_the_documents_verb() -> None:
    assert coverage(stems("remove"), stems("Deletes the specified keys")) == 1.0
    assert coverage(stems("create"), stems("make a new team")) == 1.0
    assert coverage(stems("remove"), stems("Publishes the package")) == 0.0


def test_remove_a_key_is_answered_by_the_delete_subcommand() -> None:
    answer, _, _ = compose_answer(
        "How do I remove a key from my npm configuration?",
        _captured("How do I remove a key from my npm configuration?"),
    )
    assert_clean(answer)
    assert "npm config delete" in answer, answer
    assert answer.startswith("Deletes the specified keys"), answer
