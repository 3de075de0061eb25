"""Tool results whose shape has an obvious one-line meaning, described as a person says it.

``agenttools.core.result_summary`` asks ``describe_shape`` first and falls back to its
generic description when no shape here fits. A shape is recognised by its fields, not by
the tool's name, so the three knowledge searches, an MCP tool returning the same kind of
passages, or a renamed tool all read alike, and no list of tool names is kept here:

* passages (``chunks`` of ``knowledge_base_search``, ``results`` of ``search_text`` /
  ``search_semantic``): ``8 passages from 3 documents: “Durable runs”, …``, and what the
  search had to give up (a side of a hybrid search, a filter, vectors) when it did;
* a web answer with its citations, keywords indexed, tools found, an answer delivered,
  a clarification asked, a document's metadata;
* the workflow and table tools: previews (``workflow “…” previewed: 2 actions``), a
  table configuration's edits and checks, a workflow rule, one of its actions, the
  backend's catalogues (``17 action types: “allocate_inventory”, …``).

Every string taken from a result goes through ``quote`` (retrieved data: inside “”,
cut to ``QUOTED_CHARS``); ids and hashes are left out (``is_id_like``). A key or a code
(a status, a category, an action type) reads as words only when it is shaped like a
field name (``label``): a server chooses those too, and a key that is a sentence is its
text, not ours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from agenttools.core.result_words import (
    label,
    names_of,
    plural,
    quote,
)
from events.source_key import document_key


def _list(c: Mapping[str, Any], key: str) -> list[Any]:
    value = c.get(key)
    return value if isinstance(value, list) else []


def describe_shape(content: Any) -> str | None:
    """The line for a result of a known shape, or None for the generic description."""
    if not isinstance(content, Mapping):
        return None
    for shape in _SHAPES:
        line = shape(content)
        if line:
            return line
    return None


# --- the shapes, most specific first ---------------------------------------------------


def _failure(c: Mapping[str, Any]) -> str | None:
    error = c.get("error")
    if not isinstance(error, str) or not error.strip():
        return None
    reason = c.get("reason")
    text = f"{error}: {reason}" if isinstance(reason, str) and reason.strip() and reason not in error else error
    return "failed: " + quote(text, 120)


def _clarification(c: Mapping[str, Any]) -> str | None:
    kind = c.get("clarification_requested")
    if not isinstance(kind, str):
        return None
    missing = c.get("missing_info")
    asked = f": {quote(missing, 100)}" if isinstance(missing, str) and missing.strip() else ""
    return f"asked the user to clarify ({label(kind)}){asked}"


def _passage_list(c: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    for key in ("chunks", "results"):
        items = c.get(key)
        if isinstance(items, list) and (
            not items or all(isinstance(i, Mapping) and ("doc_id" in i or "chunk_id" in i) for i in items)
        ):
            if not items and not any(k in c for k in ("total_matches", "query", "kb_id")):
                return None
            return [i for i in items if isinstance(i, Mapping)]
    return None


def _passages(c: Mapping[str, Any]) -> str | None:
    hits = _passage_list(c)
    if hits is None:
        return None
    documents = list(dict.fromkeys(str(h.get("title") or h.get("doc_id") or "") for h in hits))
    line = f"{plural(len(hits), 'passage')} from {plural(len(documents), 'document')}" if hits else "no passages found"
    external = c.get("external_answers")
    if isinstance(external, list) and external:
        line += f" and {plural(len(external), 'saved web answer')}"
    line += _search_caveats(c)  # before the names, which the line's length may cut
    return f"{line}: {names_of([{'title': d} for d in documents])}" if hits else line


def _search_caveats(c: Mapping[str, Any]) -> str:
    """What a search gave up: a person must not read a text-only ranking as the hybrid
    search they asked for, nor hits of relaxed filters as matches."""
    notes: list[str] = []
    dropped = c.get("dropped_sides")
    if isinstance(dropped, Mapping) and dropped:
        notes.append(_dropped_side(dropped))
    if c.get("relaxed"):
        notes.append("filters relaxed")
    warnings = c.get("warnings")
    if isinstance(warnings, list) and warnings and isinstance(warnings[0], str):
        notes.append(quote(warnings[0], 60))
    if c.get("kb_error"):
        notes.append("knowledge base unavailable")
    return f" ({'; '.join(notes)})" if notes else ""


#: A hybrid search's side left out (``knowledge.search.FUSION_SIDES``), in a reader's words:
#: what the passages were ranked by instead, and why (``knowledge.fusion``'s reasons).
_LEFT_OUT: Final = {
    "semantic": (
        "matching words",
        {
            "heads_disagree": "the meaning-based ranking disagreed",
            "not_confident": "no close match by meaning",
            "no_candidates": "nothing found by meaning",
            "no_weight": "ranking by meaning is off",
        },
    ),
    "text": (
        "meaning",
        {
            "heads_disagree": "the word-matching ranking disagreed",
            "not_confident": "no close match by words",
            "no_candidates": "nothing found by words",
            "no_weight": "ranking by words is off",
        },
    ),
}


def _dropped_side(dropped: Mapping[Any, Any]) -> str:
    """The ranking a hybrid search rested on and why the other did not count, in plain words
    ("ranked by matching words only: no close match by meaning"), not the fusion's terms."""
    [(side, why)] = dropped.items() if len(dropped) == 1 else [(None, None)]
    if side in _LEFT_OUT:
        kept, reasons = _LEFT_OUT[side]
        reason = reasons.get(str(why))
        return f"ranked by {kept} only" + (f": {reason}" if reason else "")
    return " and ".join(label(str(s)) for s in dropped) + " rankings left out"


