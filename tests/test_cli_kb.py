"""``agentchat ingest``, ``agentchat docs list|rm`` and ``agentchat buckets [rm]``:
every skipped file counted by reason, rejections in the exit code (``--keep-going``),
symbolic links and the size limit, no empty buckets, progress that is a ``tqdm`` bar on
a terminal and plain lines (no ``\\r``) in a log."""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.ingest_progress import IngestProgress
from app.cli.kb import add_kb_commands, run_kb_command
from app.config import Settings

ROOT = Path(__file__).resolve().parent.parent


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentchat")
    add_kb_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "kb.db"), "AGENT_EMBEDDER": "hashing"})


async def run(tmp_path: Path, *argv: str) -> int:
    return await run_kb_command(parse(*argv), settings(tmp_path))


def said(out: str, tmp_path: Path) -> list[str]:
    """A command's lines before its last, which names the database it worked on."""
    *lines, last = out.splitlines()
    assert last == f"database: SQLite file {tmp_path / 'kb.db'}", out
    return lines


def library(tmp_path: Path) -> Path:
    d = tmp_path / "library"
    (d / "guides").mkdir(parents=True)
    (d / "guides" / "install.md").write_text("# Install\n\nRun the installer with care.\n")
    (d / "faq.txt").write_text("Questions and answers about puffins.\n")
    (d / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(64))
    (d / "noise.md").write_bytes(os.urandom(3000))
    (d / ".cache").mkdir()
    (d / ".cache" / "x.md").write_text("# hidden\n")
    (d / "big.txt").write_text("lots of words " * 100_000)  # 1.3 MB
    outside = tmp_path / "outside.txt"
    outside.write_text("not part of the library\n")
    (d / "link.txt").symlink_to(outside)
    return d


async def test_ingest_reports_every_skip_and_rejection_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = library(tmp_path)
    code = await run(tmp_path, "ingest", str(d), "--bucket", "lib", "--quiet", "--max-file-mb", "1")
    out, err = capsys.readouterr()
    assert code == 1
    assert "bucket 'lib': 3 files read, 2 documents added" in out
    assert "skipped 4 files:" in out
    for line in ("1  hidden", "1  symbolic link (not followed; use --follow-links)",
                 "1  unsupported file type .png", "1  larger than the size limit (--max-file-mb)"):
        assert line in out
    assert "rejected 1:" in out and "1  binary" in out and "noise.md: binary content" in out
    assert "warning: 1 file over the 1 MB limit skipped" in out and "big.txt: 1.3 MB" in out
    assert "--keep-going" in err

    # --keep-going: the same result, exit 0; --follow-links reads the link too.
    code = await run(tmp_path, "ingest", str(d), "--bucket", "lib", "--quiet", "--keep-going", "--follow-links",
                     "--max-file-mb", "1")
    out, _ = capsys.readouterr()
    assert code == 0 and "1 document added" in out and "2 unchanged" in out and "symbolic link" not in out


async def test_nothing_ingested_creates_no_bucket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.md").write_bytes(os.urandom(2000))
    (junk / "b.bin").write_bytes(b"x")
    assert await run(tmp_path, "ingest", str(junk), "--bucket", "junk", "--quiet") == 1
    assert "nothing was stored" in capsys.readouterr().out
    assert await run(tmp_path, "buckets") == 0
    assert said(capsys.readouterr().out, tmp_path) == ["no buckets"]
    assert await run(tmp_path, "ingest", str(tmp_path / "missing"), "--quiet") == 2
    assert await run(tmp_path, "ingest", str(junk), "--bucket", "Bad-Name", "--quiet") == 2


