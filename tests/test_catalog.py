"""The tool catalog: names, groups, schemas, descriptions, core tools, new-workflow detection."""

from __future__ import annotations

import re
from types import MappingProxyType

import pytest
from ollama._types import Tool as OllamaTool

import prompts.builder
from agenttools.core import catalog, catalog_schema
from agenttools.core.catalog import (
    CONTEXT_TYPES,
    MANDATORY_CORE_TOOLS,
    RAG_FLOW_TOOLS,
    build_catalog,
    core_tools,
    is_new_workflow,
    tools_for_context,
)
from agenttools.core.catalog_schema import ACTION_TYPES
from agenttools.core.registry import ToolRegistry

# §3.3 of the reference: the 24 tools the original chat executes.
GO_WORKFLOW_TOOLS = (
    "discover",
    "get_workflow_rule",
    "explain_workflow_node",
    "list_workflow_rules",
    "list_my_alerts",
    "get_alert_detail",
    "list_alerts_for_rule",
    "preview_workflow",
    "start_draft",
    "add_draft_action",
    "remove_draft_action",
    "preview_draft",
)
GO_TABLE_TOOLS = (
    "discover_table_reference",
    "search_database_schema",
    "get_table_config",
    "list_table_configs",
    "validate_table_config",
    "preview_table_config",
    "create_table_config",
    "update_table_config",
    "apply_column_change",
    "apply_filter_change",
    "apply_join_change",
    "apply_sort_change",
)
CORPUS_TOOLS = ("search_text", "search_semantic", "get_document_metadata")

# Names the original's docs, schemas or errors mention but its chat never offered (§10.6).
STALE_NAMES = (
    "discover_action_types discover_trigger_types discover_entity_types discover_entities get_workflow "
    "explain_workflow_path list_workflows list_action_templates validate_workflow create_workflow "
    "update_workflow analyze_workflow suggest_templates show_cascade search_enums discover_config_surfaces "
    "discover_field_types discover_content_types get_page_config get_page_content get_form_definition "
    "list_pages list_forms create_page_config update_page_config create_page_content update_page_content "
    "create_form add_form_field"
).split()

TOOLISH = re.compile(
    r"\b(?:get|list|search|discover|preview|create|update|apply|start|add|remove|explain|validate|index|"
    r"generate|perplexity|knowledge|analyze|suggest|show)_[a-z_]+\b"
)


@pytest.fixture(scope="module")
def specs():
    return build_catalog()


@pytest.fixture(scope="module")
def by_name(specs):
    return {s.name: s for s in specs}


def test_catalog_has_every_tool_once(specs):
    names = [s.name for s in specs]
    assert len(names) == len(set(names))
    assert set(names) == {*GO_WORKFLOW_TOOLS, *GO_TABLE_TOOLS, *RAG_FLOW_TOOLS, *CORPUS_TOOLS, "find_tools"}
    assert len(names) == 32
    ToolRegistry(specs)  # the registry accepts it (it rejects duplicates)


def test_build_catalog_returns_fresh_values(specs):
    again = build_catalog()
    again[0].definition.parameters["properties"]["injected"] = {"type": "string"}
    assert "injected" not in build_catalog()[0].definition.parameters["properties"]
    assert "injected" not in specs[0].definition.parameters["properties"]


def test_groups_match_the_reference(specs):
    workflow = [s.name for s in tools_for_context(specs, "workflow")]
    tables = [s.name for s in tools_for_context(specs, "tables")]
    knowledge = [s.name for s in tools_for_context(specs, "knowledge")]
    assert set(workflow) == {*GO_WORKFLOW_TOOLS, "search_database_schema", *RAG_FLOW_TOOLS, "find_tools"}
    assert set(tables) == {*GO_TABLE_TOOLS, *RAG_FLOW_TOOLS, "find_tools"}
    assert set(knowledge) == {*RAG_FLOW_TOOLS, *CORPUS_TOOLS, "find_tools"}
    # catalog order is kept
    order = [s.name for s in specs]
    for group in (workflow, tables, knowledge):
        assert group == sorted(group, key=order.index)


def test_tools_for_context_rejects_unknown_context(specs):
    with pytest.raises(ValueError):
        tools_for_context(specs, "dashboards")
    with pytest.raises(ValueError):
        core_tools("dashboards", None)


