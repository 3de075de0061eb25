"""Catalog entries for the table-configuration tools: reference data, schema introspection,
reading configs, validation, previews and saving. The local ``apply_*`` edits are
``catalog_table_edits``, which builds on ``TABLES``, ``CONFIG_DESCRIPTION`` and ``table_spec``.

Nothing here writes without the user's approval: ``create_table_config`` and
``update_table_config`` produce a preview the user accepts or rejects, like
``preview_table_config`` (the original wrote straight to the backend).
"""

from __future__ import annotations

from typing import Unpack

from agenttools.core.catalog_schema import (
    SQL_IDENTIFIER_PATTERN,
    UUID_PATTERN,
    free_object,
    obj,
    string,
)
from agenttools.core.registry import ToolFacts, ToolSpec
from llm.types import ToolDefinition

TABLES = frozenset({"tables"})
BOTH = frozenset({"workflow", "tables"})

CONFIG_DESCRIPTION = (
    "The table configuration to work on, exactly as the previous tool returned it: the "
    "'config' field of get_table_config, or the 'config' of the last apply_* result. Never "
    "write one by hand. Shape: {title, widget_type, data_source: [{source, schema, select: "
    "{columns: [{name, alias}], foreign_tables: [...]}, filters: [...], sort: [...]}], "
    "visual_settings: {columns: {<field>: {name, header, type, hidden, order, format}}}, ...}."
)
_CONFIG_ID = "UUID of the saved table configuration. Leave it out to use the one open in the editor."


def table_spec(
    name: str,
    description: str,
    parameters: dict,
    examples: tuple[str, ...],
    groups: frozenset[str] = TABLES,
    **facts: Unpack[ToolFacts],
) -> ToolSpec:
    """One table tool's entry (in the ``tables`` group unless ``groups`` says otherwise)."""
    return ToolSpec(ToolDefinition(name, description, parameters), groups, examples, **facts)


