"""The sample knowledge base says what the code does: its answers are what a newcomer
reads first (the offline answerer quotes these pages)."""

from __future__ import annotations

import pytest

from app.config import Settings
from knowledge.attachments import AttachmentRejected, read_attachment
from knowledge.sample import SAMPLE_KB_DIR


def test_the_running_page_gives_autos_provider_order() -> None:
    """``AGENT_LLM_PROVIDER=auto`` tries Gemini (a key), then an OpenAI-compatible server
    (``OPENAI_BASE_URL`` or ``OPENAI_API_KEY``), then Ollama, then ``extractive``
    (``app/model_choice.py``, docs/configuration.md). The page said "neither Ollama nor
    Gemini reachable" and left the OpenAI-compatible server out."""
    text = (SAMPLE_KB_DIR / "08-running.md").read_text(encoding="utf-8")
    make_run = text.split("## make run", 1)[1].split("\n## ", 1)[0]
    order = ["`GEMINI_API_KEY`", "OpenAI-compatible server", "`OPENAI_BASE_URL`", "Ollama", "`extractive`"]
    places = [make_run.find(word) for word in order]
    assert -1 not in places, dict(zip(order, places, strict=True))
    assert places == sorted(places), dict(zip(order, places, strict=True))


def _section(page: str, heading: str) -> str:
    """The text under ``## heading`` of a sample KB page, up to the next heading."""
    text = (SAMPLE_KB_DIR / page).read_text(encoding="utf-8")
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_the_limits_page_names_the_message_length_limit() -> None:
    """The limits page named the body's bytes, its timeout, the request rate and the runs
    per user, but not ``AGENT_MAX_MESSAGE_CHARS``, so "I want to limit how long a message
    can be. Which setting?" was answered with run errors and MCP settings (round 38). The
    default it gives is the code's, and so is the refusal (``app/server/chat_request.py``).
    It has a section of its own: one more item in "Request limits" made that chunk longer
    and cost it the second place in two answers that quote it ("Is there a rate limit?")."""
    page = (SAMPLE_KB_DIR / "20-limits-and-errors.md").read_text(encoding="utf-8")
    default = Settings.from_env({}).max_message_chars
    said = [line for line in page.splitlines() if "`AGENT_MAX_MESSAGE_CHARS`" in line]
    assert said and f"at most {default:,} characters long (`AGENT_MAX_MESSAGE_CHARS`)" in said[0], said
    # The refusal per face: the native and AI SDK routes' code, and OpenAI's own on its face
    # (``app/server/openai_request.py``).
    assert "400: `invalid_field`" in said[0] and "`string_above_max_length`" in said[0], said


def test_the_search_page_says_how_the_code_fuses_the_two_searches() -> None:
    """The page said the two rankings "are fused with reciprocal rank fusion (k = 60)";
    the search adds min-max normalised scores with a weight per embedder
    (``knowledge/fusion.py``; ``ranking.rrf`` stays only for callers that have ranks), and
    a reader asking how the "hybrid search" works met neither word (round 38). Reciprocal
    rank fusion is named only as what the search does not do (round 48: "What constant
    does the reciprocal rank fusion use?" met no passage saying what it does instead)."""
    search = _section("09-knowledge-base.md", "Search")
    assert "k = 60" not in search and search.count("reciprocal rank fusion") == search.count(
        "(no reciprocal rank fusion)"
    ), search
    assert "hybrid" in search and "min-max normalised" in search, search


def test_the_events_page_names_every_event_the_service_emits() -> None:
    """The events table lacked ``approval_required``, ``run_resumed`` and ``heartbeat``
    (review of e34dee9), though a client meets all three (``events.catalog.EVENT_TYPES``);
    and it said every event has an ``id``, which the heartbeat's frame never carries
    (``app/server/run_streams.py``: it is not part of the run's log)."""
    from app.server.run_streams import heartbeat_frame
    from events.catalog import EVENT_TYPES

    events = _section("03-sse-events.md", "The events")
    rows = [line.split("|")[1].strip().strip("`") for line in events.splitlines() if line.startswith("| `")]
    assert sorted(rows) == sorted(EVENT_TYPES), sorted(set(EVENT_TYPES) ^ set(rows))
    assert b"id:" not in heartbeat_frame()
    heartbeat = next(line for line in events.splitlines() if line.startswith("| `heartbeat`"))
    assert "no `id`" in heartbeat, heartbeat


def test_what_leaves_the_machine_names_every_destination_of_user_text() -> None:
    """The page said questions and their passages go to "the LLM provider, embedder and
    Perplexity": the embedder is sent what it embeds (documents, queries), not passages,
    Perplexity the model's web query, and tool calls also go to the workflow/table
    backend (``agenttools/core/backend_client.py``, ``AGENT_BACKEND_URL``) and to MCP
    servers (``agenttools/mcp/client.py``), which it left out (review of e34dee9)."""
    text = (SAMPLE_KB_DIR / "01-overview.md").read_text(encoding="utf-8")
    section = text.split("## What leaves the machine\n", 1)[1].split("\n## ", 1)[0]
    for destination in ("LLM provider", "embedder", "Perplexity", "`AGENT_BACKEND_URL`", "MCP servers"):
        assert destination in section, destination
    assert "provider, embedder and Perplexity" not in section, section


