"""Preview interception: event payloads, what the model sees, and when nothing is sent."""

from __future__ import annotations

from agenttools.core.previews import (
    PREVIEW_SENT,
    error_strings,
    table_config_preview_outcome,
    table_config_validation_outcome,
    workflow_preview_outcome,
)
from agenttools.tables.config_rules import validate_table_config
from events import TableConfigPreview, TableConfigValidationError, WorkflowPreview


def test_workflow_preview_for_new_and_update() -> None:
    wf = {"name": "w", "actions": [], "edges": []}
    new = workflow_preview_outcome(description="d", workflow=wf, result={"valid": True, "errors": []}, workflow_id=None)
    assert new.events == [WorkflowPreview(description="d", workflow=wf, is_update=False)]
    wire = b'{"description":"d","workflow":{"name":"w","actions":[],"edges":[]},"is_update":false}'
    assert new.events[0].to_json() == wire
    assert new.model_content == PREVIEW_SENT and new.model_content["status"] == "preview_sent"
    assert not new.is_error and new.content["workflow"] == wf
    upd = workflow_preview_outcome(description="d", workflow=wf, result={"valid": True}, workflow_id="abc")
    assert upd.events[0].name == "workflow_preview"
    assert upd.events[0].to_dict() == {"description": "d", "workflow": wf, "is_update": True, "workflow_id": "abc"}


def test_table_config_preview_payload_keys() -> None:
    out = table_config_preview_outcome(config={"title": "t"}, description_of_changes="c", config_id=None, name=None, warnings=[])
    assert out.events == [TableConfigPreview(description="c", config={"title": "t"}, is_update=False)]
    assert out.events[0].to_json() == b'{"description":"c","config":{"title":"t"},"is_update":false}'
    out = table_config_preview_outcome(config={}, description_of_changes="c", config_id="id1", name="n", warnings=[])
    assert out.events[0].name == "table_config_preview"
    assert out.events[0].to_dict() == {
        "description": "c", "config": {}, "is_update": True, "config_id": "id1", "name": "n"
    }


def test_validation_error_event_carries_field_message_strings() -> None:
    report = validate_table_config({"data_source": [{"source": ""}], "widget_type": "pie"})
    out = table_config_validation_outcome(errors=report.errors, warnings=report.warnings)
    [event] = out.events
    assert isinstance(event, TableConfigValidationError) and event.name == "table_config_validation_error"
    assert event.errors == error_strings(report.errors)
    assert "title: title is required" in event.errors
    assert "widget_type: invalid widget_type 'pie'; must be one of table, chart" in event.errors
    assert out.model_content is None and out.content["valid"] is False and not out.is_error


def test_preview_sent_never_names_missing_tools() -> None:
    for word in ("create_workflow", "update_workflow", "discover_entities"):
        assert word not in PREVIEW_SENT["message"]


def test_tool_messages_only_name_tools_that_exist() -> None:
    """Every tool-like name in the backend tools' strings is a real catalog tool (§11 item 16)."""
    import ast
    import re
    from pathlib import Path

    from agenttools.core.catalog import build_catalog

    names = {spec.name for spec in build_catalog()}
    pattern = re.compile(r"\b(?:discover|list|get|create|update|validate|preview|start|add|remove|apply|search|explain)_[a-z_]+\b")
    modules = [
        "core/backend_client", "core/resolution", "workflow/tools", "tables/tools", "tables/ops", "core/drafts",
        "core/previews", "workflow/payload", "workflow/summaries", "core/tool_support", "tables/config_rules",
    ]
    root = Path(__file__).resolve().parent.parent / "agenttools"
    unknown: set[str] = set()
    for module in modules:
        tree = ast.parse((root / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and not node.value.startswith("_"):
                unknown.update(m for m in pattern.findall(node.value) if m not in names)
    # Not tool mentions: action types, the preview status value, a function name in __all__.
    unknown -= {"create_alert", "create_entity", "update_field", "preview_sent", "explain_node"}
    assert not unknown, unknown
