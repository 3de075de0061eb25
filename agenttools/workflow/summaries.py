"""Compact, deterministic views of backend workflow data for the model.

Raw backend payloads are large and full of ids; the model reasons better over short
summaries. These read the field names the backend really returns (``trigger_type_name``,
``createdDate``, recipient arrays, ``first_name``/``last_name``) — the original read names
that do not exist and silently produced empty fields.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "explain_node",
    "flow_summary",
    "page_info",
    "summarise_action_types",
    "summarise_alert",
    "summarise_rule_row",
    "trim_text",
]


def trim_text(value: Any, limit: int = 240) -> str:
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _first_sentence(text: str, limit: int = 120) -> str:
    cut = text.find(". ")
    if cut > 0:
        return text[: cut + 1]
    return trim_text(text, limit + 1)


def summarise_action_types(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """``discover action_types``: type, one-line description, ports, config fields (sorted)."""
    out: list[dict[str, Any]] = []
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("type"), str):
            continue
        ports = [
            p["name"] + (" (default)" if p.get("is_default") is True else "")
            for p in row.get("output_ports") or []
            if isinstance(p, dict) and isinstance(p.get("name"), str)
        ]
        item: dict[str, Any] = {
            "type": row["type"],
            "description": _first_sentence(str(row.get("description") or "")),
            "output_ports": ports,
        }
        schema = row.get("config_schema")
        props = schema.get("properties") if isinstance(schema, dict) else None
        if isinstance(props, dict) and props:
            item["config_fields"] = sorted(props)
            required = schema.get("required") if isinstance(schema, dict) else None
            if isinstance(required, list) and required:
                item["required_config_fields"] = sorted(str(r) for r in required)
        out.append(item)
    out.sort(key=lambda i: i["type"])
    return out


def page_info(body: Mapping[str, Any], items: Sequence[Any]) -> dict[str, Any]:
    """``total``, ``page``, ``showing`` and a ``has_more`` that is right on every page."""
    total = body.get("total")
    page = body.get("page")
    rows = body.get("rows_per_page")
    page_n = page if isinstance(page, int) and page >= 1 else 1
    rows_n = rows if isinstance(rows, int) and rows >= 1 else len(items)
    info: dict[str, Any] = {"page": page_n, "showing": len(items)}
    if isinstance(total, int):
        info["total"] = total
        info["has_more"] = (page_n - 1) * rows_n + len(items) < total
    else:
        info["has_more"] = False
    return info


def summarise_rule_row(rule: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": rule.get("id"),
        "name": rule.get("name"),
        "entity": _entity_label(rule),
        "trigger_type": rule.get("trigger_type_name") or "",
        "is_active": rule.get("is_active"),
    }


def _entity_label(rule: Mapping[str, Any]) -> str:
    schema, name = rule.get("entity_schema_name"), rule.get("entity_name")
    if isinstance(schema, str) and schema and isinstance(name, str) and name:
        return f"{schema}.{name}"
    return str(name or "")


def recipient_label(r: Mapping[str, Any]) -> str:
    name = str(r.get("name") or r.get("recipientId") or "unknown")
    kind = str(r.get("recipientType") or "user")
    if kind == "role":
        return f"role:{name}"
    email = r.get("email")
    return f"{name} <{email}>" if isinstance(email, str) and email else name


def summarise_alert(alert: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": alert.get("id"),
        "severity": alert.get("severity"),
        "status": alert.get("status"),
    }
    for src, dst, limit in (("title", "title", 160), ("message", "message", 240)):
        if alert.get(src):
            out[dst] = trim_text(alert[src], limit)
    if alert.get("createdDate"):
        out["created_date"] = alert["createdDate"]
    if alert.get("sourceRuleName"):
        out["source_rule"] = alert["sourceRuleName"]
    if alert.get("sourceEntityName"):
        out["source_entity"] = alert["sourceEntityName"]
    recipients = alert.get("recipients")
    if isinstance(recipients, list) and recipients:
        out["recipients"] = [recipient_label(r) for r in recipients if isinstance(r, dict)]
    return out


# -- graph -----------------------------------------------------------------------------


class _Graph:
    def __init__(self, actions: Sequence[Mapping[str, Any]], edges: Sequence[Mapping[str, Any]]):
        self.actions = list(actions)
        self.by_id = {str(a.get("id")): a for a in self.actions if a.get("id")}
        self.starts: list[str] = []
        self.out: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        self.inc: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
        for e in edges:
            target = str(e.get("target_action_id") or "")
            source = str(e.get("source_action_id") or "")
            if e.get("edge_type") == "start" and target:
                self.starts.append(target)
            if source:
                self.out[source].append(e)
            if target:
                self.inc[target].append(e)
        for lst in self.out.values():
            lst.sort(key=lambda e: (_int(e.get("edge_order")), str(e.get("target_action_id") or "")))

    def name(self, action_id: str) -> str:
        a = self.by_id.get(action_id)
        return str(a.get("name")) if a else action_id

    def depths(self) -> dict[str, int]:
        depth: dict[str, int] = {}
        queue: deque[str] = deque()
        for s in self.starts:
            if s not in depth:
                depth[s] = 0
                queue.append(s)
        while queue:
            cur = queue.popleft()
            for e in self.out.get(cur, []):
                t = str(e.get("target_action_id") or "")
                if t and t not in depth:
                    depth[t] = depth[cur] + 1
                    queue.append(t)
        return depth


def _int(v: Any) -> int:
    return v if isinstance(v, int) else 0


def _edge_label(e: Mapping[str, Any]) -> str:
    if e.get("source_output"):
        return str(e["source_output"])
    return "always" if e.get("edge_type") == "always" else ""


def _alert_recipients_text(config: Any) -> str:
    if not isinstance(config, dict):
        return ""
    rec = config.get("recipients")
    if not isinstance(rec, dict):
        return ""
    parts: list[str] = []
    for u in rec.get("users") or []:
        if isinstance(u, dict):
            name = u.get("name") or u.get("id") or "?"
            parts.append(f"{name} ({u['email']})" if u.get("email") else str(name))
    for r in rec.get("roles") or []:
        if isinstance(r, dict):
            parts.append(f"{r.get('name') or r.get('id') or '?'} (role)")
    return ", ".join(parts)


def flow_summary(actions: Sequence[Mapping[str, Any]], edges: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts, action types and an indented outline of the flow from the start edge."""
    g = _Graph(actions, edges)
    lines: list[str] = []
    if not g.actions:
        lines.append("(empty workflow)")
    elif not g.starts:
        lines.append("(no start edge defined)")
    else:
        visited: set[str] = set()

        def walk(action_id: str, depth: int, label: str) -> None:
            if len(lines) > 200:
                return
            prefix = "  " * depth
            a = g.by_id.get(action_id, {})
            text = prefix + (f"[{label}] " if label else "") + g.name(action_id)
            if a.get("action_type"):
                text += f" ({a['action_type']})"
                if a["action_type"] == "create_alert":
                    recipients = _alert_recipients_text(a.get("action_config"))
                    if recipients:
                        text += f" — alerts: {recipients}"
            lines.append(text)
            if action_id in visited:
                lines.append(prefix + "  ↻ (continues above)")
                return
            visited.add(action_id)
            children = g.out.get(action_id, [])
            next_depth = depth if len(children) == 1 else depth + 1
            for e in children:
                walk(str(e.get("target_action_id") or ""), next_depth, _edge_label(e))

        for s in g.starts:
            walk(s, 0, "")
    return {
        "node_count": len(g.actions),
        "edge_count": len(edges),
        "branch_count": sum(1 for lst in g.out.values() if len(lst) > 1),
        "action_types_used": sorted({str(a["action_type"]) for a in g.actions if a.get("action_type")}),
        "flow_outline": "\n".join(lines),
    }


