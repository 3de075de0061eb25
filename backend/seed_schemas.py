"""ERP-like database schemas served by the introspection endpoints.

Each table is ``(row_count_estimate, columns)``; each column is
``(name, data_type, flags, default)`` where flags holds ``pk`` and/or ``null``.
"""

from __future__ import annotations

Column = tuple[str, str, str, str | None]

_ID: Column = ("id", "uuid", "pk", "gen_random_uuid()")
_CREATED: Column = ("created_date", "timestamp with time zone", "", "now()")
_UPDATED: Column = ("updated_date", "timestamp with time zone", "", "now()")

SCHEMAS: dict[str, dict[str, tuple[int, tuple[Column, ...]]]] = {
    "core": {
        "users": (
            48,
            (
                _ID,
                ("username", "character varying(50)", "", None),
                ("first_name", "character varying(100)", "", None),
                ("last_name", "character varying(100)", "", None),
                ("email", "character varying(255)", "", None),
                ("is_active", "boolean", "", "true"),
                _CREATED,
                _UPDATED,
            ),
        ),
        "roles": (6, (_ID, ("name", "character varying(50)", "", None), ("description", "text", "null", None))),
        "user_roles": (
            61,
            (_ID, ("user_id", "uuid", "", None), ("role_id", "uuid", "", None), _CREATED),
        ),
    },
    "hr": {
        "departments": (
            9,
            (_ID, ("name", "character varying(100)", "", None), ("manager_id", "uuid", "null", None), _CREATED),
        ),
        "employees": (
            212,
            (
                _ID,
                ("user_id", "uuid", "null", None),
                ("department_id", "uuid", "", None),
                ("employee_number", "character varying(20)", "", None),
                ("job_title", "character varying(100)", "", None),
                ("hire_date", "date", "", None),
                ("salary", "numeric(12,2)", "null", None),
                ("status", "character varying(20)", "", "'active'::character varying"),
                _CREATED,
                _UPDATED,
            ),
        ),
        "timesheets": (
            15480,
            (
                _ID,
                ("employee_id", "uuid", "", None),
                ("work_date", "date", "", None),
                ("hours", "numeric(5,2)", "", None),
                ("approved", "boolean", "", "false"),
                _CREATED,
            ),
        ),
    },
    "inventory": {
        "warehouses": (
            4,
            (
                _ID,
                ("name", "character varying(100)", "", None),
                ("code", "character varying(10)", "", None),
                ("city", "character varying(100)", "null", None),
                ("is_active", "boolean", "", "true"),
            ),
        ),
        "products": (
            1350,
            (
                _ID,
                ("sku", "character varying(50)", "", None),
                ("name", "character varying(255)", "", None),
                ("description", "text", "null", None),
                ("unit_price", "numeric(12,2)", "", None),
                ("reorder_point", "integer", "", "0"),
                ("is_active", "boolean", "", "true"),
                _CREATED,
                _UPDATED,
            ),
        ),
        "inventory_items": (
            5200,
            (
                _ID,
                ("product_id", "uuid", "", None),
                ("warehouse_id", "uuid", "", None),
                ("quantity", "integer", "", "0"),
                ("reserved_quantity", "integer", "", "0"),
                ("allocated_quantity", "integer", "", "0"),
                ("last_counted_date", "timestamp with time zone", "null", None),
                _CREATED,
                _UPDATED,
            ),
        ),
        "inventory_transactions": (
            98000,
            (
                _ID,
                ("inventory_item_id", "uuid", "", None),
                ("transaction_type", "character varying(20)", "", None),
                ("quantity", "integer", "", None),
                ("reference_number", "character varying(50)", "null", None),
                ("created_by", "uuid", "", None),
                _CREATED,
            ),
        ),
    },
    "sales": {
        "customers": (
            3100,
            (
                _ID,
                ("name", "character varying(255)", "", None),
                ("email", "character varying(255)", "null", None),
                ("phone", "character varying(30)", "null", None),
                ("credit_limit", "numeric(12,2)", "", "0"),
                ("is_active", "boolean", "", "true"),
                _CREATED,
                _UPDATED,
            ),
        ),
        "orders": (
            24000,
            (
                _ID,
                ("order_number", "character varying(20)", "", None),
                ("customer_id", "uuid", "", None),
                ("status", "character varying(20)", "", "'pending'::character varying"),
                ("order_date", "timestamp with time zone", "", "now()"),
                ("due_date", "date", "null", None),
                ("total_amount", "numeric(12,2)", "", "0"),
                ("created_by", "uuid", "", None),
                _CREATED,
                _UPDATED,
            ),
        ),
        "order_line_items": (
            81000,
            (
                _ID,
                ("order_id", "uuid", "", None),
                ("product_id", "uuid", "", None),
                ("quantity", "integer", "", None),
                ("unit_price", "numeric(12,2)", "", None),
                ("discount", "numeric(5,2)", "", "0"),
            ),
        ),
        "invoices": (
            22500,
            (
                _ID,
                ("invoice_number", "character varying(20)", "", None),
                ("order_id", "uuid", "", None),
                ("amount", "numeric(12,2)", "", None),
                ("due_date", "date", "", None),
                ("paid_date", "date", "null", None),
                ("status", "character varying(20)", "", "'open'::character varying"),
                _CREATED,
            ),
        ),
    },
}

# (constraint, schema, table, column, referenced schema, referenced table, referenced column)
FOREIGN_KEYS: tuple[tuple[str, str, str, str, str, str, str], ...] = (
    ("user_roles_user_id_fkey", "core", "user_roles", "user_id", "core", "users", "id"),
    ("user_roles_role_id_fkey", "core", "user_roles", "role_id", "core", "roles", "id"),
    ("departments_manager_id_fkey", "hr", "departments", "manager_id", "hr", "employees", "id"),
    ("employees_user_id_fkey", "hr", "employees", "user_id", "core", "users", "id"),
    ("employees_department_id_fkey", "hr", "employees", "department_id", "hr", "departments", "id"),
    ("timesheets_employee_id_fkey", "hr", "timesheets", "employee_id", "hr", "employees", "id"),
    ("inventory_items_product_id_fkey", "inventory", "inventory_items", "product_id", "inventory", "products", "id"),
    (
        "inventory_items_warehouse_id_fkey",
        "inventory",
        "inventory_items",
        "warehouse_id",
        "inventory",
        "warehouses",
        "id",
    ),
    (
        "inventory_transactions_inventory_item_id_fkey",
        "inventory",
        "inventory_transactions",
        "inventory_item_id",
        "inventory",
        "inventory_items",
        "id",
    ),
    (
        "inventory_transactions_created_by_fkey",
        "inventory",
        "inventory_transactions",
        "created_by",
        "core",
        "users",
        "id",
    ),
    ("orders_customer_id_fkey", "sales", "orders", "customer_id", "sales", "customers", "id"),
    ("orders_created_by_fkey", "sales", "orders", "created_by", "core", "users", "id"),
    ("order_line_items_order_id_fkey", "sales", "order_line_items", "order_id", "sales", "orders", "id"),
    ("order_line_items_product_id_fkey", "sales", "order_line_items", "product_id", "inventory", "products", "id"),
    ("invoices_order_id_fkey", "sales", "invoices", "order_id", "sales", "orders", "id"),
)