@pytest.mark.parametrize("spec", build_catalog(), ids=lambda s: s.name)
def test_schema_shape(spec):
    params = spec.definition.parameters
    assert params["type"] == "object"
    assert params["additionalProperties"] is False
    assert isinstance(params["properties"], dict)
    assert set(params["required"]) <= set(params["properties"])
    for name, sub in params["properties"].items():
        assert sub.get("description"), f"{spec.name}.{name} has no description"
        _check_bounded(sub, f"{spec.name}.{name}")


def _check_bounded(schema, where):
    kind = schema.get("type")
    if kind == "string":
        assert "enum" in schema or "maxLength" in schema, f"{where}: unbounded string"
    if kind == "array":
        assert "maxItems" in schema, f"{where}: unbounded array"
        _check_bounded(schema["items"], f"{where}[]")
    if kind == "integer" or kind == "number":
        assert "minimum" in schema and "maximum" in schema, f"{where}: unbounded number"
    if kind == "object" and "properties" in schema:
        assert schema.get("additionalProperties") is False, f"{where}: open nested object"
        for name, sub in schema["properties"].items():
            _check_bounded(sub, f"{where}.{name}")
    for key in ("anyOf", "oneOf", "allOf", "$ref", "format"):
        assert key not in schema, f"{where}: {key} is not sent to every provider"


@pytest.mark.parametrize("spec", build_catalog(), ids=lambda s: s.name)
def test_description_and_examples(spec):
    assert len(spec.definition.description) >= 120
    assert len(spec.examples) >= 4
    assert len(set(e.casefold() for e in spec.examples)) == len(spec.examples)
    text = spec.embedding_text()
    assert text.startswith(f"{spec.name} \u2014 ")
    assert all(e in text for e in spec.examples)


def _schema_text(schema) -> str:
    parts = [schema.get("description", "")]
    for sub in (schema.get("properties") or {}).values():
        parts.append(_schema_text(sub))
    if "items" in schema:
        parts.append(_schema_text(schema["items"]))
    return " ".join(parts)


def test_descriptions_name_only_existing_tools(specs):
    names = {s.name for s in specs}
    allowed = names | set(ACTION_TYPES)
    for spec in specs:
        text = spec.definition.description + " " + _schema_text(spec.definition.parameters)
        for stale in STALE_NAMES:
            assert not re.search(rf"\b{stale}\b", text), f"{spec.name} mentions {stale}"
        for token in TOOLISH.findall(text):
            assert token in allowed, f"{spec.name} mentions unknown tool {token!r}"


def test_tool_name_check_catches_a_stale_name():
    text = "use discover_entities to list them, then create_workflow"
    assert [t for t in TOOLISH.findall(text) if t not in {s.name for s in build_catalog()}] == [
        "discover_entities",
        "create_workflow",
    ]


def test_examples_are_not_shared_between_tools(specs):
    seen: dict[str, str] = {}
    for spec in specs:
        for example in spec.examples:
            key = example.casefold()
            assert key not in seen, f"{example!r} used by {seen.get(key)} and {spec.name}"
            seen[key] = spec.name


@pytest.mark.parametrize("spec", build_catalog(), ids=lambda s: s.name)
def test_schema_survives_the_ollama_client(spec):
    """Ollama's client re-validates tool dicts and keeps only type/description/enum/items of
    each top-level property: what the model needs must still be there."""
    tool = OllamaTool.model_validate({"type": "function", "function": spec.definition.to_dict()})
    sent = tool.model_dump(exclude_none=True, by_alias=True)["function"]
    assert sent["name"] == spec.name
    assert sent["description"] == spec.definition.description
    params = sent["parameters"]
    original = spec.definition.parameters
    assert list(params.get("required", [])) == original["required"]
    assert set(params.get("properties", {})) == set(original["properties"])
    for name, sub in original["properties"].items():
        kept = params["properties"][name]
        assert kept.get("type") == sub.get("type")
        assert kept.get("description") == sub["description"]
        if "enum" in sub:
            assert list(kept["enum"]) == sub["enum"]
        if sub.get("type") == "array":
            assert kept["items"] == sub["items"]


def test_groups_of_rag_tools(by_name):
    for name in RAG_FLOW_TOOLS:
        assert by_name[name].groups == frozenset(CONTEXT_TYPES)
    for name in CORPUS_TOOLS:
        assert by_name[name].groups == frozenset({"knowledge"})
    assert by_name["search_database_schema"].groups == frozenset({"workflow", "tables"})


def test_write_tools_are_described_as_previews(by_name):
    for name in ("create_table_config", "update_table_config"):
        description = by_name[name].definition.description.lower()
        assert "preview" in description and "approve" in description
        assert "does not save anything by itself" in description


