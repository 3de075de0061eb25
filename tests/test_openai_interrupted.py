"""A non-streamed OpenAI completion whose server stops mid-run is told where the run's
answer will be, and the ``openai`` SDK does not send it again by itself.

``agentchat serve`` drains on SIGTERM: live runs go on for ``AGENT_SHUTDOWN_GRACE_S``, then
are released for the next process, which carries them on. The completion waiting on such a
run was answered 503 ``interrupted`` "...; retry" with ``Retry-After``, and the SDKs (Python
and JS) retry a 503 by themselves: behind a load balancer the retry reached another replica
at once and the question ran twice, tools included, while the first run was carried on. Now
the 503 says ``x-should-retry: false`` and names the run's ``/events``, where the answer of
the run carried on by the next process is read. A real server on the paced Ollama fake, the
real SDK with its default retries.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import openai
from openai.types.chat import ChatCompletionUserMessageParam

from tests.fakes.paced_ollama import tagged
from tests.support.deadline import until
from tests.support.procs import DEMO_AUTH, AgentServer, client, tool_stack
from tests.support.sse import iter_sse


async def _running_run(http: httpx.AsyncClient, base: str) -> str | None:
    listed = await http.get(f"{base}/v1/agent/runs", headers=DEMO_AUTH)
    runs = listed.json().get("runs", []) if listed.status_code == 200 else []
    return str(runs[0]["run_id"]) if runs else None


async def _until_text(http: httpx.AsyncClient, base: str, run_id: str) -> None:
    """Until the run's model turn streams its first text."""
    url = f"{base}/v1/agent/runs/{run_id}/events"
    async with http.stream("GET", url, headers={"Accept": "text/event-stream", **DEMO_AUTH}) as response:
        async for ev in iter_sse(response.aiter_lines()):
            if ev.event == "content_chunk":
                return


async def test_a_completion_whose_server_stops_mid_run_is_not_sent_again_and_names_the_runs_events(
    tmp_path: Path,
) -> None:
    posted: list[int] = []

    async def answered(response: httpx.Response) -> None:
        posted.append(response.status_code)

    async with tool_stack(tmp_path, tokens=60, pause_s=0.05) as stack:
        env = stack.agent_env(AGENT_SHUTDOWN_GRACE_S="0.5")
        server = AgentServer(tmp_path, env)
        server.start()
        try:
            await server.wait_healthy()
            counted = httpx.AsyncClient(timeout=60, event_hooks={"response": [answered]})
            async with client() as http, counted as sdk_http:
                sdk = openai.AsyncOpenAI(base_url=f"{server.base}/v1", api_key="demo-alice", http_client=sdk_http)
                question = [ChatCompletionUserMessageParam(role="user", content=tagged("interrupted"))]
                asked = asyncio.create_task(sdk.chat.completions.create(model="agentchat-workflow", messages=question))
                found: list[str] = []

                async def running() -> bool:
                    run_id = await _running_run(http, server.base)
                    if run_id is not None:
                        found.append(run_id)
                    return run_id is not None

                await until(running, "the completion's run", 60, step=0.1)
                run_id = found[-1]
                await asyncio.wait_for(_until_text(http, server.base, run_id), 60)
                server.send(signal.SIGTERM)  # the grace (0.5 s) ends mid-answer: the run is released
                try:
                    await asyncio.wait_for(asked, 60)
                except openai.InternalServerError as exc:
                    failure = exc
                else:
                    raise AssertionError("the completion was answered though its server stopped mid-run")
                assert await server.wait_exit(60) is not None, server.tail()
        finally:
            server.close()
        assert posted == [503], f"the SDK sent the question again: {posted}"
        assert failure.response.headers.get("x-should-retry") == "false"
        assert failure.response.headers.get("x-run-id") == run_id
        assert f"/v1/agent/runs/{run_id}/events" in str(failure.message), failure.message

        # The next process carries the run on; its answer is where the 503 said.
        again = AgentServer(tmp_path, env)
        again.start()
        try:
            await again.wait_healthy()
            async with client() as http:

                async def completed() -> bool:
                    got = await http.get(f"{again.base}/v1/agent/runs/{run_id}", headers=DEMO_AUTH)
                    return got.status_code == 200 and got.json()["status"] == "completed"

                await until(completed, "the run carried on by the next process", 120, step=0.2)
                listed = await http.get(f"{again.base}/v1/agent/runs", headers=DEMO_AUTH)
                assert [r["run_id"] for r in listed.json()["runs"]] == [run_id], "a second run was started"
        finally:
            again.close()
