"""Database introspection over the seeded ERP schemas (§9 #14–#17).

Schema and table path segments must be plain SQL identifiers (so ``/``, ``..``, ``?``
and ``#`` are refused with a 400); an identifier that names nothing is a 404.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from backend.auth import require_user
from backend.db import request_db
from backend.params import sql_identifier
from backend.responses import JSONResponse, not_found


async def list_schemas(request: Request) -> JSONResponse:
    await require_user(request)
    rows = await request_db(request).fetch_all("SELECT DISTINCT schema_name FROM schema_tables ORDER BY schema_name")
    return JSONResponse([{"name": r["schema_name"]} for r in rows])


async def list_tables(request: Request) -> JSONResponse:
    await require_user(request)
    schema = sql_identifier(request, "schema")
    rows = await request_db(request).fetch_all(
        "SELECT table_name, row_count_estimate FROM schema_tables WHERE schema_name = ? ORDER BY table_name", (schema,)
    )
    if not rows:
        raise not_found(f"schema {schema!r} not found")
    return JSONResponse(
        [{"schema": schema, "name": r["table_name"], "row_count_estimate": r["row_count_estimate"]} for r in rows]
    )


async def _require_table(request: Request) -> tuple[str, str]:
    schema = sql_identifier(request, "schema")
    table = sql_identifier(request, "table")
    found = await request_db(request).fetch_value(
        "SELECT 1 FROM schema_tables WHERE schema_name = ? AND table_name = ?", (schema, table)
    )
    if found is None:
        raise not_found(f"table {schema}.{table} not found")
    return schema, table


async def list_columns(request: Request) -> JSONResponse:
    await require_user(request)
    schema, table = await _require_table(request)
    rows = await request_db(request).fetch_all(
        "SELECT c.*, fk.referenced_schema, fk.referenced_table, fk.referenced_column FROM schema_columns c "
        "LEFT JOIN schema_foreign_keys fk ON fk.schema_name = c.schema_name AND fk.table_name = c.table_name "
        "AND fk.column_name = c.name WHERE c.schema_name = ? AND c.table_name = ? ORDER BY c.ordinal",
        (schema, table),
    )
    out = []
    for r in rows:
        column = {
            "name": r["name"],
            "data_type": r["data_type"],
            "is_nullable": bool(r["is_nullable"]),
            "is_primary_key": bool(r["is_primary_key"]),
            "default_value": r["default_value"],
            "is_foreign_key": r["referenced_table"] is not None,
        }
        if r["referenced_table"] is not None:
            column["referenced_schema"] = r["referenced_schema"]
            column["referenced_table"] = r["referenced_table"]
            column["referenced_column"] = r["referenced_column"]
        out.append(column)
    return JSONResponse(out)


async def list_relationships(request: Request) -> JSONResponse:
    """Outgoing foreign keys (``many-to-one``) and, for joins the other way, incoming ones (``one-to-many``).

    For an incoming key, ``column_name`` is this table's referenced column and the
    ``referenced_*`` fields name the table that points here.
    """
    await require_user(request)
    schema, table = await _require_table(request)
    db = request_db(request)
    outgoing = await db.fetch_all(
        "SELECT * FROM schema_foreign_keys WHERE schema_name = ? AND table_name = ? ORDER BY name", (schema, table)
    )
    incoming = await db.fetch_all(
        "SELECT * FROM schema_foreign_keys WHERE referenced_schema = ? AND referenced_table = ? ORDER BY name",
        (schema, table),
    )
    out = [
        {
            "foreign_key_name": r["name"],
            "column_name": r["column_name"],
            "referenced_schema": r["referenced_schema"],
            "referenced_table": r["referenced_table"],
            "referenced_column": r["referenced_column"],
            "relationship_type": "many-to-one",
        }
        for r in outgoing
    ]
    out += [
        {
            "foreign_key_name": r["name"],
            "column_name": r["referenced_column"],
            "referenced_schema": r["schema_name"],
            "referenced_table": r["table_name"],
            "referenced_column": r["column_name"],
            "relationship_type": "one-to-many",
        }
        for r in incoming
    ]
    return JSONResponse(out)


ROUTES = [
    Route("/v1/introspection/schemas", list_schemas, methods=["GET"]),
    Route("/v1/introspection/schemas/{schema}/tables", list_tables, methods=["GET"]),
    Route("/v1/introspection/tables/{schema}/{table}/columns", list_columns, methods=["GET"]),
    Route("/v1/introspection/tables/{schema}/{table}/relationships", list_relationships, methods=["GET"]),
]
