"""The OpenAI-compatible face names the field at fault (``param``) when a context's bucket
is refused, as it does for every other 400 (``model``, ``messages``, ...): it said
``"param": null`` for ``context.bucket: unknown bucket 'nope'`` (seen on a newcomer's
walk with the openai SDK). The native face's body is unchanged: error and detail."""

from __future__ import annotations

import httpx

from app.config import Settings
from tests.conftest import running_app


async def test_a_refused_bucket_names_its_field_on_the_openai_face_only(settings: Settings) -> None:
    question = [{"role": "user", "content": "What is a bucket?"}]
    async with running_app(settings) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as client:
        said = {}
        for key, value in (("bucket", "nope"), ("buckets", ["nope"]), ("buckets", 5)):
            refused = await client.post("/v1/chat/completions", json={
                "model": "agentchat-knowledge", "messages": question, "context": {key: value},
            })  # fmt: skip
            assert refused.status_code == 400, refused.text
            said[(key, str(value))] = (refused.json()["error"]["code"], refused.json()["error"]["param"])
        native = await client.post("/v1/agent/chat", json={
            "message": "What is a bucket?", "context_type": "knowledge", "context": {"bucket": "nope"},
        })  # fmt: skip
    assert said == {
        ("bucket", "nope"): ("unknown_bucket", "context.bucket"),
        ("buckets", "['nope']"): ("unknown_bucket", "context.buckets"),
        ("buckets", "5"): ("invalid_field", "context.buckets"),
    }
    assert native.status_code == 400 and set(native.json()) == {"error", "detail"}, native.text
    assert native.json()["error"] == "unknown_bucket"