def test_the_upgrade_advice_orders_postgresql_replicas() -> None:
    """"With several replicas or ``--workers``, upgrade them together" did not say in what
    order; only a process opening the database is refused by ``SchemaTooNew``
    (``storage/migration_runner.py``), so an old PostgreSQL replica left running carries
    on over the schema the first new one migrated (review of e34dee9)."""
    upgrading = _section("08-running.md", "Upgrading to a new release")
    assert "upgrade them together" not in upgrading, upgrading
    assert "stop every replica of the old release before the first new one opens the database" in upgrading, upgrading


def test_the_attachment_page_names_the_415_codes_the_code_gives() -> None:
    """The attachment section said every 415 is ``unsupported_media_type`` (39b0f3c), but
    binary content under a readable file's name is refused by the loader as 415
    ``unreadable_file`` (``knowledge/attachments.py``); only a file type the service does
    not read is ``unsupported_media_type``. The page names each code the code gives."""
    section = _section("19-conversations.md", "Attachment limits")
    elf = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    codes: dict[str, str] = {}
    for name, raw in [("photo.png", png), ("notes.txt", elf)]:
        with pytest.raises(AttachmentRejected) as refused:
            read_attachment(raw, name, None, bucket="b")
        assert refused.value.status == 415, (name, refused.value)
        codes[name] = refused.value.code
    assert codes == {"photo.png": "unsupported_media_type", "notes.txt": "unreadable_file"}
    assert all(f"`{code}`" in section for code in codes.values()), section


def test_the_errors_page_says_a_postgresql_outage_keeps_the_stream() -> None:
    """The page said a database away always ends a run's stream with an id-less
    ``storage_unavailable`` (and a run with an ``error``); since ea0ff56 a run on
    PostgreSQL is let go and carried on once the database is back, and a stream following
    it is kept with heartbeats (``app.runs.remote.RemoteRuns.follow_events``,
    tests/storage/test_postgres_outage_follower_app.py): only on SQLite does it end so.
    The offline answerer quoted the old sentence to "What happens to a running answer if
    the database goes away?"."""
    during = _section("20-limits-and-errors.md", "Errors during a run")
    exception = during.split("The one exception", 1)[1]
    sqlite, postgres = exception.find("On SQLite"), exception.find("On PostgreSQL the stream is kept")
    assert postgres != -1 and sqlite != -1, exception
    assert "without an `id` and ends" in exception[sqlite:], exception
    assert "without an `id` and ends" not in exception[:sqlite], exception
    meaning = _section("20-limits-and-errors.md", "storage_unavailable")
    assert "during a run it ends the run" not in meaning, meaning
    assert "during a run on SQLite it ends the run" in meaning, meaning


def test_the_overview_says_which_models_are_supported() -> None:
    """"Which models are supported?" was answered with `agentchat ingest`'s "reads the
    supported files …" (15-knowledge-cli.md): no other chunk said "supported", so that word
    outweighed "models", which many pages say, and no page said plainly which providers
    can be used (the configuration page lists their variables). The overview says it in a
    section of its own, naming each provider the code has (``app.config.PROVIDERS`` less
    ``auto``, the choice among them). A section at the page's end is a chunk of its own:
    the sentence under the configuration page's "Providers and models" heading moved that
    heading off the chunk of ``AGENT_LLM_PROVIDER`` and lost two answers."""
    from app.config import PROVIDERS

    section = _section("01-overview.md", "Supported models")
    said = {"gemini": "Gemini", "ollama": "Ollama", "openai": "OpenAI-compatible server", "extractive": "`extractive`"}
    assert set(PROVIDERS) - {"auto"} == set(said), PROVIDERS
    assert all(name in section for name in said.values()), section
    assert "supported LLM providers" in section and "`AGENT_LLM_PROVIDER`" in section, section


def test_a_newcomers_plain_questions_meet_plain_sentences_that_say_what_the_code_does() -> None:
    """Round 53 (docs/knowledge-base.md): a newcomer asking the default start how to stop
    the server, whether there is a web UI, how to see the logs, how to stop it searching
    the web, how to update or how to pick another Gemini model met no sentence in those
    words. Each now has one, and each says what the code does: Ctrl-C drains as SIGTERM
    does, for the grace period (``AGENT_SHUTDOWN_GRACE_S``'s default; docs/cli.md), the
    playground is served at ``GET /``, the logs go to stderr, no Perplexity client exists
    without its key (``app/rooms.py``), and ``GEMINI_MODEL``'s default is the code's."""
    defaults = Settings.from_env({})
    stopping = _section("08-running.md", "Stopping the server")
    assert "Ctrl-C" in stopping and "SIGTERM" in stopping, stopping
    assert f"(`AGENT_SHUTDOWN_GRACE_S`, {defaults.shutdown_grace_s:g} s)" in stopping, stopping
    assert "web UI of its own, the playground" in _section("08-running.md", "Trying it")
    assert "writes its logs to stderr, so you see them in the terminal" in _section("08-running.md", "Logs")
    assert "To update to a newer version" in _section("08-running.md", "Upgrading to a new release")
    assert "To stop the service from searching the web, leave `PERPLEXITY_API_KEY` unset" in _section(
        "05-rag-flow.md", "When Perplexity fails"
    )
    providers = _section("04-configuration.md", "Providers and models")
    assert f"`GEMINI_MODEL` picks the Gemini chat model (`{defaults.gemini_model}` by default)" in providers, providers
    listing = _section("19-conversations.md", "Listing your conversations")
    assert "the caller's conversations, their earlier chats" in listing, listing
