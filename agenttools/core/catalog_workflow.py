"""Catalog entries for the workflow tools: discovery, reading rules and alerts, previews, drafts.

Descriptions are written for a model that has never seen this product: each says when to
use the tool, what comes back, and what to do next. Example queries are only used to build
the retrieval text of the tool index; they are never sent to the model.
"""

from __future__ import annotations

from typing import Final, Unpack

from agenttools.core.catalog_schema import (
    ACTION_TYPES,
    ALERT_SEVERITIES,
    ALERT_STATUSES,
    ENTITY_PATTERN,
    NAME_OR_UUID_PATTERN,
    UUID_PATTERN,
    boolean,
    free_object,
    integer,
    obj,
    string,
)
from agenttools.core.registry import ToolFacts, ToolSpec
from llm.types import ToolDefinition

WORKFLOW = frozenset({"workflow"})
#: The core set of the empty workflow canvas (guided creation), which differs from the
#: workflow context's own (``agenttools.core.catalog.is_new_workflow`` tells them apart).
NEW_WORKFLOW: Final = "new_workflow"
NEW_CANVAS = frozenset({NEW_WORKFLOW})

_WORKFLOW_ID_FROM_CONTEXT = (
    "The workflow rule: its UUID or its exact name. Leave it out to use the workflow that is "
    "open in the editor."
)

_WORKFLOW_PAYLOAD = (
    "The complete rule to validate. Keys: name (required, up to 255 chars), description, "
    "is_active (required, boolean), entity ('schema.table', e.g. 'inventory.inventory_items') "
    "or entity_id (UUID), trigger_type (on_create | on_update | on_delete | manual) or "
    "trigger_type_id (UUID), trigger_conditions (object, optional), actions (required list) "
    "and edges (list, may be empty). Each action: name, action_type, action_config (object), "
    "is_active, optional description, optional id (UUID of an existing action when editing), "
    "and optional after ('PreviousActionName' or 'PreviousActionName:port'); the first action "
    "has no after. When you use after, leave edges empty and they are generated for you. "
    "Otherwise give edges yourself: {source_action_id, target_action_id ('temp:N' = the N-th "
    "action, counting from 0), edge_type (start | sequence | always), source_output (port), "
    "edge_order}; exactly one edge has edge_type 'start' and no source."
)


def _spec(
    name: str, description: str, parameters: dict, examples: tuple[str, ...], **facts: Unpack[ToolFacts]
) -> ToolSpec:
    return ToolSpec(ToolDefinition(name, description, parameters), WORKFLOW, examples, **facts)


