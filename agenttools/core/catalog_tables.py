"""Catalog entries for the table-configuration tools: reference data, schema introspection,
reading configs, the local ``apply_*`` edits, and previews.

Nothing here writes without the user's approval: ``create_table_config`` and
``update_table_config`` produce a preview the user accepts or rejects, like
``preview_table_config`` (the original wrote straight to the backend).
"""

from __future__ import annotations

from typing import Unpack

from agenttools.core.catalog_schema import (
    COLUMN_PATTERN,
    FILTER_OPERATORS,
    JOIN_TYPES,
    PG_TYPE_PATTERN,
    SORT_DIRECTIONS,
    SQL_IDENTIFIER_PATTERN,
    UUID_PATTERN,
    any_value,
    array,
    boolean,
    free_object,
    integer,
    item_object,
    obj,
    string,
)
from agenttools.core.registry import ToolFacts, ToolSpec
from llm.types import ToolDefinition

TABLES = frozenset({"tables"})
BOTH = frozenset({"workflow", "tables"})

_CONFIG = (
    "The table configuration to work on, exactly as the previous tool returned it: the "
    "'config' field of get_table_config, or the 'config' of the last apply_* result. Never "
    "write one by hand. Shape: {title, widget_type, data_source: [{source, schema, select: "
    "{columns: [{name, alias}], foreign_tables: [...]}, filters: [...], sort: [...]}], "
    "visual_settings: {columns: {<field>: {name, header, type, hidden, order, format}}}, ...}."
)
_CONFIG_ID = "UUID of the saved table configuration. Leave it out to use the one open in the editor."
_OPERATION = "add or remove."


def _spec(
    name: str,
    description: str,
    parameters: dict,
    examples: tuple[str, ...],
    groups: frozenset[str] = TABLES,
    **facts: Unpack[ToolFacts],
) -> ToolSpec:
    return ToolSpec(ToolDefinition(name, description, parameters), groups, examples, **facts)


def _column_item() -> dict:
    return item_object(
        {
            "name": string("Column name in its table.", max_length=128, pattern=COLUMN_PATTERN),
            "alias": string("Optional field name to show it under.", max_length=128, pattern=COLUMN_PATTERN),
            "pg_type": string(
                "The column's PostgreSQL type from search_database_schema (decides how it is displayed).",
                max_length=64,
                pattern=PG_TYPE_PATTERN,
            ),
            "source_table": string(
                "Table the column comes from, if not the base table.", max_length=63, pattern=SQL_IDENTIFIER_PATTERN
            ),
            "source_schema": string("Schema of source_table.", max_length=63, pattern=SQL_IDENTIFIER_PATTERN),
            "hidden": boolean("Select the column without showing it."),
        },
        ("name",),
    )


