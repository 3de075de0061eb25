"""The table tools against the reference backend (loopback), plus the local apply_* chain."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from agenttools.backend_tools import register_backend_tools
from agenttools.core.catalog import build_catalog
from agenttools.core.context_ids import inject_context_ids
from agenttools.core.drafts import Drafts
from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry
from agenttools.core.tool_support import WorkflowToolDeps
from backend.app import create_backend_app
from backend.seed import ALICE_ID, BOB_ID, TABLE_CONFIG_IDS
from storage.sqlite import open_sqlite_storage
from tests.support.events import wire
from tests.support.server import serve_app
from tests.support.sqlite_templates import SqliteTemplates


@pytest.fixture
async def env(tmp_path, sqlite_templates: SqliteTemplates):
    async with serve_app(create_backend_app(str(sqlite_templates.backend_copy(tmp_path / "backend.db")))) as base_url:
        async with httpx.AsyncClient() as http:
            storage = await open_sqlite_storage(sqlite_templates.agent_copy(tmp_path / "agent.db"))
            drafts = Drafts(storage.drafts)
            registry = ToolRegistry(build_catalog())
            register_backend_tools(registry, WorkflowToolDeps(backend_url=base_url, drafts=drafts))
            seen_by_backend: list[str] = []

            async def call(tool: str, args: dict[str, Any], user: str = "alice", context: dict | None = None) -> ToolOutcome:
                context = context or {}
                ctx = ToolContext(
                    user_id={"alice": ALICE_ID, "bob": BOB_ID}[user],
                    authorization=f"Bearer demo-{user}",
                    conversation_id="c",
                    run_id="r",
                    context_type="tables",
                    context=context,
                    http=http,
                )
                injected = inject_context_ids(tool, args, "tables", context)
                return await registry.handler(tool)(injected, ctx)  # type: ignore[misc]

            async def config(name: str) -> dict[str, Any]:
                r = await http.get(f"{base_url}/v1/data/name/{name}", headers={"Authorization": "Bearer demo-alice"})
                return r.json()  # type: ignore[no-any-return]

            try:
                yield call, config, base_url, http
            finally:
                await storage.close()
                del seen_by_backend


def ok(o: ToolOutcome) -> Any:
    assert not o.is_error, o.content
    return o.content


def err(o: ToolOutcome) -> str:
    assert o.is_error, o.content
    return str(o.content["error"])


async def test_discover_table_reference_is_static_and_sorted(env) -> None:
    call, *_ = env
    ref = ok(await call("discover_table_reference", {}))
    assert ref["join_types"] == sorted(ref["join_types"])
    assert list(ref["filter_operators"]) == sorted(ref["filter_operators"])
    assert ref["column_types"]["datetime"]["requires_format"] is True


async def test_search_database_schema_levels(env) -> None:
    call, *_ = env
    schemas = ok(await call("search_database_schema", {}))["schemas"]
    assert {"name": "sales"} in schemas
    tables = ok(await call("search_database_schema", {"schema": "sales"}))["tables"]
    assert any(t["name"] == "orders" for t in tables)
    both = ok(await call("search_database_schema", {"schema": "sales", "table": "orders"}))
    assert any(c["name"] == "customer_id" for c in both["columns"])
    assert any(r["referenced_table"] == "customers" for r in both["relationships"])
    table_only = ok(await call("search_database_schema", {"table": "orders"}))
    assert "schemas" in table_only and "needs its schema" in table_only["note"]
    assert err(await call("search_database_schema", {"schema": "sales", "table": "nope"})).startswith("HTTP 404:")


@pytest.mark.parametrize("bad", ["sales/../core", "..", "sales?x=1", "sales#frag", "a b", "x" * 80])
async def test_search_database_schema_rejects_path_tricks(env, bad) -> None:
    call, *_ = env
    assert "plain SQL identifier" in err(await call("search_database_schema", {"schema": bad}))
    assert "plain SQL identifier" in err(await call("search_database_schema", {"schema": "sales", "table": bad}))


async def test_get_table_config_by_id_name_and_context(env) -> None:
    call, *_ = env
    cid = TABLE_CONFIG_IDS["open_sales_orders"]
    assert ok(await call("get_table_config", {"id": cid}))["name"] == "open_sales_orders"
    assert ok(await call("get_table_config", {"name": "open_sales_orders"}))["id"] == cid
    assert ok(await call("get_table_config", {}, context={"config_id": cid}))["id"] == cid
    assert "full 36-character UUID" in err(await call("get_table_config", {"id": "12345"}))
    assert "give the configuration's id or name" in err(await call("get_table_config", {}))


@pytest.mark.parametrize("name", ["../configs/all", "a/b", "..", "x?y=1", "x#y"])
async def test_get_table_config_escapes_the_name(env, name) -> None:
    call, *_ = env
    message = err(await call("get_table_config", {"name": name}))
    assert message.startswith("HTTP 404:") or message.startswith("HTTP 400:"), message


async def test_list_table_configs_is_compact_and_sorted(env) -> None:
    call, *_ = env
    content = ok(await call("list_table_configs", {}))
    names = [c["name"] for c in content["configs"]]
    assert names == sorted(names, key=str.casefold) and content["total"] == len(TABLE_CONFIG_IDS)
    assert all("config" not in c for c in content["configs"])


async def test_validate_table_config_sends_the_right_body(env) -> None:
    call, config, *_ = env
    stored = await config("open_sales_orders")
    good = ok(await call("validate_table_config", {"config": stored["config"]}))
    assert good["valid"] is True and "backend_errors" not in good
    broken = copy.deepcopy(stored["config"])
    broken["data_source"][0]["source"] = ""
    bad = ok(await call("validate_table_config", {"config": broken}))
    assert bad["valid"] is False
    assert any(e["field"] == "data_source[0].source" for e in bad["errors"])
    assert bad["backend_errors"][0].startswith("HTTP 400:")


async def test_preview_table_config_valid_sends_preview_as_update_from_context(env) -> None:
    call, config, *_ = env
    stored = await config("open_sales_orders")
    outcome = await call(
        "preview_table_config",
        {"config": stored["config"], "description_of_changes": "No change"},
        context={"config_id": stored["id"]},
    )
    ok(outcome)
    [(name, event)] = wire(outcome.events)
    assert name == "table_config_preview"
    assert event == {"description": "No change", "config": stored["config"], "is_update": True, "config_id": stored["id"]}
    assert outcome.model_content["status"] == "preview_sent"


async def test_preview_table_config_invalid_sends_validation_error_strings(env) -> None:
    call, config, *_ = env
    broken = copy.deepcopy((await config("open_sales_orders"))["config"])
    broken.pop("title")
    broken["data_source"][0]["sort"] = [{"column": "x; drop table", "direction": "sideways"}]
    outcome = await call("preview_table_config", {"config": broken, "description_of_changes": "x"})
    content = ok(outcome)
    [(name, event)] = wire(outcome.events)
    assert name == "table_config_validation_error"
    assert "title: title is required" in event["errors"]
    assert all(isinstance(e, str) and ": " in e for e in event["errors"])
    assert any(e.startswith("data_source[0].sort[0].direction:") for e in event["errors"])
    assert content["valid"] is False and outcome.model_content is None


async def test_preview_table_config_argument_errors(env) -> None:
    call, config, *_ = env
    cfg = (await config("open_sales_orders"))["config"]
    assert "description_of_changes is required" in err(await call("preview_table_config", {"config": cfg}))
    assert "config is required" in err(await call("preview_table_config", {"description_of_changes": "x"}))
    assert "config must be a JSON object" in err(await call("preview_table_config", {"config": "nope", "description_of_changes": "x"}))
    big = {**cfg, "blob": "x" * 300_000}
    assert "larger than" in err(await call("preview_table_config", {"config": big, "description_of_changes": "x"}))


async def test_create_and_update_never_write(env) -> None:
    call, config, base_url, http = env
    stored = await config("open_sales_orders")
    created = await call("create_table_config", {"name": "Late orders", "config": stored["config"], "description": "late"})
    ok(created)
    [(name, event)] = wire(created.events)
    assert name == "table_config_preview" and event["is_update"] is False and event["name"] == "Late orders"
    assert created.model_content["status"] == "preview_sent"
    r = await http.get(f"{base_url}/v1/data/name/Late orders", headers={"Authorization": "Bearer demo-alice"})
    assert r.status_code == 404  # nothing was created

    changed = copy.deepcopy(stored["config"])
    changed["title"] = "Renamed title"
    updated = await call("update_table_config", {"config": changed}, context={"config_id": stored["id"]})
    ok(updated)
    [(name, event)] = wire(updated.events)
    assert event["is_update"] is True and event["config_id"] == stored["id"]
    assert (await config("open_sales_orders"))["config"]["title"] == stored["config"]["title"]
    assert "id is required" in err(await call("update_table_config", {"config": changed}))
    assert "name must be 3 to 100" in err(await call("create_table_config", {"name": "x", "config": changed}))


async def test_apply_chain_then_preview(env) -> None:
    """get → add column → add filter → join → sort → preview: the table_config_preview path."""
    call, config, *_ = env
    cid = TABLE_CONFIG_IDS["open_sales_orders"]
    ctx = {"config_id": cid}
    cfg = ok(await call("get_table_config", {}, context=ctx))["config"]
    step = ok(await call("apply_column_change", {"config": cfg, "operation": "add", "columns": [
        {"name": "promised_date", "pg_type": "date"}, {"name": "internal_note", "pg_type": "text", "hidden": True},
    ]}))
    assert step["valid"] is True, step
    vis = step["config"]["visual_settings"]["columns"]
    assert vis["promised_date"]["type"] == "datetime" and vis["promised_date"]["format"] == {"type": "date", "format": "yyyy-MM-dd"}
    assert vis["internal_note"] == {"name": "internal_note", "header": "internal_note", "hidden": True}
    step = ok(await call("apply_filter_change", {"config": step["config"], "operation": "add",
                                                  "filter": {"column": "region", "operator": "eq", "value": "EU"}}))
    assert "auto-added region as hidden column for filter" in step["applied"]
    step = ok(await call("apply_join_change", {"config": step["config"], "operation": "add", "join": {
        "table": "invoices", "schema": "sales", "relationship_from": "orders.id",
        "relationship_to": "invoices.order_id", "columns_to_add": ["invoice_number"]}}))
    assert step["applied"][-1] == "joined sales.invoices (left) with 1 columns"
    assert step["config"]["visual_settings"]["columns"]["invoice_number"]["type"] == "string"
    step = ok(await call("apply_sort_change", {"config": step["config"], "operation": "set",
                                                "sort": [{"column": "promised_date", "direction": "DESC"}]}))
    assert step["config"]["data_source"][0]["sort"] == [{"column": "promised_date", "direction": "desc"}]
    outcome = await call("preview_table_config", {"config": step["config"], "description_of_changes": "Added order date"}, context=ctx)
    ok(outcome)
    assert wire(outcome.events)[0][0] == "table_config_preview"
    assert wire(outcome.events)[0][1]["config_id"] == cid


async def test_apply_errors_and_invalid_results(env) -> None:
    call, config, *_ = env
    cfg = (await config("open_sales_orders"))["config"]
    assert "operation must be 'add' or 'remove'" in err(await call("apply_column_change", {"config": cfg, "operation": "upsert", "columns": [{"name": "a"}]}))
    assert "columns must not be empty" in err(await call("apply_column_change", {"config": cfg, "operation": "add", "columns": []}))
    assert "config has no data_source" in err(await call("apply_filter_change", {"config": {"title": "t"}, "operation": "add", "filter": {"column": "a", "operator": "eq"}}))
    assert "filter.operator is required" in err(await call("apply_filter_change", {"config": cfg, "operation": "add", "filter": {"column": "a"}}))
    assert "join.relationship_from is required" in err(await call("apply_join_change", {"config": cfg, "operation": "add", "join": {"table": "customers"}}))
    assert "each sort item must have a column" in err(await call("apply_sort_change", {"config": cfg, "operation": "add", "sort": [{}]}))
    # A change that breaks validation comes back as valid:false with errors, config null.
    bad = ok(await call("apply_column_change", {"config": cfg, "operation": "add", "columns": [{"name": "bad-name!"}]}))
    assert bad["valid"] is False and bad["config"] is None and bad["errors"]
