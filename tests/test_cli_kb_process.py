"""``agentchat ingest|buckets|docs`` as a user runs them: a real process, the default
configuration (only the database file is chosen), output and exit code read as a person
would. A document belongs to its bucket; commands that need no model never contact one;
an ordinary documentation folder (Markdown with its HTML rendering, a ``package.json``)
ingests with exit code 0, its non-documents skipped and counted."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import Response

from tests.fakes.ollama import FakeOllama
from tests.support.deadline import reap, within
from tests.support.procs import REPO, agentchat, child_env
from tests.support.server import serve_app

pytestmark = pytest.mark.slow  # `agentchat` CLI subprocesses


def buckets_table(out: str) -> dict[str, int]:
    """``{bucket: documents}`` from ``agentchat buckets``."""
    rows = {}
    for line in out.splitlines()[:-1]:  # the last names the database
        name, documents = line.split()[:2]
        rows[name] = int(documents.removeprefix("documents="))
    return rows


def folder(root: Path) -> Path:
    d = root / "guide"
    (d / "sub").mkdir(parents=True)
    (d / "install.md").write_text("# Install\n\nRun the installer, then restart the shell.\n")
    (d / "sub" / "upgrade.md").write_text("# Upgrade\n\nUpgrades keep your settings in place.\n")
    return d


async def test_a_second_bucket_gets_copies_and_removing_it_leaves_the_first_alone(tmp_path: Path) -> None:
    env = child_env({"AGENT_DB_PATH": str(tmp_path / "agent.db")})
    d = folder(tmp_path)
    code, out, _ = await agentchat(env, "ingest", str(d), "--quiet")
    assert code == 0 and "2 documents added, 0 updated" in out

    code, out, _ = await agentchat(env, "ingest", str(d), "--bucket", "nodecheck", "--quiet")
    assert code == 0, out
    assert "bucket 'nodecheck': 2 files read, 2 documents added, 0 updated" in out
    code, out, _ = await agentchat(env, "buckets")
    assert code == 0 and buckets_table(out) == {"default": 2, "nodecheck": 2}

    # Re-ingesting the first bucket finds its own documents unchanged: nothing moved.
    code, out, _ = await agentchat(env, "ingest", str(d), "--quiet")
    assert code == 0 and "0 documents added, 0 updated, 2 unchanged, 0 deleted" in out

    code, out, err = await agentchat(env, "buckets", "rm", "nodecheck")
    assert code == 2 and "holds 2 documents" in err and "--yes" in err
    code, out, _ = await agentchat(env, "buckets", "rm", "nodecheck", "--yes")
    assert code == 0
    assert out.splitlines() == [
        "removing bucket 'nodecheck': 2 documents, 2 chunks; other buckets are not touched",
        "removed bucket 'nodecheck' and its 2 documents",
        f"database: SQLite file {tmp_path / 'agent.db'}",
    ]
    code, out, _ = await agentchat(env, "buckets")
    assert code == 0 and buckets_table(out) == {"default": 2}
    code, out, _ = await agentchat(env, "docs", "list")
    assert code == 0 and "guide/install.md" in out and "guide/sub/upgrade.md" in out


async def test_an_explicit_id_is_never_moved_to_another_bucket(tmp_path: Path) -> None:
    env = child_env({"AGENT_DB_PATH": str(tmp_path / "agent.db")})
    d = tmp_path / "notes"
    d.mkdir()
    (d / "pinned.md").write_text("---\nid: pinned-note\n---\n# Pinned\n\nThe pinned note.\n")
    assert (await agentchat(env, "ingest", str(d), "--quiet"))[0] == 0
    code, out, _ = await agentchat(env, "ingest", str(d), "--bucket", "other", "--quiet")
    assert code == 1 and "nothing was stored" in out
    assert "document id 'pinned-note' is taken by a document of bucket 'default'" in out
    code, out, _ = await agentchat(env, "buckets")
    assert buckets_table(out) == {"default": 1}


async def test_commands_without_a_model_never_contact_one(tmp_path: Path) -> None:
    fake = FakeOllama()
    async with serve_app(fake.app) as url:
        env = child_env({"AGENT_DB_PATH": str(tmp_path / "agent.db"), "OLLAMA_HOST": url})
        for i, argv in enumerate((["buckets", "create", "parts", "part:TEXT"], ["buckets"], ["docs", "list"])):
            code, _, err = await agentchat(env, *argv)
            # The first command finds no database and says it creates one (one short line); no
            # command says anything about a model.
            said = [line for line in err.splitlines() if not (i == 0 and "creating a new database" in line)]
            assert code == 0 and said == [] and len(err) < 300, (argv, err)
        assert fake.requests == []

        code, out, err = await agentchat(env, "ingest", str(folder(tmp_path)), "--quiet")
        assert code == 0, out + err
        assert fake.embed_requests  # ingest embeds, so it (and only it) chose an embedder
        lines = err.splitlines()
        assert len(lines) == 1 and "embedder: ollama nomic-embed-text" in lines[0] and len(lines[0]) < 300


async def test_commands_that_only_read_or_remove_create_no_database(tmp_path: Path) -> None:
    """On a machine with no database yet, ``agentchat buckets`` (and every command that only
    lists, removes, prunes or compacts) created an empty file, logging a WARNING about it,
    to list nothing from it: now one line says there is none and how to make one, exit 1."""
    db = tmp_path / "data" / "agent.db"
    env = child_env({"AGENT_DB_PATH": str(db)})
    for argv in (["buckets"], ["docs", "list"], ["docs", "rm", "some-doc"], ["buckets", "rm", "default", "--yes"],
                 ["keywords", "prune", "--min-usage", "1", "--older-than", "1"], ["compact"]):
        code, out, err = await agentchat(env, *argv)
        name = " ".join(argv[:2])  # the command as the line names it
        assert (code, out) == (1, ""), (argv, out, err)
        assert err.splitlines() == [
            f"agentchat {name}: no database yet at {db}; run `make run` (or `agentchat serve`) or "
            "`agentchat ingest` to create it"
        ], (argv, err)
        assert not db.exists() and not db.parent.exists(), argv
    # A command that writes makes it, as before; then the others read it.
    (tmp_path / "a.md").write_text("# A\n\nThe a page.\n")
    code, out, err = await agentchat(env, "ingest", str(tmp_path / "a.md"), "--quiet")
    assert code == 0 and db.exists(), out + err
    code, out, err = await agentchat(env, "buckets")
    assert code == 0 and buckets_table(out) == {"default": 1} and err == "", out + err


async def test_every_command_names_its_database_and_says_when_it_made_one(tmp_path: Path) -> None:
    """``AGENT_DB_PATH`` defaults to the relative ``data/agentchat.sqlite3``: ``agentchat
    ingest`` run in another directory made a new database there, said "1 documents added"
    with exit code 0, and the running server never knew the bucket (a log line the only
    sign). Now the last line of every command names the database by its absolute path,
    says that the path is relative to where the command ran, and that the command created
    the file when it did; a command that only reads creates none, naming where it looked."""
    env = child_env({})  # the default AGENT_DB_PATH
    here, other = tmp_path / "here", tmp_path / "other"
    here.mkdir()
    other.mkdir()
    page = tmp_path / "a.md"
    page.write_text("# A\n\nThe a page.\n")
    db = here.resolve() / "data" / "agentchat.sqlite3"
    relative = f"AGENT_DB_PATH data/agentchat.sqlite3 is relative to the current directory {here.resolve()}"

    code, out, err = await agentchat(env, "ingest", str(page), "--bucket", "mine", "--quiet", cwd=here)
    assert code == 0 and db.exists(), out + err
    assert "1 document added" in out
    assert out.splitlines()[-1] == (
        f"database: created a new SQLite file {db} ({relative}); a server started in another directory "
        "does not see it (set AGENT_DB_PATH to an absolute path)"
    )
    for argv in (["ingest", str(page), "--bucket", "mine", "--quiet"], ["buckets"], ["docs", "list"]):
        code, out, err = await agentchat(env, *argv, cwd=here)
        assert code == 0 and out.splitlines()[-1] == f"database: SQLite file {db} ({relative})", (argv, out, err)

    looked = other.resolve() / "data" / "agentchat.sqlite3"
    for argv in (["buckets"], ["docs", "list"]):
        code, out, err = await agentchat(env, *argv, cwd=other)
        assert (code, out) == (1, ""), (argv, out, err)
        assert err.splitlines() == [
            f"agentchat {' '.join(argv)}: no database yet at {looked} (AGENT_DB_PATH data/agentchat.sqlite3 is "
            f"relative to the current directory {other.resolve()}); run `make run` (or `agentchat serve`) or "
            "`agentchat ingest` to create it"
        ], (argv, err)
    assert list(other.iterdir()) == []

    # An absolute AGENT_DB_PATH: the path, and no note about the directory.
    env = child_env({"AGENT_DB_PATH": str(db)})
    code, out, _ = await agentchat(env, "buckets", cwd=other)
    assert code == 0 and out.splitlines() == [
        "mine                 documents=1        chunks=1        (no typed fields)", f"database: SQLite file {db}"
    ]


async def test_an_ordinary_documentation_folder_ingests_with_exit_0(tmp_path: Path) -> None:
    env = child_env({"AGENT_DB_PATH": str(tmp_path / "agent.db")})
    d = tmp_path / "docs"
    (d / "content").mkdir(parents=True)
    (d / "output").mkdir()
    page = ("Configuring the registry. Set the registry URL with npm config set registry, "
            "then every install and publish uses it. Scoped packages can use their own registry. ")
    (d / "content" / "registry.md").write_text(f"# Registry\n\n{page * 3}\n\nSee [config](../config.md).\n")
    (d / "output" / "registry.html").write_text(
        f"<html><head><title>registry</title></head><body><nav>npm docs</nav>"
        f"<h1>Registry</h1><p>{page * 3}</p><p>See <a href='config.html'>config</a>.</p></body></html>"
    )
    (d / "content" / "scope.md").write_text("# Scope\n\nScoped package names start with an at sign.\n")
    (d / "output" / "scope.html").write_text("<h1>Scope</h1><p>Something else entirely: release notes of 2019.</p>")
    (d / "package.json").write_text('{"name": "docs", "version": "1.0.0", "scripts": {"build": "make"}}')
    (d / "nav.json").write_text('[{"title": "Registry", "url": "/registry"}, {"title": "Scope", "url": "/scope"}]')

    code, out, err = await agentchat(env, "ingest", str(d))
    assert code == 0, out + err
    assert "bucket 'default': 3 files read, 3 documents added" in out
    assert "skipped 3 files:" in out
    assert "1  same page as a Markdown file (the .md is kept)" in out
    assert "2  JSON without document records (no text, content or body field)" in out
    assert "rejected" not in out
    last = err.splitlines()[-1]  # progress on stderr, as plain lines
    assert last.startswith("ingest: 5/5 files (100%)") and re.search(r"; chunks: 3/3 embedded( \(\d+/s\))?, 3 stored$",
                                                                      last), err

    code, out, _ = await agentchat(env, "docs", "list")
    listed = out.splitlines()[:-1]  # the last names the database
    assert code == 0 and len(listed) == 3
    assert any("docs/content/registry.md" in line for line in listed)
    assert not any("docs/output/registry.html" in line for line in listed)
    assert any("docs/output/scope.html" in line for line in listed)  # same name, other text: kept


class HoldsTheDocuments(FakeOllama):
    """Ollama whose embedding of a text containing ``HOLD`` waits until released (the
    embedder's probe goes through): ``ingest`` is then surely mid-way through its files."""

    HOLD = b"held-for-the-signal"

    def __init__(self) -> None:
        super().__init__()
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def _embed(self, request: Request) -> Response:
        if self.HOLD in await request.body():
            self.holding.set()
            await self.release.wait()
        return await super()._embed(request)


async def test_sigterm_ends_an_ingest_as_ctrl_c_does(tmp_path: Path) -> None:
    """SIGTERM (a container's stop, ``timeout``) mid-ingest: one line on what stands,
    ``terminated``, exit 143, no traceback - it used to die at once without a word
    (-15). The same command again stores the rest."""
    fake = HoldsTheDocuments()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "fjord.md").write_text(f"# Fjords\n\nA fjord is a long narrow inlet ({fake.HOLD.decode()}).\n")
    async with serve_app(fake.app) as url:
        env = child_env({"AGENT_DB_PATH": str(tmp_path / "agent.db"), "OLLAMA_HOST": url})
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app.cli", "ingest", str(docs), "--quiet", cwd=REPO, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            await within(fake.holding.wait(), "ingest embedding the document", 120)
            proc.send_signal(signal.SIGTERM)
            _, err = await within(proc.communicate(), "agentchat ingest after SIGTERM", 60)
        finally:
            fake.release.set()
            await reap(proc, "agentchat", grace=5)
        text = err.decode()
        assert proc.returncode == 143, text
        assert "Traceback" not in text and "CancelledError" not in text, text
        assert "the documents stored before the interruption stay" in text, text
        assert text.splitlines()[-1] == "agentchat ingest: terminated (SIGTERM)", text
        code, out_again, err_again = await agentchat(env, "ingest", str(docs), "--quiet")
        assert code == 0 and "1 document added" in out_again, out_again + err_again