def table_specs() -> list[ToolSpec]:
    """The eight table tools that read, check, preview and save (``search_database_schema``
    is in both groups), in catalog order; the four local edits are ``catalog_table_edits``."""
    return [
        table_spec(
            "discover_table_reference",
            "Returns the reference data for table configurations: the display types a column "
            "can have and which PostgreSQL types map to each, number and date format types, "
            "date format tokens (date-fns style such as yyyy-MM-dd), editable input types, "
            "filter operators, join types, sort directions, alignments and the validation "
            "rules a config must pass. Use it when unsure which type, format or operator to "
            "use; it reads no data.",
            obj({}),
            (
                "which filter operators can I use?",
                "how do I format a date column",
                "what column display types exist",
                "what's the right format string for day month year",
                "which join types are supported",
            ),
            read_only=True,
            core_in=TABLES,
            core_rank=1,
        ),
        table_spec(
            "search_database_schema",
            "Explores the database structure. With no arguments it lists the schemas; with "
            "schema only it lists that schema's tables; with schema and table it returns the "
            "table's columns (name, PostgreSQL type, nullable, key flags) and its foreign-key "
            "relationships. Use it to find the exact column names and types before adding "
            "columns, filters or joins, or to pick a table for a workflow.",
            obj(
                {
                    "schema": string(
                        "Database schema name, e.g. 'sales'.", max_length=63, pattern=SQL_IDENTIFIER_PATTERN
                    ),
                    "table": string(
                        "Table name inside the schema; needs schema too.", max_length=63, pattern=SQL_IDENTIFIER_PATTERN
                    ),
                }
            ),
            (
                "what columns does the orders table have",
                "which tables are in the inventory schema",
                "how is customers related to addresses",
                "what's the data type of the due date field",
                "list the database schemas",
            ),
            BOTH,
            read_only=True,
        ),
        table_spec(
            "get_table_config",
            "Reads a saved table configuration: its id, name, description and the full "
            "config (data source, selected columns, joins, filters, sort, display settings). "
            "With neither argument it reads the configuration open in the editor. Call it "
            "before any apply_* change so you edit the real current config.",
            obj(
                {
                    "id": string(_CONFIG_ID, max_length=36, pattern=UUID_PATTERN),
                    "name": string(
                        "Exact name of a saved configuration, to read one other than the open one.",
                        max_length=100,
                        pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.()&,+-]{0,99}$",
                    ),
                }
            ),
            (
                "what does this table currently show",
                "load the open grid's configuration",
                "show me the settings of the 'Open invoices' table",
                "which columns are in this view right now",
            ),
            read_only=True,
            core_in=TABLES,
        ),
        table_spec(
            "list_table_configs",
            "Lists the saved table configurations with their ids, names and descriptions. Use "
            "it to find a configuration by name or to answer which tables exist; then read one "
            "with get_table_config.",
            obj({}),
            (
                "what table views do we have",
                "list all saved grids",
                "is there already a table for purchase orders",
                "show every table configuration",
            ),
            read_only=True,
        ),
        table_spec(
            "validate_table_config",
            "Checks a table configuration against the backend's rules without saving or "
            "showing anything, and returns the problems found. Usually not needed: the apply_* "
            "tools and preview_table_config validate already. Use it to diagnose why a config "
            "is rejected.",
            obj({"config": free_object(CONFIG_DESCRIPTION)}, ("config",)),
            (
                "why is this configuration invalid",
                "check whether the table config is valid",
                "is anything wrong with these settings",
                "validate the grid setup before I save it",
            ),
            read_only=True,
        ),
        table_spec(
            "preview_table_config",
            "Validates a table configuration and, if it is valid, shows it to the user as a "
            "preview they accept or reject in the editor; nothing is saved by this tool. Pass "
            "the config returned by the last apply_* call (or get_table_config) and a short "
            "description of the changes. If the result lists errors, explain them and fix "
            "them with the apply_* tools; if it says the preview was sent, tell the user it is "
            "ready and wait for them.",
            obj(
                {
                    "id": string(_CONFIG_ID, max_length=36, pattern=UUID_PATTERN),
                    "name": string("Name of the configuration.", max_length=100),
                    "description": string("Description of the configuration itself.", max_length=500),
                    "config": free_object(CONFIG_DESCRIPTION),
                    "description_of_changes": string(
                        "One or two sentences telling the user what changed.", max_length=1000, min_length=1
                    ),
                },
                ("config", "description_of_changes"),
            ),
            (
                "show me how the table looks with those changes",
                "preview the updated grid",
                "let me see it before saving",
                "apply it and show me the result",
            ),
            core_in=TABLES,
            core_rank=4,
        ),
        table_spec(
            "create_table_config",
            "Proposes a brand-new saved table configuration under a new name. It does not "
            "save anything by itself: it validates the config and sends the user a preview, "
            "and the configuration is created only if the user approves it in the editor. "
            "Use it only when the user asks for a new, separate table; to change the open "
            "table use the apply_* tools and preview_table_config.",
            obj(
                {
                    "name": string(
                        "Name of the new configuration (3 to 100 characters).", max_length=100, min_length=3
                    ),
                    "description": string("What the table is for.", max_length=500),
                    "config": free_object(CONFIG_DESCRIPTION),
                },
                ("name", "config"),
            ),
            (
                "save this as a new table called 'Late shipments'",
                "create a separate grid for supplier contacts",
                "make a new table view from this setup",
                "I want a copy of this table under another name",
            ),
        ),
        table_spec(
            "update_table_config",
            "Proposes replacing a saved table configuration. It does not save anything by "
            "itself: it validates the config and sends the user a preview, and the change is "
            "stored only if the user approves it in the editor. For everyday edits of the open "
            "table, preview_table_config does the same job; use this when the user explicitly "
            "wants to rename or re-describe the saved configuration along with its content.",
            obj(
                {
                    "id": string(_CONFIG_ID, max_length=36, pattern=UUID_PATTERN),
                    "name": string("New name, if it changes (3 to 100 characters).", max_length=100, min_length=3),
                    "description": string("New description, if it changes.", max_length=500),
                    "config": free_object(CONFIG_DESCRIPTION),
                    "description_of_changes": string(
                        "One or two sentences telling the user what changed.", max_length=1000
                    ),
                },
                ("config",),
            ),
            (
                "save my changes to this table",
                "rename this grid to 'Active customers'",
                "overwrite the saved configuration with the new columns",
                "update the stored table settings",
            ),
        ),
    ]


__all__ = ["BOTH", "CONFIG_DESCRIPTION", "TABLES", "table_spec", "table_specs"]
