"""A paid Perplexity call counts as started only once its request left (issue 21, b).

A real server process with one Perplexity connection (``AGENT_PERPLEXITY_MAX_CONNECTIONS=1``)
runs several knowledge runs that each call ``perplexity_search`` at about the same time:
the first request holds the only connection (the fake never answers it), the others wait
for it at the pool. The server is SIGKILLed then and started again on the same database.

What must hold:
- the request that left is not sent again: its call is answered ``interrupted``;
- each call that was still waiting for a connection was never sent before the kill, and
  is sent exactly once after the restart (counted at the fake), and succeeds;
- every run ends with exactly one ``message_complete`` (and its log is what the client saw).
"""

from __future__ import annotations

import asyncio
import re
import signal
import uuid
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests.fakes.paced_ollama import PacedOllama, tagged
from tests.fakes.perplexity import Answer, FakePerplexity, Hang, Reply, Source
from tests.support.procs import AgentServer, Trace, check_trace, client, follow, replay, start_run, until
from tests.support.server import serve_app

pytestmark = pytest.mark.slow  # a real server process killed and restarted

RUNS = 4
FLOW = ("knowledge_base_search", "perplexity_search", "index_keywords", "generate_response")
TAG = re.compile(r"order service (?P<tag>[A-Za-z0-9_-]+)")


def _tag_of(call_body: dict[str, object]) -> str:
    messages = call_body.get("messages")
    assert isinstance(messages, list)
    user = next(m["content"] for m in messages if m["role"] == "user")
    found = TAG.search(str(user))
    assert found, user
    return found.group("tag")


def _perplexity_results(trace: Trace) -> list[dict[str, object]]:
    return [d for d in trace.data_of("tool_call_result") if d.get("name") == "perplexity_search"]


async def test_a_call_waiting_for_a_connection_at_a_kill_is_sent_once_after_the_restart(tmp_path: Path) -> None:
    sent: Counter[str] = Counter()

    def reply(body: dict[str, object]) -> Reply:
        tag = _tag_of(body)
        sent[tag] += 1
        if sum(sent.values()) == 1:
            return Hang()  # holds the pool's only connection until the process dies
        return Answer(f"The order service release for {tag} added refunds [1].",
                      sources=[Source(url="https://example.com/notes", title="Release notes")])

    perplexity = FakePerplexity(script=reply)
    model = PacedOllama(tokens=3, pause_s=0.01, flow=FLOW)
    async with serve_app(model.app) as ollama_url, serve_app(perplexity.app) as perplexity_url:
        env = {
            "AGENT_LLM_PROVIDER": "ollama",
            "OLLAMA_HOST": ollama_url,
            "OLLAMA_MODEL": model.model,
            "AGENT_EMBEDDER": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "PERPLEXITY_API_KEY": perplexity.api_key,
            "PERPLEXITY_BASE_URL": perplexity_url,
            "AGENT_PERPLEXITY_MAX_CONNECTIONS": "1",
            "AGENT_DB_WRITE_RETRY_S": "1",
            "AGENT_MAX_RUNS_PER_USER": "100000",
            "AGENT_REQUESTS_PER_MINUTE": "1000000",
            "AGENT_HEARTBEAT_S": "1",
        }
        server = AgentServer(tmp_path, env)
        server.start()
        try:
            await server.wait_healthy()
            async with client() as http:
                traces = [Trace(tag=f"pplx{i}-{uuid.uuid4().hex[:6]}") for i in range(RUNS)]
                mark = server.mark()
                followers: list[asyncio.Task[Trace]] = []
                for trace in traces:
                    body = {"message": tagged(trace.tag, "what changed in the latest release?"),
                            "context_type": "knowledge", "context": {}}
                    status, started = await start_run(http, server.base, body)
                    assert status == 201, (status, started, server.tail())
                    trace.run_id, trace.conversation_id = started["run_id"], started["conversation_id"]
                    trace.stream_url = started["stream_url"]
                    followers.append(asyncio.create_task(follow(http, server.base, trace, deadline_s=180)))

                # One request holds the connection; every other call waits at the pool for it.
                await until(
                    lambda: sum(sent.values()) == 1
                    and len(server.grep("waiting for an outbound connection", since=mark)) >= RUNS - 1,
                    "one Perplexity request in flight and the others waiting for the connection",
                    timeout=90,
                )
                (in_flight,) = sent
                assert all(not _perplexity_results(t) for t in traces), "a Perplexity call finished before the kill"

                server.send(signal.SIGKILL)
                assert await server.wait_exit(30) is not None
                before_restart = Counter(sent)
                await server.restart()

                _, pending = await asyncio.wait(followers, timeout=180)
                for task in pending:
                    task.cancel()
                stored = {}
                for trace in traces:
                    assert trace.stream_url is not None
                    status, frames = await replay(http, server.base, trace.stream_url)
                    stored[trace.tag] = frames if status == 200 else []
        finally:
            server.close()

    assert before_restart == Counter({in_flight: 1}), before_restart
    problems: dict[str, list[str]] = {}
    for trace in traces:
        found = check_trace(trace, stored[trace.tag])
        results = _perplexity_results(trace)
        if len(results) != 1:
            found.append(f"{len(results)} perplexity_search results")
        elif trace.tag == in_flight:
            if not (results[0].get("is_error") and str(results[0].get("error", "")).startswith("interrupted")):
                found.append(f"the call that left was not answered interrupted: {results[0]}")
        elif results[0].get("is_error"):
            found.append(f"the call that waited for a connection failed: {results[0]}")
        if sent[trace.tag] != 1:
            found.append(f"its Perplexity request was sent {sent[trace.tag]} times")
        if found:
            errors = [(d.get("name"), d.get("error")) for d in trace.data_of("tool_call_result") if d.get("is_error")]
            problems[trace.tag] = [*found, f"tool errors: {errors}"]
    report = {"problems": problems, "sent": dict(sent), "unexpected": perplexity.unexpected,
              "log": server.grep("ERROR", "Traceback", "resum")[-20:]}
    assert not problems and not perplexity.unexpected, orjson.dumps(report, option=orjson.OPT_INDENT_2).decode()
