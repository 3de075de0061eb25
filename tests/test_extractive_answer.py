"""The offline answer's composition (llm/extractive_answer.py) and the KB's copy
collapse (knowledge/duplicates.py), on passages shaped like the ones that garbled
answers in issue 20; tests/test_offline_answers.py runs the whole service."""

from __future__ import annotations

from knowledge.duplicates import collapse_duplicates
from llm.extractive_answer import Passage, compose_answer
from tests.support.offline_answers import dangling_openings, fragments, repeated_sentences

MD = """### Description

This command is similar to `npm install`, except it's meant for automated environments.

The main differences between using `npm install` and `npm ci` are:

* The project **must** have an existing `package-lock.json` or
  `npm-shrinkwrap.json`.
* It will never write to `package.json` or any of the package-locks:
  installs are essentially frozen."""
HTML_END = """# npm-ci

This command is similar to `npm install`, except it's meant for automated environments.

The main differences between using `npm install` and `npm ci` are:"""
OLD_CHUNK = """you're doing a clean install of your dependencies.

The main differences between using `npm install` and `npm ci` are:

- The project **must** have an existing `package-lock.json` or `npm-shrinkwrap.json`.
- It will never write to `package.json` or any of the package-locks:
installs are essentially frozen."""


def test_the_list_comes_with_its_introduction_once_from_copies() -> None:
    passages = [
        Passage("html#0", "npm-ci", HTML_END, 0.9),  # ends at the introduction: cannot be quoted whole
        Passage("md#1", "npm-ci", MD, 0.8),
        Passage("old#1", "npm-ci", OLD_CHUNK, 0.7),  # an old chunk starting mid-sentence
    ]
    answer, sources, _ = compose_answer("What does npm ci do differently from npm install?", passages)
    assert answer.count("The main differences between using") == 1
    assert "\n* The project **must** have an existing `package-lock.json` or `npm-shrinkwrap.json`." in answer
    assert "installs are essentially frozen." in answer
    assert repeated_sentences(answer) == [] and fragments(answer) == []
    assert "you're doing" not in answer and sources[0] == "md#1"


def test_the_sentence_after_the_lead_comes_along() -> None:
    text = (
        "## Durable runs\n\n- `POST /v1/agent/runs/{run_id}/cancel` stops a run. It is idempotent.\n"
        "- `GET /v1/agent/runs/{run_id}/events` streams the events of a run after a disconnect. "
        "`Last-Event-ID` (or `?after=N`) replays from that point and then follows live."
    )
    passages = [Passage("api#1", "HTTP API", text, 0.5)]
    answer, _, _ = compose_answer("How do I resume a stream after a disconnect?", passages)
    assert "Last-Event-ID" in answer and not answer.startswith("- ")


def test_a_code_block_stays_a_code_block() -> None:
    text = "## Configure CI\n\nConfigure Travis CI to build using `npm ci`:\n\n```yaml\ninstall:\n- npm ci\n```"
    answer, _, _ = compose_answer("How do I configure Travis CI for npm ci?", [Passage("ci#3", "npm-ci", text, 0.5)])
    assert "```yaml\ninstall:\n- npm ci\n```" in answer


def test_copies_are_collapsed_and_counted() -> None:
    hits = [
        ("a", "docs/content/npm-ci.md", MD),
        ("b", "docs/output/npm-ci.html", MD.replace("*", "-").replace("\n  ", " ")),  # same words
        ("c", "docs/other.md", "Something else entirely about publishing packages to a registry."),
    ]
    kept, dropped = collapse_duplicates(hits, 5, text=lambda h: h[2], source=lambda h: h[1], document=lambda h: h[0])
    assert [h[0] for h in kept] == ["a", "c"] and dropped == 1


def test_a_where_question_is_answered_by_the_place() -> None:
    passages = [
        Passage("cache#2", "npm-cache", "npm stores cache data in an opaque directory named after its format.", 0.8),
        Passage("folders#4", "Folders", "Cache files are stored in `~/.npm` on Posix.", 0.5),
    ]
    answer, _, _ = compose_answer("Where does npm store its cache?", passages)
    assert answer.startswith("Cache files are stored in `~/.npm`"), answer


