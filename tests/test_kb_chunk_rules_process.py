"""Stored chunks follow a change of the chunking rules (``knowledge.chunking.CHUNK_RULES``),
with real processes: ``agentchat serve`` on a fresh database (SQLite, the default, and
PostgreSQL), ``agentchat ingest`` beside it.

The first start ingests the sample, and ``agentchat ingest`` a user's folder into a
bucket of its own. The database is then made what an older release whose chunker cut
differently would have left (``tests.support.older_chunks``: same files, same stamps and
content hashes, other chunks, no rules version). The offline answerer quotes stored
chunks, and our tests measure those of today's rules, so:

* the next start re-makes the sample's chunks by itself (before the fix it said "already
  there" and kept the older ones);
* the user's documents are not the start's to re-make (their files may be anywhere):
  ``/readyz`` counts them and says how to re-make them, and the next ``agentchat ingest``
  of their folder re-chunks them, though no file changed, and says so.

The embedder is pinned to the hashing one (what the default picks where no model
answers): the older documents are stored with the same one as the server's, so nothing
but their cut differs.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from knowledge.sample import SAMPLE_KB_DIR
from tests.storage.conftest import ENGINES
from tests.support.older_chunks import cut_by_older_rules, stored_chunks, todays_chunks
from tests.support.postgres import TestPostgres
from tests.support.procs import AgentServer, child_env, run_cli
from tests.support.readyz_counts import current
from toolindex.hashing import HashingEmbedder

pytestmark = pytest.mark.slow  # two starts of a real server, each ingesting the sample

MANUAL = "manual"


def user_folder(root: Path) -> Path:
    d = root / "handbook"
    d.mkdir()
    sentences = [f"Step {i} of the ocelot enclosure check is written down in the log book." for i in range(40)]
    paragraphs = [" ".join(sentences[i : i + 4]) for i in range(0, 40, 4)]
    (d / "enclosure.md").write_text("# Enclosure\n\n" + "\n\n".join(paragraphs))
    (d / "feeding.md").write_text("# Feeding\n\n" + " ".join(s.replace("enclosure", "feeding") for s in sentences))
    (d / "notes.txt").write_text("Notes.\n\n" + "\n\n".join(s.replace("Step", "Note") for s in sentences[:20]))
    return d


async def stop(server: AgentServer) -> None:
    server.send(signal.SIGTERM)
    assert await server.wait_exit(60) is not None, server.tail()


async def older_chunking(server: AgentServer) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:  # counted in the background: once they are current
        status, body = await current(lambda: server.readyz(http), lambda answer: answer[1])
    assert status == 200 and body is not None, (status, body)
    return dict(body["checks"]["knowledge"]["older_chunking"])


@pytest.fixture(params=ENGINES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment naming a fresh database of each engine: the default SQLite file in
    the data directory, or a PostgreSQL database of the session's server."""
    if request.param == "sqlite":
        yield {"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")}
        return
    server: TestPostgres = request.getfixturevalue("pg_server")
    with server.database() as url:
        yield {"AGENT_DATABASE_URL": url, "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
               "AGENT_SECRET_KEY": "a-key-for-this-test-0123456789"}  # fmt: skip


async def test_stored_chunks_cut_by_older_rules_are_re_made(tmp_path: Path, database: dict[str, str]) -> None:
    folder = user_folder(tmp_path)
    server = AgentServer(tmp_path, {**database, "AGENT_EMBEDDER": "hashing"})
    target = database.get("AGENT_DATABASE_URL") or database["AGENT_DB_PATH"]
    cli_env = child_env({**database, "AGENT_EMBEDDER": "hashing"})
    sample, manual = todays_chunks(SAMPLE_KB_DIR, "default"), todays_chunks(folder, MANUAL)
    server.start()
    try:
        first = await server.wait_ready(timeout=180)
        assert str(first["checks"]["knowledge"]["sample_kb"]).startswith("ingested"), first
        assert await older_chunking(server) == {"documents": 0}
        await stop(server)
        code, out = await run_cli(["ingest", str(folder), "--bucket", MANUAL, "--quiet"], cli_env)
        assert code == 0 and "3 documents added" in out, out
        assert await stored_chunks(target, "default") == sample
        assert await stored_chunks(target, MANUAL) == manual

        await cut_by_older_rules(target, [(SAMPLE_KB_DIR, "default"), (folder, MANUAL)], HashingEmbedder())
        older_sample, older_manual = await stored_chunks(target, "default"), await stored_chunks(target, MANUAL)
        assert set(older_sample) == set(sample) and older_sample != sample
        assert set(older_manual) == set(manual) and all(older_manual[i] != manual[i] for i in manual)

        server.start()
        again = await server.wait_ready(timeout=180)
        status = str(again["checks"]["knowledge"]["sample_kb"])
        assert status.startswith("ingested") and f"{len(sample)} re-chunked" in status, again
        assert await stored_chunks(target, "default") == sample, "the sample's chunks are still the older rules'"

        waiting = await older_chunking(server)  # the user's documents: counted, and how to re-make them
        assert waiting["documents"] == len(manual), waiting
        assert "agentchat ingest" in waiting["detail"], waiting
        assert await stored_chunks(target, MANUAL) == older_manual  # the start leaves them alone

        code, out = await run_cli(["ingest", str(folder), "--bucket", MANUAL, "--quiet"], cli_env)
        assert code == 0 and f"{len(manual)} updated ({len(manual)} re-chunked" in out, out
        assert await stored_chunks(target, MANUAL) == manual
        assert await older_chunking(server) == {"documents": 0}

        code, out = await run_cli(["ingest", str(folder), "--bucket", MANUAL, "--quiet"], cli_env)
        assert code == 0 and "3 more unchanged, not opened" in out and "re-chunked" not in out, out
    finally:
        await server.kill()
        server.close()
