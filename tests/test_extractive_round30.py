"""Offline answers (issue 20 item 4), round 30: a quote names the thing it describes when
its section or list is named by a plain lower-case word or a bold name, on the passages
the real search returned (npm 11's documentation); each test fails without its change.

* package.json heads each field's section with the field's bare name (``### bin``) and
  npm config each subcommand's (``#### list``): the paragraph under it is quoted with
  the name as its label, as a hyphenated or backticked name already was
  (``llm.extractive_read.NAME_HEADING``, ``with_name``). A form the section opens with
  still follows the labelled paragraph (``with_syntax``).
* npm's scripts page names each life-cycle script by a bold paragraph right above the
  list saying what it does (``**prepublish** (DEPRECATED)``): an item quoted alone keeps
  that name, note included (``with_list_name``).
"""

from __future__ import annotations

from llm.extractive_answer import Passage, compose_answer
from tests.support.offline_answers import assert_clean

DESCRIPTION = Passage(
    "package-json-8d61b93e#4",
    "package.json",
    "### description\n\nPut a description in it.\nIt's a string.\nThis helps people discover your package, as "
    "it's listed in `npm search`.\n\n### keywords\n\nPut keywords in it.\nIt's an array of strings.\nThis helps "
    'people discover your package as it\'s listed in `npm search`.\n\nExample:\n\n```json\n"keywords": [\n  '
    '"node",\n  "javascript",\n  "npm"\n]\n```\n\n### homepage\n\nThe URL to the project homepage.\n\nExample:\n\n'
    '```json\n"homepage": "https://github.com/npm/example#readme"\n```',
    0.5329,
    summary="Specifics of npm's package.json handling",
    section="description",
)
FOLDERS = Passage(
    "folders-7392ac39#0",
    "Folders",
    "### Description\n\nnpm puts various things on your computer.\nThat's its job.\n\nThis document will tell you "
    "what it puts where.\n\n#### tl;dr\n\n* Local install (default): puts stuff in `./node_modules` of the "
    "current package root.\n* Global install (with `-g`): puts stuff in /usr/local or wherever node is "
    "installed.\n* Install it **locally** if you're going to `require()` it.\n* Install it **globally** if "
    "you're going to run it on the command line.\n* If you need both, then install it in both places, or use "
    "`npm link`.",
    0.2431,
    summary="Folder structures used by npm",
    section="Description",
)
BIN = Passage(
    "package-json-8d61b93e#18",
    "package.json",
    "### bin\n\nA lot of packages have one or more executable files that they'd like to install into the PATH. "
    'npm makes this pretty easy (in fact, it uses this feature to install the "npm" executable.)',
    0.2158,
    summary="Specifics of npm's package.json handling",
    section="bin",
)
CONFIG_GET_LIST = Passage(
    "npm-config-72d73d09#2",
    "npm-config",
    "#### get\n\n```bash\nnpm config get [key ...]\nnpm get [key ...]\n```\n\nEcho the config value(s) to "
    "stdout.\n\nIf multiple keys are provided, then the values will be prefixed with the key names.\n\nIf no "
    "keys are provided, then this command behaves the same as `npm config list`.\n\n#### list\n\n```bash\nnpm "
    "config list\n```\n\nShow all the config settings.\nUse `-l` to also show defaults.\nUse `--json` to show "
    "the settings in json format.",
    0.3054,
    summary="Manage the npm configuration files",
    section="Sub-commands › get",
)
LIFE_CYCLE = Passage(
    "scripts-513af995#4",
    "Scripts",
    "**prepublish** (DEPRECATED)\n* Does not run during `npm publish`, but does run during `npm ci` and `npm "
    "install`.\nSee below for more info.\n\n**prepublishOnly**\n* Runs BEFORE the package is prepared and "
    'packed, ONLY on `npm publish`.\n\n**prepack**\n* Runs BEFORE a tarball is packed (on "`npm pack`", "`npm '
    'publish`", and when installing a git dependency).\n* NOTE: "`npm run pack`" is NOT the same as "`npm '
    'pack`". "`npm run pack`" is an arbitrary user defined script name, whereas, "`npm pack`" is a CLI defined '
    "command.\n\n**postpack**\n* Runs AFTER the tarball has been generated but before it is moved to its final "
    "destination (if at all, publish does not save the tarball locally)",
    0.7809,
    summary='How npm handles the "scripts" field',
    section="Life Cycle Scripts",
)