async def test_the_progress_counts_chunks_as_they_are_embedded(tmp_path: Path) -> None:
    """A log file's progress line while a batch is embedded said ``0 chunks, 0 chunks/s``
    (~100 s of them for node's docs): the counter moved only when the batch was stored.
    Here the embedder holds one request of the batch: the line says how many chunks are
    embedded already, and that none is stored yet; then the end, all of both."""
    import re

    fake = HoldsTheDocuments()
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(80):  # more than one request's 64 texts; the held one is the last file's
        held = f" ({fake.HOLD.decode()})" if i == 79 else ""
        (docs / f"note{i:02d}.md").write_text(f"# Note {i}\n\nThe note about the item {i}{held}.\n")
    async with serve_app(fake.app) as url:
        env = child_env({"AGENT_DB_PATH": str(tmp_path / "agent.db"), "OLLAMA_HOST": url})
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app.cli", "ingest", str(docs), cwd=REPO, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        lines: list[str] = []
        try:
            await within(fake.holding.wait(), "ingest embedding the batch", 120)

            async def a_line_while_held() -> str:
                assert proc.stderr is not None
                while line := (await proc.stderr.readline()).decode():
                    lines.append(line)
                    if "embedded" in line:
                        return line
                raise AssertionError("".join(lines))

            held_line = await within(a_line_while_held(), "a progress line while the request is held", 60)
            fake.release.set()
            out, rest = await within(proc.communicate(), "agentchat ingest", 120)
        finally:
            fake.release.set()
            await reap(proc, "agentchat", grace=5)
        assert proc.returncode == 0, "".join(lines) + rest.decode()
        counted = re.search(r"; chunks: (\d+)/(\d+) embedded( \(\d+/s\))?, 0 stored", held_line)
        assert counted is not None, held_line
        assert 0 < int(counted[1]) < int(counted[2]), held_line
        assert held_line.startswith("ingest: 80/80 files (100%)") and " 0 chunks" not in held_line, held_line
        last = rest.decode().splitlines()[-1]
        assert re.search(r"; chunks: (\d+)/\1 embedded( \(\d+/s\))?, \1 stored$", last), last
        assert "80 documents added" in out.decode()