def test_a_phrasal_verb_is_not_its_verb_alone() -> None:
    passages = [
        Passage("logging#4", "logging", "The CLI logs any notice headers returned from the configured registry.", 0.9),
        Passage("login#0", "npm-login", "Verify a user in the specified registry, and save the credentials.", 0.6),
        Passage("whoami#0", "npm-whoami", "Display the username of the user logged in to the registry.", 0.5),
    ]
    answer, sources, _ = compose_answer("How do I log in to the registry?", passages)
    assert answer.startswith("Verify a user in the specified registry"), answer
    assert sources[0] == "login#0"


def test_a_heading_that_says_more_than_its_paragraph_is_kept() -> None:
    text = "## The answers come from the extractive provider\n\nNo model was reachable at start-up. Check `/readyz`."
    passage = Passage("t#0", "Troubleshooting", text, 0.5)
    answer, _, _ = compose_answer("What happens when no model is reachable?", [passage])
    assert answer.startswith("**The answers come from the extractive provider.** No model was reachable"), answer
    assert fragments(answer) == [] and repeated_sentences(answer) == []


REBUILD_OPENING = """### Synopsis

```bash
npm rebuild [<package-spec>] ...]
```

### Description

This command does the following:

1. Execute lifecycle scripts (`preinstall`, `install`, `postinstall`, `prepare`)
2. Links bins depending on whether bin links are enabled"""
REBUILD_LATER = """Usually, you should not need to run `npm rebuild` as it is already done for you as part of
npm install (unless you suppressed these steps with `--ignore-scripts`)."""
REBUILD_OPTION = """#### `ignore-scripts`

If true, npm does not run scripts specified in package.json files. Commands that run a script,
such as `npm rebuild`, still run their scripts."""


def test_what_a_named_page_does_is_its_opening_with_what_it_introduces() -> None:
    # "npm rebuild run" is said in full by later sentences; the question asks what the
    # page is about, which its description says first (and the list it introduces).
    passages = [
        Passage("rebuild#1", "npm-rebuild", REBUILD_LATER, 0.8),
        Passage("rebuild#4", "npm-rebuild", REBUILD_OPTION, 0.7),
        Passage("rebuild#0", "npm-rebuild", REBUILD_OPENING, 0.58, "Rebuild a package"),
    ]
    answer, sources, _ = compose_answer("What does npm rebuild run?", passages)
    # "This command …" comes after what names the command: the page's summary.
    assert answer.startswith("Rebuild a package. [rebuild#0]\n\nThis command does the following:"), answer
    assert "1. Execute lifecycle scripts" in answer and sources[0] == "rebuild#0"
    assert repeated_sentences(answer) == [] and fragments(answer) == []


STOP_OPENING = """### Synopsis

```bash
npm stop [-- <args>]
```

### Description

This runs a predefined command specified in the "stop" property of a package's "scripts" object.

Unlike with [npm start](/commands/npm-start), there is no default script that will run if the `"stop"`
property is not defined."""


def test_a_named_page_asked_one_thing_answers_with_what_says_it() -> None:
    # The question names npm-stop but asks about a case its opening does not cover.
    answer, _, _ = compose_answer(
        "What happens with npm stop when no stop script is defined?",
        [Passage("stop#0", "npm-stop", STOP_OPENING, 0.8)],
    )
    assert answer.startswith("Unlike with [npm start](/commands/npm-start), there is no default script"), answer


OWNER_OPENING = """### Synopsis

```bash
npm owner add <user> <package-spec>
npm owner rm <user> <package-spec>
```

### Description

Manage ownership of published packages.

* add: Add a new user as a maintainer of a package. This user is enabled to modify metadata.
* rm: Remove a user from the package owner list."""


def test_a_how_to_from_a_page_description_shows_the_command() -> None:
    answer, _, _ = compose_answer(
        "How do I add a maintainer to my package?", [Passage("owner#0", "npm-owner", OWNER_OPENING, 0.7)]
    )
    assert answer.startswith("add: Add a new user as a maintainer of a package."), answer
    assert "```bash\nnpm owner add <user> <package-spec>" in answer
    # A quote that names the command itself needs no synopsis.
    named, _, _ = compose_answer(
        "How do I stop a package?",
        [Passage("stop#0", "npm-stop", STOP_OPENING.replace("This runs", "`npm stop` runs"), 0.7)],
    )
    assert "```" not in named, named


