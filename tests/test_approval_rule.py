"""Which calls wait for a decision, and what carrying a parked run on does with one —
without a server: the setting, the registry's rule, the MCP annotations, and the agent
loop on a ``Run`` with no store (its events visible as emitted)."""

from __future__ import annotations

from typing import Any

import mcp.types as types

from agenttools.core.registry import ApprovalRule, ToolContext, ToolOutcome, ToolSpec
from agenttools.mcp.catalog import tool_from_mcp
from app.config import Settings
from app.runs.records import Caller, ChatInput
from app.runs.run import Run
from app.runs.state import PendingCalls, RunState
from llm.scripted import ScriptedCall, ScriptedProvider, ScriptedTurn
from llm.types import Message, ToolCall
from tests.support.agent_kit import build_agent, names, payloads, registry_of, tool


def test_the_setting_names_the_tools_none_or_each_tools_own_default() -> None:
    assert Settings.from_env({}).approval_tools is None
    assert Settings.from_env({"AGENT_APPROVAL_TOOLS": "default"}).approval_tools is None
    assert Settings.from_env({"AGENT_APPROVAL_TOOLS": "none"}).approval_tools == ()
    assert Settings.from_env({"AGENT_APPROVAL_TOOLS": " a, b ,a"}).approval_tools == ("a", "b")


def test_the_registry_sets_needs_approval_from_the_rule_also_for_tools_added_later() -> None:
    asks = ToolSpec(tool("wipe").definition, frozenset({"workflow"}), asks_approval=True)
    quiet = tool("read")
    reg = registry_of((asks, None), (quiet, None))
    assert reg.spec("wipe").needs_approval and not reg.spec("read").needs_approval
    reg.set_approval(ApprovalRule.from_setting(()))
    assert not reg.spec("wipe").needs_approval
    reg.set_approval(ApprovalRule.from_setting(("read",)))
    assert reg.spec("read").needs_approval and not reg.spec("wipe").needs_approval
    reg.add_spec(tool("later"))
    assert not reg.spec("later").needs_approval
    reg.set_approval(ApprovalRule.from_setting(None))
    assert reg.spec("wipe").needs_approval and not reg.spec("later").needs_approval


def test_mcp_annotations_decide_the_default() -> None:
    def listed(annotations: types.ToolAnnotations | None) -> bool:
        raw = types.Tool(name="t", description="d", inputSchema={"type": "object"}, annotations=annotations)
        return tool_from_mcp("srv", raw).asks_approval

    assert listed(None)  # says nothing: it may write
    assert listed(types.ToolAnnotations(readOnlyHint=False))
    assert not listed(types.ToolAnnotations(readOnlyHint=True))
    assert listed(types.ToolAnnotations(readOnlyHint=True, destructiveHint=True))
    assert listed(types.ToolAnnotations(destructiveHint=False))  # not read-only is enough


def _parked_state(call: ToolCall, *, decision: dict[str, Any] | None, started: bool) -> RunState:
    state = RunState(system="s", tool_names=["wipe"], budget=10_000, messages=[])
    state.add(Message("user", "wipe it"))
    state.add(Message("assistant", "", [call]))
    state.take_unsaved()
    state.turns = 1
    state.pending = PendingCalls(calls=[call], allowed=["wipe"], started=[call.id] if started else [])
    state.awaiting = {"tool_use_id": call.id, "name": call.name, "expires_at": 0.0}
    if decision is not None:
        state.approvals[call.id] = decision
    return state


async def _carry_on(state: RunState, ran: list[dict[str, Any]]) -> Run:
    spec = ToolSpec(tool("wipe", {"table": {"type": "string"}}).definition, frozenset({"workflow"}), asks_approval=True)

    async def wipe(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        ran.append(args)
        return ToolOutcome({"wiped": args.get("table")})

    agent = build_agent(ScriptedProvider([ScriptedTurn(chunks=["done"])]), registry_of((spec, wipe)))
    run = Run(id="run_unit", conversation_id="conv_unit", user_id="alice", context_type="workflow")
    await agent.run(run, ChatInput("wipe it", "workflow", {}, "conv_unit"), Caller("alice"), state=state)
    return run


async def test_an_approved_call_cut_off_by_a_crash_is_not_run_again() -> None:
    call = ToolCall("call_1", "wipe", {"table": "stock"})
    ran: list[dict[str, Any]] = []
    run = await _carry_on(_parked_state(call, decision={"decision": "approve"}, started=True), ran)
    assert ran == []  # marked started before the crash: at most once
    [result] = payloads(run, "tool_call_result")
    assert result["is_error"] and result["error"].startswith("interrupted")
    assert names(run)[-1] == "message_complete"


async def test_an_edited_call_runs_with_the_users_arguments_and_the_model_is_told() -> None:
    call = ToolCall("call_1", "wipe", {"table": "stock"})
    ran: list[dict[str, Any]] = []
    decision = {"decision": "edit", "arguments": {"table": "orders"}}
    run = await _carry_on(_parked_state(call, decision=decision, started=False), ran)
    assert ran == [{"table": "orders"}]
    assert payloads(run, "message_complete")[0]["status"] == "completed"


async def test_a_call_parked_on_and_carried_on_undecided_expired() -> None:
    call = ToolCall("call_1", "wipe", {"table": "stock"})
    ran: list[dict[str, Any]] = []
    run = await _carry_on(_parked_state(call, decision=None, started=False), ran)
    assert ran == []
    assert payloads(run, "error")[0]["code"] == "approval_expired"
    assert [p["status"] for p in payloads(run, "message_complete")] == ["cancelled"]


async def test_a_new_call_that_needs_approval_parks_the_run_without_ending_it() -> None:
    spec = ToolSpec(tool("wipe", {"table": {"type": "string"}}).definition, frozenset({"workflow"}), asks_approval=True)
    ran: list[dict[str, Any]] = []

    async def wipe(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        ran.append(args)
        return ToolOutcome({"ok": True})

    provider = ScriptedProvider([ScriptedTurn(calls=[ScriptedCall("wipe", {"table": "stock"})])])
    agent = build_agent(provider, registry_of((spec, wipe)))
    run = Run(id="run_unit", conversation_id="conv_unit", user_id="alice", context_type="workflow")
    await agent.run(run, ChatInput("wipe it", "workflow", {}, "conv_unit"), Caller("alice"))
    assert ran == [] and run.parked and not run.finished
    assert names(run)[-1] == "approval_required" and "message_complete" not in names(run)
    [wait] = payloads(run, "approval_required")
    assert wait["name"] == "wipe" and wait["arguments"] == {"table": "stock"}
