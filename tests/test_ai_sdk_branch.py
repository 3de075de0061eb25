"""``regenerate()`` and an edited message (``sendMessage({text, messageId})``) with the
``ai`` package's own ``Chat`` over a real server: the model sees the branch the chat
shows. The server keeps the conversation's history, so before, a regenerated answer was
sent to the model after a copy of its question and the answer it replaces (3 user
messages for 2 turns), and an edit of the first message after every turn that followed
it. Now the stored history is cut back to the turn replaced (``app/server/history_branch.py``)
— refused with 409 while a run of the chat is live, 404 in a chat the user does not have,
400 for a ``messageId`` that names no message or answer of it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import httpx
import orjson

from app.config import Settings
from llm.scripted import ScriptedProvider, ScriptedTurn
from llm.types import ChatRequest
from tests.conftest import running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn, last_user_text
from tests.test_ai_sdk_stream import js, node, of, texts
from tests.test_compat_faces_owners import bearer, env

__all__ = ["node"]  # the fixture, shared with the AI SDK tests

WORKFLOW = {"context_type": "workflow"}  # a plain answer: no knowledge flow owed


def numbered() -> ScriptedProvider:
    """Answers ``Answer 1.``, ``Answer 2.``, … in the order the model is asked."""
    return ScriptedProvider(lambda request, index: ScriptedTurn(chunks=(f"Answer {index + 1}.",)))


def seen(request: ChatRequest) -> list[tuple[str, str]]:
    """The conversation the model was sent: (role, text) of each message."""
    return [(m.role, m.content) for m in request.messages]


def shown(state: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], texts(m)) for m in state["messages"]]


async def chat_steps(node: str, base: str, chat_id: str, first: str, *steps: str, **spec: Any) -> list[dict[str, Any]]:
    """A ``Chat`` sends ``first``, then each step (a line of ``tests/js/ai_sdk_client.mjs``),
    each after the previous request ended; the chat's state after each."""
    async with js(node, mode="chat", api=f"{base}/v1/agent/ui-stream", chatId=chat_id, text=first, body=WORKFLOW,
                  **spec) as client:
        await client.until(lambda recs: len(of(recs, "state")) == 1, "the first answer")
        for n, step in enumerate(steps, start=2):
            await client.send(step)
            await client.until(lambda recs, n=n: len(of(recs, "state")) == n, f"the request of {step!r} to end")
        records = await client.finish()
    states = of(records, "state")
    assert all(s["status"] == "ready" and s["error"] is None for s in states), states
    return states


async def test_regenerate_sends_the_model_one_copy_of_the_question_and_not_the_answer_replaced(
    node: str, settings: Settings
) -> None:
    provider = numbered()
    async with running_app(settings, provider=provider, embedder=None) as (base, app):
        states = await chat_steps(
            node, base, "chat-regen", "What is a lease?", "send How long does it last?", "regenerate"
        )
        first_answer = states[-1]["messages"][1]["id"]
        # The same chat reloaded: regenerate its first answer, named by its id.
        async with js(node, mode="chat", api=f"{base}/v1/agent/ui-stream", chatId="chat-regen",
                      messages=states[-1]["messages"], body=WORKFLOW) as client:
            await client.send(f"regenerate {first_answer}")
            await client.until(lambda recs: of(recs, "state"), "the regenerated first answer")
            [again] = of(await client.finish(), "state")
        stored = await app.state.services.conversations.load("chat-regen", "local")
    assert seen(provider.requests[2]) == [
        ("user", "What is a lease?"), ("assistant", "Answer 1."), ("user", "How long does it last?"),
    ]  # before: the question twice and "Answer 2." between them
    assert shown(states[-1]) == [
        ("user", "What is a lease?"), ("assistant", "Answer 1."),
        ("user", "How long does it last?"), ("assistant", "Answer 3."),
    ]
    assert seen(provider.requests[3]) == [("user", "What is a lease?")]
    assert shown(again) == [("user", "What is a lease?"), ("assistant", "Answer 4.")]
    assert [(m.role, m.content) for m in stored] == [("user", "What is a lease?"), ("assistant", "Answer 4.")]


