"""Writes the seed data into a freshly migrated database, once."""

from __future__ import annotations

from typing import Any

from backend.db import Database, Writer
from backend.responses import dumps_text
from backend.seed import (
    ALERTS,
    ENTITIES,
    ENTITY_TYPES,
    INACTIVE_ENTITIES,
    ROLE_DESCRIPTIONS,
    ROLES,
    RULES,
    SEED_TIME,
    TABLE_CONFIG_IDS,
    TABLE_CONFIGS,
    TOKENS,
    TRIGGER_TYPE_DESCRIPTIONS,
    TRIGGER_TYPES,
    USERS,
    seed_id,
)
from backend.seed_action_types import ACTION_TYPES
from backend.seed_schemas import FOREIGN_KEYS, SCHEMAS

_SEEDED_KEY = "seeded"


async def seed_database(db: Database) -> bool:
    """Insert the seed data unless it was inserted before; True when it ran now."""
    async with db.write() as w:
        if await db.fetch_value("SELECT value FROM backend_meta WHERE key = ?", (_SEEDED_KEY,)) is not None:
            return False
        await _seed_people(w)
        await _seed_catalog(w)
        await _seed_rules(w)
        await _seed_alerts(w)
        await _seed_table_configs(w)
        await _seed_schemas(w)
        await w.execute("INSERT INTO backend_meta(key, value) VALUES (?, ?)", (_SEEDED_KEY, SEED_TIME))
    return True


async def _seed_people(w: Writer) -> None:
    await w.execute_many(
        "INSERT INTO roles(id, name, description) VALUES (?, ?, ?)",
        [(rid, name, ROLE_DESCRIPTIONS[name]) for name, rid in ROLES.items()],
    )
    await w.execute_many(
        "INSERT INTO users(id, username, first_name, last_name, email, created_date) VALUES (?, ?, ?, ?, ?, ?)",
        [(u.id, u.username, u.first_name, u.last_name, u.email, SEED_TIME) for u in USERS.values()],
    )
    await w.execute_many(
        "INSERT INTO user_roles(user_id, role_id) VALUES (?, ?)",
        [(u.id, ROLES[r]) for u in USERS.values() for r in u.roles],
    )
    await w.execute_many("INSERT INTO api_tokens(token, user_id) VALUES (?, ?)", list(TOKENS.items()))


async def _seed_catalog(w: Writer) -> None:
    await w.execute_many("INSERT INTO entity_types(id, name) VALUES (?, ?)", [(i, n) for n, i in ENTITY_TYPES.items()])
    rows = []
    for full_name, eid in ENTITIES.items():
        schema, _, table = full_name.partition(".")
        rows.append((eid, table, ENTITY_TYPES["table"], schema, int(full_name not in INACTIVE_ENTITIES)))
    await w.execute_many(
        "INSERT INTO entities(id, name, entity_type_id, schema_name, is_active) VALUES (?, ?, ?, ?, ?)", rows
    )
    await w.execute_many(
        "INSERT INTO trigger_types(id, name, description) VALUES (?, ?, ?)",
        [(tid, name, TRIGGER_TYPE_DESCRIPTIONS[name]) for name, tid in TRIGGER_TYPES.items()],
    )
    await w.execute_many(
        "INSERT INTO action_types(type, name, description, category, supports_manual_execution, is_async, "
        "config_schema, output_ports, sort_order) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                a["type"],
                a["name"],
                a["description"],
                a["category"],
                int(a["supports_manual_execution"]),
                int(a["is_async"]),
                dumps_text(a["config_schema"]),
                dumps_text(a["output_ports"]),
                i,
            )
            for i, a in enumerate(ACTION_TYPES)
        ],
    )