PACK_OPENING = """### Synopsis

```bash
npm pack <package-spec>
```

### Configuration

#### `dry-run`

* Default: false
* Type: Boolean

Indicates that you don't want npm to make any changes and that it should only report what it would have done."""


def test_a_page_summary_answers_when_the_page_says_it_nowhere_else() -> None:
    # npm-pack's first chunk is its synopsis and an option: only its front-matter
    # summary says what it does. The summary is quoted as a sentence with the synopsis,
    # never the option's paragraph as if it were the page's opening.
    passages = [Passage("pack#0", "npm-pack", PACK_OPENING, 0.8, "Create a tarball from a package")]
    answer, sources, _ = compose_answer("How do I create a tarball of my package?", passages)
    assert answer == ("Create a tarball from a package. [pack#0]\n\n```bash\nnpm pack <package-spec>\n```"), answer
    assert sources == ["pack#0"]
    # A page with an opening of its own: the summary leads into it, said once.
    login = (
        "### Synopsis\n\n```bash\nnpm login\n```\n\n### Description\n\nVerify a user in the specified registry, "
        "and save the credentials to the `.npmrc` file."
    )
    answer, _, _ = compose_answer(
        "How do I log in to the registry?",
        [Passage("login#0", "npm-login", login, 0.8, "Login to a registry user account")],
    )
    assert answer.startswith("Login to a registry user account. [login#0]\n\nVerify a user"), answer
    assert "```bash\nnpm login\n```" in answer and repeated_sentences(answer) == [] and fragments(answer) == []


def test_the_provider_reads_a_page_summary_from_the_chunk_metadata() -> None:
    import orjson

    from llm.extractive_results import passages_of
    from llm.types import ToolResult

    chunk = {
        "source_id": "pack#0",
        "title": "npm-pack",
        "text": PACK_OPENING,
        "score": 0.8,
        "metadata": {"format": "markdown", "description": "Create a tarball from a package"},
    }
    record = {**chunk, "source_id": "inv#0", "metadata": {"format": "json", "description": "Tarball crate"}}
    result = ToolResult("call_1", "knowledge_base_search", orjson.dumps({"chunks": [chunk, record]}).decode())
    assert [p.summary for p in passages_of(result)] == ["Create a tarball from a package", ""]


TOOLS = """# The RAG tools and their parameters

## knowledge_base_search

`knowledge_base_search(query, kb_id="default_kb", top_k=5)` searches the internal knowledge base.

## perplexity_search

`perplexity_search(query, context?)` searches external sources. Use it only when the knowledge base results are
insufficient. It returns an answer, citations and an id for the stored result."""
TROUBLE = """## Perplexity errors

Without `PERPLEXITY_API_KEY`, or when Perplexity returns 429, times out or fails, `perplexity_search` returns a tool
error and the model answers from the knowledge base alone."""


def test_a_section_the_question_names_answers_with_what_it_says_first() -> None:
    passages = [
        Passage("trouble#2", "Troubleshooting", TROUBLE, 0.66),
        Passage("tools#0", "The RAG tools", TOOLS, 0.54),
    ]
    answer, sources, _ = compose_answer("When should perplexity_search be used?", passages)
    assert answer.startswith("`perplexity_search(query, context?)` searches external sources. Use it only when"), answer
    assert sources[0] == "tools#0"


EVENTS = """## The events

| event | data | when |
| --- | --- | --- |
| `run_started` | `{run_id, conversation_id}` | always first |
| `content_chunk` | `{chunk}` | streamed assistant text |
| `message_complete` | `{status, run_id, conversation_id, turns, usage}` | always last, exactly once |"""


def test_one_row_of_a_table_answers_under_its_header() -> None:
    answer, _, _ = compose_answer(
        "Which event is always the last one of a run?", [Passage("sse#1", "SSE events and their order", EVENTS, 0.6)]
    )
    assert answer.startswith("| event | data | when |\n| --- | --- | --- |\n| `message_complete` |"), answer
    assert "run_started" not in answer
    # A question asking for several things still gets the whole table.
    every, _, _ = compose_answer("Which events does a run stream?", [Passage("sse#1", "SSE events", EVENTS, 0.6)])
    assert "`run_started`" in every and "`message_complete`" in every