def _web_answer(c: Mapping[str, Any]) -> str | None:
    if "perplexity_result_id" not in c and not ("answer" in c and isinstance(c.get("citations"), list)):
        return None
    answer = c.get("answer")
    citations = _list(c, "citations")
    head = f"web answer with {plural(len(citations), 'citation')}"
    return f"{head}: {quote(answer, 90)}" if isinstance(answer, str) and answer.strip() else head


def _keywords(c: Mapping[str, Any]) -> str | None:
    if c.get("indexed") is not True or not isinstance(c.get("keyword_count"), int):
        return None
    items = _list(c, "keywords")
    names = names_of(items, 4)
    line = f"indexed {plural(int(c['keyword_count']), 'keyword')}" + (f": {names}" if names else "")
    rejected = c.get("rejected")
    return line + (f" ({len(rejected)} rejected)" if isinstance(rejected, list) and rejected else "")


def _tools_found(c: Mapping[str, Any]) -> str | None:
    tools = c.get("tools")
    if not isinstance(tools, list) or "query" not in c:
        return None
    if not tools:
        return "no matching tools"
    return f"found {plural(len(tools), 'tool')}: {names_of(tools, 4)}"


def _delivered(c: Mapping[str, Any]) -> str | None:
    if c.get("delivered") is not True:
        return None
    sources = _list(c, "sources")
    # Documents, as the playground's source cards and the OpenAI face's Sources: lines count
    # them (``events.source_key``): two passages of one page are one source.
    documents = {_document_key(s) for s in sources if isinstance(s, Mapping)} - {""}
    n = len(documents) or (c.get("source_count") if isinstance(c.get("source_count"), int) else len(sources))
    if not n:
        return "answer delivered, citing no sources"
    names = names_of(sources)
    return f"answer delivered, citing {plural(int(n), 'source')}" + (f": {names}" if names else "")


def _document_key(source: Mapping[str, Any]) -> str:
    """A source card's document (``events.source_key.document_key``); "" without an id."""
    url, ident, meta = source.get("url"), source.get("id"), source.get("metadata")
    link = url if isinstance(url, str) else None
    if not isinstance(ident, str):
        return link or ""
    doc_id = meta.get("doc_id") if isinstance(meta, Mapping) else None
    return document_key(ident, link, doc_id if isinstance(doc_id, str) else None)


def _document(c: Mapping[str, Any]) -> str | None:
    if "doc_id" not in c or "chunks" not in c or "fields" not in c:
        return None
    title = c.get("title") or c.get("doc_id")
    line = f"document {quote(str(title))}"
    source = c.get("source")
    if isinstance(source, str) and source:
        line += f" from {quote(source)}"
    chunks = c.get("chunks")
    if isinstance(chunks, int):
        line += f", {plural(chunks, 'passage')}"
    fields = c.get("fields")
    if isinstance(fields, Mapping) and fields:
        line += f", {plural(len(fields), 'field')}"
    return line


def _columns(config: Mapping[str, Any]) -> int:
    sources = config.get("data_source")
    if not isinstance(sources, list):
        return 0
    n = 0
    for source in sources:
        select = source.get("select") if isinstance(source, Mapping) else None
        columns = select.get("columns") if isinstance(select, Mapping) else None
        n += len(columns) if isinstance(columns, list) else 0
        joins = select.get("foreign_tables") if isinstance(select, Mapping) else None
        for join in joins if isinstance(joins, list) else []:
            cols = join.get("columns") if isinstance(join, Mapping) else None
            n += len(cols) if isinstance(cols, list) else 0
    return n