def workflow_specs() -> list[ToolSpec]:
    """The twelve workflow tools, in catalog order."""
    return [
        _spec(
            "discover",
            "Lists the building blocks available for workflow automation. category="
            "'action_types' returns every action a workflow step can perform, with a short "
            "description, its output ports (the default one marked) and its config fields; "
            "'trigger_types' returns the events that can start a workflow (record created, "
            "updated, deleted, or manual); 'entities' returns the database tables a workflow "
            "can watch, as schema and table names. Call it before designing or changing a "
            "workflow when you are unsure which action, trigger or table to use, then build "
            "with start_draft and add_draft_action or with preview_workflow.",
            obj(
                {
                    "category": string(
                        "Which building blocks to list.",
                        enum=("action_types", "trigger_types", "entities"),
                    )
                },
                ("category",),
            ),
            (
                "what kinds of steps can a workflow do?",
                "which events can kick off an automation",
                "show me the tables I can attach a workflow to",
                "what settings does the send_email action need",
                "list every action type with its output ports",
            ),
            read_only=True,
            core_in=WORKFLOW | NEW_CANVAS,
            core_rank=1,
        ),
        _spec(
            "get_workflow_rule",
            "Reads one saved workflow rule in full: its trigger, the table it watches, every "
            "action with its configuration, the connections between actions, and a readable "
            "outline of the flow (alert recipients shown by name). Use it to describe or "
            "review a workflow other than the one already shown in the editor context, or "
            "before proposing changes to it with preview_workflow. Find names and ids with "
            "list_workflow_rules.",
            obj({"workflow_id": string(_WORKFLOW_ID_FROM_CONTEXT, max_length=255, pattern=NAME_OR_UUID_PATTERN)}),
            (
                "walk me through the 'Low stock reorder' workflow",
                "what does the order fulfillment rule do step by step",
                "open the approval workflow and show me its actions",
                "how is the supplier onboarding automation put together",
                "give me an overview of this rule's flow",
            ),
            read_only=True,
        ),
        _spec(
            "explain_workflow_node",
            "Explains a single step (action) of a workflow: its type and full configuration "
            "(for alert steps, the recipients with names and emails), how far it is from the "
            "start, which steps lead into it and through which output port, and where it "
            "goes next. Identify the step by its name, its id, or its action type (every step "
            "of that type is explained). The workflow defaults to the one open in the editor. "
            "Use it to answer 'who gets notified', 'what does this step do' or 'what happens "
            "after X'.",
            obj(
                {
                    "workflow_id": string(_WORKFLOW_ID_FROM_CONTEXT, max_length=255, pattern=NAME_OR_UUID_PATTERN),
                    "node_name": string(
                        "The step's name, its UUID, or an action type such as 'create_alert'.",
                        max_length=255,
                        min_length=1,
                    ),
                },
                ("node_name",),
            ),
            (
                "who receives the alert in this workflow?",
                "what happens after the approval step is rejected",
                "explain the check inventory node",
                "what is configured on the send email step",
                "which step comes before the status transition",
            ),
            read_only=True,
        ),
        _spec(
            "list_workflow_rules",
            "Lists the saved workflow rules the user can see, each with its id, name, the "
            "table it watches, its trigger and whether it is active, plus the total count and "
            "whether more pages follow. Use it to find a rule by name, to answer 'which "
            "automations exist', or to get an id for get_workflow_rule, explain_workflow_node "
            "or list_alerts_for_rule.",
            obj(
                {
                    "page": integer("Page number, from 1.", minimum=1, maximum=10_000, default=1),
                    "rows": integer("Rules per page.", minimum=1, maximum=100, default=100),
                }
            ),
            (
                "what automations do we have?",
                "show all workflows",
                "which rules are currently turned off",
                "is there already a workflow for purchase orders",
                "list the automation rules in the system",
            ),
            read_only=True,
            core_in=WORKFLOW,
        ),
        _spec(
            "list_my_alerts",
            "Lists the alerts in the current user's own inbox, each with its "
            "severity, status, title, message, time and recipients, plus paging totals. "
            "Filter by status and severity; leave status out to see every status. This is "
            "only the user's inbox: to find out who a workflow notifies, use "
            "explain_workflow_node; for all alerts raised by one rule, use "
            "list_alerts_for_rule. For one alert in full, use get_alert_detail.",
            obj(
                {
                    "status": string("Only alerts in this state.", enum=ALERT_STATUSES),
                    "severity": string("Only alerts of this severity.", enum=ALERT_SEVERITIES),
                    "page": integer("Page number, from 1.", minimum=1, maximum=10_000, default=1),
                    "rows": integer("Alerts per page.", minimum=1, maximum=100, default=20),
                }
            ),
            (
                "do I have any critical alerts?",
                "show my unresolved notifications",
                "what alerts came in for me today",
                "list my acknowledged warnings",
                "anything high severity waiting for me",
            ),
            read_only=True,
        ),
        _spec(
            "get_alert_detail",
            "Reads one alert in full by its UUID: title, message, severity, status, the rule "
            "and record that raised it, recipients and timestamps. Use it after "
            "list_my_alerts or list_alerts_for_rule when the user asks about a specific alert.",
            obj(
                {
                    "alert_id": string(
                        "The alert's UUID, as listed by the alert tools.", max_length=36, pattern=UUID_PATTERN
                    )
                },
                ("alert_id",),
            ),
            (
                "tell me more about that first alert",
                "what triggered this alert",
                "show the full details of the stock warning",
                "open alert 3f2b... and explain it",
            ),
            read_only=True,
        ),
        _spec(
            "list_alerts_for_rule",
            "Lists the alerts that one workflow rule has raised, for every recipient, with "
            "severity, status, title, time and recipients, plus paging totals. The rule "
            "defaults to the workflow open in the editor. Requires administrator rights on the "
            "backend; a permission error means the user cannot see other people's alerts.",
            obj(
                {
                    "workflow_id": string(_WORKFLOW_ID_FROM_CONTEXT, max_length=255, pattern=NAME_OR_UUID_PATTERN),
                    "status": string("Only alerts in this state.", enum=ALERT_STATUSES),
                    "page": integer("Page number, from 1.", minimum=1, maximum=10_000, default=1),
                    "rows": integer("Alerts per page.", minimum=1, maximum=100, default=20),
                }
            ),
            (
                "how often has this workflow fired alerts",
                "which alerts did the reorder rule create this week",
                "are there open alerts from the overdue invoice automation",
                "show the alert history of this rule",
            ),
            read_only=True,
        ),
        _spec(
            "preview_workflow",
            "Validates a complete workflow (new, or a changed version of an existing one) "
            "without saving it and shows it to the user as a preview they accept or reject in "
            "the editor. Nothing is saved by this tool. Use it when you have the whole "
            "workflow at once or are editing an existing rule (pass workflow_id); to build a "
            "new workflow step by step prefer start_draft. If the result lists errors, fix "
            "them and call it again; if it says the preview was sent, tell the user it is "
            "ready for review and stop.",
            obj(
                {
                    "workflow_id": string(
                        "UUID of the saved rule being changed; leave out for a new workflow.",
                        max_length=36,
                        pattern=UUID_PATTERN,
                    ),
                    "workflow": free_object(_WORKFLOW_PAYLOAD),
                    "description": string(
                        "One or two sentences telling the user what this workflow does or what changed.",
                        max_length=1000,
                        min_length=1,
                    ),
                },
                ("workflow", "description"),
            ),
            (
                "add an email step after the approval in this workflow",
                "change the alert severity to high and show me",
                "make a workflow that notifies sales when an order is cancelled",
                "rewire the failure branch to log an audit entry instead",
                "disable the delay step and let me see the result",
            ),
        ),
        _spec(
            "start_draft",
            "Starts building a new workflow step by step. Give it a name, the table to watch "
            "('schema.table', as listed by discover with category 'entities') and the trigger "
            "(on_create, on_update, on_delete or manual). Returns a draft_id. Next, call "
            "add_draft_action once per step, then preview_draft to show the result. Drafts "
            "expire after 10 minutes without use.",
            obj(
                {
                    "name": string("A short name for the workflow.", max_length=255, min_length=1),
                    "entity": string(
                        "The table to watch, as 'schema.table' (e.g. 'sales.orders'), or its UUID.",
                        max_length=127,
                        pattern=ENTITY_PATTERN,
                    ),
                    "trigger_type": string(
                        "What starts the workflow: on_create, on_update, on_delete, manual (or a trigger type UUID).",
                        max_length=100,
                        pattern=NAME_OR_UUID_PATTERN,
                    ),
                    "description": string("What the workflow is for.", max_length=1000),
                    "trigger_conditions": free_object(
                        "Optional conditions on the triggering record, e.g. only when a field "
                        "changes to a given value. Leave out to run on every event."
                    ),
                },
                ("name", "entity", "trigger_type"),
            ),
            (
                "create a new workflow for when a purchase order is created",
                "I want to automate something when inventory changes",
                "start building a rule on the customers table",
                "set up an automation that runs manually",
            ),
            core_in=NEW_CANVAS,
            core_rank=2,
        ),
        _spec(
            "add_draft_action",
            "Adds one step to a workflow draft made by start_draft. Give the step a unique "
            "name, an action type (see discover with category 'action_types'), its "
            "configuration, and after: the name of the step it follows, optionally with the "
            "output port as 'StepName:port' (the default port is used otherwise). Leave after "
            "out only for the first step. Returns the step's output ports so the next step "
            "can branch from them. When the steps are complete, call preview_draft.",
            obj(
                {
                    "draft_id": string("The draft_id returned by start_draft.", max_length=36, pattern=UUID_PATTERN),
                    "name": string("A unique name for this step.", max_length=255, min_length=1),
                    "action_type": string("What the step does.", enum=ACTION_TYPES),
                    "action_config": free_object(
                        "The step's settings; the fields depend on action_type (discover "
                        "action_types lists them), e.g. for send_email: recipients, subject, body."
                    ),
                    "after": string(
                        "The step this one follows: 'StepName' or 'StepName:port'. Leave out for the first step.",
                        max_length=300,
                    ),
                    "description": string("What this step is for.", max_length=1000),
                    "is_active": boolean("Whether the step runs.", default=True),
                },
                ("draft_id", "name", "action_type", "action_config"),
            ),
            (
                "then send an email to the warehouse manager",
                "add a step that checks stock levels",
                "if approval fails, create a high severity alert",
                "after that wait two hours before notifying",
                "next, update the order status to shipped",
            ),
            core_in=NEW_CANVAS,
            core_rank=3,
        ),
        _spec(
            "remove_draft_action",
            "Removes a step from a workflow draft by its name. Steps that followed it are "
            "reconnected to the step it followed, so the flow stays in one piece. Use it when "
            "the user changes their mind about a step before the preview.",
            obj(
                {
                    "draft_id": string("The draft_id returned by start_draft.", max_length=36, pattern=UUID_PATTERN),
                    "action_name": string("The name of the step to remove.", max_length=255, min_length=1),
                },
                ("draft_id", "action_name"),
            ),
            (
                "actually drop the delay step",
                "remove the email I just added",
                "take out the audit log action",
                "undo that last step, I don't want it",
            ),
            # Core on the empty canvas, unlike the Go original: guided creation is a multi-turn
            # conversation (now that history is kept) in which the user confirms each step, so
            # "drop that step" is an expected request, and without the tool the model's only way
            # out is a fresh draft that loses the earlier steps. It costs one small schema.
            core_in=NEW_CANVAS,
            core_rank=4,
        ),
        _spec(
            "preview_draft",
            "Finishes a workflow draft: resolves names, connects the steps, validates the "
            "whole workflow without saving it, and shows it to the user as a preview they "
            "accept or reject in the editor. If the result lists errors, fix the draft with "
            "add_draft_action or remove_draft_action and preview again; if it says the preview "
            "was sent, tell the user it is ready for review.",
            obj(
                {
                    "draft_id": string("The draft_id returned by start_draft.", max_length=36, pattern=UUID_PATTERN),
                    "description": string(
                        "One or two sentences telling the user what the workflow does.",
                        max_length=1000,
                        min_length=1,
                    ),
                },
                ("draft_id", "description"),
            ),
            (
                "that's all the steps, show me the workflow",
                "let me see what we built",
                "looks good, preview it",
                "validate the draft and show it on the canvas",
            ),
            core_in=NEW_CANVAS,
            core_rank=5,
        ),
    ]