RESTART = """### Description

This restarts a project.

If the current project has a `"restart"` script specified in `package.json`, then the following scripts will be run:

1. prerestart
2. restart
3. postrestart

If it does _not_ have a `"restart"` script specified, but it does have `stop` and/or `start` scripts, then the
following scripts will be run:

1. prerestart
2. prestop
3. stop"""


def test_a_question_about_a_negated_case_is_answered_by_that_case() -> None:
    passages = [Passage("restart#0", "npm-restart", RESTART, 0.8)]
    answer, _, _ = compose_answer("Which scripts run for npm restart when there is no restart script?", passages)
    assert answer.startswith("If it does _not_ have a"), answer
    assert "2. prestop" in answer and "2. restart" not in answer
    positive, _, _ = compose_answer("Which scripts run for npm restart when there is a restart script?", passages)
    assert positive.startswith("If the current project has"), positive


LL = """### Synopsis

```bash
npm ll [[<@scope>/]<pkg> ...]
```

### Description

List installed packages

### Configuration

#### `all`

* Default: false
* Type: Boolean

Show or act on all packages. For `npm outdated` and `npm ls` this lists every outdated or installed package."""
LS = """### Synopsis

```bash
npm ls <package-spec>
```

### Description

This command will print to stdout all the versions of packages that are installed, in a tree structure."""


def test_an_alias_page_gives_way_to_the_page_that_explains_it() -> None:
    # npm-ll and npm-ls share their summary; npm-ll's description only repeats it, so
    # its option paragraph (which mentions installed packages) is not the answer.
    passages = [
        Passage("ll#0", "npm-ll", LL, 0.8, "List installed packages"),
        Passage("ls#0", "npm-ls", LS, 0.4, "List installed packages"),
    ]
    answer, sources, _ = compose_answer("How do I list the installed packages?", passages)
    assert sources == ["ls#0"], answer
    assert "all the versions of packages that are installed" in answer and "```bash\nnpm ls" in answer
    assert repeated_sentences(answer) == [] and fragments(answer) == []
    # Alone (no page explains it), the alias page still answers.
    answer, sources, _ = compose_answer("How do I list the installed packages?", passages[:1])
    assert sources == ["ll#0"], answer
    # Two pages that each say more than their shared summary are both kept.
    other = Passage(
        "other#0", "npm-other", LS.replace("This command will print", "It prints"), 0.9, "List installed packages"
    )
    _, sources, _ = compose_answer("How do I list the installed packages?", [other, passages[1]])
    assert sources[0] == "other#0"


def test_a_who_question_is_answered_by_the_party() -> None:
    text = """## Durable runs

- `POST /v1/agent/runs` starts a run and returns `{run_id, conversation_id, stream_url}`. The `stream_url`
  carries a signed token so a browser can read it.
- `GET /v1/agent/conversations/{id}` returns the messages of a conversation to its owner only."""
    answer, _, _ = compose_answer(
        "Who may read the messages of a conversation?", [Passage("api#1", "HTTP API", text, 0.5)]
    )
    assert answer.startswith(
        "`GET /v1/agent/conversations/{id}` returns the messages of a conversation to its owner only."
    ), answer


CHUNKING = """## Chunking

Documents are split along their headings and paragraphs into chunks of about 800 characters, with the last
whole sentences of a chunk repeated at the start of the next one."""
FILTERS = """## Corpus tools

- `get_document_metadata(doc_id)`: all metadata of one document.

`filters` is one small language with the operators `=`, `!=`, `>`, `in`, `nin` and `like`. Both search tools
re-rank their candidates to `top_k`, with at most 3 chunks per document."""


def test_how_many_things_is_answered_by_a_number_of_them() -> None:
    # "800 characters" is an amount too, but "how many chunks" counts chunks.
    passages = [
        Passage("kb#1", "How the knowledge base stores and searches documents", CHUNKING, 0.63),
        Passage("tools#3", "The RAG tools", FILTERS, 0.39),
    ]
    answer, sources, _ = compose_answer("How many chunks of one document can a search return?", passages)
    assert sources[0] == "tools#3" and "3 chunks per document" in answer, answer