async def test_buckets_rm_of_one_document_says_it_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Walking docs/cli.md: ``buckets rm`` of a bucket holding one document said ``holds 1
    documents; add --yes to remove them with it``."""
    guide = tmp_path / "guide.md"
    guide.write_text("# Guide\n\nOne page.\n")
    assert await run(tmp_path, "ingest", str(guide), "--bucket", "one", "--quiet") == 0
    capsys.readouterr()
    assert await run(tmp_path, "buckets", "rm", "one") == 2
    assert capsys.readouterr().err.strip() == (
        "agentchat buckets rm: bucket 'one' holds 1 document; add --yes to remove it with the bucket"
    )
    assert await run(tmp_path, "buckets", "rm", "one", "--yes") == 0
    assert said(capsys.readouterr().out, tmp_path) == [
        "removing bucket 'one': 1 document, 1 chunk; other buckets are not touched",
        "removed bucket 'one' and its 1 document",
    ]


async def test_buckets_rm_of_an_empty_bucket_says_it_held_no_documents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``buckets rm`` of an empty bucket said ``removed bucket 'x' and its 0 documents``
    (and ``removing bucket 'x': 0 documents, 0 chunks`` before it); it asks no --yes."""
    assert await run(tmp_path, "buckets", "create", "empty") == 0
    capsys.readouterr()
    assert await run(tmp_path, "buckets", "rm", "empty") == 0
    assert said(capsys.readouterr().out, tmp_path) == [
        "removing bucket 'empty' (it holds no documents)",
        "removed bucket 'empty' (it held no documents)",
    ]


async def test_docs_list_rm_and_buckets_rm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = library(tmp_path)
    await run(tmp_path, "ingest", str(d), "--bucket", "lib", "--quiet", "--keep-going", "--max-file-mb", "1")
    await run(tmp_path, "ingest", str(d / "guides"), "--bucket", "other", "--quiet")  # a copy; 'lib' keeps its own
    capsys.readouterr()
    assert await run(tmp_path, "docs", "list", "--limit", "1") == 0
    out = said(capsys.readouterr().out, tmp_path)
    first = out[0].split()[0]
    assert out[-1] == f"(more may follow: --after {first})"
    assert await run(tmp_path, "docs", "list", "--after", first) == 0
    rest = "\n".join(said(capsys.readouterr().out, tmp_path))
    assert first.startswith("faq-") and first not in rest
    assert "guides/install.md" in rest and str(tmp_path) not in rest
    assert await run(tmp_path, "docs", "list", "--bucket", "other") == 0
    listed = "\n".join(said(capsys.readouterr().out, tmp_path))
    assert "guides/install.md" in listed and "faq" not in listed
    doc_id = listed.split()[0]

    assert await run(tmp_path, "docs", "rm", doc_id, "nope-123", "lib-nope", "nope-123") == 1
    removal = capsys.readouterr()
    # Which went and which did not: the missing ids named, each once (as ingest lists its rejections).
    assert said(removal.out, tmp_path) == ["removed 1 of 3 documents", "not found 2:", "  nope-123", "  lib-nope"]
    assert removal.err.strip() == "agentchat docs rm: 2 ids not found (listed above); exit code 1"
    assert await run(tmp_path, "docs", "rm", doc_id) == 1  # already gone
    removal = capsys.readouterr()
    assert said(removal.out, tmp_path) == ["removed 0 of 1 document", "not found 1:", f"  {doc_id}"]
    assert removal.err.strip() == "agentchat docs rm: 1 id not found (listed above); exit code 1"
    assert await run(tmp_path, "docs", "list", "--bucket", "other") == 0
    assert said(capsys.readouterr().out, tmp_path) == ["no documents"]

    assert await run(tmp_path, "buckets", "rm", "lib") == 2  # it holds documents: --yes
    assert "add --yes" in capsys.readouterr().err
    assert await run(tmp_path, "buckets", "rm", "lib", "--yes") == 0
    out = said(capsys.readouterr().out, tmp_path)
    assert out == ["removing bucket 'lib': 2 documents, 2 chunks; other buckets are not touched",
                   "removed bucket 'lib' and its 2 documents"]
    assert await run(tmp_path, "buckets", "rm", "lib") == 1
    assert capsys.readouterr().err.strip() == "agentchat buckets rm: unknown bucket 'lib'; available buckets: other"
    # An unknown bucket is not an empty one: the same error, naming those there are.
    assert await run(tmp_path, "docs", "list", "--bucket", "nosuch") == 1
    out, err = capsys.readouterr()
    assert said(out, tmp_path) == [] and err.strip() == "agentchat docs list: unknown bucket 'nosuch'; " \
        "available buckets: other"
    assert await run(tmp_path, "buckets") == 0
    listed_bare = capsys.readouterr().out
    assert listed_bare.split()[0] == "other"
    assert await run(tmp_path, "buckets", "list") == 0  # the spelling `docs list` suggests
    assert capsys.readouterr().out == listed_bare
    assert await run(tmp_path, "buckets", "create", "inv", "amount:real") == 0
    out = said(capsys.readouterr().out, tmp_path)
    assert out[0] == "created bucket 'inv' (amount:REAL); every bucket now:"
    assert [line.split()[0] for line in out[1:]] == ["inv", "other"]


