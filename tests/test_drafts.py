"""Workflow drafts: the draft rules over the store (ownership, TTL, limit, locking) and the
four draft tools."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from agenttools.backend_tools import register_backend_tools
from agenttools.core.catalog import build_catalog
from agenttools.core.drafts import DraftAction, DraftLimitError, DraftNotFoundError, Drafts
from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry
from agenttools.core.tool_support import WorkflowToolDeps
from backend.app import create_backend_app
from backend.seed import ALICE_ID, BOB_ID, ENTITIES, TRIGGER_TYPES
from tests.support.events import wire
from tests.support.server import serve_app
from tests.support.storage import opened_storage


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store(tmp_path):
    clock = FakeClock()
    async with opened_storage(tmp_path / "drafts.db") as storage:
        yield Drafts(storage.drafts, clock=clock, max_per_owner=3), clock


async def _new(s: Drafts, owner: str = "alice") -> str:
    d = await s.create(owner, name="n", entity="sales.orders", trigger_type="on_create")
    return d.id


# -- store ----------------------------------------------------------------------------------


async def test_another_callers_draft_is_not_found(store) -> None:
    s, _ = store
    draft_id = await _new(s, "alice")
    assert (await s.get("alice", draft_id)).id == draft_id
    with pytest.raises(DraftNotFoundError):
        await s.get("bob", draft_id)
    with pytest.raises(DraftNotFoundError):
        await s.update("bob", draft_id, lambda d: d.actions.clear())


async def test_ttl_expires_and_use_refreshes_it(store) -> None:
    s, clock = store
    draft_id = await _new(s)
    clock.now += 540  # 9 minutes
    await s.get("alice", draft_id)  # use slides the window
    clock.now += 540
    assert (await s.get("alice", draft_id)).id == draft_id
    clock.now += 601
    with pytest.raises(DraftNotFoundError):
        await s.get("alice", draft_id)
    assert await s.purge_expired() == 1


async def test_per_owner_limit_counts_only_live_drafts(store) -> None:
    s, clock = store
    for _ in range(3):
        await _new(s, "alice")
    with pytest.raises(DraftLimitError):
        await _new(s, "alice")
    await _new(s, "bob")  # another caller has their own budget
    clock.now += 601
    await _new(s, "alice")  # expired ones no longer count


async def test_concurrent_updates_do_not_lose_actions(store) -> None:
    s, _ = store
    draft_id = await _new(s)

    async def add(i: int) -> None:
        def mutate(d):
            d.actions.append(DraftAction(name=f"a{i}", action_type="delay", action_config={}))
        await s.update("alice", draft_id, mutate)

    await asyncio.gather(*(add(i) for i in range(20)))
    assert sorted(a.name for a in (await s.get("alice", draft_id)).actions) == sorted(f"a{i}" for i in range(20))


async def test_drafts_survive_a_reopen(tmp_path) -> None:
    path = tmp_path / "d.db"
    async with opened_storage(path) as storage:
        draft_id = await _new(Drafts(storage.drafts))
    async with opened_storage(path) as storage:  # migrations are idempotent
        assert (await Drafts(storage.drafts).get("alice", draft_id)).name == "n"


# -- tools against the reference backend ------------------------------------------------------


@pytest.fixture
async def tools(tmp_path):
    async with serve_app(create_backend_app(str(tmp_path / "backend.db"))) as base_url:
        async with httpx.AsyncClient() as http, opened_storage(tmp_path / "agent.db") as storage:
            registry = ToolRegistry(build_catalog())
            register_backend_tools(registry, WorkflowToolDeps(backend_url=base_url, drafts=Drafts(storage.drafts)))

            async def call(tool: str, args: dict[str, Any], user: str = "alice") -> ToolOutcome:
                ctx = ToolContext(
                    user_id={"alice": ALICE_ID, "bob": BOB_ID}[user],
                    authorization=f"Bearer demo-{user}",
                    conversation_id="c",
                    run_id="r",
                    context_type="workflow",
                    context={"is_new": True},
                    http=http,
                )
                return await registry.handler(tool)(args, ctx)  # type: ignore[misc]

            yield call


def ok(o: ToolOutcome) -> Any:
    assert not o.is_error, o.content
    return o.content


def err(o: ToolOutcome) -> str:
    assert o.is_error, o.content
    return str(o.content["error"])


async def _start(call, user: str = "alice") -> str:
    content = ok(await call("start_draft", {"name": "Order flow", "entity": "sales.orders", "trigger_type": "on_create"}, user))
    assert content["status"] == "draft_created"
    return str(content["draft_id"])


EMAIL = {"recipients": ["ops@example.com"], "subject": "New order", "body": "Check it"}


async def test_single_action_draft_previews_with_its_start_edge(tools) -> None:
    call = tools
    draft_id = await _start(call)
    added = ok(await call("add_draft_action", {"draft_id": draft_id, "name": "Mail", "action_type": "send_email", "action_config": EMAIL}))
    assert added["output_ports"] == ["success", "failure"] and added["action_index"] == 0
    outcome = await call("preview_draft", {"draft_id": draft_id, "description": "Mail on every order"})
    ok(outcome)
    [(name, event)] = wire(outcome.events)
    assert name == "workflow_preview" and event["is_update"] is False
    assert event["description"] == "Mail on every order"
    wf = event["workflow"]
    assert wf["entity_id"] == ENTITIES["sales.orders"] and wf["trigger_type_id"] == TRIGGER_TYPES["on_create"]
    assert wf["edges"] == [{"target_action_id": "temp:0", "edge_type": "start", "edge_order": 0}]
    assert outcome.model_content["status"] == "preview_sent"


async def test_branching_draft_uses_default_and_named_ports(tools) -> None:
    call = tools
    draft_id = await _start(call)
    ok(await call("add_draft_action", {"draft_id": draft_id, "name": "Check", "action_type": "check_inventory", "action_config": {"threshold": 2}}))
    ok(await call("add_draft_action", {"draft_id": draft_id, "name": "Mail", "action_type": "send_email", "action_config": EMAIL, "after": "Check"}))
    ok(await call("add_draft_action", {"draft_id": draft_id, "name": "Log", "action_type": "log_audit_entry", "action_config": {"message": "short"}, "after": "Check:insufficient"}))
    outcome = await call("preview_draft", {"draft_id": draft_id, "description": "d"})
    ok(outcome)
    edges = wire(outcome.events)[0][1]["workflow"]["edges"]
    assert [(e.get("source_action_id"), e["target_action_id"], e.get("source_output")) for e in edges] == [
        (None, "temp:0", None),
        ("temp:0", "temp:1", "sufficient"),
        ("temp:0", "temp:2", "insufficient"),
    ]


async def test_add_draft_action_validation(tools) -> None:
    call = tools
    draft_id = await _start(call)
    base = {"draft_id": draft_id, "name": "Check", "action_type": "check_inventory", "action_config": {"threshold": 2}}
    assert "unknown action_type 'teleport'" in err(await call("add_draft_action", {**base, "action_type": "teleport"}))
    assert "missing required field(s): threshold" in err(await call("add_draft_action", {**base, "action_config": {}}))
    assert "action_config must be a JSON object" in err(await call("add_draft_action", {**base, "action_config": [1]}))
    assert "'after' references unknown action 'Ghost'" in err(await call("add_draft_action", {**base, "after": "Ghost"}))
    ok(await call("add_draft_action", base))
    assert "already exists" in err(await call("add_draft_action", base))
    mail = {"draft_id": draft_id, "name": "Mail", "action_type": "send_email", "action_config": EMAIL}
    assert "has no output port 'maybe'" in err(await call("add_draft_action", {**mail, "after": "Check:maybe"}))
    assert "already has a start action" in err(await call("add_draft_action", mail))
    assert "action name is empty" in err(await call("add_draft_action", {**mail, "after": ":success"}))


async def test_remove_action_reconnects_dependants_to_its_predecessor(tools) -> None:
    call = tools
    draft_id = await _start(call)
    ok(await call("add_draft_action", {"draft_id": draft_id, "name": "A", "action_type": "check_inventory", "action_config": {"threshold": 1}}))
    ok(await call("add_draft_action", {"draft_id": draft_id, "name": "B", "action_type": "delay", "action_config": {"duration": 1, "unit": "hours"}, "after": "A:insufficient"}))
    ok(await call("add_draft_action", {"draft_id": draft_id, "name": "C", "action_type": "send_email", "action_config": EMAIL, "after": "B"}))
    removed = ok(await call("remove_draft_action", {"draft_id": draft_id, "action_name": "B"}))
    assert removed["reconnected"] == ["C"] and "2 action(s) remaining" in removed["message"]
    outcome = await call("preview_draft", {"draft_id": draft_id, "description": "d"})
    ok(outcome)
    edges = wire(outcome.events)[0][1]["workflow"]["edges"]
    assert [e["edge_type"] for e in edges] == ["start", "sequence"]
    assert edges[1]["source_output"] == "insufficient"
    assert "not found in the draft" in err(await call("remove_draft_action", {"draft_id": draft_id, "action_name": "B"}))


async def test_removing_the_start_action_promotes_its_only_follower(tools) -> None:
    call = tools
    draft_id = await _start(call)
    ok(await call("add_draft_action", {"draft_id": draft_id, "name": "A", "action_type": "delay", "action_config": {"duration": 1, "unit": "hours"}}))
    ok(await call("add_draft_action", {"draft_id": draft_id, "name": "B", "action_type": "send_email", "action_config": EMAIL, "after": "A"}))
    ok(await call("remove_draft_action", {"draft_id": draft_id, "action_name": "A"}))
    outcome = await call("preview_draft", {"draft_id": draft_id, "description": "d"})
    assert ok(outcome)["valid"] is True


async def test_drafts_are_invisible_to_another_caller(tools) -> None:
    call = tools
    draft_id = await _start(call, "alice")
    add = {"draft_id": draft_id, "name": "Mail", "action_type": "send_email", "action_config": EMAIL}
    assert "not found or expired" in err(await call("add_draft_action", add, "bob"))
    assert "not found or expired" in err(await call("preview_draft", {"draft_id": draft_id, "description": "d"}, "bob"))
    assert "not found or expired" in err(await call("remove_draft_action", {"draft_id": draft_id, "action_name": "Mail"}, "bob"))
    ok(await call("add_draft_action", add, "alice"))


async def test_start_draft_fails_early_on_bad_names(tools) -> None:
    call = tools
    assert "entity 'sales.nope' not found" in err(await call("start_draft", {"name": "x", "entity": "sales.nope", "trigger_type": "on_create"}))
    assert "trigger type 'hourly' not found" in err(await call("start_draft", {"name": "x", "entity": "sales.orders", "trigger_type": "hourly"}))
    assert "name is required" in err(await call("start_draft", {"entity": "sales.orders", "trigger_type": "on_create"}))


async def test_preview_draft_errors(tools) -> None:
    call = tools
    draft_id = await _start(call)
    assert "no actions yet" in err(await call("preview_draft", {"draft_id": draft_id, "description": "d"}))
    assert "description is required" in err(await call("preview_draft", {"draft_id": draft_id}))
    assert "not found or expired" in err(await call("preview_draft", {"draft_id": "not-a-draft", "description": "d"}))


async def test_invalid_action_config_comes_back_as_dry_run_errors(tools) -> None:
    call = tools
    draft_id = await _start(call)
    bad = {**EMAIL, "recipients": "not-a-list"}
    ok(await call("add_draft_action", {"draft_id": draft_id, "name": "Mail", "action_type": "send_email", "action_config": bad}))
    outcome = await call("preview_draft", {"draft_id": draft_id, "description": "d"})
    content = ok(outcome)
    assert outcome.events == [] and content["valid"] is False
    assert any(e.startswith("action config:") for e in content["errors"])