def test_which_things_is_answered_by_the_sentence_listing_them() -> None:
    npm = Passage(
        "search#1",
        "npm-search",
        "Additionally, you can add both of these to your config to change default search filtering behavior.",
        0.69,
    )
    answer, sources, _ = compose_answer(
        "Which operators can a search filter use?", [npm, Passage("tools#3", "The RAG tools", FILTERS, 0.52)]
    )
    assert sources[0] == "tools#3" and "`nin`" in answer, answer


def test_a_page_named_by_a_title_word_does_not_define_what_it_never_says() -> None:
    # npm's "Folders" page is named by "folder", but says nothing of a backend.
    folders = Passage("folders#0", "Folders", "# Folders\n\nFolder structures used by npm", 0.21)
    overview = Passage(
        "overview#1",
        "What the service is",
        "## Main parts\n\nThe agenttools folder holds the tool "
        "catalog. The backend folder holds a reference implementation of the REST API for demos.",
        0.31,
    )
    answer, sources, _ = compose_answer("What is in the backend folder?", [folders, overview])
    assert sources[0] == "overview#1" and "reference implementation" in answer, answer


def test_a_preposition_after_a_noun_is_no_phrasal_verb() -> None:
    # "password on the registry" is the password wherever the text says it; "log in"
    # after "I" stays a phrasal verb (the text's "logs" alone is another word).
    profile = (
        "* `npm profile set password`: Change your password.\n"
        "This is interactive, you'll be prompted for your current password and a new password."
    )
    login = '#### `registry`\n\n* Default: "https://registry.npmjs.org/"\n* Type: URL\n\nThe base URL of the registry.'
    passages = [Passage("login#1", "npm-login", login, 0.68), Passage("profile#1", "npm-profile", profile, 0.41)]
    answer, sources, _ = compose_answer("How do I change my password on the registry?", passages)
    assert sources[0] == "profile#1" and "`npm profile set password`" in answer, answer
    from llm.extractive_question import Question

    assert Question.of("How do I change my password on the registry?").phrasal == {}
    assert Question.of("How do I log in to the registry?").phrasal == {"log": "in"}


def test_a_name_the_question_writes_counts_more_than_its_other_words() -> None:
    passages = [
        Passage(
            "flow#3",
            "The mandatory RAG flow",
            "## When Perplexity fails\n\nIf Perplexity times out or returns a server error, the tool returns "
            "an error the model can read.",
            0.9,
        ),
        Passage(
            "api#2",
            "HTTP API and routes",
            "## Operations\n\n- `GET /healthz`: liveness.\n- `GET /metrics`: Prometheus text format.",
            0.5,
        ),
    ]
    answer, sources, _ = compose_answer("What does the /metrics endpoint return?", passages)
    assert answer.startswith("`GET /metrics`: Prometheus text format.") and sources[0] == "api#2"


def test_a_subcommand_item_shows_the_synopsis_line_that_runs_it() -> None:
    opening = (
        "### Synopsis\n\n```bash\nnpm cache add <package-spec>\nnpm cache clean [<key>]\nnpm cache verify\n```\n\n"
        "### Description\n\nUsed to add, list, or clean the `npm cache` folder."
    )
    details = (
        "### Details\n\n* clean: Delete a single entry or all entries out of the cache folder.\n"
        "* verify: Verify the contents of the cache folder, garbage collecting any unneeded data, and "
        "verifying the integrity of the cache index and all cached data."
    )
    passages = [Passage("npm-cache#1", "npm-cache", details, 0.9), Passage("npm-cache#0", "npm-cache", opening, 0.5)]
    answer, _, _ = compose_answer("How do I verify the integrity of the npm cache?", passages)
    assert answer.startswith("verify: Verify the contents of the cache folder")
    assert "```bash\nnpm cache verify\n```" in answer and "npm cache clean" not in answer


