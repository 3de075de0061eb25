# ruff: noqa: E501  (the documents' lines, quoted as the search returned them)
"""Offline answers (issue 20 item 4), round 13 of the answerer: a how-to answered with
what to type, each change tested on the passages the real search returned (npm 11's
documentation) and failing without it.

* A how-to answered by what a section says first ("You should specify a license for your
  package …": what to do, not how) gets the paragraph after it when that one shows the
  form with a code block ("… add a current SPDX license identifier …, like this:")
  (``llm.extractive_additions.with_form_after``).
* A how-to asked of a command's page ("how do I clear out npm's cache?") is answered by
  the item of its subcommand list that does it ("clean: Delete … out of the cache
  folder", shown with its synopsis line ``npm cache clean``), not by the page's summary
  naming every subcommand (``SUBCOMMAND_BONUS``).
* What a how-to asks to do — the action right after "how do I", before its circumstances
  ("when …", "with …") — counts more than the rest (``Question.action``): "How do I skip
  the questions when creating a package.json with npm init?" is "You can also use
  `-y`/`--yes` to skip the questionnaire", not the initializer paragraph that says
  "creating … package.json" and "npm init".
"""

from __future__ import annotations

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question
from llm.extractive_additions import with_form_after
from llm.extractive_read import Unit, read_passage
from tests.support.offline_answers import dangling_openings, fragments, repeated_sentences

LICENSE_PASSAGES = [
    Passage(
        "npm-json-2424ddf0#8",
        "package.json",
        (
            "```\n"
            "{\n"
            '  "license": "ISC"\n'
            "}\n"
            "```\n"
            "\n"
            "```\n"
            "{\n"
            '  "license": "(MIT OR Apache-2.0)"\n'
            "}\n"
            "```\n"
            "\n"
            "Finally, if you do not wish to grant others the right to use a private or unpublished package under any terms:\n"
            "\n"
            "```\n"
            "{\n"
            '  "license": "UNLICENSED"\n'
            "}\n"
            "```\n"
            "\n"
            'Consider also setting `"private": true` to prevent accidental publication.\n'
            "\n"
            "### people fields: author, contributors\n"
            "\n"
            'The "author" is one person. "contributors" is an array of people. A "person" is an object with a "name" field and optionally "url" and "email", like this:\n'
            "\n"
            "```\n"
            "{\n"
            '  "name" : "Barney Rubble",\n'
            '  "email" : "barney@npmjs.com",\n'
            '  "url" : "http://barnyrubble.npmjs.com/"\n'
            "}\n"
            "```\n"
            "\n"
            "Or you can shorten that all into a single string, and npm will parse it for you:\n"
            "\n"
            "```\n"
            "{\n"
            '  "author": "Barney Rubble <barney@npmjs.com> (http://barnyrubble.npmjs.com/)"\n'
            "}\n"
            "```"
        ),
        0.724,
        section="package.json @11.19.1 › Table of contents › license",
    ),
    Passage(
        "package-json-8d61b93e#6",
        "package.json",
        (
            "### license\n"
            "\n"
            "You should specify a license for your package so that people know how they are permitted to use it, and any restrictions you're placing on it.\n"
            "\n"
            "If you're using a common license such as BSD-2-Clause or MIT, add a current SPDX license identifier for the license you're using, like this:\n"
            "\n"
            "```json\n"
            "{\n"
            '  "license" : "BSD-3-Clause"\n'
            "}\n"
            "```\n"
            "\n"
            "You can check [the full list of SPDX license IDs](https://spdx.org/licenses/).\n"
            "Ideally, you should pick one that is [OSI](https://opensource.org/licenses/) approved.\n"
            "\n"
            "If your package is licensed under multiple common licenses, use an [SPDX license expression syntax version 2.0 string](https://spdx.dev/specifications/), like this:\n"
            "\n"
            "```json\n"
            "{\n"
            '  "license" : "(ISC OR GPL-3.0)"\n'
            "}\n"
            "```"
        ),
        0.6982,
        summary="Specifics of npm's package.json handling",
        section="license",
    ),
    Passage(
        "npm-json-2424ddf0#7",
        "package.json",
        (
            "```\n"
            "{\n"
            '  "license" : "SEE LICENSE IN <filename>"\n'
            "}\n"
            "```\n"
            "\n"
            "Then include a file named `<filename>` at the top level of the package.\n"
            "\n"
            'Some old packages used license objects or a "licenses" property containing an array of license objects:\n'
            "\n"
            "```\n"
            "// Not valid metadata\n"
            "{\n"
            '  "license" : {\n'
            '    "type" : "ISC",\n'
            '    "url" : "https://opensource.org/licenses/ISC"\n'
            "  }\n"
            "}\n"
            "// Not valid metadata\n"
            "{\n"
            '  "licenses" : [\n'
            "    {\n"
            '      "type": "MIT",\n'
            '      "url": "https://www.opensource.org/licenses/mit-license.php"\n'
            "    },\n"
            "    {\n"
            '      "type": "Apache-2.0",\n'
            '      "url": "https://opensource.org/licenses/apache2.0.php"\n'
            "    }\n"
            "  ]\n"
            "}\n"
            "```\n"
            "\n"
            "Those styles are now deprecated. Instead, use SPDX expressions, like this:\n"
            "\n"
            "```\n"
            "{\n"
            '  "license": "ISC"\n'
            "}\n"
            "```\n"
            "\n"
            "```\n"
            "{\n"
            '  "license": "(MIT OR Apache-2.0)"\n'
            "}\n"
            "```"
        ),
        0.4215,
        section="package.json @11.19.1 › Table of contents › license",
    ),
]

