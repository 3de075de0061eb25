"""``agentchat migrate-db``: a SQLite database filled by the real app moves into a real
PostgreSQL (with pgvector) and the app started on PostgreSQL serves the same
conversation, replays the same run events and finds the same knowledge; a copy killed
with SIGKILL half-way resumes without duplicates or loss; a count that differs after
the copy fails loudly; a file another process has open, or a target that already holds
data, is refused before anything is copied."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest
import pytest_asyncio

from app.cli.kb_file import open_kb_file
from app.config import Settings
from knowledge.kb import KnowledgeBase
from llm.extractive import ExtractiveProvider
from llm.types import Message
from storage.draft_records import Draft, DraftAction
from storage.keyword_records import Citation, ExternalResult, NewExternalVector
from storage.sqlite import open_sqlite_storage
from tests.conftest import collect_sse, running_app
from tests.support.deadline import reap, within
from tests.support.postgres import GUARDED, TestPostgres
from tests.support.procs import REPO, child_env
from toolindex.hashing import HashingEmbedder

INVOICES = [
    {"id": f"inv-{i}", "title": f"Invoice {i} from {vendor}",
     "text": f"Invoice {i} issued by {vendor} for {service}. The total amount due is {100 * i} EUR, "
             f"payable within 30 days of the invoice date.",
     "metadata": {"vendor": vendor, "amount": 100.0 * i}}
    for i, (vendor, service) in enumerate(
        [("Acme", "cloud hosting"), ("Globex", "security audit"), ("Initech", "printer repair"),
         ("Acme", "staff training"), ("Umbrella", "data migration"), ("Globex", "legal advice")], start=1)
]
GUIDES = [
    {"id": "guide-resume", "title": "Resuming a run",
     "text": "Runs outlive their connections. To resume a stream after a disconnect, reconnect to the events "
             "URL with the Last-Event-ID header and the server replays every event you missed."},
    {"id": "guide-shell", "title": "Shell environment",
     "text": "The shell environment lists PATH, HOME and SHELL variables."},
]
SEARCHES: list[dict[str, Any]] = [
    {"query": "how do I resume a stream after a disconnect", "mode": "hybrid"},
    {"query": "reconnect replay missed events", "mode": "semantic"},
    {"query": "invoice security audit", "mode": "text", "bucket": "invoices"},
    {"query": "invoice amount due", "mode": "hybrid", "bucket": "invoices", "filters": {"amount": {">": 250}}},
    {"query": "Acme invoice", "mode": "semantic", "bucket": "invoices", "filters": {"vendor": "acme"}},
]


@pytest.fixture
def pg(pg_server: TestPostgres) -> TestPostgres:
    """The session's PostgreSQL (``pg_server``, tests/conftest.py): each test takes a fresh
    database of it, so a server of this module's own would only add a start."""
    return pg_server


def _settings(tmp_path: Path, **extra: str) -> Settings:
    return Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_ADMIN_OPEN": "true",
        "AGENT_EMBEDDER": "hashing",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        # The keys come from the environment on both engines (app/keyring.py): the
        # stream URLs issued on SQLite verify on PostgreSQL.
        "AGENT_SECRET_KEY": "migrated-deployment-key-0123456789",
        **extra,
    })


