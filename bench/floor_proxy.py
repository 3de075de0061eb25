"""The floor of ``bench/capacity.py``: a bare streaming proxy, the least a server can spend.

It speaks just enough of the agent's API for the load clients (``bench/_load.py``):
``POST /v1/agent/runs`` answers ``201`` with a ``stream_url``, and ``GET`` of it sends one
``POST /api/chat`` to the Ollama fake with the same client library as the agent
(``httpx``, one shared client), reads its NDJSON lines, decodes each once and re-emits
its text as an SSE ``content_chunk`` (``id:``, ``event:``, ``data:``), then one
``message_complete``. No durability, no auth, no history, no middleware: pure ASGI on
the same server stack (uvicorn, picking uvloop and httptools when installed). Its CPU per
run beside the agent's shows how much of the agent's cost is the stack itself.

Run by ``bench/capacity.py``:  python bench/floor_proxy.py --port N --upstream URL
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402
from starlette.types import ASGIApp, Receive, Scope, Send  # noqa: E402

from bench._common import raise_fd_limit  # noqa: E402

PREFIX = "/v1/agent/runs"
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def build_app(upstream: str, model: str) -> tuple[ASGIApp, httpx.AsyncClient]:
    """The proxy and its shared upstream client; runs asked for but not yet read are kept
    in the app's own dict (run id → message)."""
    http = httpx.AsyncClient(
        base_url=upstream, timeout=httpx.Timeout(120),
        limits=httpx.Limits(max_connections=4096, max_keepalive_connections=4096),
    )
    pending: dict[str, str] = {}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await http.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        path, method = scope["path"], scope["method"]
        if method == "POST" and path == PREFIX:
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            run_id = uuid.uuid4().hex
            pending[run_id] = str(orjson.loads(body).get("message", ""))
            answer = {"run_id": run_id, "conversation_id": run_id, "stream_url": f"{PREFIX}/{run_id}/events"}
            await _respond(send, 201, orjson.dumps(answer), b"application/json")
        elif method == "GET" and path.startswith(PREFIX + "/") and path.endswith("/events"):
            run_id = path[len(PREFIX) + 1 : -len("/events")]
            question = pending.pop(run_id, None)
            if question is None:
                await _respond(send, 404, b"no such run", b"text/plain")
                return
            await _stream(send, http, model, run_id, question)
        elif path == "/healthz":
            await _respond(send, 200, b"ok", b"text/plain")
        else:
            await _respond(send, 404, b"not found", b"text/plain")

    return app, http


async def _stream(send: Send, http: httpx.AsyncClient, model: str, run_id: str, question: str) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    seq = 0
    body = {"model": model, "messages": [{"role": "user", "content": question}], "stream": True}
    async with http.stream("POST", "/api/chat", json=body) as response:
        async for line in response.aiter_lines():
            if not line:
                continue
            part = orjson.loads(line)
            text = part.get("message", {}).get("content")
            if text:
                seq += 1
                frame = b"id: %d\nevent: content_chunk\ndata: %s\n\n" % (seq, orjson.dumps({"chunk": text}))
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            if part.get("done"):
                break
    end = orjson.dumps({"status": "completed", "run_id": run_id, "conversation_id": run_id, "turns": 1})
    frame = b"id: %d\nevent: message_complete\ndata: %s\n\n" % (seq + 1, end)
    await send({"type": "http.response.body", "body": frame, "more_body": False})


async def _respond(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    import uvicorn

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True, help="base URL of the Ollama fake")
    p.add_argument("--model", default="paced-llama:latest")
    args = p.parse_args()
    raise_fd_limit()
    app, _ = build_app(args.upstream, args.model)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False, backlog=4096)


if __name__ == "__main__":
    main()
