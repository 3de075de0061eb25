"""The reference backend over a real loopback server: shapes, auth, errors, validation."""

from __future__ import annotations

import asyncio
import base64
import copy
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from backend import create_backend_app, serve_backend
from backend.seed import (
    ACTION_TYPE_NAMES,
    ADMIN_ID,
    ALERT_IDS,
    ALICE_ID,
    BOB_ID,
    ENTITIES,
    ENTITY_TYPES,
    ROLES,
    RULE_IDS,
    RULES,
    TABLE_CONFIG_IDS,
    TABLE_CONFIGS,
    TRIGGER_TYPES,
)
from tests.support.server import free_port, serve_app

MISSING_ID = "00000000-0000-4000-8000-000000000000"


# Read-only tests share one seeded server (uvicorn start/stop dominates the run time);
# tests that write get their own fresh server and database through ``fresh``.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@asynccontextmanager
async def running_backend(db_path: Path) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    async with serve_app(create_backend_app(db_path)) as url:
        made = {
            name: httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer demo-{name}"})
            for name in ("admin", "alice", "bob")
        }
        made["anon"] = httpx.AsyncClient(base_url=url)
        try:
            yield made
        finally:
            for client in made.values():
                await client.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def clients(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    async with running_backend(tmp_path_factory.mktemp("backend") / "shared.db") as made:
        yield made


@pytest_asyncio.fixture(loop_scope="module")
async def fresh(tmp_path: Path) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    async with running_backend(tmp_path / "fresh.db") as made:
        yield made


@pytest.fixture
def base_url(clients: dict[str, httpx.AsyncClient]) -> str:
    return str(clients["anon"].base_url).rstrip("/")


@pytest.fixture
def alice(clients: dict[str, httpx.AsyncClient]) -> httpx.AsyncClient:
    return clients["alice"]


@pytest.fixture
def bob(clients: dict[str, httpx.AsyncClient]) -> httpx.AsyncClient:
    return clients["bob"]


@pytest.fixture
def admin(clients: dict[str, httpx.AsyncClient]) -> httpx.AsyncClient:
    return clients["admin"]


def jwt(claims: dict[str, Any]) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(obj)).rstrip(b"=").decode()

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.not-a-real-signature"