def test_seed_000_schemas(by_name):
    kb = by_name["knowledge_base_search"].definition.parameters
    assert kb["required"] == ["query"]
    assert kb["properties"]["kb_id"]["default"] == "default_kb"
    assert kb["properties"]["top_k"]["default"] == 5
    px = by_name["perplexity_search"].definition.parameters
    assert px["required"] == ["query"] and "context" in px["properties"]
    kw = by_name["index_keywords"].definition.parameters
    assert kw["required"] == ["keywords"]
    assert (kw["properties"]["keywords"]["minItems"], kw["properties"]["keywords"]["maxItems"]) == (3, 10)
    assert {"query_id", "perplexity_result_id"} <= set(kw["properties"])
    gr = by_name["generate_response"].definition.parameters
    assert set(gr["required"]) == {"answer", "sources", "used_internal_kb", "used_external_kb"}
    assert gr["properties"]["confidence_score"]["maximum"] == 1.0
    for name, chars in (("search_text", 400), ("search_semantic", 500)):
        p = by_name[name].definition.parameters
        assert p["required"] == ["bucket", "query"]
        assert p["properties"]["top_k"]["default"] == 10
        assert p["properties"]["context_chars"]["default"] == chars
        assert {"filters", "doc_id"} <= set(p["properties"])
    assert by_name["get_document_metadata"].definition.parameters["required"] == ["doc_id"]


def test_reference_enums(by_name):
    props = by_name["add_draft_action"].definition.parameters["properties"]
    assert sorted(props["action_type"]["enum"]) == sorted(ACTION_TYPES) and len(ACTION_TYPES) == 17
    assert by_name["discover"].definition.parameters["properties"]["category"]["enum"] == [
        "action_types",
        "trigger_types",
        "entities",
    ]
    filt = by_name["apply_filter_change"].definition.parameters["properties"]["filter"]
    assert len(filt["properties"]["operator"]["enum"]) == 11
    sort = by_name["apply_sort_change"].definition.parameters["properties"]["operation"]
    assert sort["enum"] == ["add", "remove", "set"]


# --- core tools ------------------------------------------------------------------------


def test_core_tools_per_context(specs):
    existing = {"workflow": {"workflow_id": "35da6628-a96b-4bc4-a90f-8fa874ae48cc", "nodes": [{"id": "n1"}]}}
    assert core_tools("workflow", existing["workflow"]) == [
        "list_workflow_rules",
        "discover",
        "knowledge_base_search",
        "generate_response",
        "find_tools",
    ]
    assert core_tools("workflow", {"is_new": True}) == [
        "discover",
        "start_draft",
        "add_draft_action",
        "remove_draft_action",
        "preview_draft",
        "knowledge_base_search",
        "generate_response",
        "find_tools",
    ]
    assert core_tools("tables", {"config_id": "x"}) == [
        "get_table_config",
        "discover_table_reference",
        "apply_column_change",
        "apply_filter_change",
        "preview_table_config",
        "knowledge_base_search",
        "generate_response",
        "find_tools",
    ]
    knowledge = core_tools("knowledge", None)
    assert set(knowledge) == {*RAG_FLOW_TOOLS, *CORPUS_TOOLS, "find_tools"}
    assert len(knowledge) == len(set(knowledge))


@pytest.mark.parametrize("context_type", CONTEXT_TYPES)
@pytest.mark.parametrize("context", [None, {"is_new": True}, {"workflow_id": "abc", "nodes": [1]}, {}])
def test_core_tools_are_in_their_context_and_include_mandatory(specs, context_type, context):
    allowed = {s.name for s in tools_for_context(specs, context_type)}
    core = core_tools(context_type, context)
    assert set(core) <= allowed
    assert set(MANDATORY_CORE_TOOLS) <= set(core)
    assert core[-1] == "find_tools"  # every context can reach the tools selection left out
    assert len(core) == len(set(core))


def test_core_tools_without_mandatory_policy():
    assert "knowledge_base_search" not in core_tools("workflow", {"is_new": False}, mandatory=())
    assert core_tools("tables", None, mandatory=("generate_response",))[-2:] == ["generate_response", "find_tools"]


# --- new-workflow detection (§10.3 of the reference: the 14 cases) -----------------------

