"""Chaos: live runs with tool calls while the server is SIGKILLed every 20 s and restarted.

For ``--seconds`` (120), ``--runs`` (200) runs are started at an even pace against a
real ``agentchat serve`` process. The model is the paced, stateless Ollama fake of
``tests/fakes/paced_ollama.py`` (in this process, so it outlives the server): every run
streams ``--tokens`` words ``--pause-ms`` apart per turn and walks
knowledge_base_search → validate_table_config (a POST to the reference backend, counted
per run by a proxy) → generate_response. Every ``--kill-every`` seconds the server gets
SIGKILL and is started again on the same port and SQLite file; each client is an
EventSource-like reader that reconnects with ``Last-Event-ID``.

Reported (targets: 0 lost / 0 duplicated / 0 executed twice, and every run finished):
- runs started (201) and finished (saw ``message_complete``), by final status;
- events lost (ids a client never got, or that the final log has and the client did
  not see), duplicated (ids a client got twice), mismatched (same id, other content);
- tool calls executed twice (a run's backend POST reached the backend more than once);
- recovery: from the restart (spawn of the new process) to the first ``run_resumed``
  event a client received, and to the first event of any interrupted run (p50/p99);
- how many runs ended ``run_interrupted``.

Run from the repository root:  .venv/bin/python bench/chaos.py [--seconds 120]
Writes bench/results/chaos.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import summary, write_results  # noqa: E402
from tests.fakes.paced_ollama import SIDE_EFFECT_PATH, SIDE_EFFECT_TOOL, run_body, tagged  # noqa: E402
from tests.support.procs import (  # noqa: E402
    AgentServer,
    Frame,
    Trace,
    client,
    follow,
    replay,
    start_run,
    tool_stack,
)

TARGETS = {"events_lost": 0, "events_duplicated": 0, "tool_calls_executed_twice": 0, "runs_not_finished": 0}


@dataclass(slots=True)
class Restart:
    killed_at: float
    spawned_at: float = 0.0
    healthy_at: float = 0.0
    pending: set[str] = field(default_factory=set)
    """Tags of the runs a client was still following when the server was killed."""


@dataclass(slots=True)
class Seen:
    at: float
    tag: str
    event: str


async def killer(
    server: AgentServer, restarts: list[Restart], traces: list[Trace], every_s: float, until: float
) -> None:
    while time.monotonic() + every_s < until:
        await asyncio.sleep(every_s)
        restart = Restart(killed_at=time.monotonic(), pending={t.tag for t in traces if t.outcome == "pending"})
        server.send(signal.SIGKILL)
        await server.wait_exit(30)
        restarts.append(restart)
        restart.spawned_at = time.monotonic()
        server.start()
        await server.wait_healthy(120)
        restart.healthy_at = time.monotonic()


async def one_run(
    http: Any, base: str, trace: Trace, seen: list[Seen], deadline_s: float
) -> Trace:
    status, body = await start_run(http, base, run_body(trace.tag), deadline_s=60)
    trace.start_status = status
    if status != 201:
        trace.outcome = f"error: start answered {status}"
        return trace
    trace.run_id, trace.conversation_id, trace.stream_url = body["run_id"], body["conversation_id"], body["stream_url"]

    def note(t: Trace, frame: Frame) -> None:
        seen.append(Seen(time.monotonic(), t.tag, frame[1]))

    return await follow(http, base, trace, deadline_s=deadline_s, on_frame=note)


def judge(trace: Trace, stored: list[Frame] | None) -> dict[str, int]:
    ids = [int(f[0]) for f in trace.frames if f[0] and f[0].isdigit()]
    got = set(ids)
    top = max([*ids, len(stored or [])], default=0)
    lost = len(set(range(1, top + 1)) - got)
    duplicated = len(ids) - len(got)
    mismatched = 0
    if stored is not None:
        by_id = {f[0]: f for f in trace.frames}
        mismatched = sum(1 for f in stored if f[0] in by_id and by_id[f[0]] != f)
    return {"lost": lost, "duplicated": duplicated, "mismatched": mismatched}


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    async with tool_stack(workdir, tokens=args.tokens, pause_s=args.pause_ms / 1000) as stack:
        server = AgentServer(workdir, stack.agent_env())
        server.start()
        try:
            await server.wait_healthy(120)
            traces = [Trace(tag=f"chaos-{i:04d}-{uuid.uuid4().hex[:6]}") for i in range(args.runs)]
            restarts: list[Restart] = []
            seen: list[Seen] = []
            async with client(max_connections=max(64, args.runs)) as http:
                t0 = time.monotonic()
                end = t0 + args.seconds
                kill_task = asyncio.create_task(killer(server, restarts, traces, args.kill_every, end))
                # Starts spread evenly over the window, leaving room for the last runs to end.
                pace = max(0.0, args.seconds - args.tail_s) / max(1, args.runs)
                tasks = []
                for i, trace in enumerate(traces):
                    delay = t0 + i * pace - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(
                        asyncio.create_task(one_run(http, server.base, trace, seen, args.seconds + args.drain_s))
                    )
                await asyncio.sleep(max(0.0, end - time.monotonic()))  # the killer keeps going
                kill_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await kill_task
                if not server.running:  # cancelled between the kill and the restart
                    server.start()
                await server.wait_healthy(120)
                _, pending = await asyncio.wait(tasks, timeout=args.drain_s)
                for task in pending:
                    task.cancel()
                elapsed = time.monotonic() - t0

                stored: dict[str, list[Frame] | None] = {}
                histories_missing = 0
                for trace in traces:
                    if trace.stream_url is None:
                        stored[trace.tag] = None
                        continue
                    try:
                        status, frames = await replay(http, server.base, trace.stream_url)
                    except Exception:
                        status, frames = 0, []
                    stored[trace.tag] = frames if status == 200 else []
                    conv = await http.get(f"{server.base}/v1/agent/conversations/{trace.conversation_id}")
                    messages = conv.json().get("messages", []) if conv.status_code == 200 else []
                    users = [m.get("content") for m in messages]
                    histories_missing += tagged(trace.tag) not in users
            log_errors = server.grep("Traceback", "ERROR", limit=30)
        finally:
            server.close()

        started = [t for t in traces if t.start_status == 201]
        finished = [t for t in started if t.outcome == "complete"]
        statuses = Counter(t.final_status or "none" for t in started)
        codes = Counter(t.error_codes[-1] for t in started if t.error_codes)
        per_run = {t.tag: judge(t, stored.get(t.tag)) for t in started}
        twice = {t.tag: stack.proxy.side_effects(t.tag) for t in started if stack.proxy.side_effects(t.tag) > 1}
        side_effect_results = sum(
            1 for t in started for d in t.data_of("tool_call_result") if d.get("name") == SIDE_EFFECT_TOOL
        )
        multiple_completes = sum(1 for t in started if t.names().count("message_complete") > 1)

        to_resumed, to_first_event, to_healthy = [], [], []
        for r in restarts:
            to_healthy.append(r.healthy_at - r.spawned_at)
            after = [s for s in seen if s.at >= r.spawned_at and s.tag in r.pending]
            resumed = [s.at for s in after if s.event == "run_resumed"]
            if resumed:
                to_resumed.append(min(resumed) - r.spawned_at)
            if after:
                to_first_event.append(min(s.at for s in after) - r.spawned_at)

        result = {
            "seconds": args.seconds,
            "elapsed_s": round(elapsed, 1),
            "kill_every_s": args.kill_every,
            "kills": len(restarts),
            "model": {"tokens_per_turn": args.tokens, "pause_ms": args.pause_ms, "turns_per_run": 3},
            "runs_requested": args.runs,
            "runs_started": len(started),
            "runs_finished": len(finished),
            "final_status": dict(statuses),
            "final_error_codes": dict(codes),
            "runs_interrupted": codes.get("run_interrupted", 0),
            "runs_not_finished": len(started) - len(finished),
            "runs_not_finished_sample": [f"{t.tag}: {t.outcome}" for t in started if t.outcome != "complete"][:20],
            "runs_with_more_than_one_message_complete": multiple_completes,
            "events_received": sum(len(t.frames) for t in started),
            "events_lost": sum(v["lost"] for v in per_run.values()),
            "events_duplicated": sum(v["duplicated"] for v in per_run.values()),
            "events_mismatched": sum(v["mismatched"] for v in per_run.values()),
            "side_effecting_calls_seen": side_effect_results,
            "backend_side_effect_requests": stack.proxy.count("POST", SIDE_EFFECT_PATH),
            "tool_calls_executed_twice": sum(n - 1 for n in twice.values()),
            "runs_with_a_tool_call_executed_twice": len(twice),
            "conversations_missing_the_user_message": histories_missing,
            "recovery_s": {
                "restart_to_first_run_resumed": summary(to_resumed),
                "restart_to_first_event_of_an_interrupted_run": summary(to_first_event),
                "restart_to_healthy": summary(to_healthy),
            },
            "model_streams": {"finished": stack.fake.streams_finished, "cut": stack.fake.streams_cut},
            "server_log_errors": log_errors,
        }
    result["targets"] = TARGETS
    result["meets_targets"] = all(result[k] == v for k, v in TARGETS.items())
    result["meets_targets_detail"] = {k: result[k] == v for k, v in TARGETS.items()}
    return result


def print_summary(result: dict[str, Any], path: Path) -> None:
    rec = result["recovery_s"]
    lines = [
        f"chaos: {result['elapsed_s']} s, {result['kills']} SIGKILLs (every {result['kill_every_s']} s)",
        f"  runs started {result['runs_started']}, finished {result['runs_finished']} (target: all), "
        f"status {result['final_status']}, run_interrupted {result['runs_interrupted']}",
        f"  events lost {result['events_lost']}, duplicated {result['events_duplicated']}, "
        f"mismatched {result['events_mismatched']}; tool calls executed twice {result['tool_calls_executed_twice']} "
        f"(target 0/0/0: {'met' if result['meets_targets'] else 'NOT met'})",
        f"  recovery, restart → first run_resumed: p50 {rec['restart_to_first_run_resumed']['p50']} s, "
        f"p99 {rec['restart_to_first_run_resumed']['p99']} s "
        f"(→ first event of an interrupted run p50 {rec['restart_to_first_event_of_an_interrupted_run']['p50']} s; "
        f"→ healthy p50 {rec['restart_to_healthy']['p50']} s)",
        f"  results: {path}",
    ]
    print("\n".join(lines))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0, help="length of the chaos window")
    p.add_argument("--runs", type=int, default=200, help="runs started, evenly spread over the window")
    p.add_argument("--kill-every", type=float, default=20.0, help="SIGKILL the server every this many seconds")
    p.add_argument("--tokens", type=int, default=20, help="words the model streams per turn")
    p.add_argument("--pause-ms", type=float, default=50.0, help="pause between streamed words")
    p.add_argument("--tail-s", type=float, default=10.0, help="no run starts in the window's last seconds")
    p.add_argument("--drain-s", type=float, default=90.0, help="how long runs may take to end after the window")
    p.add_argument("--keep", action="store_true", help="keep the working directory (logs, databases)")
    p.add_argument("--name", default="chaos", help="results file name (bench/results/<name>.json)")
    return p.parse_args()


async def main(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    try:
        result = await bench(args, workdir)
    except BaseException:
        print(f"chaos: failed; logs kept in {workdir}", file=sys.stderr)
        raise
    path = write_results(args.name, result)
    print_summary(result, path)
    if args.keep or not result["meets_targets"]:
        print(f"  logs and databases: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(parse_args())))