async def test_output_piped_into_a_reader_that_stops_ends_quietly(tmp_path: Path) -> None:
    """``agentchat docs list | head`` printed two chained ``BrokenPipeError`` tracebacks
    once ``head`` had its lines; a short listing whose reader left before the end said
    ``Exception ignored ... BrokenPipeError`` at exit (code 120). Now either ends as a
    shell tool does: nothing on stderr, exit 141 (128 + SIGPIPE)."""
    env = child_env({"AGENT_DB_PATH": str(tmp_path / "agent.db")})
    pages = tmp_path / "pages"
    pages.mkdir()
    for i in range(150):  # a listing of ~13 KB: written while the command runs, past the pipe's buffer
        (pages / f"page-{i:03}.md").write_text(f"# Page {i}\n\nThe text of page number {i}.\n")
    code, out, err = await agentchat(env, "ingest", str(pages), "--quiet")
    assert code == 0, out + err
    for argv in (["docs", "list", "--limit", "150"], ["buckets"]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first line
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "app.cli", *argv, cwd=REPO, env=env,
                stdout=write_end, stderr=asyncio.subprocess.PIPE,
            )
        finally:
            os.close(write_end)
        try:
            _, err_bytes = await within(proc.communicate(), f"agentchat {' '.join(argv)}", 180)
        finally:
            await reap(proc, "agentchat", grace=5)
        assert (proc.returncode, err_bytes.decode()) == (141, ""), argv
