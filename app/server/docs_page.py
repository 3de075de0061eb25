"""``GET /docs``: the OpenAPI description as one readable page, rendered on the server.

Rendered once from the very document ``/openapi.json`` serves, so the two cannot
disagree; no script and no CDN, so it works offline and under the playground's strict
Content-Security-Policy (its only other file is ``/static/docs.css``). Every operation
shows its parameters, body and responses; every component schema (the SSE event
catalogue among them) is shown as JSON with its ``$ref`` links made clickable.

A body that is a reference to a component is shown by the component's name, linked,
never as the raw ``{"$ref": …}`` a person cannot read; a *request* body also shows the
component's schema in place, since what to send is what a reader of an operation came
for (a newcomer found every request body on the page was one unreadable ``$ref``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from html import escape
from typing import Any

from app.server.openapi import HTTP_METHODS

SCHEMA_REF = "#/components/schemas/"
_REF = re.compile(r"&quot;#/components/schemas/([A-Za-z0-9_.\-]+)&quot;")
_CODE = re.compile(r"`([^`]+)`")
#: A schema this short is shown inline rather than as a block.
INLINE_CHARS = 60


def _anchor(kind: str, name: str) -> str:
    return f"{kind}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")


def _prose(text: str) -> str:
    """Descriptions as HTML: escaped, with Markdown's `code` spans kept as code."""
    return _CODE.sub(r"<code>\1</code>", escape(text))


def _schema_html(schema: Any) -> str:
    compact = json.dumps(schema, ensure_ascii=False)
    if len(compact) <= INLINE_CHARS:
        return f" <code>{_REF.sub(lambda m: _link(m[1], m[0]), escape(compact))}</code>"
    return f"<pre>{_schema_json(schema)}</pre>"


def _link(name: str, text: str) -> str:
    return f'<a href="#{_anchor("schema", name)}">{text}</a>'


def _schema_json(schema: Any) -> str:
    """Pretty JSON with ``$ref`` targets linked to their section."""
    text = escape(json.dumps(schema, indent=2, ensure_ascii=False))
    return _REF.sub(lambda m: _link(m[1], m[0]), text)


