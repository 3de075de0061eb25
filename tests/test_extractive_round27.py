"""Issue 20 item 4, round 27: two rules of the offline answerer, each gaining a
later-written question it missed with the fact among its passages.

A setting's paragraph that opens with "This …" is quoted under the setting's name.

npm's configuration reference opens each setting's section with its name as the heading,
its properties, then a paragraph that often says "this" of the setting: "#### `cidr`",
"* Default: null", "* Type: null or String (can be set multiple times)", "This is a list
of CIDR address to be used when configuring limited access tokens …". That sentence was
the best unit for "how do I make an access token only work from certain network
addresses?", but a quote opening with "This" and nothing before it for "this" to refer
to is never given, so the answer fell to other passages and never said ``cidr``. The
heading is what "this" is: the quote is labelled with the name ("**`cidr`:** This is a
list …", ``llm.extractive_read.opens_named_section``), and the readability check counts
"This" or "It" right after a name label as referring to it (``dangling_openings``).

What a reader asks to "see" is what a command lists, shows, displays or prints: "how can
I see which access tokens my account has?" is npm token's summary and "This lets you
list, create and revoke authentication tokens" with its synopsis (``npm token list``).
"see" was a function word to the answerer, so the question said only "access tokens"
and "account", and token settings saying both led (``llm.extractive_words.SYNONYMS``).

Tested on the passages the real search returned (tests/data/extractive_round27_passages.json)
and on small passages of their own.
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question
from llm.extractive_read import opens_named_section, read_passage
from llm.extractive_words import coverage
from tests.support.offline_answers import assert_clean, captured_passages, carries, dangling_openings

PASSAGES = Path(__file__).parent / "data" / "extractive_round27_passages.json"

CIDR = (
    "#### `cidr`\n\n"
    "* Default: null\n"
    "* Type: null or String (can be set multiple times)\n\n"
    "This is a list of CIDR address to be used when configuring limited access tokens with "
    "the `npm token create` command.\n"
)


def test_the_cidr_setting_is_quoted_under_its_name() -> None:
    # Before: "This is a list of CIDR address …" scored first but was not quoted (it
    # opens by referring back), and the answer led with other token settings.
    question = "How do I make an access token only work from certain network addresses?"
    answer, sources, _ = compose_answer(question, captured_passages(PASSAGES, question))
    assert_clean(answer)
    assert carries(answer, "cidr"), answer
    assert answer.startswith("**`cidr`:** This is a list of CIDR address"), answer
    assert "npm-token-c68ff140#5" in sources, sources


def test_a_paragraph_saying_this_of_its_settings_name_is_labelled_with_it() -> None:
    passages = [Passage("npm-token#5", "npm-token", CIDR, 0.6, section="Configuration › `cidr`")]
    answer, _, _ = compose_answer("How do I limit an access token to some CIDR addresses?", passages)
    assert answer.startswith("**`cidr`:** This is a list of CIDR address to be used"), answer
    assert_clean(answer)


def test_the_name_is_the_sections_only_when_the_paragraph_opens_it() -> None:
    read = read_passage(Passage("npm-token#5", "npm-token", CIDR, 0.6))
    opening = next(b for b, block in enumerate(read.blocks) if block.kind == "prose")
    assert opens_named_section(read, opening) == "cidr"  # after the setting's properties
    plain = read_passage(Passage("a#3", "A", "#### `save-exact`\n\nThis saves an exact version.\n", 0.5))
    assert opens_named_section(plain, 1) == "save-exact"  # right under the heading
    # A heading that is a title, not a name ("Description" over "This command removes
    # …"), is not what "this" refers to: the page's summary is (``antecedent``).
    titled = read_passage(Passage("b#3", "B", "### Description\n\nThis command removes packages.\n", 0.5))
    assert opens_named_section(titled, 1) == ""
    later = read_passage(
        Passage("c#3", "C", "#### `cidr`\n\nA list of addresses.\n\nThis one is used for tokens.\n", 0.5)
    )
    assert opens_named_section(later, 2) == ""  # not what the section says first


def test_a_this_after_a_name_label_is_no_dangling_opening() -> None:
    assert dangling_openings("**`cidr`:** This is a list of CIDR address to be used. [npm-token#5]") == []
    assert dangling_openings("**`read-only`:** It marks a token as unable to publish. [npm-token#8]") == []
    # A connective still answers something before it, and a heading label is no name.
    assert dangling_openings("**`cidr`:** However, this is deprecated. [npm-token#5]") != []
    assert dangling_openings("**Token settings.** This is a list of CIDR address. [npm-token#5]") != []
    assert dangling_openings("This is a list of CIDR address. [npm-token#5]") != []


def test_seeing_the_access_tokens_is_npm_token_list() -> None:
    # Before: "**`read-only`:** This is used to mark a token as unable to publish …" and
    # "When creating a Granular Access Token with `npm token create` …": settings of
    # the page saying "access token(s)", never the command that lists them.
    question = "How can I see which access tokens my account has?"
    answer, sources, _ = compose_answer(question, captured_passages(PASSAGES, question))
    assert_clean(answer)
    assert carries(answer, "npm token list"), answer
    assert "This lets you list, create and revoke authentication tokens." in answer, answer
    assert sources[0] == "npm-token-c68ff140#0", sources


def test_seeing_meets_listing_showing_displaying_and_printing() -> None:
    see = Question.of("How can I see my conversations?")
    for text in ("lists the caller's conversations", "shows the conversations", "prints every conversation"):
        assert coverage(see.stems, see.terms(text)) == 1.0, text
    # Another verb of the question still has to be met: "see" is one word of it.
    assert coverage(see.stems, see.terms("deletes the caller's conversations")) < 1.0
