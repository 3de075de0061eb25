"""Attachment uploads go through the replica's overload admission (``app/ops/load.py``):
while the replica refuses new runs because its event loop stays late, an upload is
refused the same way (503 ``replica_busy`` with ``Retry-After``, nothing stored) and
accepted again once the lag has stayed low."""

from __future__ import annotations

import time

import httpx

from app.config import Settings
from app.ops.load import SUSTAINED_S, SUSTAINED_SAMPLES, ReplicaLoad
from tests.conftest import running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.test_load import FACES, keep_the_loop_late, metric

NOTE = b"# Hangar rules\n\nThe zeppelin hangar opens at six.\n"


async def upload(client: httpx.AsyncClient, conversation: str) -> httpx.Response:
    files = {"file": ("rules.md", NOTE, "text/markdown")}
    return await client.post(f"/v1/agent/conversations/{conversation}/attachments", files=files)


async def test_an_upload_is_refused_while_the_replica_is_overloaded(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider(lambda _request, _i: GatedTurn(["working ", gate, "done"]))
    cfg = settings.with_(max_loop_lag_ms=100)  # the setting under test, as in tests/test_load.py
    async with running_app(cfg, provider=provider, embedder=None) as (base, app):
        load: ReplicaLoad = app.state.services.load
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            live = await client.post("/v1/agent/runs", json=FACES[1][2])  # a stream to protect
            assert live.status_code == 201, live.text
            await keep_the_loop_late(load)
            await load.monitor.stop()  # hold the decision while the upload is answered

            refused = await upload(client, "busy-chat")
            assert refused.status_code == 503, refused.text
            assert refused.headers.get("retry-after") == "2"
            assert refused.json()["error"] == "replica_busy"
            # Nothing was stored: not even the conversation the upload would have made.
            assert (await client.get("/v1/agent/conversations/busy-chat/attachments")).status_code == 404
            metrics = (await client.get("/metrics")).text
            assert metric(metrics, 'agentchat_runs_refused_total{reason="loop_lag"}') == 1

            now = time.monotonic()  # the lag back under the limit long enough: accepted again
            for i in range(SUSTAINED_SAMPLES):
                load.monitor.record(0.001, now=now + i * 0.1)
            load.monitor.record(0.001, now=now + SUSTAINED_S + 0.2)
            assert not load.overloaded
            accepted = await upload(client, "busy-chat")
            assert accepted.status_code == 201, accepted.text
            listed = (await client.get("/v1/agent/conversations/busy-chat/attachments")).json()
            assert [a["filename"] for a in listed["attachments"]] == ["rules.md"]
            gate.open()