CACHE_PASSAGES = [
    Passage(
        "npm-cache-2d87922d#3",
        "npm-cache",
        (
            "This directory is primarily accessed through `pacote`, the library responsible for all package fetching as of npm@5.\n"
            "\n"
            "All data that passes through the cache is fully verified for integrity on both insertion and extraction.\n"
            "Cache corruption will either trigger an error, or signal to `pacote` that the data must be refetched, which it will do automatically.\n"
            "For this reason, it should never be necessary to clear the cache for any reason other than reclaiming disk space, thus why `clean` now requires `--force` to run.\n"
            "\n"
            "There is currently no method exposed through npm to inspect or directly manage the contents of this cache.\n"
            "In order to access it, `cacache` must be used directly.\n"
            "\n"
            "npm will not remove data by itself: the cache will grow as new packages are installed."
        ),
        0.8333,
        summary="Manipulates packages cache",
        section="Details",
    ),
    Passage(
        "npm-cache-2d87922d#0",
        "npm-cache",
        (
            "### Synopsis\n"
            "\n"
            "```bash\n"
            "npm cache add <package-spec>\n"
            "npm cache clean [<key>]\n"
            "npm cache ls [<name>@<version>]\n"
            "npm cache verify\n"
            "npm cache npx ls\n"
            "npm cache npx rm [<key>...]\n"
            "npm cache npx info <key>...\n"
            "```\n"
            "\n"
            "Note: This command is unaware of workspaces.\n"
            "\n"
            "### Description\n"
            "\n"
            "Used to add, list, or clean the `npm cache` folder.\n"
            "Also used to view info about entries in the `npm exec` (aka `npx`) cache folder.\n"
            "\n"
            "#### `npm cache`\n"
            "\n"
            "* add:\n"
            "  Add the specified packages to the local cache.\n"
            "  This command is primarily intended to be used internally by npm, but it can provide a way to add data to the local installation cache explicitly."
        ),
        0.6007,
        summary="Manipulates packages cache",
        section="Synopsis",
    ),
    Passage(
        "npm-cache-2d87922d#1",
        "npm-cache",
        (
            "* clean:\n"
            "  Delete a single entry or all entries out of the cache folder.\n"
            "  Note that this is typically unnecessary, as npm's cache is self-healing and resistant to data corruption issues.\n"
            "\n"
            "* ls:\n"
            "  List given entries or all entries in the local cache.\n"
            "\n"
            "* verify:\n"
            "  Verify the contents of the cache folder, garbage collecting any unneeded data, and verifying the integrity of the cache index and all cached data."
        ),
        0.4474,
        summary="Manipulates packages cache",
        section="Description › `npm cache`",
    ),
    Passage(
        "npm-doctor-74fe2686#7",
        "npm-doctor",
        (
            "#### Validate the checksums of cached packages\n"
            "\n"
            "When an npm package is published, the publishing process generates a checksum that npm uses at install time to verify that the package didn't get corrupted in transit.\n"
            "`npm doctor` uses these checksums to validate the package tarballs in your local cache (you can see where that cache is located with `npm config get cache`).\n"
            "In the event that there are corrupt packages in your cache, you should probably run `npm cache clean -f` and reset the cache."
        ),
        0.4126,
        summary="Check the health of your npm environment",
        section="Description › Validate the checksums of cached packages",
    ),
]