async def test_buckets_create_of_an_existing_bucket_says_it_was_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``buckets create`` of a bucket that exists adds the fields it does not have yet (or
    nothing): it said ``created bucket 'lib'`` all the same, as if it had been made anew."""
    assert await run(tmp_path, "ingest", str(library(tmp_path)), "--bucket", "lib", "--keep-going", "--quiet") == 0
    capsys.readouterr()
    assert await run(tmp_path, "buckets", "create", "lib", "year:integer") == 0
    out = said(capsys.readouterr().out, tmp_path)
    assert out[0] == "bucket 'lib' already exists: added year:INTEGER, read from the metadata of its 3 " \
        "documents where it fits; every bucket now:"
    assert out[1].split()[0] == "lib" and "year:INTEGER" in out[1]
    assert await run(tmp_path, "buckets", "create", "lib", "year:integer") == 0
    out = said(capsys.readouterr().out, tmp_path)
    assert out[0] == "bucket 'lib' already exists with year:INTEGER: nothing changed; every bucket now:"


async def test_docs_rm_of_ids_that_all_exist_counts_them_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pages = tmp_path / "pages"
    pages.mkdir()
    for name in ("one", "two"):
        (pages / f"{name}.md").write_text(f"# {name}\n\nA page.\n")
    assert await run(tmp_path, "ingest", str(pages), "--quiet") == 0
    capsys.readouterr()
    assert await run(tmp_path, "docs", "list") == 0
    ids = [line.split()[0] for line in said(capsys.readouterr().out, tmp_path)]
    assert await run(tmp_path, "docs", "rm", *ids) == 0
    removal = capsys.readouterr()
    assert said(removal.out, tmp_path) == ["removed 2 documents"] and removal.err == ""


def test_progress_is_a_bar_on_a_terminal_and_plain_lines_otherwise() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    class Report:
        chunks = 42

    log = io.StringIO()
    plain = IngestProgress(log, interval_s=0)
    for i in range(1, 4):
        plain(i, 3, f"docs/{i}.md")
    plain.on_batch(Report())
    plain.close()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines[0].startswith("ingest: 1/3 files (33%)") and "files/s" in lines[0] and "ETA" in lines[0]
    assert lines[-1].startswith("ingest: 3/3 files (100%)") and lines[-1].endswith("; chunks: 42 stored")

    tty = Tty()
    bar = IngestProgress(tty)
    for i in range(1, 4):
        bar(i, 3, f"docs/{i}.md")
    bar.on_batch(Report())
    bar.close()
    shown = tty.getvalue()
    assert "\r" in shown and "3/3" in shown and "file/s" in shown and "chunks: 42 stored" in shown


def test_the_eta_waits_until_enough_is_seen_then_is_smoothed() -> None:
    """A plain line shows no ETA until 5 s or 2 % of the files have gone by - the first
    line of a 1,000-file ingestion whose first file took 0.3 s used to say "ETA 5m00s"
    from that one file (a large first file: hours) - then one from a smoothed rate:
    the average so far at first, each later interval weighing 0.3."""
    now = [0.0]
    log = io.StringIO()
    progress = IngestProgress(log, interval_s=0, tty=False, clock=lambda: now[0])
    for t, done in ((0.3, 1), (2.0, 9), (5.0, 10), (10.0, 30)):
        now[0] = t
        progress(done, 1000, f"docs/{done}.md")
    lines = log.getvalue().splitlines()
    assert lines[0] == "ingest: 1/1000 files (0%), 3.3 files/s; chunks: 0 stored"
    assert "ETA" not in lines[1]
    # 5 s in: 10 files at 2 files/s so far, 990 left.
    assert lines[2] == "ingest: 10/1000 files (1%), 2.0 files/s; chunks: 0 stored, ETA 8m15s"
    # The last 5 s went at 4 files/s: 0.3 * 4 + 0.7 * 2 = 2.6 files/s, 970 left.
    assert lines[3].endswith(", ETA 6m13s"), lines[3]

    # 2 % of the files is enough too, however early.
    now[0] = 0.0
    early = IngestProgress(io.StringIO(), interval_s=0, tty=False, clock=lambda: now[0])
    now[0] = 0.5
    early(2, 100, "docs/2.md")
    assert early.stream.getvalue().splitlines()[-1].endswith(", 4.0 files/s; chunks: 0 stored, ETA 24s")


def test_the_eta_stays_sane_while_no_file_finishes() -> None:
    """An ``ingest /usr/share/doc`` with the local embedder stood at 512/965 files while a
    batch was embedded: each 5 s line folded a rate of 0 files/s into the smoothed rate,
    and the ETA grew 1.43 times a line, "ETA 97h33m" to "ETA 174663h07m" in 100 s. Only a
    finished file moves the smoothed rate now (over the time since the last one); while
    none finishes, the ETA is the one that rate would give if a file finished now."""
    now = [0.0]
    log = io.StringIO()
    progress = IngestProgress(log, interval_s=0, tty=False, clock=lambda: now[0])
    for k in range(1, 6):  # 1 file/s for 500 s
        now[0] = 100.0 * k
        progress(100 * k, 1000, f"docs/{100 * k}.md")
    assert log.getvalue().splitlines()[-1].endswith(", ETA 8m20s")  # 500 left at 1/s
    for t in range(505, 655, 5):  # then 150 s without a finished file, a line every 5 s
        now[0] = float(t)
        progress.tick()
    stalled = log.getvalue().splitlines()[5:]
    assert len(stalled) == 30
    # 0.3 * (1 file / 150 s) + 0.7 * 1 file/s = 0.702 files/s, 500 left.
    assert stalled[-1].endswith(", ETA 11m52s"), stalled[-1]
    assert all(re.search(r"ETA ([0-9]+m[0-9]{2}s)$", line) for line in stalled), stalled
    # The reading resumes: 100 files in the 160 s since the last one.
    now[0] = 660.0
    progress(600, 1000, "docs/600.md")
    assert log.getvalue().splitlines()[-1].endswith(", ETA 7m31s")  # 0.3 * 0.625 + 0.7 * 1, 400 left

async def test_progress_ticks_through_a_quiet_stretch() -> None:
    """No file finished and no batch written for a while (one slow embedding call): the
    ticker still writes a line every interval, saying what is going on."""
    import asyncio

    log = io.StringIO()
    progress = IngestProgress(log, interval_s=0.01)
    progress.on_stage("embed", 64, 900)
    progress(3, 3, "embedding 64/900 chunks")
    ticker = asyncio.create_task(progress.ticking())
    try:
        async with asyncio.timeout(30):
            while len(log.getvalue().splitlines()) < 3:
                await asyncio.sleep(0.01)
    finally:
        ticker.cancel()
    lines = log.getvalue().splitlines()
    assert all(line.startswith("ingest: 3/3 files (100%)") for line in lines)
    assert lines[-1].endswith("; chunks: 64/900 embedded, 0 stored") and "ETA" not in lines[-1]


def test_agentchat_ingest_in_a_log_file_has_no_carriage_returns(tmp_path: Path) -> None:
    d = library(tmp_path)
    env = {**os.environ, "AGENT_DB_PATH": str(tmp_path / "kb.db"), "AGENT_EMBEDDER": "hashing"}
    with open(tmp_path / "ingest.log", "wb") as logfile:
        argv = [sys.executable, "-m", "app.cli", "ingest", str(d), "--bucket", "lib", "--max-file-mb", "1"]
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=logfile, timeout=120)
    log = (tmp_path / "ingest.log").read_bytes()
    assert proc.returncode == 1, log
    assert b"\r" not in log and b"ingest: 3/3 files (100%)" in log
    assert b"skipped 4 files" in proc.stdout and b"rejected 1" in proc.stdout


def test_the_parser_loads_no_knowledge_base_and_keeps_its_size_limit() -> None:
    """Every command builds the KB commands' parser (``serve --workers``' supervisor too):
    it names the ingest's size limit itself, equal to the knowledge base's, so building it
    imports nothing of ``knowledge`` (the whole KB with numpy)."""
    import subprocess
    import sys

    from app.cli import kb
    from knowledge.filecheck import DEFAULT_MAX_FILE_MB
    from tests.support.procs import REPO, child_env

    assert kb.DEFAULT_MAX_FILE_MB == DEFAULT_MAX_FILE_MB
    code = (
        "import argparse, sys; from app.cli.kb import add_kb_commands; "
        "add_kb_commands(argparse.ArgumentParser().add_subparsers()); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('knowledge', 'numpy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=child_env({}), capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout


def test_a_postgresql_database_is_named_without_its_password() -> None:
    from app.cli.database import cli_database

    url = "postgresql://bob:s3cret-Passw0rd@127.0.0.1:5432/agent"
    where = cli_database(Settings.from_env({"AGENT_DATABASE_URL": url, "AGENT_SECRET_KEY": "k" * 40}))
    assert where.line() == "database: PostgreSQL postgresql://bob@127.0.0.1:5432/agent" and not where.created


async def test_ingest_into_a_bucket_chats_do_not_search_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A walkthrough ingested npm's docs with ``--bucket npmdocs`` and asked about them: the
    answer was 'I could not find an answer', since chats search AGENT_KB_DEFAULT_BUCKETS
    (``default``) unless they name a bucket, and the ingest's report said nothing of it."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Walrus\n\nThe walrus kiosk is on floor nine.\n")

    async def ingest(bucket: str, defaults: str | None = None) -> list[str]:
        env = {"AGENT_DB_PATH": str(tmp_path / "kb.db"), "AGENT_EMBEDDER": "hashing"}
        if defaults is not None:
            env["AGENT_KB_DEFAULT_BUCKETS"] = defaults
        code = await run_kb_command(parse("ingest", str(tmp_path / "docs"), "--bucket", bucket, "--quiet"),
                                    Settings.from_env(env))
        assert code == 0
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]

    assert await ingest("npmdocs") == [
        "note: chats search bucket 'npmdocs' only when they name it (context.buckets): AGENT_KB_DEFAULT_BUCKETS "
        "is 'default' here; to search it by default, set AGENT_KB_DEFAULT_BUCKETS=default,npmdocs on every replica"
    ]
    assert await ingest("npmdocs") != [], "said again when nothing changed: the bucket is still not searched"
    assert await ingest("npmdocs", "default,npmdocs") == []
    assert await ingest("npmdocs", "*") == []
    assert await ingest("default") == []
