"""Catalog entries for the four local edits of a table configuration: ``apply_column_change``,
``apply_filter_change``, ``apply_join_change`` and ``apply_sort_change``.

Apart from ``catalog_tables`` (reading, checking, previewing and saving a configuration)
because these four are one family with one contract: each takes the ``config`` the
previous call returned, changes one part of it in memory, saves nothing and returns
``{valid, applied, warnings, errors, config}`` for the next edit or the preview. Their
schemas (a column, a filter, a join, a sort item) are theirs alone.
"""

from __future__ import annotations

from agenttools.core.catalog_schema import (
    COLUMN_PATTERN,
    FILTER_OPERATORS,
    JOIN_TYPES,
    PG_TYPE_PATTERN,
    SORT_DIRECTIONS,
    SQL_IDENTIFIER_PATTERN,
    any_value,
    array,
    boolean,
    free_object,
    integer,
    item_object,
    obj,
    string,
)
from agenttools.core.catalog_tables import CONFIG_DESCRIPTION, TABLES, table_spec
from agenttools.core.registry import ToolSpec

_OPERATION = "add or remove."


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


def table_edit_specs() -> list[ToolSpec]:
    """The four ``apply_*`` edits, in catalog order (after ``catalog_tables.table_specs``)."""
    return [
        table_spec(
            "apply_column_change",
            "Adds columns to or removes columns from a table configuration, locally, without "
            "saving. New columns get a display type from their PostgreSQL type (datetime "
            "columns also get a date format); hidden columns are selected but not shown. "
            "Returns {valid, applied, warnings, errors, config}. Find column names and types "
            "with search_database_schema first. If valid, pass the returned config to the next "
            "apply_* call or to preview_table_config.",
            obj(
                {
                    "config": free_object(CONFIG_DESCRIPTION),
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
        table_spec(
            "apply_filter_change",
            "Adds or removes a filter on a table configuration, locally, without saving. A "
            "filter column that is not selected yet is added as a hidden column. Removing "
            "drops the first filter on that column. Returns {valid, applied, warnings, errors, "
            "config}; if valid, continue with the returned config (another apply_* call or "
            "preview_table_config).",
            obj(
                {
                    "config": free_object(CONFIG_DESCRIPTION),
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
        table_spec(
            "apply_join_change",
            "Joins another table into a table configuration (to show its columns) or removes a "
            "join, locally, without saving. Give the table, its schema, the columns that link "
            "the two tables (relationship_from on the base table, relationship_to on the "
            "joined one; search_database_schema lists the relationships) and the columns to "
            "show. Returns {valid, applied, warnings, errors, config}; if valid, continue with "
            "the returned config.",
            obj(
                {
                    "config": free_object(CONFIG_DESCRIPTION),
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
        table_spec(
            "apply_sort_change",
            "Changes the sort order of a table configuration, locally, without saving: set "
            "replaces the whole sort (an empty list clears it), add appends sort keys, remove "
            "drops the listed columns. Returns {valid, applied, warnings, errors, config}; if "
            "valid, continue with the returned config.",
            obj(
                {
                    "config": free_object(CONFIG_DESCRIPTION),
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


__all__ = ["table_edit_specs"]