INIT_PASSAGES = [
    Passage(
        "npm-init-d40c0b47#2",
        "npm-init",
        (
            "* `npm init @usr@2.0.0` -> `npm exec @usr/create@2.0.0`\n"
            "* `npm init @usr/foo@2.0.0` -> `npm exec @usr/create-foo@2.0.0`\n"
            "\n"
            "If the initializer is omitted (by just calling `npm init`), init will fall back to legacy init behavior.\n"
            "It will ask you a bunch of questions, and then write a package.json for you.\n"
            "It will attempt to make reasonable guesses based on existing fields, dependencies, and options selected.\n"
            "It is strictly additive, so it will keep any fields and values that were already set.\n"
            "You can also use `-y`/`--yes` to skip the questionnaire altogether.\n"
            "If you pass `--scope`, it will create a scoped package."
        ),
        0.6985,
        summary="Create a package.json file",
        section="Description",
    ),
    Passage(
        "npm-init-d40c0b47#0",
        "npm-init",
        (
            "### Synopsis\n"
            "\n"
            "```bash\n"
            "npm init <package-spec> (same as `npx create-<package-spec>`)\n"
            "npm init <@scope> (same as `npx <@scope>/create`)\n"
            "\n"
            "aliases: create, innit\n"
            "```\n"
            "\n"
            "### Description\n"
            "\n"
            "`npm init <initializer>` can be used to set up a new or existing npm package.\n"
            "\n"
            "`initializer` in this case is an npm package named `create-<initializer>`,\n"
            "which will be installed by [`npm-exec`](/commands/npm-exec), and then have its main bin executed -- presumably creating or updating `package.json` and running any other initialization-related operations.\n"
            "\n"
            "The init command is transformed to a corresponding `npm exec` operation as follows:"
        ),
        0.4938,
        summary="Create a package.json file",
        section="Synopsis",
    ),
    Passage(
        "config-37606c25#46",
        "Config",
        (
            "#### `init-type`\n"
            "\n"
            '* Default: "commonjs"\n'
            "* Type: String\n"
            "\n"
            "The value that `npm init` should use by default for the package.json type\n"
            "field.\n"
            "\n"
            "#### `init-version`\n"
            "\n"
            '* Default: "1.0.0"\n'
            "* Type: SemVer string\n"
            "\n"
            "The value that `npm init` should use by default for the package version\n"
            "number, if not already set in package.json.\n"
            "\n"
            "#### `install-links`\n"
            "\n"
            "* Default: false\n"
            "* Type: Boolean\n"
            "\n"
            "When set file: protocol dependencies will be packed and installed as regular\n"
            "dependencies instead of creating a symlink. This option has no effect on\n"
            "workspaces."
        ),
        0.1658,
        summary="About npm configuration",
        section="Config Settings › `init-type`",
    ),
]


def _readable(answer: str) -> None:
    assert repeated_sentences(answer) == [] and fragments(answer) == [] and dangling_openings(answer) == []


def test_a_how_to_gets_the_form_its_section_shows_in_the_next_paragraph() -> None:
    answer, sources, _ = compose_answer("How do I say under which license people may use my package?", LICENSE_PASSAGES)
    assert answer.startswith("You should specify a license for your package")
    assert "add a current SPDX license identifier" in answer
    assert '"license" : "BSD-3-Clause"' in answer  # the code block the paragraph introduces
    assert sources[0] == "package-json-8d61b93e#6"
    _readable(answer)


def test_the_next_paragraph_is_not_added_to_a_question_that_is_no_how_to() -> None:
    answer, _, _ = compose_answer("Why should I specify a license for my package?", LICENSE_PASSAGES)
    assert "You should specify a license" in answer
    assert "SPDX license identifier" not in answer


def test_the_form_comes_only_after_a_section_s_first_paragraph() -> None:
    read = read_passage(LICENSE_PASSAGES[1])
    question = Question.of("How do I say under which license people may use my package?")
    first = next(b for b, block in enumerate(read.blocks) if block.kind == "prose")
    lead = read.blocks[first].units[0]
    pieces = with_form_after(read, Unit(0, first, 0, lead, 1.0), [lead], question)
    assert len(pieces) == 3 and pieces[2].startswith("```")
    # Quoted from the paragraph that itself shows the form: nothing to add.
    second = first + 1
    said = " ".join(read.blocks[second].units)
    assert with_form_after(read, Unit(0, second, 0, said, 1.0), [said], question) == [said]


def test_a_how_to_asked_of_a_command_page_is_answered_by_the_subcommand_that_does_it() -> None:
    answer, sources, _ = compose_answer("How do I clear out npm's cache?", CACHE_PASSAGES)
    assert "npm cache clean" in answer
    assert "Delete a single entry or all entries out of the cache folder" in answer
    assert sources[0] == "npm-cache-2d87922d#1"
    _readable(answer)


def test_a_how_to_weighs_what_it_asks_to_do_over_its_circumstances() -> None:
    question = Question.of("How do I skip the questions when creating a package.json with npm init?")
    assert question.action == frozenset({"skip", "question"})
    assert Question.of("How do I clear out npm's cache?").action == Question.of("How do I clear out npm's cache?").stems
    assert Question.of("What does npm init do?").action == frozenset()
    answer, sources, _ = compose_answer(
        "How do I skip the questions when creating a package.json with npm init?", INIT_PASSAGES
    )
    assert "`-y`/`--yes` to skip the questionnaire" in answer
    assert sources[0] == "npm-init-d40c0b47#2"
    _readable(answer)