def assert_error(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = resp.json()
    assert body["code"] == code
    assert isinstance(body["message"], str) and body["message"]
    return body


# --- auth -------------------------------------------------------------------------------------


GET_ROUTES = [
    "/v1/workflow/action-types",
    "/v1/workflow/trigger-types",
    "/v1/workflow/entities",
    "/v1/workflow/rules",
    f"/v1/workflow/rules/{RULE_IDS['Low Stock Alert']}",
    f"/v1/workflow/rules/{RULE_IDS['Low Stock Alert']}/actions",
    f"/v1/workflow/rules/{RULE_IDS['Low Stock Alert']}/edges",
    "/v1/workflow/alerts/mine",
    "/v1/workflow/alerts",
    f"/v1/workflow/alerts/{ALERT_IDS['low_stock_widget']}",
    f"/v1/core/users/{ALICE_ID}",
    f"/v1/core/roles/{ROLES['admin']}",
    "/v1/introspection/schemas",
    "/v1/introspection/schemas/sales/tables",
    "/v1/introspection/tables/sales/orders/columns",
    "/v1/introspection/tables/sales/orders/relationships",
    f"/v1/data/id/{TABLE_CONFIG_IDS['customer_directory']}",
    "/v1/data/name/customer_directory",
    "/v1/data/configs/all",
]


async def test_every_endpoint_requires_a_bearer_token(clients: dict[str, httpx.AsyncClient]) -> None:
    anon = clients["anon"]
    for path in GET_ROUTES:
        resp = await anon.get(path)
        assert_error(resp, 401, "unauthenticated")
        assert resp.headers["www-authenticate"] == "Bearer"
    for method, path in [
        ("POST", "/v1/workflow/rules/full?dry_run=true"),
        ("PUT", f"/v1/workflow/rules/{RULE_IDS['Low Stock Alert']}/full"),
        ("POST", "/v1/data/validate"),
        ("POST", "/v1/data"),
        ("PUT", f"/v1/data/{TABLE_CONFIG_IDS['customer_directory']}"),
    ]:
        assert_error(await anon.request(method, path, json={}), 401, "unauthenticated")


async def test_bad_tokens_are_refused(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url) as c:
        for header in ["Basic ZGVtbzpkZW1v", "Bearer", "Bearer demo-mallory", "Bearer a.b.c", "demo-alice"]:
            assert_error(await c.get("/v1/workflow/rules", headers={"Authorization": header}), 401, "unauthenticated")
        bad_claims: list[dict[str, Any]] = [
            {"sub": "mallory"},
            {"name": "no subject"},
            {"sub": "alice", "exp": int(time.time()) - 60},
        ]
        for claims in bad_claims:
            resp = await c.get("/v1/workflow/rules", headers={"Authorization": f"Bearer {jwt(claims)}"})
            assert_error(resp, 401, "unauthenticated")


async def test_unsigned_jwt_subject_selects_the_user(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url) as c:
        for sub in ("bob", BOB_ID):
            token = jwt({"sub": sub, "exp": int(time.time()) + 600})
            resp = await c.get("/v1/workflow/alerts/mine", headers={"Authorization": f"Bearer {token}"})
            assert resp.status_code == 200
            ids = {a["id"] for a in resp.json()["items"]}
            assert ids == {ALERT_IDS["shortage_so1042"], ALERT_IDS["approval_so1043"], ALERT_IDS["invoice_inv2001"]}


# --- workflow catalog ---------------------------------------------------------------------------


async def test_action_types_have_ports_and_schemas(alice: httpx.AsyncClient) -> None:
    resp = await alice.get("/v1/workflow/action-types")
    assert resp.status_code == 200
    types = resp.json()
    assert [t["type"] for t in types] == list(ACTION_TYPE_NAMES)
    assert len(types) == 17
    for t in types:
        assert set(t) == {
            "type",
            "name",
            "description",
            "category",
            "supports_manual_execution",
            "is_async",
            "config_schema",
            "output_ports",
        }
        assert sum(p["is_default"] for p in t["output_ports"]) == 1
        assert all(set(p) == {"name", "description", "is_default"} for p in t["output_ports"])
        assert t["config_schema"]["type"] == "object" and isinstance(t["config_schema"]["properties"], dict)
    by_type = {t["type"]: t for t in types}
    assert [p["name"] for p in by_type["evaluate_condition"]["output_ports"]] == ["output-true", "output-false"]
    assert "recipients" in by_type["create_alert"]["config_schema"]["required"]


async def test_trigger_types_and_entities(alice: httpx.AsyncClient) -> None:
    triggers = (await alice.get("/v1/workflow/trigger-types")).json()
    assert {t["name"]: t["id"] for t in triggers} == dict(TRIGGER_TYPES)
    assert all(set(t) == {"id", "name", "description", "is_active"} for t in triggers)

    entities = (await alice.get("/v1/workflow/entities")).json()
    assert {f"{e['schema_name']}.{e['name']}": e["id"] for e in entities} == dict(ENTITIES)
    assert all(set(e) == {"id", "name", "entity_type_id", "schema_name", "is_active"} for e in entities)
    assert any(not e["is_active"] for e in entities)

    filtered = await alice.get("/v1/workflow/entities", params={"entity_type_id": ENTITY_TYPES["view"]})
    assert filtered.status_code == 200 and filtered.json() == []
    assert_error(await alice.get("/v1/workflow/entities", params={"entity_type_id": "nope"}), 400, "invalid_argument")


# --- rules ---------------------------------------------------------------------------------------


async def test_rules_list_paginates(alice: httpx.AsyncClient) -> None:
    first = (await alice.get("/v1/workflow/rules")).json()
    assert set(first) == {"items", "total", "page", "rows_per_page"}
    assert first["total"] == len(RULES) == 8
    assert first["page"] == 1 and first["rows_per_page"] == 10 and len(first["items"]) == 8
    rule = first["items"][0]
    assert rule["trigger_type_name"] in TRIGGER_TYPES and "trigger_type" not in rule
    assert {"entity_name", "entity_schema_name", "entity_type_name", "created_date", "is_active"} <= set(rule)
    assert [r["name"] for r in first["items"]] == sorted(RULE_IDS)

    page3 = (await alice.get("/v1/workflow/rules", params={"page": 3, "rows": 3})).json()
    assert page3["page"] == 3 and page3["rows_per_page"] == 3 and page3["total"] == 8
    assert [r["name"] for r in page3["items"]] == sorted(RULE_IDS)[6:]
    beyond = (await alice.get("/v1/workflow/rules", params={"page": 9, "rows": 3})).json()
    assert beyond["items"] == [] and beyond["total"] == 8
    assert len((await alice.get("/v1/workflow/rules", params={"rows": 1000})).json()["items"]) == 8


@pytest.mark.parametrize(
    "params", [{"page": "0"}, {"page": "-1"}, {"rows": "0"}, {"rows": "1001"}, {"rows": "abc"}, {"page": "1.5"}]
)
async def test_invalid_pagination_is_a_400(alice: httpx.AsyncClient, params: dict[str, str]) -> None:
    assert_error(await alice.get("/v1/workflow/rules", params=params), 400, "invalid_argument")
    assert_error(await alice.get("/v1/workflow/alerts/mine", params=params), 400, "invalid_argument")


async def test_get_rule_actions_and_edges(alice: httpx.AsyncClient) -> None:
    seed = next(r for r in RULES if r.key == "low_stock")
    rule = (await alice.get(f"/v1/workflow/rules/{seed.id}")).json()
    assert rule["id"] == seed.id and rule["name"] == "Low Stock Alert"
    assert rule["entity_id"] == ENTITIES["inventory.inventory_items"]
    assert rule["entity_schema_name"] == "inventory" and rule["entity_name"] == "inventory_items"
    assert rule["trigger_type_id"] == TRIGGER_TYPES["on_update"] and rule["trigger_type_name"] == "on_update"
    assert [a["name"] for a in rule["actions"]] == [a.name for a in seed.actions]

    actions = (await alice.get(f"/v1/workflow/rules/{seed.id}/actions")).json()
    assert actions == rule["actions"]
    alert = next(a for a in actions if a["action_type"] == "create_alert")
    assert set(alert) == {"id", "rule_id", "name", "description", "action_type", "action_config", "is_active"}
    assert alert["action_config"]["recipients"] == {"users": [ALICE_ID], "roles": [ROLES["inventory_manager"]]}

    edges = (await alice.get(f"/v1/workflow/rules/{seed.id}/edges")).json()
    start = [e for e in edges if e["edge_type"] == "start"]
    assert len(start) == 1 and "source_action_id" not in start[0] and "source_output" not in start[0]
    assert start[0]["target_action_id"] == seed.action_id("check")
    needs = next(e for e in edges if e.get("source_output") == "needs_reorder")
    assert needs["source_action_id"] == seed.action_id("check") and needs["target_action_id"] == seed.action_id("alert")
    assert [e["edge_order"] for e in edges] == sorted(e["edge_order"] for e in edges)


async def test_unknown_and_malformed_rule_ids(alice: httpx.AsyncClient) -> None:
    for suffix in ("", "/actions", "/edges"):
        assert_error(await alice.get(f"/v1/workflow/rules/{MISSING_ID}{suffix}"), 404, "not_found")
        assert_error(await alice.get(f"/v1/workflow/rules/not-a-uuid{suffix}"), 400, "invalid_argument")
    assert_error(await alice.get("/v1/workflow/nothing-here"), 404, "not_found")


# --- alerts ---------------------------------------------------------------------------------------


ALICE_ALERTS = {"low_stock_widget", "low_stock_gadget", "low_stock_bolts", "invoice_inv2002"}


async def test_my_alerts_are_scoped_to_the_caller(alice: httpx.AsyncClient, bob: httpx.AsyncClient) -> None:
    mine = (await alice.get("/v1/workflow/alerts/mine")).json()
    assert set(mine) == {"items", "total", "page", "rows_per_page"}
    assert {a["id"] for a in mine["items"]} == {ALERT_IDS[k] for k in ALICE_ALERTS}
    assert mine["total"] == 4
    dates = [a["createdDate"] for a in mine["items"]]
    assert dates == sorted(dates, reverse=True)
    widget = next(a for a in mine["items"] if a["id"] == ALERT_IDS["low_stock_widget"])
    assert widget["alertType"] == "low_stock" and widget["sourceRuleName"] == "Low Stock Alert"
    assert widget["sourceRuleId"] == RULE_IDS["Low Stock Alert"]
    assert {"createdDate", "updatedDate", "sourceEntityName", "context"} <= set(widget)
    assert "created_at" not in widget
    assert widget["recipients"] == [
        {
            "recipientType": "user",
            "recipientId": ALICE_ID,
            "name": "Alice Nguyen",
            "email": "alice.nguyen@ichor.example",
        },
        {"recipientType": "role", "recipientId": ROLES["inventory_manager"], "name": "inventory_manager"},
    ]
    bobs = (await bob.get("/v1/workflow/alerts/mine")).json()
    assert {a["id"] for a in bobs["items"]}.isdisjoint({ALERT_IDS[k] for k in ALICE_ALERTS})


async def test_my_alerts_filters_and_pages(alice: httpx.AsyncClient) -> None:
    active = (await alice.get("/v1/workflow/alerts/mine", params={"status": "active"})).json()
    assert {a["id"] for a in active["items"]} == {ALERT_IDS["low_stock_widget"], ALERT_IDS["low_stock_bolts"]}
    mixed = (
        await alice.get("/v1/workflow/alerts/mine", params={"status": "active,dismissed", "severity": "low"})
    ).json()
    assert {a["id"] for a in mixed["items"]} == {ALERT_IDS["low_stock_bolts"], ALERT_IDS["invoice_inv2002"]}
    page2 = (await alice.get("/v1/workflow/alerts/mine", params={"rows": 3, "page": 2})).json()
    assert page2["total"] == 4 and len(page2["items"]) == 1 and page2["rows_per_page"] == 3
    for params in ({"status": "open"}, {"severity": "urgent"}, {"status": "active,bogus"}):
        assert_error(await alice.get("/v1/workflow/alerts/mine", params=params), 400, "invalid_argument")


async def test_admin_alert_list(alice: httpx.AsyncClient, admin: httpx.AsyncClient) -> None:
    assert_error(await alice.get("/v1/workflow/alerts"), 403, "permission_denied")
    everything = (await admin.get("/v1/workflow/alerts", params={"rows": 100})).json()
    assert everything["total"] == len(ALERT_IDS)
    rule_id = RULE_IDS["Low Stock Alert"]
    for_rule = (await admin.get("/v1/workflow/alerts", params={"sourceRuleId": rule_id, "status": "active"})).json()
    assert {a["id"] for a in for_rule["items"]} == {ALERT_IDS["low_stock_widget"], ALERT_IDS["low_stock_bolts"]}
    assert_error(await admin.get("/v1/workflow/alerts", params={"sourceRuleId": "x"}), 400, "invalid_argument")


async def test_alert_detail_access(alice: httpx.AsyncClient, bob: httpx.AsyncClient, admin: httpx.AsyncClient) -> None:
    gadget = await alice.get(f"/v1/workflow/alerts/{ALERT_IDS['low_stock_gadget']}")  # alice only via her role
    assert gadget.status_code == 200
    body = gadget.json()
    assert body["status"] == "acknowledged"
    assert body["recipients"] == [
        {"recipientType": "role", "recipientId": ROLES["inventory_manager"], "name": "inventory_manager"}
    ]
    assert body["acknowledgments"][0]["userId"] == ALICE_ID
    assert set(body["acknowledgments"][0]) == {"id", "alertId", "userId", "userName", "acknowledgedDate", "notes"}

    assert_error(await alice.get(f"/v1/workflow/alerts/{ALERT_IDS['shortage_so1042']}"), 403, "permission_denied")
    assert_error(await bob.get(f"/v1/workflow/alerts/{ALERT_IDS['low_stock_widget']}"), 403, "permission_denied")
    assert_error(await alice.get(f"/v1/workflow/alerts/{MISSING_ID}"), 404, "not_found")
    assert (await admin.get(f"/v1/workflow/alerts/{ALERT_IDS['shortage_so1042']}")).status_code == 200
    system = (await admin.get(f"/v1/workflow/alerts/{ALERT_IDS['system_backup']}")).json()
    assert "sourceRuleId" not in system and system["acknowledgments"] == []


# --- users and roles ------------------------------------------------------------------------------


async def test_users_and_roles(bob: httpx.AsyncClient) -> None:
    user = (await bob.get(f"/v1/core/users/{ALICE_ID}")).json()
    assert user["first_name"] == "Alice" and user["last_name"] == "Nguyen"
    assert user["email"] == "alice.nguyen@ichor.example" and user["username"] == "alice"
    assert user["roles"] == ["inventory_manager", "warehouse_staff"]
    assert "firstName" not in user
    role = (await bob.get(f"/v1/core/roles/{ROLES['sales_manager']}")).json()
    assert role == {"id": ROLES["sales_manager"], "name": "sales_manager", "description": role["description"]}
    assert_error(await bob.get(f"/v1/core/users/{MISSING_ID}"), 404, "not_found")
    assert_error(await bob.get(f"/v1/core/roles/{MISSING_ID}"), 404, "not_found")
    assert (await bob.get(f"/v1/core/users/{ADMIN_ID}")).json()["roles"] == ["admin"]


# --- introspection --------------------------------------------------------------------------------


async def test_introspection(alice: httpx.AsyncClient) -> None:
    assert (await alice.get("/v1/introspection/schemas")).json() == [
        {"name": "core"},
        {"name": "hr"},
        {"name": "inventory"},
        {"name": "sales"},
    ]
    tables = (await alice.get("/v1/introspection/schemas/sales/tables")).json()
    assert [t["name"] for t in tables] == ["customers", "invoices", "order_line_items", "orders"]
    assert all(t["schema"] == "sales" and t["row_count_estimate"] > 0 for t in tables)

    columns = (await alice.get("/v1/introspection/tables/sales/orders/columns")).json()
    by_name = {c["name"]: c for c in columns}
    assert by_name["id"]["is_primary_key"] and not by_name["id"]["is_foreign_key"]
    assert by_name["id"]["data_type"] == "uuid"
    fk = by_name["customer_id"]
    assert fk["is_foreign_key"] and (fk["referenced_schema"], fk["referenced_table"], fk["referenced_column"]) == (
        "sales",
        "customers",
        "id",
    )
    assert by_name["due_date"]["is_nullable"] and "referenced_table" not in by_name["due_date"]

    rels = (await alice.get("/v1/introspection/tables/sales/orders/relationships")).json()
    outgoing = {(r["column_name"], r["referenced_table"]) for r in rels if r["relationship_type"] == "many-to-one"}
    incoming = {(r["column_name"], r["referenced_table"]) for r in rels if r["relationship_type"] == "one-to-many"}
    assert outgoing == {("customer_id", "customers"), ("created_by", "users")}
    assert incoming == {("id", "order_line_items"), ("id", "invoices")}
    assert all(
        set(r)
        == {
            "foreign_key_name",
            "column_name",
            "referenced_schema",
            "referenced_table",
            "referenced_column",
            "relationship_type",
        }
        for r in rels
    )


async def test_introspection_rejects_bad_identifiers(alice: httpx.AsyncClient) -> None:
    assert_error(await alice.get("/v1/introspection/schemas/nope/tables"), 404, "not_found")
    assert_error(await alice.get("/v1/introspection/tables/sales/nope/columns"), 404, "not_found")
    assert_error(await alice.get("/v1/introspection/tables/nope/orders/relationships"), 404, "not_found")
    for raw in ("sales..orders", "..sales", "sales%3Fx%3D1", "sales%23frag", "sa%20les", "1abc"):
        assert_error(await alice.get(f"/v1/introspection/schemas/{raw}/tables"), 400, "invalid_argument")
        assert_error(await alice.get(f"/v1/introspection/tables/sales/{raw}/columns"), 400, "invalid_argument")
    # An encoded slash decodes to an extra path segment, which no route matches.
    assert_error(await alice.get("/v1/introspection/schemas/sales%2F..%2Fcore/tables"), 404, "not_found")


# --- full save / dry run ---------------------------------------------------------------------------


def workflow(**overrides: Any) -> dict[str, Any]:
    """A valid three-action workflow with temp references."""
    body: dict[str, Any] = {
        "name": "Reorder widgets",
        "description": "Alert when stock is low",
        "is_active": True,
        "entity_id": ENTITIES["inventory.inventory_items"],
        "trigger_type_id": TRIGGER_TYPES["on_update"],
        "trigger_conditions": {},
        "actions": [
            {"name": "Check", "action_type": "check_reorder_point", "action_config": {}, "is_active": True},
            {
                "name": "Alert",
                "action_type": "create_alert",
                "action_config": {
                    "alert_type": "low_stock",
                    "severity": "high",
                    "title": "Low",
                    "message": "Stock is low",
                    "recipients": {"users": [ALICE_ID], "roles": []},
                },
                "is_active": True,
                "after": "Check:needs_reorder",
            },
            {"name": "Log", "action_type": "log_audit_entry", "action_config": {"message": "ok"}, "is_active": True},
        ],
        "edges": [
            {"target_action_id": "temp:0", "edge_type": "start", "edge_order": 0},
            {
                "source_action_id": "temp:0",
                "target_action_id": "temp:1",
                "edge_type": "sequence",
                "source_output": "needs_reorder",
                "edge_order": 1,
            },
            {
                "source_action_id": "temp:0",
                "target_action_id": "temp:2",
                "edge_type": "sequence",
                "source_output": "ok",
                "edge_order": 2,
            },
        ],
    }
    body.update(overrides)
    return body


async def dry_run(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post("/v1/workflow/rules/full", params={"dry_run": "true"}, json=body)
    assert resp.status_code == 200, resp.text
    result: dict[str, Any] = resp.json()
    assert set(result) == {"valid", "errors", "action_count", "edge_count"}
    return result


async def test_dry_run_valid_workflow(alice: httpx.AsyncClient) -> None:
    assert await dry_run(alice, workflow()) == {"valid": True, "errors": [], "action_count": 3, "edge_count": 3}
    assert await dry_run(alice, workflow(actions=[], edges=[])) == {
        "valid": True,
        "errors": [],
        "action_count": 0,
        "edge_count": 0,
    }
    single = workflow(actions=workflow()["actions"][2:], edges=[{"target_action_id": "temp:0", "edge_type": "start"}])
    assert (await dry_run(alice, single))["valid"] is True
    # Nothing was saved by the dry runs.
    assert (await alice.get("/v1/workflow/rules")).json()["total"] == 8


def _edges(*edges: tuple[str | None, str, str, str | None]) -> list[dict[str, Any]]:
    out = []
    for i, (src, dst, kind, port) in enumerate(edges):
        edge: dict[str, Any] = {"target_action_id": dst, "edge_type": kind, "edge_order": i}
        if src is not None:
            edge["source_action_id"] = src
        if port is not None:
            edge["source_output"] = port
        out.append(edge)
    return out


GRAPH_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("no edges", {"edges": []}, ["graph: rules with actions require at least one edge"]),
    (
        "two start edges",
        {
            "edges": _edges(
                (None, "temp:0", "start", None), (None, "temp:1", "start", None), ("temp:0", "temp:2", "sequence", "ok")
            )
        },
        ["graph: exactly one start edge is required, found 2"],
    ),
    (
        "no start edge",
        {"edges": _edges(("temp:0", "temp:1", "sequence", "needs_reorder"), ("temp:0", "temp:2", "sequence", "ok"))},
        ["graph: exactly one start edge is required, found 0"],
    ),
    (
        "unresolved temp",
        {
            "edges": _edges(
                (None, "temp:0", "start", None),
                ("temp:0", "temp:7", "sequence", "ok"),
                ("temp:0", "temp:1", "always", None),
                ("temp:0", "temp:2", "always", None),
            )
        },
        ["graph: edges[1].target_action_id 'temp:7' is out of range: there are 3 action(s)"],
    ),
    (
        "unknown uuid",
        {
            "edges": _edges(
                (None, "temp:0", "start", None),
                (MISSING_ID, "temp:1", "sequence", None),
                ("temp:0", "temp:2", "sequence", None),
                ("temp:0", "temp:1", "sequence", None),
            )
        },
        [f"graph: edges[1].source_action_id '{MISSING_ID}' is not the id of any action in this request"],
    ),
    (
        "cycle",
        {
            "edges": _edges(
                (None, "temp:0", "start", None),
                ("temp:0", "temp:1", "sequence", "needs_reorder"),
                ("temp:1", "temp:2", "sequence", "success"),
                ("temp:2", "temp:1", "always", None),
            )
        },
        ['graph: cycle detected: "Alert" -> "Log" -> "Alert"'],
    ),
    (
        "unreachable",
        {"edges": _edges((None, "temp:0", "start", None), ("temp:0", "temp:1", "sequence", "needs_reorder"))},
        ['graph: action "Log" (actions[2]) is not reachable from the start edge'],
    ),
    (
        "start edge with a source",
        {
            "edges": _edges(
                ("temp:1", "temp:0", "start", None),
                ("temp:0", "temp:1", "sequence", None),
                ("temp:0", "temp:2", "sequence", None),
            )
        },
        ["graph: edges[0] is a start edge and must not have a source_action_id"],
    ),
    (
        "sequence without a source",
        {
            "edges": _edges(
                (None, "temp:0", "start", None),
                (None, "temp:1", "sequence", None),
                ("temp:0", "temp:2", "sequence", None),
            )
        },
        ["graph: edges[1] is a sequence edge and needs a source_action_id"],
    ),
    (
        "bad port",
        {
            "edges": _edges(
                (None, "temp:0", "start", None),
                ("temp:0", "temp:1", "sequence", "success"),
                ("temp:0", "temp:2", "sequence", "ok"),
            )
        },
        [
            "output port: edges[1]: 'success' is not an output port of action \"Check\" (check_reorder_point); "
            "valid ports: ok, needs_reorder"
        ],
    ),
]


@pytest.mark.parametrize(("case", "overrides", "expected"), GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
async def test_dry_run_graph_errors(
    alice: httpx.AsyncClient, case: str, overrides: dict[str, Any], expected: list[str]
) -> None:
    result = await dry_run(alice, workflow(**overrides))
    assert result["valid"] is False
    for want in expected:
        assert any(err.startswith(want) for err in result["errors"]), (want, result["errors"])
    assert result["action_count"] == 3 and result["edge_count"] == len(workflow(**overrides)["edges"])


async def test_dry_run_action_config_errors(alice: httpx.AsyncClient) -> None:
    body = workflow()
    body["actions"][1]["action_config"] = {
        "alert_type": "low_stock",
        "severity": "urgent",
        "title": "",
        "recipients": {"users": ["alice"]},
    }
    body["actions"][2]["action_config"] = {"message": 5}
    result = await dry_run(alice, body)
    assert result["valid"] is False
    prefix = 'action config: actions[1] "Alert" (create_alert): '
    assert f"{prefix}severity: 'urgent' is not one of low, medium, high, critical" in result["errors"]
    assert f"{prefix}message: is required" in result["errors"]
    assert f"{prefix}title: must be at least 1 characters" in result["errors"]
    assert f"{prefix}recipients.users[0]: must be a 36-character UUID, got 'alice'" in result["errors"]
    assert (
        'action config: actions[2] "Log" (log_audit_entry): message: expected string, got integer' in result["errors"]
    )
    assert all(e.startswith("action config: ") for e in result["errors"])


STRUCT_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("missing name", {"name": None}, "name"),
    ("long name", {"name": "x" * 256}, "name"),
    ("long description", {"description": "x" * 1001}, "description"),
    ("missing entity", {"entity_id": None}, "entity_id"),
    ("entity not a uuid", {"entity_id": "inventory.inventory_items"}, "entity_id"),
    ("unknown entity", {"entity_id": MISSING_ID}, "entity_id"),
    ("unknown trigger", {"trigger_type_id": MISSING_ID}, "trigger_type_id"),
    ("actions not a list", {"actions": {"a": 1}}, "actions"),
]


@pytest.mark.parametrize(("case", "overrides", "field"), STRUCT_CASES, ids=[c[0] for c in STRUCT_CASES])
async def test_dry_run_struct_errors_are_400(
    alice: httpx.AsyncClient, case: str, overrides: dict[str, Any], field: str
) -> None:
    resp = await alice.post("/v1/workflow/rules/full?dry_run=true", json=workflow(**overrides))
    body = assert_error(resp, 400, "invalid_argument")
    assert field in [f["field"] for f in body["fields"]]


async def test_dry_run_action_and_edge_struct_errors(alice: httpx.AsyncClient) -> None:
    body = workflow()
    body["actions"][0]["action_type"] = "launch_rocket"
    del body["actions"][1]["action_config"]
    body["actions"][2]["name"] = ""
    body["edges"][1]["edge_type"] = "jump"
    body["edges"][2]["edge_order"] = -1
    del body["edges"][0]["target_action_id"]
    resp = await alice.post("/v1/workflow/rules/full?dry_run=true", json=body)
    err = assert_error(resp, 400, "invalid_argument")
    fields = {f["field"] for f in err["fields"]}
    assert fields == {
        "actions[0].action_type",
        "actions[1].action_config",
        "actions[2].name",
        "edges[1].edge_type",
        "edges[2].edge_order",
        "edges[0].target_action_id",
    }
    assert err["message"].startswith("validation failed: ")
    for bad in (b"not json", b"[1, 2]", b""):
        raw = await alice.post(
            "/v1/workflow/rules/full?dry_run=true", content=bad, headers={"content-type": "application/json"}
        )
        assert_error(raw, 400, "invalid_argument")
    assert_error(await alice.post("/v1/workflow/rules/full?dry_run=maybe", json=workflow()), 400, "invalid_argument")


async def test_create_rule_then_update_it(fresh: dict[str, httpx.AsyncClient]) -> None:
    alice, bob = fresh["alice"], fresh["bob"]
    invalid = await alice.post("/v1/workflow/rules/full", json=workflow(edges=[]))
    assert assert_error(invalid, 400, "invalid_argument")["valid"] is False

    created = await alice.post("/v1/workflow/rules/full", json=workflow())
    assert created.status_code == 201, created.text
    rule = created.json()
    assert rule["name"] == "Reorder widgets" and rule["created_by"] == ALICE_ID
    assert rule["trigger_type_name"] == "on_update"
    ids = [a["id"] for a in rule["actions"]]
    assert len(set(ids)) == 3
    start = next(e for e in rule["edges"] if e["edge_type"] == "start")
    assert start["target_action_id"] == ids[0]
    assert (await bob.get("/v1/workflow/rules")).json()["total"] == 9
    assert (await bob.get(f"/v1/workflow/rules/{rule['id']}/edges")).json() == rule["edges"]

    # Update: keep Check and Log by id, drop Alert, add a new Delay via temp ref.
    update = workflow(name="Reorder widgets v2")
    update["actions"] = [
        {**update["actions"][0], "id": ids[0]},
        {"name": "Wait", "action_type": "delay", "action_config": {"duration": 1, "unit": "hours"}, "is_active": True},
        {**update["actions"][2], "id": ids[2]},
    ]
    update["edges"] = _edges(
        (None, ids[0], "start", None),
        (ids[0], "temp:1", "sequence", "needs_reorder"),
        ("temp:1", ids[2], "always", None),
    )
    path = f"/v1/workflow/rules/{rule['id']}/full"
    assert (await alice.put(path, params={"dry_run": "true"}, json=update)).json() == {
        "valid": True,
        "errors": [],
        "action_count": 3,
        "edge_count": 3,
    }
    assert (await alice.get(f"/v1/workflow/rules/{rule['id']}")).json()["name"] == "Reorder widgets"  # dry run
    saved = await alice.put(path, json=update)
    assert saved.status_code == 200, saved.text
    after = saved.json()
    assert after["name"] == "Reorder widgets v2"
    assert [a["name"] for a in after["actions"]] == ["Check", "Wait", "Log"]
    assert after["actions"][0]["id"] == ids[0] and after["actions"][2]["id"] == ids[2]
    assert ids[1] not in {a["id"] for a in after["actions"]}
    wait_id = after["actions"][1]["id"]
    assert {(e.get("source_action_id"), e["target_action_id"]) for e in after["edges"]} == {
        (None, ids[0]),
        (ids[0], wait_id),
        (wait_id, ids[2]),
    }

    # An action id from another rule is a 400, as is an id on create.
    foreign = copy.deepcopy(update)
    foreign["actions"][0]["id"] = next(r for r in RULES if r.key == "low_stock").action_id("check")
    assert_error(await alice.put(path, params={"dry_run": "true"}, json=foreign), 400, "invalid_argument")
    assert_error(await alice.post("/v1/workflow/rules/full?dry_run=true", json=update), 400, "invalid_argument")
    assert_error(await alice.put(f"/v1/workflow/rules/{MISSING_ID}/full?dry_run=true", json=update), 404, "not_found")


# --- table configs ----------------------------------------------------------------------------------


def table_config(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = copy.deepcopy(
        next(c for c in TABLE_CONFIGS if c["name"] == "customer_directory")["config"]
    )
    config["title"] = "Key Accounts"
    config.update(overrides)
    return config


async def test_table_configs_read(alice: httpx.AsyncClient) -> None:
    everything = (await alice.get("/v1/data/configs/all")).json()
    assert [c["name"] for c in everything] == sorted(TABLE_CONFIG_IDS)
    keys = {
        "id",
        "name",
        "description",
        "config",
        "created_by",
        "updated_by",
        "created_date",
        "updated_date",
        "is_system",
    }
    assert all(set(c) == keys for c in everything)
    by_id = (await alice.get(f"/v1/data/id/{TABLE_CONFIG_IDS['open_sales_orders']}")).json()
    by_name = (await alice.get("/v1/data/name/open_sales_orders")).json()
    assert by_id == by_name and by_id["config"]["data_source"][0]["source"] == "orders"
    assert_error(await alice.get(f"/v1/data/id/{MISSING_ID}"), 404, "not_found")
    assert_error(await alice.get("/v1/data/name/no_such_config"), 404, "not_found")
    assert_error(await alice.get("/v1/data/id/not-a-uuid"), 400, "invalid_argument")


async def test_table_config_validate(alice: httpx.AsyncClient) -> None:
    ok = await alice.post("/v1/data/validate", json={"name": "key_accounts", "config": table_config()})
    assert ok.status_code == 204 and ok.content == b""

    bad_config = table_config(widget_type="grid")
    bad_config["data_source"][0]["filters"] = [{"column": "name; drop table", "operator": "equals"}]
    bad_config["visual_settings"]["columns"]["email"]["header"] = "Customer ID"
    resp = await alice.post("/v1/data/validate", json={"name": "ka", "description": "x" * 501, "config": bad_config})
    body = assert_error(resp, 400, "invalid_argument")
    codes = {(e["field"], e["code"]) for e in body["errors"]}
    assert ("widget_type", "INVALID_VALUE") in codes
    assert ("data_source[0].filters[0].column", "INVALID_FORMAT") in codes
    assert ("data_source[0].filters[0].operator", "INVALID_VALUE") in codes
    assert ("visual_settings.columns.email.header", "VISIBLE_ID_HEADER") in codes
    assert "name: must be a string of 3-100 characters" in body["message"]
    assert "description: must be a string of at most 500 characters" in body["message"]
    assert "config.widget_type: " in body["message"]

    # The original tool posted the bare config: that is missing name and config.
    bare = await alice.post("/v1/data/validate", json=table_config())
    assert "name: is required" in assert_error(bare, 400, "invalid_argument")["message"]


async def test_table_config_create_update_and_get_by_name(fresh: dict[str, httpx.AsyncClient]) -> None:
    alice, bob, admin = fresh["alice"], fresh["bob"], fresh["admin"]
    created = await alice.post(
        "/v1/data", json={"name": "key_accounts", "description": "Top customers", "config": table_config()}
    )
    assert created.status_code == 201, created.text
    cfg = created.json()
    assert cfg["name"] == "key_accounts" and cfg["created_by"] == ALICE_ID and cfg["is_system"] is False
    assert cfg["config"]["title"] == "Key Accounts"
    assert (await bob.get("/v1/data/name/key_accounts")).json() == cfg

    dup = await bob.post("/v1/data", json={"name": "key_accounts", "config": table_config()})
    assert_error(dup, 409, "already_exists")
    invalid = await bob.post("/v1/data", json={"name": "broken", "config": table_config(data_source=[])})
    assert_error(invalid, 400, "invalid_argument")

    new_config = table_config(title="Key Accounts (EU)")
    updated = await bob.put(f"/v1/data/{cfg['id']}", json={"config": new_config})
    assert updated.status_code == 200, updated.text
    after = updated.json()
    assert after["config"]["title"] == "Key Accounts (EU)"
    assert after["name"] == "key_accounts" and after["description"] == "Top customers" and after["updated_by"] == BOB_ID
    renamed = (await bob.put(f"/v1/data/{cfg['id']}", json={"name": "eu_key_accounts"})).json()
    assert renamed["config"]["title"] == "Key Accounts (EU)"
    assert (await bob.get("/v1/data/name/eu_key_accounts")).json()["id"] == cfg["id"]
    assert_error(await bob.get("/v1/data/name/key_accounts"), 404, "not_found")

    assert_error(await bob.put(f"/v1/data/{cfg['id']}", json={"name": "open_sales_orders"}), 409, "already_exists")
    assert_error(await bob.put(f"/v1/data/{cfg['id']}", json={}), 400, "invalid_argument")
    bad = await bob.put(f"/v1/data/{cfg['id']}", json={"config": table_config(title="")})
    assert ("title", "REQUIRED") in {
        (e["field"], e["code"]) for e in assert_error(bad, 400, "invalid_argument")["errors"]
    }
    assert_error(await bob.put(f"/v1/data/{MISSING_ID}", json={"description": "x"}), 404, "not_found")

    system_id = TABLE_CONFIG_IDS["customer_directory"]
    assert_error(await bob.put(f"/v1/data/{system_id}", json={"description": "mine now"}), 403, "permission_denied")
    assert (await admin.put(f"/v1/data/{system_id}", json={"description": "curated"})).json()[
        "description"
    ] == "curated"


# --- plumbing ---------------------------------------------------------------------------------------


async def test_oversized_body_is_a_json_413(alice: httpx.AsyncClient) -> None:
    huge = {"name": "huge", "config": {"title": "x" * (2 * 1024 * 1024)}}
    assert_error(await alice.post("/v1/data/validate", json=huge), 413, "too_large")


async def test_wrong_method_is_a_json_405(alice: httpx.AsyncClient) -> None:
    assert_error(await alice.delete("/v1/workflow/rules"), 405, "method_not_allowed")


async def test_restart_keeps_data_and_does_not_reseed(tmp_path: Path) -> None:
    db_path = tmp_path / "persist.db"
    headers = {"Authorization": "Bearer demo-alice"}
    async with serve_app(create_backend_app(db_path)) as url, httpx.AsyncClient(base_url=url, headers=headers) as c:
        assert (await c.post("/v1/data", json={"name": "kept_config", "config": table_config()})).status_code == 201
    async with serve_app(create_backend_app(db_path)) as url, httpx.AsyncClient(base_url=url, headers=headers) as c:
        names = [x["name"] for x in (await c.get("/v1/data/configs/all")).json()]
        assert names.count("kept_config") == 1 and len(names) == len(TABLE_CONFIGS) + 1
        assert (await c.get("/v1/workflow/rules")).json()["total"] == len(RULES)


async def test_unseeded_backend_has_schema_but_no_users(tmp_path: Path) -> None:
    async with serve_app(create_backend_app(tmp_path / "empty.db", seed=False)) as url:
        async with httpx.AsyncClient(base_url=url) as c:
            assert (await c.get("/healthz")).json() == {"status": "ok"}
            resp = await c.get("/v1/workflow/rules", headers={"Authorization": "Bearer demo-alice"})
            assert_error(resp, 401, "unauthenticated")


async def test_serve_backend_runs_until_cancelled(tmp_path: Path) -> None:
    port = free_port()
    task = asyncio.create_task(serve_backend("127.0.0.1", port, tmp_path / "served.db"))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
        for _ in range(200):
            try:
                resp = await c.get("/v1/workflow/trigger-types", headers={"Authorization": "Bearer demo-bob"})
                break
            except httpx.TransportError:
                assert not task.done(), task.exception()
                await asyncio.sleep(0.02)
        assert resp.status_code == 200 and len(resp.json()) == len(TRIGGER_TYPES)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The lifespan shut down cleanly: the database is closed and reopens with its data.
    async with running_backend(tmp_path / "served.db") as made:
        assert (await made["bob"].get("/v1/workflow/rules")).json()["total"] == len(RULES)
