"""Offline answers (issue 20 item 4), round 35: questions in the words newcomers write.
An FAQ's "Yes, npm ci …" is no longer quoted "Npm ci …" for a question asking no yes or
no (``llm.extractive_quote.without_answer_word``).
"""

from __future__ import annotations

from llm.extractive_answer import Passage, compose
from llm.extractive_quote import without_answer_word
from llm.extractive_words import Words


def test_a_dropped_yes_leaves_a_command_name_as_written() -> None:
    how = "How do I install exactly what the lock file says?"
    # A command or identifier after "Yes,": the sentence as written, not "Npm ci installs".
    assert without_answer_word(["Yes, npm ci installs exactly what the lock file says."], how) == [
        "Yes, npm ci installs exactly what the lock file says."
    ]
    assert without_answer_word(["No, package-lock.json is read."], how) == ["No, package-lock.json is read."]
    # Prose after it stands alone with its capital; a code span keeps its case.
    assert without_answer_word(["No, the lock file is read first."], how) == ["The lock file is read first."]
    assert without_answer_word(["Yes, `npm ci` installs it."], how) == ["`npm ci` installs it."]
    # Through the answerer.
    text = "Yes, npm ci installs exactly what the lock file says, and fails when it and package.json disagree."
    faq = [Passage("ci#0", "Clean installs", text, 0.6)]
    answer = compose(how, faq, Words()).answer
    assert answer.startswith("Yes, npm ci installs exactly"), answer
