"""``agentchat ingest`` from its own process beside a serving ``agentchat serve`` on one
SQLite file (``storage.sqlite.group_gap``), with real processes.

The command writes without the server's writer lock, so the two meet only at SQLite's
own write lock. It wrote its parts back to back, and the server's writer - waiting in
SQLite's busy handler, polling in steps up to 100 ms - seldom found the file free
between two of them: no run event committed for most of the ingest, and every live
stream stalled 5-12.5 s (``bench/kb_write_stall.py``, ``cli``). Now the command leaves
the file free after each part until the server's writer has committed (or a bounded
gap passed), so a paced run's events are stored between the command's parts.

Watched from the file itself, by a read-only connection (WAL: a reader never blocks a
writer): the documents the command has committed, and the live log's sequence (every
run event stored takes the next id). Between two of the command's parts the server
stored events - or it did not.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sqlite3
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.fakes.paced_ollama import run_body
from tests.support.deadline import reap
from tests.support.procs import REPO, AgentServer, Trace, client, follow, start_run, tool_stack, until

pytestmark = pytest.mark.slow  # real server and command processes on one file

#: 800 files of ~4 KiB: ~5 chunks each, ~4,000 chunks, parts of 500 (``CHUNKS_PER_WRITE``).
FILES = 800
FILE_WORDS = 600


def _write_files(folder: Path) -> None:
    rng = random.Random(7)
    folder.mkdir()
    for i in range(FILES):
        text = " ".join(f"w{rng.randrange(20_000)}" for _ in range(FILE_WORDS))
        (folder / f"d{i}.txt").write_text(text, encoding="utf-8")


def _sample(db: Path) -> tuple[int, int]:
    """(documents stored, the live log's last event id) in one read transaction."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM kb_documents),"
            " (SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = 'run_log')"
        ).fetchone()
        return int(row[0]), int(row[1])
    finally:
        conn.close()


def _parts_with_events(samples: list[tuple[int, int]]) -> tuple[int, int]:
    """(how many of the command's parts, but the first and the last, were followed by
    stored run events before the next part committed; how many such parts there were).

    The samples' document counts step up once a part (each part's documents commit
    together); for each step, the events seen before the next step are compared with
    those seen before this one: the command's gap after a part is what lets them in."""
    last_seq: dict[int, int] = {}
    order: list[int] = []
    for docs, seq in samples:
        if docs not in last_seq:
            order.append(docs)
        last_seq[docs] = max(seq, last_seq.get(docs, 0))
    steps = [d for d in order if d > 0]
    # The first part is judged by none (before it the run streamed freely), the last is
    # followed by no other part (after it the run streams freely again).
    judged = list(itertools.pairwise(steps[:-1]))
    with_events = sum(last_seq[this] > last_seq[before] for before, this in judged)
    return with_events, len(judged)


async def test_a_running_servers_run_keeps_storing_events_between_the_cli_ingests_parts(tmp_path: Path) -> None:
    folder = tmp_path / "files"
    await asyncio.to_thread(_write_files, folder)
    # Model turns of 120 words 25 ms apart, the first streaming on until the command has
    # ended: the run is live through the whole ingest whatever the machine's load. It
    # used to be ~9 s of turns, guessed longer than the command's start and ingest; at
    # load ~9 the command's start alone outlasted them, the run ended before the ingest's
    # third part, and no event could be stored between the later parts (2 of 8).
    async with tool_stack(tmp_path, tokens=120, pause_s=0.025) as stack:
        stack.fake.streaming_until = ingested = asyncio.Event()
        env = stack.agent_env(AGENT_DB_WRITE_RETRY_S="10")  # the default: no failed run as the pass mark
        server = AgentServer(tmp_path, env, name="serve")
        try:
            server.start()
            await server.wait_ready()
            async with client() as http:
                trace = Trace(tag=f"cli-{uuid.uuid4().hex[:6]}")
                status, body = await start_run(http, server.base, run_body(trace.tag))
                assert status == 201, (status, body)
                trace.run_id, trace.stream_url = body["run_id"], body["stream_url"]
                following = asyncio.create_task(follow(http, server.base, trace, deadline_s=120))
                await until(lambda: trace.last_id >= 5, "the run streaming", timeout=60)

                cli = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "app.cli", "ingest", "--quiet", str(folder),
                    env={**server.env, "AGENT_LOG_LEVEL": "WARNING"}, cwd=REPO,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                )  # fmt: skip
                samples: list[tuple[int, int]] = []
                try:
                    deadline = time.monotonic() + 120
                    while cli.returncode is None:
                        assert time.monotonic() < deadline, "agentchat ingest did not end"
                        samples.append(await asyncio.to_thread(_sample, server.db_path))
                        await asyncio.sleep(0.005)
                    assert cli.stdout is not None
                    output = (await cli.stdout.read()).decode(errors="replace")
                finally:
                    code = await reap(cli, "agentchat ingest")
                    ingested.set()  # the run's turn ends now, and the run with it
                assert code == 0, output
                assert f"{FILES} documents added" in output, output
                done = await asyncio.wait_for(following, 120)
            assert samples[-1][0] == FILES, samples[-3:]
            with_events, parts = _parts_with_events(samples)
            assert parts >= 4, samples  # the ingest was written in parts, the run streamed meanwhile
            # The run's events kept being stored between the command's parts: after most
            # of them. A gap is bounded (``group_gap.GAP_S``), so a server starved of CPU
            # misses some on a loaded machine (5 of 8 at load ~8: the suite beside three
            # other jobs). Before the gaps, the server got in after a few of them only
            # (2 of 8 at load 5).
            assert 2 * with_events > parts, (with_events, parts, server.tail())
            assert done.outcome == "complete" and not done.error_codes, (done.outcome, done.error_codes, server.tail())
            assert not server.grep("storage write gave up"), server.tail()
        finally:
            server.close()