def test_a_how_to_from_a_section_shows_the_form_it_opens_with() -> None:
    text = (
        "### Aliases\n\n* `<alias>@npm:<name>`\n\n"
        "Primarily used by commands like `npm install` and in the dependency sections in the `package.json`, "
        "this refers to a package by an alias. The `<alias>` is the name of the package as it is reified in "
        "the `node_modules` folder."
    )
    passages = [Passage("package-spec#1", "Package spec", text, 0.9)]
    answer, _, _ = compose_answer("How do I refer to a package by an alias in package.json?", passages)
    assert answer.startswith("Primarily used by commands like")
    assert answer.rstrip().endswith("* `<alias>@npm:<name>`")
    assert fragments(answer) == []


def test_a_quote_never_ends_on_an_introduction_without_its_list() -> None:
    text = (
        "# npm-trust\n\n### Synopsis\n\nNote: This command is unaware of workspaces.\n\n### Prerequisites\n\n"
        "Before using npm trust commands, ensure the following requirements are met:"
    )
    passages = [
        Passage(
            "npm-trust#0",
            "npm-trust",
            text,
            0.9,
            "Manage trusted publishing relationships between packages and CI/CD providers",
        )
    ]
    answer, _, _ = compose_answer("What does npm trust do?", passages)
    assert "Manage trusted publishing relationships" in answer
    assert "requirements are met:" not in answer


NPX_LATER = """This resulted in some shifts in its functionality:

- Any `npm` config value may be provided.
- The `--npm` option is removed. `npx` will always use the `npm` it ships with."""

CONFIG_OPTION = """The location of user-level configuration settings.

This may be overridden by the `npm_config_userconfig` environment variable or the `--userconfig` command line
option, but may _not_ be overridden by settings in the `globalconfig` file."""


def test_a_quote_never_opens_with_a_sentence_referring_to_text_not_shown() -> None:
    # The chunk opens with "This resulted in …": what "this" is sits in the chunk before.
    # The list is quoted alone rather than after a sentence the reader cannot place.
    answer, _, _ = compose_answer("Which options does npx remove?", [Passage("npx#8", "npx", NPX_LATER, 0.6)])
    assert "--npm" in answer and "This resulted" not in answer, answer
    assert dangling_openings(answer) == [], answer
    # The paragraph before is in the chunk: it comes first, so "this" has its referent.
    answer, _, _ = compose_answer(
        "What can override the userconfig environment variable?", [Passage("config#94", "config", CONFIG_OPTION, 0.6)]
    )
    assert answer.startswith("The location of user-level configuration settings. [config#94]\n\nThis may be"), answer
    assert dangling_openings(answer) == [] and fragments(answer) == []


FILTERS_LANGUAGE = (
    "- `get_document_metadata(doc_id)`: all metadata of one document.\n\n`filters` is one small language: "
    "`{field: value}` or `{field: {op: value}}` with the operators `=`, `!=`, `>`, `>=`, `<`, `<=`, `in`, "
    "`nin` and `like`, combined with `$and` and `$or`. Fields are checked against the bucket's schema."
)
NO_MODEL = (
    "# Troubleshooting\n\n## The answers come from the extractive provider\n\nNo model was reachable at "
    "start-up. Check `/readyz`: it names the provider in use. Start Ollama (`OLLAMA_HOST`) or set "
    "`GEMINI_API_KEY`, or pin a provider with `AGENT_LLM_PROVIDER`.\n\n## The run ends with error code "
    "mandatory_tool_missing\n\nThe model did not call `knowledge_base_search` first or did not end with "
    "`generate_response`, even after the enforcement prompt and one retry. Use a model with reliable tool "
    "calling, or check that the tools were offered (see the `tool_selection` event)."
)
MODEL_PER_CONTEXT = (
    "## Using the agent from an OpenAI SDK\n\nOpen WebUI, LibreChat or any OpenAI SDK (the OpenAI Python SDK "
    "too) can use the agent as a model through `POST /v1/chat/completions`: set the base URL to "
    "`http://<host>:8000/v1` and send the API key as usual (a JWT with `AGENT_AUTH=jwt`, any value with `none`). "
    "`GET /v1/models` lists one model per UI context: `agentchat-workflow`, `agentchat-tables` and "
    "`agentchat-knowledge`; the model picks the context."
)


