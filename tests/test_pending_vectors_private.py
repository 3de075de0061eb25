"""Documents of one user's attachment waiting for vectors: counted for the operator,
never in another user's search.

An attachment uploaded while the embedder cannot embed documents is stored for text
search and waits for vectors (the re-embedding's pending count). ``/readyz`` counts it
(the operator's view: the whole index); a search by meaning says "N document(s) have no
vectors yet" in its ``warnings``. That count was the whole index's, so another user's
search told of a file it could not search - and that one had been attached. It now
counts what the search covered only: the owner's search in that conversation counts the
attachment, another user's does not. Two JWT users on one served app; the model is the
Ollama fake, scripted; the embedder is the real hashing one whose document embedding
fails (``DocumentsDownEmbedder``), so queries still embed and the search is by meaning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from llm.ollama import OllamaProvider
from tests.conftest import running_app
from tests.fakes import FakeOllama, running_fake
from tests.test_compat_faces_owners import bearer, env
from tests.test_keyword_reuse_e2e import chat_bodies, tool_results
from tests.test_unreadable_vectors_private import NOTE, DocumentsDownEmbedder, a_search

ALICE, CAROL = bearer("alice"), bearer("carol")
WAITING = "document(s) have no vectors yet"


def waiting_warnings(result: dict[str, Any]) -> list[str]:
    return [w for w in result.get("warnings", []) if WAITING in w]


async def test_another_users_attachment_waiting_for_vectors_is_not_counted_in_a_search(tmp_path: Path) -> None:
    settings = Settings.from_env(env(tmp_path, AGENT_EMBEDDER="hashing"))
    async with running_app(settings) as (_base, app):  # the shared corpus, embedded
        kb = app.state.services.rooms.named("knowledge").kb
        await kb.create_bucket("default")
        await kb.ingest_documents([{"id": "bells", "title": "Bells", "text": "Church bells ring on Sundays."}])

    fake = FakeOllama()
    async with running_fake(fake.app) as ollama_url:
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=10)
        async with (
            running_app(settings, provider=provider, embedder=DocumentsDownEmbedder(dim=384)) as (base, _app),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            files = {"file": ("lighthouse-keeper.md", NOTE, "text/markdown")}
            up = await http.post("/v1/agent/conversations/a-one/attachments", files=files, headers=ALICE)
            assert up.status_code == 201, up.text
            ready = (await http.get("/readyz")).json()
            assert ready["checks"]["knowledge"]["pending_vectors"] == 1, ready  # the operator's: the whole index
            body = {"message": "When is the bell rung?", "context_type": "knowledge"}
            searches: list[dict[str, Any]] = []
            for headers, extra in ((CAROL, {}), (ALICE, {"conversation_id": "a-one"})):
                for turn in a_search():
                    fake.add_turn(turn)
                run = await http.post("/v1/agent/chat", headers=headers, json={**body, **extra})
                assert run.status_code == 200, run.text
                [result] = tool_results(chat_bodies(fake)[-1], "knowledge_base_search")  # this run's one search
                searches.append(result)
    carols, alices = searches
    # Carol's search covers the shared corpus only, all of it embedded: nothing waits there.
    assert not waiting_warnings(carols), carols
    # Alice's, in the conversation of her attachment, covers it: told it waits for vectors.
    assert [w.split(WAITING)[0] for w in waiting_warnings(alices)] == ["1 "], alices