def table_specs() -> list[ToolSpec]:
    """The twelve table tools (``search_database_schema`` is in both groups), in catalog order."""
    return [
        _spec(
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
        _spec(
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
        _spec(
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
        _spec(
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
        _spec(
            "validate_table_config",
            "Checks a table configuration against the backend's rules without saving or "
            "showing anything, and returns the problems found. Usually not needed: the apply_* "
            "tools and preview_table_config validate already. Use it to diagnose why a config "
            "is rejected.",
            obj({"config": free_object(_CONFIG)}, ("config",)),
            (
                "why is this configuration invalid",
                "check whether the table config is valid",
                "is anything wrong with these settings",
                "validate the grid setup before I save it",
            ),
            read_only=True,
        ),
        _spec(
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
                    "config": free_object(_CONFIG),
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
        _spec(
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
                    "config": free_object(_CONFIG),
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
        _spec(
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
                    "config": free_object(_CONFIG),
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
        _spec(
            "apply_column_change",
            "Adds columns to or removes columns from a table configuration, locally, without "
            "saving. New columns get a display type from their PostgreSQL type (datetime "
            "columns also get a date format); hidden columns are selected but not shown. "
            "Returns {valid, applied, warnings, errors, config}. Find column names and types "
            "with search_database_schema first. If valid, pass the returned config to the next "
            "apply_* call or to preview_table_config.",
            obj(
                {
                    "config": free_object(_CONFIG),
                    "operation": string(_OPERATION, enum=("add", "remove")),
                    "columns": array(
                        "The columns to add or remove. Each: {name (required), alias, pg_type, "
                        "source_table, source_schema, hidden}.",
                        _column_item(),
                        max_items=50,
                        min_items=1,
                    ),
                },
                ("config", "operation", "columns"),
            ),
            (
                "add the email column",
                "show the customer phone number too",
                "remove the created date column",
                "hide the internal notes field",
                "include order total and currency in the grid",
            ),
            core_in=TABLES,
            core_rank=2,
        ),
        _spec(
            "apply_filter_change",
            "Adds or removes a filter on a table configuration, locally, without saving. A "
            "filter column that is not selected yet is added as a hidden column. Removing "
            "drops the first filter on that column. Returns {valid, applied, warnings, errors, "
            "config}; if valid, continue with the returned config (another apply_* call or "
            "preview_table_config).",
            obj(
                {
                    "config": free_object(_CONFIG),
                    "operation": string(_OPERATION, enum=("add", "remove")),
                    "filter": item_object(
                        {
                            "column": string("Column to filter on.", max_length=128, pattern=COLUMN_PATTERN),
                            "operator": string("Comparison; needed to add.", enum=FILTER_OPERATORS),
                            "value": any_value(
                                "Value to compare with (a list for 'in'; leave out for is_null / is_not_null)."
                            ),
                            "label": string("Label shown on the filter control.", max_length=100),
                            "control_type": string(
                                "Input control for the filter, e.g. 'select' or 'date'.", max_length=50
                            ),
                        },
                        ("column",),
                        "The filter: {column (required), operator (eq, neq, gt, gte, lt, lte, in, like, "
                        "ilike, is_null, is_not_null; needed to add), value (for 'in' a list), label, "
                        "control_type}. To remove, column is enough.",
                    ),
                },
                ("config", "operation", "filter"),
            ),
            (
                "only show active customers",
                "filter orders to amounts over 1000",
                "remove the status filter",
                "show rows where the ship date is empty",
                "limit it to the EU region",
            ),
            core_in=TABLES,
            core_rank=3,
        ),
        _spec(
            "apply_join_change",
            "Joins another table into a table configuration (to show its columns) or removes a "
            "join, locally, without saving. Give the table, its schema, the columns that link "
            "the two tables (relationship_from on the base table, relationship_to on the "
            "joined one; search_database_schema lists the relationships) and the columns to "
            "show. Returns {valid, applied, warnings, errors, config}; if valid, continue with "
            "the returned config.",
            obj(
                {
                    "config": free_object(_CONFIG),
                    "operation": string(_OPERATION, enum=("add", "remove")),
                    "join": item_object(
                        {
                            "table": string("Table to join.", max_length=63, pattern=SQL_IDENTIFIER_PATTERN),
                            "schema": string("Schema of that table.", max_length=63, pattern=SQL_IDENTIFIER_PATTERN),
                            "join_type": string("Join kind; left when left out.", enum=JOIN_TYPES),
                            "relationship_from": string(
                                "Linking column on the base table, e.g. 'customer_id'.",
                                max_length=128,
                                pattern=COLUMN_PATTERN,
                            ),
                            "relationship_to": string(
                                "Linking column on the joined table, e.g. 'id'.", max_length=128, pattern=COLUMN_PATTERN
                            ),
                            "columns_to_add": array(
                                "Columns of the joined table to show.",
                                string("Column name.", max_length=128, pattern=COLUMN_PATTERN),
                                max_items=50,
                            ),
                        },
                        ("table",),
                        "The join: {table (required), schema, join_type (inner | left | right | full; "
                        "left by default), relationship_from (column on the base table), "
                        "relationship_to (column on the joined table), columns_to_add (list of column "
                        "names)}. To remove, table and schema are enough.",
                    ),
                },
                ("config", "operation", "join"),
            ),
            (
                "bring in the customer name from the customers table",
                "show the supplier's country next to each product",
                "remove the warehouse join",
                "link orders to their shipping addresses",
            ),
        ),
        _spec(
            "apply_sort_change",
            "Changes the sort order of a table configuration, locally, without saving: set "
            "replaces the whole sort (an empty list clears it), add appends sort keys, remove "
            "drops the listed columns. Returns {valid, applied, warnings, errors, config}; if "
            "valid, continue with the returned config.",
            obj(
                {
                    "config": free_object(_CONFIG),
                    "operation": string("set, add or remove.", enum=("add", "remove", "set")),
                    "sort": array(
                        "Sort keys. Each: {column (required), direction (asc | desc), priority (0 first)}.",
                        item_object(
                            {
                                "column": string("Column to sort by.", max_length=128, pattern=COLUMN_PATTERN),
                                "direction": string("asc or desc; asc when left out.", enum=SORT_DIRECTIONS),
                                "priority": integer("Lower sorts first.", minimum=0, maximum=1000),
                            },
                            ("column",),
                        ),
                        max_items=20,
                    ),
                },
                ("config", "operation", "sort"),
            ),
            (
                "sort by newest first",
                "order the rows by customer name",
                "stop sorting by due date",
                "sort by priority then by amount descending",
            ),
        ),
    ]