def test_which_language_models_is_not_answered_by_another_language() -> None:
    """The sample KB's answer to "Which language models can I use?" opened with the search
    tools' ``filters`` ("one small language: … with the operators …"): "language" was the
    question's rarest word among the passages, and that sentence its only one saying it -
    in another sense, without the models it qualifies."""
    passages = [
        Passage("agentchat-tools#3", "The RAG tools and their parameters", FILTERS_LANGUAGE, 0.48),
        Passage("agentchat-compatible-faces#1", "OpenAI-compatible API and the Vercel AI SDK", MODEL_PER_CONTEXT, 0.43),
        Passage("agentchat-troubleshooting#0", "Troubleshooting", NO_MODEL, 0.39),
    ]
    answer, sources, _ = compose_answer("Which language models can I use?", passages)
    assert "filters" not in answer and "agentchat-tools#3" not in sources, answer
    assert answer.startswith("**The answers come from the extractive provider.** No model was reachable"), answer


def test_the_word_before_the_focus_counts_where_a_passage_says_it_with_the_focus() -> None:
    """Only passages that say the focus but never beside that word make it another sense:
    "typed fields" keeps "field" of "which field types …", and with no passage saying
    "formats" the files of "which file formats …" still count."""
    from llm.extractive_question import Question

    language = Question.of("Which language models can I use?")
    alone = language.modifier_alone_in([FILTERS_LANGUAGE, NO_MODEL])
    assert alone.modifier_alone and not language.words.stems("language") & alone.terms(FILTERS_LANGUAGE)
    field_types = Question.of("Which field types can a bucket declare?")
    typed = "A bucket may declare typed fields (TEXT, INTEGER, REAL, DATE, BOOLEAN)."
    assert not field_types.modifier_alone_in([typed, "An unknown field is a tool error."]).modifier_alone
    formats = Question.of("Which file formats does agentchat ingest accept?")
    assert not formats.modifier_alone_in(["It reads Markdown, text and HTML files."]).modifier_alone


SUPPORTED_MODELS = (
    "## Supported models\n\nThe supported LLM providers, and so the models you can use, are Gemini, any model "
    "Ollama serves on your own machine, any OpenAI-compatible server (OpenAI itself, vLLM, LM Studio, llama.cpp's "
    "server or OpenRouter) and the offline `extractive` provider, which needs no model at all. "
    "`AGENT_LLM_PROVIDER` chooses among them; with `auto`, the default, the service takes the first one "
    "configured and reachable."
)


def test_what_models_asks_for_several_as_which_models_does() -> None:
    """"What models can I use?" is "Which models can I use?" in other words, and is answered
    alike: the sentence naming the models and listing them. It was read as a question
    about one thing, and every passage saying "model" answered it as well, so the sample
    KB's answer opened with the troubleshooting page's "No model was reachable at
    start-up" (the search's second passage) over the overview's supported models."""
    passages = [
        Passage("agentchat-compatible-faces#1", "OpenAI-compatible API and the Vercel AI SDK", MODEL_PER_CONTEXT, 0.8),
        Passage("agentchat-troubleshooting#0", "Troubleshooting", NO_MODEL, 0.7167),
        Passage("agentchat-overview#4", "What the agent chat service is", SUPPORTED_MODELS, 0.6891),
    ]
    for question in ("What models can I use?", "Which models can I use?"):
        answer, sources, _ = compose_answer(question, passages)
        assert answer.startswith("The supported LLM providers, and so the models you can use, are Gemini"), answer
        assert sources[0] == "agentchat-overview#4", sources


def test_what_with_a_plural_before_an_auxiliary_has_a_focus() -> None:
    """"What <things> do / are / can …" asks for several of them, as "which <things>"
    does; "what does …", "what is …" and "what happens …" name no things asked for."""
    from llm.extractive_question import Question

    assert Question.of("What models can I use?").focus == "model"
    assert Question.of("What events are sent after a tool call?").focus == "event"
    assert Question.of("What models can I use?").enumeration
    for question in ("What does npm dedupe do?", "What is this service?", "What happens when a run fails?"):
        assert Question.of(question).focus is None, question
