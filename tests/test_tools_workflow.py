"""The workflow tools against the reference backend, served on real loopback."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from agenttools.backend_tools import register_backend_tools
from agenttools.core.catalog import build_catalog
from agenttools.core.drafts import Drafts
from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry
from agenttools.core.resolution import ResolutionCache
from agenttools.core.tool_support import WorkflowToolDeps
from backend.app import create_backend_app
from backend.seed import ADMIN_ID, ALERT_IDS, ALICE_ID, BOB_ID, ENTITIES, RULE_IDS, TRIGGER_TYPES, USERS
from storage.sqlite import open_sqlite_storage
from tests.support.events import wire
from tests.support.server import serve_app
from tests.support.sqlite_templates import SqliteTemplates

Call = Callable[..., Awaitable[ToolOutcome]]
USER_IDS = {"alice": ALICE_ID, "bob": BOB_ID, "admin": ADMIN_ID}


@pytest.fixture
async def env(tmp_path, sqlite_templates: SqliteTemplates):
    """(call, cache): ``await call(tool, args, user="alice", context=None)``."""
    async with serve_app(create_backend_app(str(sqlite_templates.backend_copy(tmp_path / "backend.db")))) as base_url:
        async with httpx.AsyncClient() as http:
            storage = await open_sqlite_storage(sqlite_templates.agent_copy(tmp_path / "agent.db"))
            drafts = Drafts(storage.drafts)
            cache = ResolutionCache()
            registry = ToolRegistry(build_catalog())
            register_backend_tools(registry, WorkflowToolDeps(backend_url=base_url, drafts=drafts, resolution_cache=cache))

            async def call(tool: str, args: dict[str, Any], user: str = "alice", context: dict | None = None) -> ToolOutcome:
                ctx = ToolContext(
                    user_id=USER_IDS.get(user, user),
                    authorization=f"Bearer demo-{user}",
                    conversation_id="conv",
                    run_id="run",
                    context_type="workflow",
                    context=context or {},
                    http=http,
                )
                handler = registry.handler(tool)
                assert handler is not None, tool
                return await handler(args, ctx)

            try:
                yield call, cache
            finally:
                await storage.close()


def ok(outcome: ToolOutcome) -> Any:
    assert not outcome.is_error, outcome.content
    return outcome.content


def err(outcome: ToolOutcome) -> str:
    assert outcome.is_error, outcome.content
    return str(outcome.content["error"])


# -- discover ----------------------------------------------------------------------------


async def test_discover_action_types_is_summarised_and_sorted(env) -> None:
    call, _ = env
    content = ok(await call("discover", {"category": "action_types"}))
    types = content["action_types"]
    assert [t["type"] for t in types] == sorted(t["type"] for t in types)
    assert len(types) == 17
    check = next(t for t in types if t["type"] == "check_inventory")
    assert check["output_ports"] == ["sufficient (default)", "insufficient"]
    assert check["config_fields"] == sorted(check["config_fields"])
    assert "threshold" in check["required_config_fields"]


async def test_discover_entities_and_triggers(env) -> None:
    call, _ = env
    entities = ok(await call("discover", {"category": "entities"}))["entities"]
    names = [e["name"] for e in entities]
    assert "inventory.inventory_items" in names and "hr.timesheets" not in names  # inactive left out
    triggers = ok(await call("discover", {"category": "trigger_types"}))["trigger_types"]
    assert {"on_create", "manual"} <= {t["name"] for t in triggers}


async def test_discover_unknown_category_names_the_valid_ones(env) -> None:
    call, _ = env
    message = err(await call("discover", {"category": "discover_entities"}))
    assert "action_types, trigger_types or entities" in message


# -- rules ---------------------------------------------------------------------------------


async def test_list_workflow_rules_reads_trigger_type_name(env) -> None:
    call, _ = env
    content = ok(await call("list_workflow_rules", {}))
    low = next(r for r in content["results"] if r["name"] == "Low Stock Alert")
    assert low["trigger_type"] == "on_update"
    assert low["entity"] == "inventory.inventory_items"
    assert content["total"] == len(RULE_IDS) and content["has_more"] is False


async def test_has_more_is_right_on_later_pages(env) -> None:
    call, _ = env
    page1 = ok(await call("list_workflow_rules", {"page": 1, "rows": 3}))
    page3 = ok(await call("list_workflow_rules", {"page": 3, "rows": 3}))
    assert page1["has_more"] is True and page1["showing"] == 3
    assert page3["showing"] == len(RULE_IDS) - 6 and page3["has_more"] is False


async def test_get_workflow_rule_by_name_with_outline_and_enriched_recipients(env) -> None:
    call, _ = env
    content = ok(await call("get_workflow_rule", {"workflow_id": "low_stock-alert"}))
    assert content["workflow_id"] == RULE_IDS["Low Stock Alert"]
    summary = content["summary"]
    assert summary["node_count"] == 3 and summary["branch_count"] == 1
    outline = summary["flow_outline"].splitlines()
    assert outline[0] == "Check Reorder Point (check_reorder_point)"
    alice = USERS["alice"]
    assert any(
        "[needs_reorder] Alert Inventory Team (create_alert)" in line
        and f"{alice.first_name} {alice.last_name} ({alice.email})" in line
        and "inventory_manager (role)" in line
        for line in outline
    ), outline
    assert "actions" not in content["rule"]


async def test_get_workflow_rule_errors(env) -> None:
    call, _ = env
    assert "list_workflow_rules" in err(await call("get_workflow_rule", {"workflow_id": "No Such Rule"}))
    missing = "00000000-0000-4000-8000-000000000000"
    assert err(await call("get_workflow_rule", {"workflow_id": missing})).startswith("HTTP 404:")
    assert "workflow_id is required" in err(await call("get_workflow_rule", {}))


async def test_get_workflow_rule_uses_the_context_id_when_injected(env) -> None:
    from agenttools.core.context_ids import inject_context_ids

    call, _ = env
    ctx = {"workflow_id": RULE_IDS["Welcome New Customer"]}
    args = inject_context_ids("get_workflow_rule", {"workflow_id": "welcome"}, "workflow", ctx)
    content = ok(await call("get_workflow_rule", args, context=ctx))
    assert content["rule"]["name"] == "Welcome New Customer"
    assert content["summary"]["flow_outline"] == "Welcome Email (send_email)"


async def test_explain_workflow_node_by_name_type_and_id(env) -> None:
    call, _ = env
    rule = RULE_IDS["Low Stock Alert"]
    by_name = ok(await call("explain_workflow_node", {"workflow_id": rule, "node_name": "Alert Inventory Team"}))
    assert by_name["depth_from_start"] == 1
    assert by_name["incoming_from"] == [
        {"action_id": by_name["incoming_from"][0]["action_id"], "action_name": "Check Reorder Point",
         "edge_type": "sequence", "output_port": "needs_reorder"}
    ]
    users = by_name["action"]["action_config"]["recipients"]["users"]
    assert users == [{"id": ALICE_ID, "name": "Alice Nguyen", "email": USERS["alice"].email}]
    start = ok(await call("explain_workflow_node", {"workflow_id": rule, "node_name": "check_reorder_point"}))
    assert start["depth_from_start"] == 0
    assert start["incoming_from"][0]["action_name"] == "(trigger)"
    by_id = ok(await call("explain_workflow_node", {"workflow_id": rule, "node_name": start["action"]["id"]}))
    assert by_id["action"]["name"] == "Check Reorder Point"


async def test_explain_workflow_node_errors(env) -> None:
    call, _ = env
    rule = RULE_IDS["Low Stock Alert"]
    message = err(await call("explain_workflow_node", {"workflow_id": rule, "node_name": "Nope"}))
    assert "available actions: Check Reorder Point" in message
    assert "workflow_id is required" in err(await call("explain_workflow_node", {"node_name": "x"}))
    assert "node_name is required" in err(await call("explain_workflow_node", {"workflow_id": rule}))


# -- alerts ------------------------------------------------------------------------------------


async def test_list_my_alerts_summarises_real_alert_shape(env) -> None:
    call, _ = env
    content = ok(await call("list_my_alerts", {}))
    assert content["total"] == 4 and content["showing"] == 4 and content["has_more"] is False
    first = content["results"][0]
    assert {"id", "severity", "status", "title", "created_date"} <= set(first)
    assert all(isinstance(r, str) for a in content["results"] for r in a.get("recipients", []))
    assert any(r.startswith("role:") for a in content["results"] for r in a.get("recipients", []))


async def test_list_my_alerts_filters_and_rejects_bad_enums(env) -> None:
    call, _ = env
    high = ok(await call("list_my_alerts", {"severity": "high"}))
    assert high["results"] and all(a["severity"] == "high" for a in high["results"])
    assert "status must be one of" in err(await call("list_my_alerts", {"status": "active&rows=1000"}))
    assert "rows must be a whole number" in err(await call("list_my_alerts", {"rows": "lots"}))


async def test_alert_detail_ownership_and_ids(env) -> None:
    call, _ = env
    alice_alert = ALERT_IDS["low_stock_widget"]
    assert ok(await call("get_alert_detail", {"alert_id": alice_alert}))["id"] == alice_alert
    assert err(await call("get_alert_detail", {"alert_id": alice_alert}, user="bob")).startswith("HTTP 403:")
    assert "full 36-character UUID" in err(await call("get_alert_detail", {"alert_id": "1234"}))
    assert "full 36-character UUID" in err(await call("get_alert_detail", {"alert_id": "../../core/users"}))


async def test_list_alerts_for_rule_admin_only(env) -> None:
    call, _ = env
    content = ok(await call("list_alerts_for_rule", {"workflow_id": "Low Stock Alert"}, user="admin"))
    assert content["workflow_id"] == RULE_IDS["Low Stock Alert"]
    assert content["results"] and all(a.get("source_rule") == "Low Stock Alert" for a in content["results"])
    assert err(await call("list_alerts_for_rule", {"workflow_id": "Low Stock Alert"})).startswith("HTTP 403:")


# -- preview_workflow ------------------------------------------------------------------------


def _new_workflow() -> dict[str, Any]:
    return {
        "name": "Notify on new order",
        "is_active": True,
        "entity": "sales.orders",
        "trigger_type": "on_create",
        "actions": [
            {"name": "Check", "action_type": "check_inventory", "action_config": {"threshold": 1}, "is_active": True},
            {
                "name": "Mail",
                "action_type": "send_email",
                "action_config": {"recipients": ["ops@example.com"], "subject": "s", "body": "b"},
                "is_active": True,
                "after": "Check",
            },
        ],
        "edges": [],
    }


async def test_preview_workflow_sends_the_transformed_workflow(env) -> None:
    call, _ = env
    outcome = await call("preview_workflow", {"workflow": _new_workflow(), "description": "Mail on new orders"})
    ok(outcome)
    assert outcome.model_content["status"] == "preview_sent"
    [(name, event)] = wire(outcome.events)
    assert name == "workflow_preview"
    assert event["is_update"] is False and "workflow_id" not in event
    wf = event["workflow"]
    assert wf["entity_id"] == ENTITIES["sales.orders"] and "entity" not in wf
    assert wf["trigger_type_id"] == TRIGGER_TYPES["on_create"]
    assert wf["edges"] == [
        {"target_action_id": "temp:0", "edge_type": "start", "edge_order": 0},
        {"source_action_id": "temp:0", "target_action_id": "temp:1", "edge_type": "sequence",
         "source_output": "sufficient", "edge_order": 1},
    ]
    assert all("after" not in a for a in wf["actions"])


async def test_preview_workflow_update_dry_runs_through_the_update_endpoint(env) -> None:
    call, _ = env
    rule_id = RULE_IDS["Welcome New Customer"]
    rule = ok(await call("get_workflow_rule", {"workflow_id": rule_id}))
    action = ok(await call("explain_workflow_node", {"workflow_id": rule_id, "node_name": "Welcome Email"}))["action"]
    workflow = {
        "name": rule["rule"]["name"],
        "is_active": True,
        "entity_id": rule["rule"]["entity_id"],
        "trigger_type_id": rule["rule"]["trigger_type_id"],
        "actions": [
            {"id": action["id"], "name": action["name"], "action_type": "send_email",
             "action_config": {**action["action_config"], "subject": "Welcome aboard!"}, "is_active": True}
        ],
        "edges": [{"target_action_id": action["id"], "edge_type": "start", "edge_order": 0}],
    }
    outcome = await call("preview_workflow", {"workflow_id": rule_id, "workflow": workflow, "description": "New subject"})
    ok(outcome)
    [(name, event)] = wire(outcome.events)
    assert event["is_update"] is True and event["workflow_id"] == rule_id
    # An existing action id only validates on the update endpoint: on create it would be rejected.
    assert event["workflow"]["actions"][0]["id"] == action["id"]


async def test_preview_workflow_invalid_graph_is_reported_not_previewed(env) -> None:
    call, _ = env
    wf = _new_workflow()
    wf["edges"] = [
        {"target_action_id": "temp:0", "edge_type": "start", "edge_order": 0},
        {"target_action_id": "temp:1", "edge_type": "start", "edge_order": 1},
    ]
    outcome = await call("preview_workflow", {"workflow": wf, "description": "x"})
    content = ok(outcome)
    assert outcome.events == [] and outcome.model_content is None
    assert content["valid"] is False and any("start edge" in e for e in content["errors"])


@pytest.mark.parametrize(
    "mutate,expected",
    [
        (lambda wf: wf.update(entity="nope.table"), "entity 'nope.table' not found; call discover"),
        (lambda wf: wf.update(entity="orders"), "'schema.table' format"),
        (lambda wf: wf.update(trigger_type="on_birthday"), "trigger type 'on_birthday' not found"),
        (lambda wf: wf["actions"][1].update(after="Ghost"), "no action is named 'Ghost'"),
        (lambda wf: wf["actions"][1].pop("after"), "both have no 'after'"),
        (lambda wf: wf["actions"][0].update(action_type="teleport"), "unknown action_type 'teleport'"),
    ],
)
async def test_preview_workflow_payload_errors(env, mutate, expected) -> None:
    call, _ = env
    wf = _new_workflow()
    mutate(wf)
    message = err(await call("preview_workflow", {"workflow": wf, "description": "x"}))
    assert expected in message
    assert "discover_entities" not in message and "discover_trigger_types" not in message


async def test_preview_workflow_struct_error_is_http_400(env) -> None:
    call, _ = env
    wf = _new_workflow()
    wf["name"] = "x" * 300
    assert err(await call("preview_workflow", {"workflow": wf, "description": "x"})).startswith("HTTP 400:")


async def test_preview_workflow_rejects_non_object_and_huge_payloads(env) -> None:
    call, _ = env
    assert "must be a JSON object" in err(await call("preview_workflow", {"workflow": [1], "description": "x"}))
    huge = _new_workflow()
    huge["actions"][0]["action_config"]["blob"] = "x" * 400_000
    assert "larger than" in err(await call("preview_workflow", {"workflow": huge, "description": "x"}))
    assert "description is required" in err(await call("preview_workflow", {"workflow": _new_workflow()}))


async def test_a_rule_created_moments_ago_resolves_after_one_refetch(tmp_path) -> None:
    """A cached list that lacks a name is refetched once (if older than a few seconds)."""
    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    async with serve_app(create_backend_app(str(tmp_path / "backend.db"))) as base_url:
        async with httpx.AsyncClient() as http:
            storage = await open_sqlite_storage(tmp_path / "agent.db")
            drafts = Drafts(storage.drafts)
            cache = ResolutionCache(clock=clock)
            registry = ToolRegistry(build_catalog())
            register_backend_tools(registry, WorkflowToolDeps(backend_url=base_url, drafts=drafts, resolution_cache=cache))
            ctx = ToolContext(user_id=ADMIN_ID, authorization="Bearer demo-admin", conversation_id="c",
                              run_id="r", context_type="workflow", context={}, http=http)
            get_rule = registry.handler("get_workflow_rule")
            try:
                ok(await get_rule({"workflow_id": "Low Stock Alert"}, ctx))
                body = {"name": "Brand New Rule", "is_active": True, "entity_id": ENTITIES["sales.orders"],
                        "trigger_type_id": TRIGGER_TYPES["manual"], "actions": [], "edges": []}
                saved = await http.post(f"{base_url}/v1/workflow/rules/full", json=body,
                                        headers={"Authorization": "Bearer demo-admin"})
                assert saved.status_code == 201, saved.text
                clock.now += 10  # well inside the 60 s TTL
                content = ok(await get_rule({"workflow_id": "Brand New Rule"}, ctx))
                assert content["rule"]["name"] == "Brand New Rule"
                assert cache.stats.refreshes == 1
                assert "not found" in err(await get_rule({"workflow_id": "Still Missing"}, ctx))
                assert cache.stats.refreshes == 1  # a fresh list is not refetched again
            finally:
                await storage.close()