def test_a_field_headed_by_its_bare_name_labels_its_paragraph() -> None:
    # "### bin": the paragraph says what the field does but never its name, which is
    # what the reader has to write in package.json.
    answer, sources, _ = compose_answer(
        "How do I make my package put a command on people's PATH when they install it?", [DESCRIPTION, FOLDERS, BIN]
    )
    assert answer.startswith("**`bin`:** A lot of packages have one or more executable files"), answer
    assert sources[0] == "package-json-8d61b93e#18"
    assert_clean(answer)


def test_a_labelled_subcommand_paragraph_keeps_the_form_its_section_opens_with() -> None:
    answer, _, _ = compose_answer("How do I see all the npm settings that are currently in effect?", [CONFIG_GET_LIST])
    assert answer.startswith("**`list`:** Show all the config settings."), answer
    assert "```bash\nnpm config list\n```" in answer, answer
    assert_clean(answer)


def test_an_item_quoted_alone_keeps_the_bold_name_of_its_list() -> None:
    # Without the name the reader is told what some script does, not which one, nor that
    # it is deprecated.
    answer, _, _ = compose_answer("Which script runs only when I publish, and not on npm install?", [LIFE_CYCLE])
    assert answer.startswith("**`prepublish`:** (DEPRECATED) Does not run during `npm publish`"), answer
    assert_clean(answer)


def test_a_bold_sentence_above_a_list_is_no_name() -> None:
    # Only a name (one word, maybe with a short note) labels the list under it: a bold
    # sentence or lead-in is the list's introduction, not its name.
    passage = Passage(
        "scripts-use#0",
        "Scripts",
        "**This is important.**\n* Runs the prepare script before the package is published to the registry.",
        0.5,
        section="Use Cases",
    )
    answer, _, _ = compose_answer("When does the prepare script run before the package is published?", [passage])
    assert answer.startswith("Runs the prepare script before the package is published"), answer


#: The README of npm's own dependency ``once`` (under npm's node_modules), its "## usage"
#: section: a title, not the name of the thing the paragraph describes.
ONCE_USAGE = Passage(
    "once-readme#1",
    "once",
    "## usage\n\nIronically, the prototype feature makes this module twice as\ncomplicated as necessary.\n\n"
    "To check whether you function has been called, use `fn.called`. Once the\nfunction is called for the first "
    "time the return value of the original\nfunction is saved in `fn.value` and subsequent calls will continue "
    "to\nreturn this value.",
    0.5,
    summary="Run a function exactly one time",
    section="usage",
)


def test_a_readmes_lower_case_section_title_is_no_name() -> None:
    # READMEs head their sections "## usage", "## install", "## api": quoted under
    # "**`usage`:**", the paragraph read as what some ``usage`` setting does.
    answer, _, _ = compose_answer("How do I check whether a function wrapped with once has been called?", [ONCE_USAGE])
    assert answer.startswith("To check whether you function has been called, use `fn.called`."), answer
    assert "`usage`" not in answer, answer
    assert_clean(answer)


#: undici's Dispatcher docs (under npm's node_modules): "**Options**" titles the list of a
#: method's options, as "**Bugfixes**" and "**Security**" title a changelog's lists.
DUMP_OPTIONS = Passage(
    "undici-dispatcher#40",
    "Dispatcher",
    "#### `dump`\n\nDump the response body by reading it and discarding the chunks.\n\n**Options**\n- `maxSize` - "
    "The maximum size (in bytes) of the response body to dump. If the size of the request's body exceeds this "
    "value then the connection will be closed. Default: `1048576`.\n",
    0.5,
    summary="undici Dispatcher API",
    section="`dump`",
)


def test_a_capitalised_bold_title_over_a_list_is_no_name() -> None:
    # Labelled "**`Options`:**", the item read as what some ``Options`` does.
    answer, _, _ = compose_answer(
        "What is the maximum size of the response body the dump interceptor reads before closing the connection?",
        [DUMP_OPTIONS],
    )
    assert answer.startswith("`maxSize` - The maximum size (in bytes) of the response body to dump."), answer
    assert "`Options`" not in answer, answer
    assert_clean(answer)