def _brief(schema: Mapping[str, Any]) -> str:
    """One line for a parameter: type, range, pattern or choices."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f'<a href="#{_anchor("schema", name)}">{escape(name)}</a>'
    if "enum" in schema:
        return " | ".join(f"<code>{escape(json.dumps(v))}</code>" for v in schema["enum"])
    parts = [escape(str(schema.get("type", "any")))]
    if "minimum" in schema or "maximum" in schema:
        parts.append(f"{schema.get('minimum', '…')}..{schema.get('maximum', '…')}")
    if "pattern" in schema:
        parts.append(f"<code>{escape(str(schema['pattern']))}</code>")
    if "default" in schema:
        parts.append(f"default <code>{escape(json.dumps(schema['default']))}</code>")
    return " ".join(parts)


def _component_name(schema: Any) -> str | None:
    """The component a schema only refers to (``{"$ref": "#/components/schemas/X"}``), else None."""
    if isinstance(schema, Mapping) and set(schema) == {"$ref"}:
        ref = str(schema["$ref"])
        if ref.startswith(SCHEMA_REF):
            return ref[len(SCHEMA_REF):]
    return None


def _body_schema_html(schema: Any, schemas: Mapping[str, Any], *, expand: bool) -> str:
    """A body's schema: a referenced component by its linked name (and, with ``expand``,
    its schema in place), anything else as JSON."""
    name = _component_name(schema)
    if name is None or name not in schemas:
        return _schema_html(schema)
    link = f" {_link(name, escape(name))}"
    if not expand:
        return link
    return f"{link}<pre>{_schema_json(schemas[name])}</pre>"


def _content(content: Mapping[str, Any], schemas: Mapping[str, Any], *, expand: bool = False) -> str:
    out = []
    for media, body in content.items():
        out.append(f"<div class=media><code>{escape(media)}</code>")
        if "schema" in body:
            out.append(_body_schema_html(body["schema"], schemas, expand=expand))
        events = body.get("x-sse-events")
        if events:
            links = ", ".join(f'<a href="#{_anchor("event", n)}">{escape(n)}</a>' for n in events)
            out.append(f"<p class=events>Events: {links}</p>")
        out.append("</div>")
    return "".join(out)


def _operation(
    path: str, method: str, op: Mapping[str, Any], default_security: Any, schemas: Mapping[str, Any]
) -> str:
    anchor = _anchor("op", op.get("operationId") or f"{method}-{path}")
    html = [f'<section class=op id="{anchor}"><h3><span class="m {method}">{method.upper()}</span> '
            f"<code>{escape(path)}</code> <small>{_prose(op.get('summary', ''))}</small></h3>"]
    if op.get("description"):
        html.append(f"<p>{_prose(op['description'])}</p>")
    security = op.get("security", default_security)
    schemes = sorted({name for req in security for name in req}) if security else []
    optional = not security or any(not req for req in security)
    auth = "none" if not schemes else " or ".join(schemes) + (" (optional)" if optional else "")
    html.append(f"<p class=auth>Authentication: {escape(auth)}</p>")
    params = op.get("parameters") or []
    if params:
        html.append("<table><tr><th>parameter</th><th>in</th><th>schema</th><th>description</th></tr>")
        for p in params:
            req = " <b>required</b>" if p.get("required") else ""
            html.append(f"<tr><td><code>{escape(p['name'])}</code>{req}</td><td>{escape(p['in'])}</td>"
                        f"<td>{_brief(p.get('schema', {}))}</td><td>{_prose(p.get('description', ''))}</td></tr>")
        html.append("</table>")
    body = op.get("requestBody")
    if body:
        note = f"<p>{_prose(body['description'])}</p>" if body.get("description") else ""
        html.append(f"<h4>Request body</h4>{note}{_content(body.get('content', {}), schemas, expand=True)}")
    html.append("<h4>Responses</h4><dl>")
    for status, response in op.get("responses", {}).items():
        headers = ", ".join(f"<code>{escape(h)}</code>" for h in response.get("headers", {}))
        html.append(f"<dt>{escape(status)}</dt><dd>{_prose(response.get('description', ''))}"
                    + (f" — headers: {headers}" if headers else "")
                    + _content(response.get("content", {}), schemas) + "</dd>")
    html.append("</dl></section>")
    return "".join(html)


def render_docs(document: Mapping[str, Any]) -> bytes:
    info = document.get("info", {})
    paths: Mapping[str, Any] = document.get("paths", {})
    schemas: Mapping[str, Any] = document.get("components", {}).get("schemas", {})
    events: Mapping[str, Any] = document.get("x-sse-events", {})
    default_security = document.get("security", [])
    by_tag: dict[str, list[tuple[str, str, Mapping[str, Any]]]] = {}
    for path, item in paths.items():
        for method, op in item.items():
            if method in HTTP_METHODS:
                by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((path, method, op))
    tag_notes = {t["name"]: t.get("description", "") for t in document.get("tags", [])}
    order = list(tag_notes)
    nav, body = [], []
    for tag, ops in sorted(by_tag.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)):
        nav.append(f"<li>{escape(tag)}<ul>")
        body.append(f"<h2>{escape(tag)}</h2><p>{_prose(tag_notes.get(tag, ''))}</p>")
        for path, method, op in ops:
            anchor = _anchor("op", op.get("operationId") or f"{method}-{path}")
            nav.append(f'<li><a href="#{anchor}">{method.upper()} {escape(path)}</a></li>')
            body.append(_operation(path, method, op, default_security, schemas))
        nav.append("</ul></li>")
    body.append('<h2 id="events">Server-Sent Events</h2><p>Each frame: <code>id</code> (position in the run, '
                "from 1), <code>event</code> (the name), <code>data</code> (compact JSON of the schema below).</p>")
    for name, ref in events.items():
        target = str(ref.get("$ref", "")).rsplit("/", 1)[-1]
        schema = schemas.get(target, ref)
        body.append(f'<section class=event id="{_anchor("event", name)}"><h3><code>{escape(name)}</code></h3>'
                    f"<p>{_prose(schema.get('description', ''))}</p><pre>{_schema_json(schema)}</pre></section>")
    body.append("<h2 id=schemas>Schemas</h2>")
    for name, schema in schemas.items():
        body.append(f'<section class=schema id="{_anchor("schema", name)}"><h3>{escape(name)}</h3>'
                    f"<pre>{_schema_json(schema)}</pre></section>")
    title = escape(f"{info.get('title', 'API')} {info.get('version', '')}".strip())
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{title} — API</title><link rel="stylesheet" href="/static/docs.css">'
        '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml"></head><body>'
        f"<nav><p><b>{title}</b></p><p><a href=\"/openapi.json\">openapi.json</a> · <a href=\"/\">playground</a></p>"
        f'<ul>{"".join(nav)}<li><a href="#events">events</a></li><li><a href="#schemas">schemas</a></li></ul></nav>'
        f"<main><h1>{title}</h1><p>{_prose(info.get('description', ''))}</p>{''.join(body)}</main></body></html>"
    )
    return page.encode()
