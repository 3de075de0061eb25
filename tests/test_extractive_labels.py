"""Offline answers (issue 20 item 4), round 12 of the answerer: two changes made after
reading round11's answers, each tested on the passages the real search returned and
failing without its change.

* A passage quoted from a section named by one name (a config option, a package.json
  field) keeps the name as its label when it does not say it (``with_name``): the
  sentence "Dependencies saved to package.json will be configured with an exact version"
  is what ``save-exact`` does, and a reader needs the name to use it.
* The question's adjacent words said side by side count a little (``phrase_share``):
  "Each document has an id, a bucket, … a content hash" answers "what does the knowledge
  base keep for each document?", not "… tables are cut … and keep their Markdown".
"""

from __future__ import annotations

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question, phrase_share
from tests.support.offline_answers import dangling_openings, fragments

#: npm's documentation (npm 11): the first three passages the search returned.
EXACT_PASSAGES = [
    Passage(
        "npm-json-2424ddf0#46",
        "package.json",
        (
            "Published packages may dictate their resolutions by pinning dependencies or using an "
            "`npm-shrinkwrap.json` file.\n"
            "\n"
            "To make sure the package `@npm/foo` is always installed as version `1.0.0` no matter what "
            "version your dependencies rely on:\n"
            "\n"
            "```\n"
            "{\n"
            '  "overrides": {\n'
            '    "@npm/foo": "1.0.0"\n'
            "  }\n"
            "}\n"
            "```\n"
            "\n"
            "Override values can use any specifier that npm accepts for dependencies, including\n"
            "an exact version, a semver range, a dist-tag, or a replacement specifier such as\n"
            "`npm:`, `file:`, or a Git URL.\n"
            "\n"
            "For example, if you only need to enforce a minimum patched release instead of one exact "
            "version, you can use a semver range:\n"
            "\n"
            "```\n"
            "{\n"
            '  "overrides": {\n'
            '    "@npm/foo": "^1.0.0"\n'
            "  }\n"
            "}\n"
            "```"
        ),
        0.714,
        section="package.json @11.19.1 › Table of contents › overrides",
    ),
    Passage(
        "package-json-8d61b93e#49",
        "package.json",
        (
            "```json\n"
            "{\n"
            '  "overrides": {\n'
            '    "@npm/foo": "1.0.0"\n'
            "  }\n"
            "}\n"
            "```\n"
            "\n"
            "Override values can use any specifier that npm accepts for dependencies, including\n"
            "an exact version, a semver range, a dist-tag, or a replacement specifier such as\n"
            "`npm:`, `file:`, or a Git URL.\n"
            "\n"
            "For example, if you only need to enforce a minimum patched release instead of one\n"
            "exact version, you can use a semver range:\n"
            "\n"
            "```json\n"
            "{\n"
            '  "overrides": {\n'
            '    "@npm/foo": "^1.0.0"\n'
            "  }\n"
            "}\n"
            "```\n"
            "\n"
            "The above is a short hand notation, the full object form can be used to allow overriding "
            "a package itself as well as a child of the package.\n"
            "This will cause `@npm/foo` to always be `1.0.0` while also making `@npm/bar` at any depth "
            "beyond `@npm/foo` also `1.0.0`:"
        ),
        0.5231,
        summary="Specifics of npm's package.json handling",
        section="overrides",
    ),
    Passage(
        "npm-link-724ded4c#6",
        "npm-link",
        (
            "### Configuration\n"
            "\n"
            "#### `save`\n"
            "\n"
            "* Default: `true` unless when using `npm update` where it defaults to `false`\n"
            "* Type: Boolean\n"
            "\n"
            "Save installed packages to a `package.json` file as dependencies.\n"
            "\n"
            "When used with the `npm rm` command, removes the dependency from\n"
            "`package.json`.\n"
            "\n"
            "Will also prevent writing to `package-lock.json` if set to `false`.\n"
            "\n"
            "#### `save-exact`\n"
            "\n"
            "* Default: false\n"
            "* Type: Boolean\n"
            "\n"
            "Dependencies saved to package.json will be configured with an exact version\n"
            "rather than using npm's default semver range operator."
        ),
        0.4816,
        summary="Symlink a package folder",
        section="Configuration",
    ),
]


def test_a_section_named_by_an_option_is_quoted_under_its_name() -> None:
    question = "How do I make npm write exact versions into package.json instead of a caret range?"
    answer, _, _ = compose_answer(question, EXACT_PASSAGES)
    assert "**`save-exact`:** Dependencies saved to package.json will be configured with an exact version" in answer
    # The label reads as one: no fragment, no dangling opening for the readability checks.
    assert fragments(answer) == [] and dangling_openings(answer) == []


#: The sample knowledge base: the first two passages the search returned.
EACH_DOCUMENT_PASSAGES = [
    Passage(
        "agentchat-knowledge-base#1",
        "How the knowledge base stores and searches documents",
        (
            "## Chunking\n"
            "\n"
            "Documents are split along their headings and paragraphs into chunks of about 800 "
            "characters, with the last whole sentences (up to about 120 characters) of a chunk "
            "repeated at the start of the next one in the same section, so a fact on a boundary is "
            "still found whole and no chunk starts mid-sentence. Long lists, code blocks and tables "
            "are cut between items, lines and rows and keep their Markdown."
        ),
        0.8375,
        section="How the knowledge base stores and searches documents › Chunking",
    ),
    Passage(
        "agentchat-knowledge-base#0",
        "How the knowledge base stores and searches documents",
        (
            "# How the knowledge base stores and searches documents\n"
            "\n"
            "## Storage\n"
            "\n"
            "Documents and their chunks live in the service's SQLite file (WAL mode). Each document "
            "has an id, a bucket, a title, a source, a content hash, the embedding model and "
            "dimension, and metadata. Chunks hold the text, their position and a float32 vector. An "
            "FTS5 full-text index (unicode61 tokenizer, diacritics removed) is kept in sync by "
            "triggers."
        ),
        0.6087,
        section="How the knowledge base stores and searches documents",
    ),
]


def test_the_question_s_words_side_by_side_count() -> None:
    question = "What does the knowledge base keep for each document?"
    pairs = Question.of(question).pairs
    assert phrase_share(pairs, "Each document has an id and a content hash.") > phrase_share(
        pairs, "Tables are cut between rows and keep their Markdown."
    )
    answer, _, _ = compose_answer(question, EACH_DOCUMENT_PASSAGES)
    assert "content hash" in answer.split("\n\n")[0], answer
