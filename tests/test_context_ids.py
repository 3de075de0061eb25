"""Context-ID injection, case by case as §6 of the reference describes it."""

from __future__ import annotations

import pytest

from agenttools.core.context_ids import inject_context_ids

WF = "35da6628-a96b-4bc4-a90f-8fa874ae48cc"
CFG = "0f3b8d52-4a8e-4f0e-9a77-2c1f1c3e5d11"
OTHER = "AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE"


@pytest.mark.parametrize("tool", ["explain_workflow_node", "get_workflow_rule", "list_alerts_for_rule"])
def test_workflow_id_is_injected_for_its_three_tools(tool: str) -> None:
    assert inject_context_ids(tool, {}, "workflow", {"workflow_id": WF}) == {"workflow_id": WF}


@pytest.mark.parametrize("tool", ["preview_table_config", "get_table_config", "update_table_config"])
def test_config_id_is_injected_as_id_for_its_three_tools(tool: str) -> None:
    assert inject_context_ids(tool, {"config": {}}, "tables", {"config_id": CFG}) == {"config": {}, "id": CFG}


@pytest.mark.parametrize("tool", ["preview_workflow", "discover", "start_draft", "list_table_configs", "create_table_config"])
def test_other_tools_are_left_alone(tool: str) -> None:
    args = {"workflow_id": "x"}
    assert inject_context_ids(tool, args, "workflow", {"workflow_id": WF, "config_id": CFG}) == args


def test_a_strict_uuid_from_the_model_is_kept_even_in_upper_case() -> None:
    out = inject_context_ids("get_workflow_rule", {"workflow_id": OTHER}, "workflow", {"workflow_id": WF})
    assert out["workflow_id"] == OTHER


@pytest.mark.parametrize(
    "given",
    ["", "Low Stock Alert", WF[:-1], WF.replace("-", ""), "{" + WF + "}", "urn:uuid:" + WF, 42, None, ["x"], WF + " "],
)
def test_anything_but_a_strict_uuid_is_replaced(given) -> None:
    out = inject_context_ids("explain_workflow_node", {"workflow_id": given, "node_name": "n"}, "workflow", {"workflow_id": WF})
    assert out == {"workflow_id": WF, "node_name": "n"}


@pytest.mark.parametrize("context", [{}, {"workflow_id": ""}, {"workflow_id": 123}, {"workflow_id": None}, None, []])
def test_missing_empty_or_non_string_context_values_inject_nothing(context) -> None:
    assert inject_context_ids("get_workflow_rule", {"workflow_id": "abc"}, "workflow", context) == {"workflow_id": "abc"}


def test_context_value_is_not_validated_and_needs_no_escaping() -> None:
    weird = 'abc"}, "evil": {"x'
    assert inject_context_ids("get_workflow_rule", {}, "workflow", {"workflow_id": weird}) == {"workflow_id": weird}


def test_caller_dict_is_not_mutated() -> None:
    args = {"node_name": "n"}
    out = inject_context_ids("explain_workflow_node", args, "workflow", {"workflow_id": WF})
    assert args == {"node_name": "n"} and out is not args


def test_name_with_config_id_in_context_gets_id_injected() -> None:
    out = inject_context_ids("get_table_config", {"name": "Other"}, "tables", {"config_id": CFG})
    assert out == {"name": "Other", "id": CFG}


def test_both_ids_only_apply_to_their_own_tools() -> None:
    ctx = {"workflow_id": WF, "config_id": CFG}
    assert inject_context_ids("get_table_config", {}, "tables", ctx) == {"id": CFG}
    assert inject_context_ids("get_workflow_rule", {}, "workflow", ctx) == {"workflow_id": WF}