async def test_an_edited_message_replaces_it_and_drops_what_followed(node: str, settings: Settings) -> None:
    provider = numbered()
    async with running_app(settings, provider=provider, embedder=None) as (base, app):
        states = await chat_steps(
            node, base, "chat-edit", "First question?", "send Second question?",
            "edit 2 Second question, edited?", "edit 0 First question, edited?",
        )
        stored = await app.state.services.conversations.load("chat-edit", "local")
    assert seen(provider.requests[2]) == [
        ("user", "First question?"), ("assistant", "Answer 1."), ("user", "Second question, edited?"),
    ]
    assert shown(states[2]) == [
        ("user", "First question?"), ("assistant", "Answer 1."),
        ("user", "Second question, edited?"), ("assistant", "Answer 3."),
    ]
    assert seen(provider.requests[3]) == [("user", "First question, edited?")]  # before: 4 user messages
    assert shown(states[3]) == [("user", "First question, edited?"), ("assistant", "Answer 4.")]
    assert [(m.role, m.content) for m in stored] == [("user", "First question, edited?"), ("assistant", "Answer 4.")]


def body(chat_id: str, *messages: dict[str, Any], trigger: str = "submit-message", message_id: str | None = None
         ) -> dict[str, Any]:
    return {"id": chat_id, "messages": list(messages), "trigger": trigger, "messageId": message_id, **WORKFLOW}


def user(msg_id: str, text: str) -> dict[str, Any]:
    return {"id": msg_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def answer(run_id: str, text: str) -> dict[str, Any]:
    return {"id": run_id, "role": "assistant", "parts": [{"type": "text", "text": text}]}


def run_id_of(stream: str) -> str:
    start = next(line[6:] for line in stream.splitlines() if line.startswith("data: {") and '"start"' in line)
    return str(orjson.loads(start)["messageId"])


async def test_a_cut_is_refused_while_live_for_unknown_ids_and_in_another_users_chat(tmp_path: Path) -> None:
    gate = Gate()

    def turn(request: ChatRequest, index: int) -> GatedTurn:
        question = last_user_text(request)
        return GatedTurn([gate, "Slow answer."] if question == "Second?" else [f"About {question}"])

    provider = GatedProvider(turn)
    alice, bob = bearer("alice"), bearer("bob")
    async with running_app(Settings.from_env(env(tmp_path)), provider=provider, embedder=None) as (base, app):
        api = "/v1/agent/ui-stream"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            first = await http.post(api, json=body("chat-x", user("u1", "First?")), headers=alice)
            assert first.status_code == 200, first.text
            run1 = run_id_of(first.text)
            regen = body("chat-x", user("u1", "First?"), trigger="regenerate-message", message_id=run1)
            # Bob has no chat "chat-x": nothing of his to regenerate, nothing of Alice's touched.
            missing = await http.post(api, json=regen, headers=bob)
            assert missing.status_code == 404, missing.text
            assert (await http.post(api, json=body("chat-x", user("b1", "Bob's?")), headers=bob)).status_code == 200
            # Now he has one: Alice's answer is no answer of it (400 naming it), nor a made-up id.
            for who, named in ((bob, run1), (alice, "run-nope")):
                refused = await http.post(api, json={**regen, "messageId": named}, headers=who)
                assert refused.status_code == 400 and named in refused.json()["detail"], refused.text
            edit = body("chat-x", user("u1", "First, edited?"), message_id="msg-nope")
            refused = await http.post(api, json=edit, headers=alice)
            assert refused.status_code == 400 and "msg-nope" in refused.json()["detail"], refused.text

            second = body("chat-x", user("u1", "First?"), answer(run1, "About First?"), user("u2", "Second?"))
            async with contextlib.AsyncExitStack() as stack:
                stack.callback(gate.open)  # a failed check leaves no run parked at its gate
                live = await stack.enter_async_context(http.stream("POST", api, json=second, headers=alice))
                assert live.status_code == 200
                await within(gate.reached.wait(), "the second run to park at its gate")
                for attempt in (regen, body("chat-x", user("u1", "Edited?"), message_id="u1")):
                    busy = await http.post(api, json=attempt, headers=alice)
                    assert busy.status_code == 409 and busy.json()["error"] == "conversation_busy", busy.text
                gate.open()
                rest = "".join([part async for part in live.aiter_text()])
                assert rest.endswith("data: [DONE]\n\n")
            after = await http.post(api, json=regen, headers=alice)  # the run ended: the cut goes through
            assert after.status_code == 200, after.text
        conversations = app.state.services.conversations
        alices = [(m.role, m.content) for m in await conversations.load("chat-x", "alice")]
        bobs = [(m.role, m.content) for m in await conversations.load("chat-x", "bob")]
    assert alices == [("user", "First?"), ("assistant", "About First?")]
    assert bobs == [("user", "Bob's?"), ("assistant", "About Bob's?")]
    asked = [seen(r) for r in provider.requests]
    assert asked[-1] == [("user", "First?")]  # the second turn (live when refused) is gone with the cut
