"""The model fakes' process of the load benchmarks (``python bench/_fakes.py``).

The paced Ollama fake (``tests/fakes/paced_ollama.py``, answering text only) and the
paced Gemini fake (``tests/fakes/paced_gemini.py``) on loopback ports in a process of
their own, so thousands of paced streams do not share an event loop with the clients
or the server under test; plus a ``/stats`` app: streams finished / cut and this
process's event-loop lag (the fake must not be what holds tokens back). Every token is
``"<i>@<CLOCK_MONOTONIC ns>;"``, the time the fake produced it. ``Fakes`` starts the
process and reads its URLs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402

from bench._common import raise_fd_limit  # noqa: E402
from bench._load import PYTHON, LoopLag, run_loop  # noqa: E402


def _fakes_main(args: argparse.Namespace) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from tests.fakes.paced_gemini import PacedGemini, stamped
    from tests.fakes.paced_ollama import PacedOllama, Step

    class StampedOllama(PacedOllama):
        """Text only, ``tokens`` stamped words, then the final line: exactly the Gemini
        fake's tokens, so both providers stream the same script. Cheap enough never to be
        what holds tokens back: every line is pre-encoded around its stamp (no JSON
        encoding per token), one timer per stream."""

        async def _lines(self, model: str, step: Step) -> AsyncIterator[bytes]:
            head = orjson.dumps({"model": model, "created_at": "2026-01-01T00:00:00Z",
                                 "message": {"role": "assistant", "content": ""}, "done": False})
            cut = head.index(b'"content":""') + len(b'"content":"')
            prefix, suffix = head[:cut], head[cut:] + b"\n"
            final = orjson.dumps(self._final(model, {"role": "assistant", "content": ""})) + b"\n"
            finished = False
            try:
                for i in range(self.tokens):
                    await asyncio.sleep(self.pause_s)
                    yield prefix + stamped(i).encode() + suffix  # digits, '@' and ';': no escaping
                yield final
                finished = True
            finally:
                if finished:
                    self.streams_finished += 1
                else:
                    self.streams_cut += 1

    raise_fd_limit()
    pause = args.pause_ms / 1000
    ollama = StampedOllama(tokens=args.tokens, pause_s=pause, flow=())
    gemini = PacedGemini(tokens=args.tokens, pause_s=pause, word=stamped)
    lag = LoopLag()

    async def stats(request: Request) -> JSONResponse:
        body = {
            name: {"chats": f.chats, "streams_finished": f.streams_finished, "streams_cut": f.streams_cut}
            for name, f in (("ollama", ollama), ("gemini", gemini))
        }
        body["loop_lag_ms"] = lag.stop()
        lag.start()
        return JSONResponse(body)

    async def main() -> None:
        lag.start()
        tasks = []
        ports = {}
        for name, app in (("ollama", ollama.app), ("gemini", gemini.app), ("stats", Starlette(routes=[
            Route("/stats", stats)
        ]))):
            config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False,
                                    lifespan="off", backlog=4096)
            server = uvicorn.Server(config)
            tasks.append(asyncio.create_task(server.serve()))
            while not server.started:
                await asyncio.sleep(0.01)
            ports[name] = server.servers[0].sockets[0].getsockname()[1]
        print("FAKES " + orjson.dumps({k: f"http://127.0.0.1:{p}" for k, p in ports.items()}).decode(), flush=True)
        await asyncio.Event().wait()

    run_loop(main())


class Fakes:
    """The fakes process (see the module docstring); ``ollama``, ``gemini`` are base URLs."""

    def __init__(self, workdir: Path, *, tokens: int, pause_ms: float) -> None:
        from tests.support.procs import ManagedProcess, child_env

        argv = [PYTHON, str(Path(__file__)), "--tokens", str(tokens), "--pause-ms", str(pause_ms)]
        self.proc = ManagedProcess("fakes", argv, child_env({}), workdir / "fakes.log")
        self.urls: dict[str, str] = {}

    async def __aenter__(self) -> Fakes:
        self.proc.start()
        deadline = time.monotonic() + 60
        while not self.urls:
            for line in self.proc.lines():
                if line.startswith("FAKES "):
                    self.urls = orjson.loads(line[6:])
            if not self.proc.running or time.monotonic() > deadline:
                raise RuntimeError(f"the fakes did not start:\n{self.proc.tail()}")
            await asyncio.sleep(0.05)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.proc.close()

    @property
    def ollama(self) -> str:
        return self.urls["ollama"]

    @property
    def gemini(self) -> str:
        return self.urls["gemini"]

    async def stats(self) -> dict[str, Any]:
        """Counters and the loop lag since the previous call."""
        async with httpx.AsyncClient(timeout=10) as http:
            return dict((await http.get(self.urls["stats"] + "/stats")).json())


def main() -> None:
    p = argparse.ArgumentParser(description="the paced model fakes of the load benchmarks (not run by hand)")
    p.add_argument("--tokens", type=int, default=60)
    p.add_argument("--pause-ms", type=float, default=100.0)
    _fakes_main(p.parse_args())


if __name__ == "__main__":
    main()