def _table_name(c: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    for value in (config.get("title"), c.get("name"), config.get("name")):
        if isinstance(value, str) and value.strip():
            return quote(value)
    return "(untitled)"


def _table_config(c: Mapping[str, Any]) -> str | None:
    """A table configuration previewed, edited, checked, saved or read."""
    config = c.get("config")
    if not isinstance(config, Mapping) or "data_source" not in config:
        if "valid" in c and isinstance(c.get("errors"), list):  # validate_table_config
            return _validity(c, "configuration")
        return None
    name = _table_name(c, config)
    columns = plural(_columns(config), "column")
    applied = c.get("applied")
    if isinstance(applied, list) and applied:
        line = f"table {name}: {quote(str(applied[-1]), 60)}"
        if len(applied) > 1:
            line += f" (+{len(applied) - 1} more)"
        return line + f", {columns}" + _validity_note(c)
    if c.get("valid") is True and "errors" in c:  # the preview's content
        return f"table {name} previewed: {columns}" + _validity_note(c)
    return f"table configuration {name}: {columns}"


def _validity(c: Mapping[str, Any], what: str) -> str:
    errors = _list(c, "errors")
    if c.get("valid") is True:
        return f"{what} valid" + _validity_note(c)
    first = errors[0] if errors else None
    text = first.get("message") if isinstance(first, Mapping) else first
    line = f"{what} invalid: {plural(len(errors), 'error')}"
    return line + (f", first {quote(str(text), 70)}" if text else "")


def _validity_note(c: Mapping[str, Any]) -> str:
    if c.get("valid") is False:
        errors = _list(c, "errors")
        return f" (invalid: {plural(len(errors), 'error')})"
    warnings = c.get("warnings")
    return f" ({plural(len(warnings), 'warning')})" if isinstance(warnings, list) and warnings else ""


def _workflow_preview(c: Mapping[str, Any]) -> str | None:
    workflow = c.get("workflow")
    if not isinstance(workflow, Mapping) or not isinstance(workflow.get("actions"), list):
        return None
    name = workflow.get("name")
    label = quote(name) if isinstance(name, str) and name.strip() else "(unnamed)"
    actions = workflow["actions"]
    return f"workflow {label} previewed: {plural(len(actions), 'action')}: {names_of(actions)}".rstrip(": ")


def _workflow_rule(c: Mapping[str, Any]) -> str | None:
    rule = c.get("rule")
    if not isinstance(rule, Mapping) or not isinstance(c.get("actions"), list):
        return None
    actions = c["actions"]
    line = f"workflow {quote(str(rule.get('name') or '(unnamed)'))}: {plural(len(actions), 'action')}"
    trigger, entity = rule.get("trigger_type_name"), rule.get("entity_name")
    if isinstance(trigger, str) and isinstance(entity, str):
        line += f", runs {label(trigger)} of {quote(entity)}"
    return line + (f": {names_of(actions)}" if names_of(actions) else "")


def _workflow_node(c: Mapping[str, Any]) -> str | None:
    action = c.get("action")
    if not isinstance(action, Mapping) or "outgoing_to" not in c:
        return None
    incoming = _list(c, "incoming_from")
    outgoing = _list(c, "outgoing_to")
    kind = action.get("action_type")
    line = f"action {quote(str(action.get('name') or '(unnamed)'))}"
    line += f" ({label(kind)})" if isinstance(kind, str) and kind else ""
    line += f": from {names_of(incoming) or 'nothing'}"
    return line + (
        f", to {names_of([{'name': o.get('action_name')} for o in outgoing if isinstance(o, Mapping)])}"
        if outgoing
        else ", leads nowhere"
    )


def _catalogue(c: Mapping[str, Any]) -> str | None:
    """``discover``: ``{category, count, <category>: [...]}``."""
    category = c.get("category")
    if not isinstance(category, str) or not isinstance(c.get(category), list):
        return None
    items = c[category]
    count = c.get("count") if isinstance(c.get("count"), int) else len(items)
    names = names_of(items)
    return f"{count} {label(category)}" + (f": {names}" if names else "")


def _page(c: Mapping[str, Any]) -> str | None:
    """A backend page of results: ``4 of 12 results: “Low stock: Widget A”, …``."""
    results = c.get("results")
    if not isinstance(results, list) or ("has_more" not in c and "total" not in c):
        return None
    total = c.get("total")
    shown = len(results)
    head = f"{shown} of {total}" if isinstance(total, int) and total > shown else str(shown)
    noun = "result" if shown == 1 and head == "1" else "results"
    names = names_of(results)
    return f"{head} {noun}" + (f": {names}" if names else "")


def _status_message(c: Mapping[str, Any]) -> str | None:
    """A step reported in the backend's own words (a draft started, an action added)."""
    status, message = c.get("status"), c.get("message")
    if not isinstance(status, str) or not isinstance(message, str) or status == "preview_sent" or "title" in c:
        return None
    return f"{label(status)}: {quote(message, 110)}"


_SHAPES: Final[tuple[Callable[[Mapping[str, Any]], str | None], ...]] = (
    _failure,
    _clarification,
    _passages,
    _web_answer,
    _keywords,
    _tools_found,
    _delivered,
    _document,
    _workflow_preview,
    _table_config,
    _workflow_rule,
    _workflow_node,
    _catalogue,
    _page,
    _status_message,
)