async def _seed_rules(w: Writer) -> None:
    for rule in RULES:
        author = USERS[rule.created_by].id
        await w.execute(
            "INSERT INTO rules(id, name, description, entity_id, trigger_type_id, trigger_conditions, canvas_layout, "
            "is_active, is_default, created_by, updated_by, created_date, updated_date) "
            "VALUES (?, ?, ?, ?, ?, ?, NULL, ?, 0, ?, ?, ?, ?)",
            (
                rule.id,
                rule.name,
                rule.description,
                ENTITIES[rule.entity],
                TRIGGER_TYPES[rule.trigger_type],
                None if rule.trigger_conditions is None else dumps_text(dict(rule.trigger_conditions)),
                int(rule.is_active),
                author,
                author,
                SEED_TIME,
                SEED_TIME,
            ),
        )
        await w.execute_many(
            "INSERT INTO rule_actions(id, rule_id, position, name, description, action_type, action_config, is_active) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    rule.action_id(a.key),
                    rule.id,
                    pos,
                    a.name,
                    a.description,
                    a.action_type,
                    dumps_text(dict(a.config)),
                    int(a.is_active),
                )
                for pos, a in enumerate(rule.actions)
            ],
        )
        await w.execute_many(
            "INSERT INTO rule_edges(id, rule_id, source_action_id, target_action_id, edge_type, source_output, "
            "edge_order, created_date) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    seed_id("edge", f"{rule.key}/{order}"),
                    rule.id,
                    None if e.source is None else rule.action_id(e.source),
                    rule.action_id(e.target),
                    e.edge_type,
                    e.source_output,
                    order,
                    SEED_TIME,
                )
                for order, e in enumerate(rule.edges)
            ],
        )


async def _seed_alerts(w: Writer) -> None:
    rule_ids = {r.key: r.id for r in RULES}
    for alert in ALERTS:
        entity_name = entity_id = None
        if alert.entity is not None:
            entity_name, entity_id = alert.entity, ENTITIES[alert.entity]
        rule_id = None if alert.rule_key is None else rule_ids[alert.rule_key]
        await w.execute(
            "INSERT INTO alerts(id, alert_type, severity, title, message, context, source_entity_name, "
            "source_entity_id, source_rule_id, action_url, status, expires_date, created_date, updated_date) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)",
            (
                alert.id,
                alert.alert_type,
                alert.severity,
                alert.title,
                alert.message,
                None if alert.context is None else dumps_text(dict(alert.context)),
                entity_name,
                entity_id,
                rule_id,
                None if rule_id is None else f"/workflow/alerts/{alert.id}",
                alert.status,
                alert.created,
                alert.created,
            ),
        )
        recipients: list[tuple[Any, ...]] = [(alert.id, "user", u) for u in alert.users]
        recipients += [(alert.id, "role", r) for r in alert.roles]
        await w.execute_many(
            "INSERT INTO alert_recipients(alert_id, recipient_type, recipient_id) VALUES (?, ?, ?)", recipients
        )
        await w.execute_many(
            "INSERT INTO alert_acknowledgments(id, alert_id, user_id, acknowledged_date, notes) VALUES (?, ?, ?, ?, ?)",
            [
                (seed_id("ack", f"{alert.key}/{u}"), alert.id, u, alert.created, "Reorder placed")
                for u in alert.acknowledged_by
            ],
        )


async def _seed_table_configs(w: Writer) -> None:
    await w.execute_many(
        "INSERT INTO table_configs(id, name, description, config, created_by, updated_by, created_date, updated_date, "
        "is_system) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                TABLE_CONFIG_IDS[c["name"]],
                c["name"],
                c["description"],
                dumps_text(c["config"]),
                USERS[c["created_by"]].id,
                USERS[c["created_by"]].id,
                SEED_TIME,
                SEED_TIME,
                int(c["is_system"]),
            )
            for c in TABLE_CONFIGS
        ],
    )


async def _seed_schemas(w: Writer) -> None:
    for schema, tables in SCHEMAS.items():
        for table, (estimate, columns) in tables.items():
            await w.execute(
                "INSERT INTO schema_tables(schema_name, table_name, row_count_estimate) VALUES (?, ?, ?)",
                (schema, table, estimate),
            )
            await w.execute_many(
                "INSERT INTO schema_columns(schema_name, table_name, ordinal, name, data_type, is_nullable, "
                "is_primary_key, default_value) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (schema, table, i, name, dtype, int("null" in flags), int("pk" in flags), default)
                    for i, (name, dtype, flags, default) in enumerate(columns, start=1)
                ],
            )
    await w.execute_many(
        "INSERT INTO schema_foreign_keys(name, schema_name, table_name, column_name, referenced_schema, "
        "referenced_table, referenced_column) VALUES (?, ?, ?, ?, ?, ?, ?)",
        list(FOREIGN_KEYS),
    )