UUID = "35da6628-a96b-4bc4-a90f-8fa874ae48cc"
NEW_WORKFLOW_CASES = [
    ("nil", None, True),
    ("empty bytes", b"", True),
    ("null", b"null", True),
    ("is_new true", b'{"is_new":true}', True),
    ("is_new true, empty id and nodes", b'{"is_new":true,"workflow_id":"","nodes":[]}', True),
    ("empty id and nodes", b'{"workflow_id":"","nodes":[]}', True),
    ("empty id only", b'{"workflow_id":""}', True),
    ("uuid, empty nodes", f'{{"workflow_id":"{UUID}","nodes":[]}}'.encode(), False),
    ("empty id, one node", b'{"workflow_id":"","nodes":[{"id":"n1"}]}', False),
    ("uuid and nodes", f'{{"workflow_id":"{UUID}","nodes":[{{"id":"n1"}}]}}'.encode(), False),
    ("is_new false with uuid", f'{{"is_new":false,"workflow_id":"{UUID}"}}'.encode(), False),
    ("is_new false alone", b'{"is_new":false}', False),
    ("is_new false, empty id and nodes", b'{"is_new":false,"workflow_id":"","nodes":[]}', False),
    ("invalid json", b"{not json", False),
]


@pytest.mark.parametrize("impl", [is_new_workflow, prompts.builder.is_new_workflow], ids=["agenttools", "prompts"])
@pytest.mark.parametrize(("case", "raw", "expected"), NEW_WORKFLOW_CASES, ids=[c[0] for c in NEW_WORKFLOW_CASES])
def test_is_new_workflow_reference_cases(impl, case, raw, expected):
    assert impl(raw) is expected
    if raw is not None and case != "invalid json":
        # the decoded form (what the app holds after parsing the body) gives the same answer
        import orjson

        decoded = orjson.loads(raw) if raw else None
        assert impl(decoded) is expected


@pytest.mark.parametrize("impl", [is_new_workflow, prompts.builder.is_new_workflow], ids=["agenttools", "prompts"])
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", True),
        ("   ", True),
        (b"[]", False),
        ([], False),
        ('"text"', False),
        ({"is_new": "yes"}, False),
        ({"workflow_id": 5}, False),
        ({"nodes": {"a": 1}}, False),
        ({"is_new": None}, True),
        ({"nodes": None, "workflow_id": None}, True),
        ({"config_id": "x"}, True),
    ],
)
def test_is_new_workflow_other_shapes(impl, raw, expected):
    assert impl(raw) is expected


def test_no_mutable_module_state():
    import __future__

    from agenttools.core import catalog_knowledge, catalog_table_edits, catalog_tables, catalog_workflow, validation

    immutable = (str, int, float, tuple, frozenset, MappingProxyType, re.Pattern, type(None))
    modules = (
        catalog, catalog_schema, catalog_workflow, catalog_tables, catalog_table_edits, catalog_knowledge, validation,
        prompts.builder,
    )
    for module in modules:
        for name, value in vars(module).items():
            if name.startswith("__") or callable(value) or isinstance(value, (type(re), __future__._Feature)):
                continue
            if type(value) is object:  # a sentinel: nothing on it can change
                continue
            assert isinstance(value, immutable), (
                f"{module.__name__}.{name} is mutable ({type(value).__name__})"
            )


# --- the labelled retrieval set read by the benchmark -----------------------------------------


def test_bench_tool_queries_are_well_formed(specs):
    from pathlib import Path

    import orjson

    path = Path(__file__).resolve().parent.parent / "bench" / "data" / "tool_queries.json"
    rows = orjson.loads(path.read_bytes())
    assert len(rows) >= 60
    examples = {e.casefold() for s in specs for e in s.examples}
    messages = set()
    for row in rows:
        assert set(row) == {"message", "context_type", "context", "needed"}
        assert row["context_type"] in CONTEXT_TYPES
        allowed = {s.name for s in tools_for_context(specs, row["context_type"])}
        assert row["needed"] and set(row["needed"]) <= allowed, row
        assert row["message"].casefold() not in examples, row["message"]
        assert row["message"] not in messages
        messages.add(row["message"])
    by_context = {c: [r for r in rows if r["context_type"] == c] for c in CONTEXT_TYPES}
    assert all(len(v) >= 15 for v in by_context.values())
    new_canvas = [r for r in by_context["workflow"] if is_new_workflow(r["context"])]
    assert len(new_canvas) >= 8
    needed = {n for r in rows for n in r["needed"]}
    # every workflow/table tool is exercised at least once
    assert {*GO_WORKFLOW_TOOLS, *GO_TABLE_TOOLS} <= needed