def migrate_cmd(url: str, db: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", "migrate-db", "--to", url, "--from", str(db), *extra]


def run_migrate(url: str, db: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        migrate_cmd(url, db, *extra), cwd=REPO, env=child_env({}), capture_output=True, text=True, timeout=300,
        check=False,
    )


async def _searches(kb: KnowledgeBase) -> list[list[tuple[str, str, float]]]:
    out = []
    for s in SEARCHES:
        res = await kb.search(s["query"], bucket=s.get("bucket"), mode=s["mode"], filters=s.get("filters"), top_k=5)
        assert res.mode == s["mode"] and not res.warnings, (s, res.warnings)
        out.append([(h.doc_id, h.chunk_id, round(h.score, 4)) for h in res.hits])
    return out


async def _fill_through_the_app(tmp_path: Path) -> dict[str, Any]:
    """Runs with events, a KB ingest with typed fields, keywords, external results and
    vectors, drafts — all through the app and its stores; returns what it saw."""
    seen: dict[str, Any] = {}
    async with (
        running_app(_settings(tmp_path), provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        services = app.state.services
        kb: KnowledgeBase = services.rooms.knowledge.kb
        await kb.create_bucket("invoices", {"vendor": "TEXT", "amount": "REAL"})
        for bucket, docs in (("invoices", INVOICES), ("default", GUIDES)):
            posted = await http.post("/v1/kb/documents", json={"documents": docs, "bucket": bucket})
            assert posted.status_code == 200, posted.text
        runs = []
        conversation_id = None
        for question in ("How do I resume a stream after a disconnect?", "Which invoice is for the security audit?"):
            body: dict[str, Any] = {"message": question, "context_type": "knowledge"}
            if conversation_id:
                body["conversation_id"] = conversation_id
            created = (await http.post("/v1/agent/runs", json=body)).json()
            conversation_id = created["conversation_id"]
            events = await collect_sse(http, "GET", created["stream_url"])
            assert events[-1].event == "message_complete" and events[-1].json()["status"] == "completed"
            runs.append((created["stream_url"], [(e.id, e.event, e.data) for e in events if e.event != "heartbeat"]))
        storage = services.storage
        now = time.time()
        result = ExternalResult("ext-1", "perplexity", "zephyr calibration interval", "Every quarter [1].",
                                (Citation(1, "https://example.org/zephyr", "Zephyr"),), "sonar", "q-1",
                                conversation_id, now, owner="zoe")
        await storage.external_results.save(result)
        await storage.keywords.upsert({"zephyr calibration": "Zephyr calibration"}, query_id="q-1",
                                      external_result_ids=["ext-1"], conversation_id=conversation_id, owner="zoe",
                                      now=now,
                                      terms={"zephyr calibration": ["zephyr", "calibr"]})
        vec = np.ones(8, np.float32) / np.sqrt(8)
        await storage.external_vectors.save("hashing:test", [NewExternalVector("answer", "ext-1", vec)])
        draft = Draft("draft-1", "someone", "Escalate", "tickets", "on_create",
                      actions=[DraftAction("notify", "send_email", {"to": "ops@example.org"})],
                      created_at=now, last_access=now)
        assert await storage.drafts.insert(draft, live_after=now - 3600, max_per_owner=10)
        await storage.db.flush()
        seen["conversation"] = (await http.get(f"/v1/agent/conversations/{conversation_id}")).json()
        seen["conversation_id"] = conversation_id
        seen["runs"] = runs
        seen["searches"] = await _searches(kb)
        seen["now"] = now
    return seen


async def test_a_database_filled_by_the_app_serves_the_same_on_postgresql(pg: TestPostgres, tmp_path: Path) -> None:
    seen = await _fill_through_the_app(tmp_path)
    assert len(seen["conversation"]["messages"]) >= 4 and all(r[1] for r in seen["runs"])
    with pg.database(empty=True) as url:  # migrate-db migrates the target itself
        done = run_migrate(url, tmp_path / "agent.sqlite3", "--batch-rows", "7")
        assert done.returncode == 0, done.stderr
        assert "every count matches" in done.stderr
        pg_settings = _settings(tmp_path, AGENT_DATABASE_URL=url, AGENT_DB_PATH=str(tmp_path / "unused.sqlite3"))
        async with (
            running_app(pg_settings, provider=ExtractiveProvider()) as (base, app),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            services = app.state.services
            assert services.storage.engine == "postgres"
            conversation = (await http.get(f"/v1/agent/conversations/{seen['conversation_id']}")).json()
            assert conversation == seen["conversation"]
            for stream_url, frames in seen["runs"]:  # the old stream URLs work: the same key
                replayed = await collect_sse(http, "GET", stream_url)
                assert [(e.id, e.event, e.data) for e in replayed if e.event != "heartbeat"] == frames
            assert await _searches(services.rooms.knowledge.kb) == seen["searches"]
            storage = services.storage
            hits = await storage.keywords.hits(["zephyr calibration"], owner="zoe")  # owners copied too
            assert [(h.key, h.external_result_id) for h in hits] == [("zephyr calibration", "ext-1")]
            assert await storage.keywords.hits(["zephyr calibration"], owner="someone") == []
            copied = await storage.external_results.get("ext-1", owner="zoe")
            assert copied is not None and copied.citations[0].url == "https://example.org/zephyr"
            draft = await storage.drafts.load("someone", "draft-1", live_after=seen["now"] - 3600)
            assert draft is not None and draft.actions[0].action_config == {"to": "ops@example.org"}
            vectors = await storage.external_vectors.after("hashing:test", 8, 0, 10)
            assert [v.ref for v in vectors] == ["ext-1"]
            # New rows continue after the copied ids: another run in the same conversation.
            created = (await http.post("/v1/agent/runs", json={
                "message": "And the shell environment?", "context_type": "knowledge",
                "conversation_id": seen["conversation_id"]})).json()
            more = await collect_sse(http, "GET", created["stream_url"])
            assert more[-1].json()["status"] == "completed"
            await storage.db.flush()
        with psycopg.connect(url, **GUARDED) as conn:
            hnsw = conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'kb_chunks_hnsw_%'").fetchone()
            tsv = conn.execute("SELECT count(*) FROM kb_chunks WHERE tsv IS NULL OR ntok = 0").fetchone()
            # Each chunk carries its document's bucket (the per-bucket HNSW graphs' key).
            drift = conn.execute(
                "SELECT count(*) FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id WHERE c.bucket <> d.bucket"
            ).fetchone()
            chunks = conn.execute("SELECT count(*) FROM kb_chunks").fetchone()
        # The sample knowledge base's buckets are under the exact threshold: no graph.
        assert hnsw == (0,) and tsv == (0,) and drift == (0,) and chunks is not None and chunks[0] > 0


async def _big_source(path: Path) -> dict[str, int]:
    """Enough rows for many small batches: a KB with vectors and typed fields, and a
    long conversation."""
    kb = await open_kb_file(path, HashingEmbedder(dim=32))
    try:
        await kb.create_bucket("parts", {"kind": "TEXT", "rank": "INTEGER"})
        docs = [{"id": f"part-{i:04d}", "title": f"Part {i}", "text": f"part {i} of kind {i % 7} " * 3,
                 "metadata": {"kind": f"k{i % 7}", "rank": i}} for i in range(250)]
        report = await kb.ingest_documents(docs, bucket="parts")
        assert not report.rejected
    finally:
        await kb.aclose()
    storage = await open_sqlite_storage(path)
    try:
        for c in range(4):
            await storage.conversations.claim(f"conv-{c}", "user-1")
            await storage.conversations.append(
                f"conv-{c}", "user-1", [Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}")
                                        for i in range(150)])
    finally:
        await storage.close()
    return {"kb_chunks": 250, "messages": 600}


def _target_rows(url: str, table: str) -> int:
    with psycopg.connect(url, **GUARDED) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # type: ignore[arg-type]
    return int(row[0]) if row else 0


def _copied_so_far(url: str) -> int:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("SELECT coalesce(sum(rows), 0) FROM agentchat_migrate_db").fetchone()
    except psycopg.Error:  # not created yet
        return 0
    return int(row[0]) if row else 0


async def test_a_copy_killed_half_way_resumes_without_duplicates_or_loss(pg: TestPostgres, tmp_path: Path) -> None:
    db = tmp_path / "big.sqlite3"
    expected = await _big_source(db)
    with pg.database(empty=True) as url:
        proc = subprocess.Popen(migrate_cmd(url, db, "--batch-rows", "5"), cwd=REPO, env=child_env({}),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while _copied_so_far(url) < 150:
                assert proc.poll() is None, "migrate-db ended before it could be killed"
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        partial = {t: _target_rows(url, t) for t in expected}
        assert any(partial[t] < n for t, n in expected.items()), partial  # it really stopped half-way

        resumed = run_migrate(url, db, "--batch-rows", "50")
        assert resumed.returncode == 0, resumed.stderr
        assert "(resumed)" in resumed.stderr and "every count matches" in resumed.stderr

        lite = await open_sqlite_storage(db)
        try:
            chunks = await lite.db.fetchall("SELECT id, doc_id, position, text FROM kb_chunks ORDER BY id")
            messages = await lite.db.fetchall(
                "SELECT conversation_id, seq, role, payload FROM messages ORDER BY conversation_id, seq")
            typed = await lite.db.fetchall('SELECT doc_id, kind, rank FROM "meta_parts" ORDER BY doc_id')
        finally:
            await lite.close()
        with psycopg.connect(url, **GUARDED) as conn:
            pg_chunks = conn.execute("SELECT id, doc_id, position, text FROM kb_chunks ORDER BY id").fetchall()
            pg_messages = conn.execute(
                "SELECT conversation_id, seq, role, payload FROM messages ORDER BY conversation_id, seq").fetchall()
            pg_typed = conn.execute('SELECT doc_id, kind, rank FROM "meta_parts" ORDER BY doc_id').fetchall()
            next_id = conn.execute("SELECT nextval('kb_chunks_id_seq')").fetchone()
            postings = conn.execute(
                "SELECT (SELECT count(*) FROM kb_postings), (SELECT sum(length(tsv)) FROM kb_chunks)"
            ).fetchone()
        assert len(chunks) == expected["kb_chunks"] and len(messages) == expected["messages"]
        # Every copied chunk's lexemes are posted once (full text's postings, issue 24).
        assert postings is not None and postings[0] == postings[1] > 0
        assert [tuple(r) for r in pg_chunks] == [tuple(r) for r in chunks]
        assert [(c, s, r, bytes(p)) for c, s, r, p in pg_messages] == [tuple(r) for r in messages]
        assert [tuple(r) for r in pg_typed] == [tuple(r) for r in typed]
        assert next_id is not None and next_id[0] > chunks[-1][0]


async def test_counts_that_differ_fail_and_a_busy_source_or_a_filled_target_is_refused(
    pg: TestPostgres, tmp_path: Path
) -> None:
    settings = _settings(tmp_path)
    async with running_app(settings, provider=ExtractiveProvider()) as (base, _app), httpx.AsyncClient() as http:
        posted = await http.post(f"{base}/v1/kb/documents", json={"documents": GUIDES})
        assert posted.status_code == 200
        with pg.database(empty=True) as url:
            busy = run_migrate(url, settings.db_path)  # the running app has the file open
            assert busy.returncode == 2 and "open in another process" in busy.stderr, busy.stderr
            assert _copied_so_far(url) == 0
    with pg.database(empty=True) as url:
        assert run_migrate(url, settings.db_path).returncode == 0
        with psycopg.connect(url, autocommit=True, **GUARDED) as conn:
            conn.execute("DELETE FROM kb_chunks WHERE id = (SELECT max(id) FROM kb_chunks)")
            # A copy whose completion was never recorded (killed after its last batch): the
            # counts decide (a recorded one is "already migrated", below).
            conn.execute("DELETE FROM agentchat_migrate_db_done")
        again = run_migrate(url, settings.db_path)
        assert again.returncode == 1, again.stderr
        assert "kb_chunks: 2 in SQLite, 1 in PostgreSQL" in again.stderr, again.stderr

        other = tmp_path / "other.sqlite3"
        storage = await open_sqlite_storage(other)
        await storage.conversations.claim("conv-other", "user-2")
        await storage.close()
        filled = run_migrate(url, other)
        assert filled.returncode == 2 and "already holds data" in filled.stderr, filled.stderr


async def test_a_completed_copy_run_again_after_the_target_served_says_so(pg: TestPostgres, tmp_path: Path) -> None:
    """Operator review: after the replicas served on the target, ``migrate-db`` run again
    printed ``resumed at 13/13 rows`` per table and exited 1 "row counts differ after the
    copy (conversations: 13 in SQLite, 17 in PostgreSQL …)" — exit 1 says "run it again
    to resume", which never helps. A completed copy says so, how far the target moved on,
    copies nothing and exits 0; a file changed since is refused (exit 2)."""
    from storage.postgres import open_postgres_storage

    db = tmp_path / "agent.sqlite3"
    lite = await open_sqlite_storage(db)
    try:
        for c in range(3):
            await lite.conversations.claim(f"conv-{c}", "user-1")
            await lite.conversations.append(f"conv-{c}", "user-1", [Message(role="user", content=f"hello {c}")])
    finally:
        await lite.close()
    with pg.database(empty=True) as url:
        first = run_migrate(url, db)
        assert first.returncode == 0 and "every count matches" in first.stderr, first.stderr
        served = await open_postgres_storage(url)  # the replicas serve on the target
        try:
            await served.conversations.claim("conv-new", "user-2")
            await served.conversations.append("conv-new", "user-2", [Message(role="user", content="hi")])
            await served.conversations.append("conv-0", "user-1", [Message(role="user", content="more")])
        finally:
            await served.close()
        with psycopg.connect(url, **GUARDED) as conn:
            before = conn.execute("SELECT (SELECT count(*) FROM conversations), (SELECT count(*) FROM messages)")
            target_before = before.fetchone()

        again = run_migrate(url, db)
        assert again.returncode == 0, again.stderr
        said = [line for line in again.stderr.splitlines() if line.startswith("already migrated")]
        assert len(said) == 1, again.stderr
        assert "the target has moved on since — 3 more rows" in said[0], said
        assert "conversations +1" in said[0] and "messages +2" in said[0], said
        assert "resumed at" not in again.stderr and "differ" not in again.stderr, again.stderr
        with psycopg.connect(url, **GUARDED) as conn:
            after = conn.execute("SELECT (SELECT count(*) FROM conversations), (SELECT count(*) FROM messages)")
            assert after.fetchone() == target_before  # nothing copied again

        lite = await open_sqlite_storage(db)  # the SQLite file written after the move
        try:
            await lite.conversations.claim("conv-late", "user-1")
        finally:
            await lite.close()
        changed = run_migrate(url, db)
        assert changed.returncode == 2, changed.stderr
        said = [line for line in changed.stderr.splitlines() if line.startswith("agentchat migrate-db:")]
        assert len(said) == 1 and "the file has changed since (conversations: 3 then, 4 now)" in said[0], said


@dataclass(frozen=True)
class SmallCopy:
    """One ``agentchat migrate-db`` of a small SQLite file (``small_copy``)."""

    source: Path
    url: str
    pid: int
    returncode: int
    stderr: str


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def small_copy(pg_server: TestPostgres, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[SmallCopy]:
    """A small SQLite file copied by one ``agentchat migrate-db`` into an empty PostgreSQL
    database, its stderr a pipe: a conversation; an unfinished run whose events are partly
    in SQLite's live log (``run_log``, issue 23); a keyed run with its request fingerprint
    (migration 31) and an older keyed run without one. The tests of what one copy does (its
    progress lines, the live log, the fingerprints, the writer lock it held) read this one
    copy: a ``migrate-db`` each (a process start and the target's migration, ~2 CPU-s
    apiece) only repeated the same copy."""
    from storage.records import NewRun, RunEvent, RunWrite

    db = tmp_path_factory.mktemp("small") / "agent.sqlite3"
    lite = await open_sqlite_storage(db)
    try:
        await lite.conversations.claim("conv-1", "user-1")
        await lite.runs.create(NewRun("live", "c", "alice", "knowledge", b"{}", "enqueue"))
        await lite.runs.commit(RunWrite("live", "c", "alice", events=[RunEvent(1, "run_started", "{}")]))
        await lite.runs.settle_log(everything=True)  # one event settled while it lives, two in the log
        await lite.runs.commit(RunWrite("live", "c", "alice", status="running", events=[
            RunEvent(2, "content_chunk", '{"chunk":"a"}'), RunEvent(3, "content_chunk", '{"chunk":"b"}')]))
        assert [e.seq for e in await lite.runs.events_after("live", 0)] == [1, 2, 3]
        assert await lite.db.fetchone("SELECT count(*) FROM run_log WHERE run_id = 'live'") == (2,)
        await lite.runs.create(NewRun("keyed", "c-keyed", "alice", "knowledge", b"{}", "enqueue", "k-1",
                                      request_fingerprint="ab" * 32))
        await lite.runs.create(NewRun("older", "c-older", "alice", "knowledge", b"{}", "enqueue", "k-2"))
    finally:
        await lite.close()
    with pg_server.database(empty=True) as url:  # migrate-db migrates the target itself
        proc = await asyncio.create_subprocess_exec(
            *migrate_cmd(url, db), cwd=REPO, env=child_env({}),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = await within(proc.communicate(), "agentchat migrate-db of the small file", 300)
        finally:
            await reap(proc, "agentchat migrate-db", grace=5)
        assert proc.returncode is not None
        yield SmallCopy(db, url, proc.pid, proc.returncode, err.decode())


@pytest.mark.asyncio(loop_scope="module")
async def test_an_unfinished_runs_events_in_the_live_log_are_copied(small_copy: SmallCopy) -> None:
    """SQLite appends an unfinished run's events to its live log (``run_log``, issue 23);
    PostgreSQL keeps them in ``run_events``, where a replica carries the run on from."""
    assert small_copy.returncode == 0, small_copy.stderr
    with psycopg.connect(small_copy.url, **GUARDED) as conn:
        rows = conn.execute("SELECT seq, event FROM run_events WHERE run_id = 'live' ORDER BY seq").fetchall()
        status = conn.execute("SELECT status FROM runs WHERE id = 'live'").fetchone()
    assert rows == [(1, "run_started"), (2, "content_chunk"), (3, "content_chunk")]
    assert status == ("running",)


@pytest.mark.asyncio(loop_scope="module")
async def test_an_idempotency_keys_request_fingerprint_is_copied(small_copy: SmallCopy) -> None:
    """A keyed run's request fingerprint (migration 31) moves with its key: after the
    move, a repeat of the key with another request is still refused (422), not replayed."""
    assert small_copy.returncode == 0, small_copy.stderr
    with psycopg.connect(small_copy.url, **GUARDED) as conn:
        rows = conn.execute("SELECT id, idempotency_key, request_fingerprint FROM runs ORDER BY id").fetchall()
    assert rows == [("keyed", "k-1", "ab" * 32), ("live", None, None), ("older", "k-2", None)]


async def test_an_unusable_target_is_one_line_and_exit_2(pg: TestPostgres, tmp_path: Path) -> None:
    """Unreachable, or a user that may not create the ``vector`` extension: refused before
    copying (exit 2), one line, no traceback (it was a 46-line traceback and exit 1)."""
    db = tmp_path / "source.sqlite3"
    storage = await open_sqlite_storage(db)
    await storage.conversations.claim("conv-1", "user-1")
    await storage.close()

    away = run_migrate("postgresql://postgres@127.0.0.1:9/agent", db)
    assert away.returncode == 2, away.stderr
    assert "Traceback" not in away.stderr, away.stderr
    said = [line for line in away.stderr.splitlines() if line.startswith("agentchat migrate-db:")]
    assert len(said) == 1 and "cannot open the PostgreSQL" in said[0] and "Connection refused" in said[0], away.stderr

    role = f"weak_{os.getpid()}"
    name = pg.new_database(empty=True)
    try:
        pg.admin(f"CREATE ROLE {role} LOGIN")
        pg.admin(f'ALTER DATABASE "{name}" OWNER TO {role}')
        weak = run_migrate(f"postgresql://{role}@{pg.host}:{pg.port}/{name}", db)
    finally:
        pg.drop_database(name)
        pg.admin(f"DROP ROLE IF EXISTS {role}")
    assert weak.returncode == 2, weak.stderr
    assert "Traceback" not in weak.stderr, weak.stderr
    said = [line for line in weak.stderr.splitlines() if line.startswith("agentchat migrate-db:")]
    assert len(said) == 1 and "create the vector extension (pgvector)" in said[0], weak.stderr


@pytest.mark.asyncio(loop_scope="module")
async def test_progress_into_a_pipe_is_plain_lines(small_copy: SmallCopy) -> None:
    assert small_copy.returncode == 0, small_copy.stderr  # its stderr was a pipe
    assert "\r" not in small_copy.stderr, small_copy.stderr[:2000]
    # conv-1 and the three runs' conversations
    assert "  conversations: done, 4/4 rows" in small_copy.stderr.splitlines(), small_copy.stderr


@pytest.mark.asyncio(loop_scope="module")
async def test_the_copy_holds_the_files_writer_lock(pg: TestPostgres, small_copy: SmallCopy) -> None:
    """``migrate-db`` holds the SQLite file's writer lock for its whole copy, so a serve
    started during the copy waits for it (``app.cli.writer_wait``) rather than writing
    rows the copy has passed; while a serve (here: this test) holds the lock, the copy is
    refused before anything is copied. Third review of issue 23: it took no lock."""
    from storage.sqlite.writer_lock import WriterLock

    db = small_copy.source
    assert small_copy.returncode == 0, small_copy.stderr
    after = WriterLock(db)
    assert after.holder() == f"pid {small_copy.pid}"  # the copy took the lock (and released it: free now)
    assert after.try_acquire()
    after.release()

    serve = WriterLock(db)
    assert serve.try_acquire()
    try:
        with pg.database(empty=True) as url:
            busy = run_migrate(url, db)
            assert busy.returncode == 2, busy.stderr
            assert f"pid {os.getpid()} holds the writer lock of {db}" in busy.stderr, busy.stderr
            assert _copied_so_far(url) == 0
    finally:
        serve.release()