def _links(g: _Graph, edges: list[Mapping[str, Any]], *, outgoing: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in edges:
        other = str(e.get("target_action_id" if outgoing else "source_action_id") or "")
        item: dict[str, Any] = {
            "action_id": other,
            "action_name": g.name(other) if other else "(trigger)",
            "edge_type": e.get("edge_type"),
        }
        if e.get("source_output"):
            item["output_port"] = e["source_output"]
        out.append(item)
    return out


def explain_node(
    actions: Sequence[Mapping[str, Any]], edges: Sequence[Mapping[str, Any]], node: str
) -> dict[str, Any] | None:
    """Explanation(s) of the action named ``node`` (or with that id, or of that type).

    ``None`` when nothing matches.
    """
    g = _Graph(actions, edges)
    depths = g.depths()

    def explain(a: Mapping[str, Any]) -> dict[str, Any]:
        aid = str(a.get("id") or "")
        return {
            "action": {
                "id": a.get("id"),
                "name": a.get("name"),
                "action_type": a.get("action_type"),
                "description": a.get("description") or "",
                "is_active": a.get("is_active"),
                "action_config": a.get("action_config"),
            },
            "depth_from_start": depths.get(aid, -1),
            "incoming_from": _links(g, g.inc.get(aid, []), outgoing=False),
            "outgoing_to": _links(g, g.out.get(aid, []), outgoing=True),
        }

    same_type = [a for a in g.actions if a.get("action_type") == node]
    if len(same_type) > 1 and not any(a.get("name") == node for a in g.actions):
        return {
            "matched_by": "action_type",
            "match_count": len(same_type),
            "message": f'Found {len(same_type)} actions of type "{node}" in this workflow',
            "explanations": [explain(a) for a in same_type],
        }
    folded = node.casefold()
    for pick in (
        lambda a: a.get("name") == node,
        lambda a: str(a.get("id") or "").lower() == node.lower(),
        lambda a: str(a.get("name") or "").casefold() == folded,
        lambda a: a.get("action_type") == node,
    ):
        match = next((a for a in g.actions if pick(a)), None)
        if match is not None:
            return explain(match)
    return None
