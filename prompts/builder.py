"""The system prompt builder and the fixed messages the agent loop sends.

The prose lives in ``prompts/texts/*.md`` so it can be read and reviewed as text; this module
only decides which pieces go together for a context and fills in the blanks. Texts are read
with ``importlib.resources`` once per ``PromptLibrary`` (the app builds one at start-up and
hands it around); nothing is loaded at import time.

A system prompt is made of, in order:
1. the base role;
2. the mandatory RAG flow (first tool, optional web search and keyword indexing, last tool),
   present when the context's enforcement policy names those tools; else, when
   ``knowledge_base_search`` is offered, the same flow on demand (``rag_flow_on_demand``);
3. the context's own sections: workflow (plus guided creation on an empty canvas), tables
   (with its own preamble and the context really embedded: the Go original dropped it) or
   knowledge;
4. keyword guidance (when the web search is available), tool-call rules, answer formatting;
5. the current UI context as compact JSON in a fenced block, capped at ``CONTEXT_CAP_BYTES``;
6. optional notes: the tool budget, a search plan, the names of the available tools.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from importlib import resources
from string import Template
from typing import Any, Final

import orjson

CONTEXT_TYPES: Final = ("workflow", "tables", "knowledge")
CONTEXT_CAP_BYTES: Final = 32 * 1024
"""Past this many bytes of compact JSON, the embedded context is cut and a note says so."""
PLAN_HINT_CAP_CHARS: Final = 4000
ID_CAP_CHARS: Final = 200

TEXT_NAMES: Final = (
    "base",
    "rag_flow_first",
    "rag_flow_external",
    "rag_flow_last",
    "rag_flow_on_demand",
    "rag_tool_rules",
    "keyword_guidance",
    "response_formatting",
    "enforcement",
    "perplexity_guidance",
    "keyword_requirement",
    "tool_budget",
    "context_truncated",
    "plan_hint",
    "workflow_role",
    "workflow_draft_builder",
    "workflow_concepts",
    "workflow_guided_creation",
    "workflow_context",
    "tables_role",
    "tables_operations",
    "tables_reference",
    "tables_context",
    "knowledge_role",
    "knowledge_context",
)

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


class PromptLibrary:
    """The prompt texts, read once from the package, and the functions that compose them."""

    def __init__(self, package: str = "prompts", folder: str = "texts") -> None:
        root = resources.files(package).joinpath(folder)
        texts: dict[str, str] = {}
        for name in TEXT_NAMES:
            texts[name] = root.joinpath(f"{name}.md").read_text(encoding="utf-8").strip()
        self._texts = texts

    def text(self, name: str) -> str:
        """One prompt text, as stored."""
        return self._texts[name]

    # --- the system prompt ---------------------------------------------------------------

    def build_system_prompt(
        self,
        context_type: str,
        context: Mapping[str, Any] | None,
        *,
        tool_names: Sequence[str],
        mandatory_first: str | None = "knowledge_base_search",
        mandatory_last: str | None = "generate_response",
        max_tool_calls: int | None = None,
        plan_hint: str | None = None,
        is_new: bool | None = None,
    ) -> str:
        """The system prompt for one run.

        ``tool_names`` are the tools this run may use (the web-search steps are described
        only when ``perplexity_search`` is among them). ``mandatory_first`` /
        ``mandatory_last`` name the tools the context's policy enforces; ``None`` leaves
        that step out. ``is_new`` overrides the empty-canvas detection for workflows.
        """
        if context_type not in CONTEXT_TYPES:
            raise ValueError(f"unknown context_type {context_type!r}")
        ctx = context if isinstance(context, Mapping) else None
        names = set(tool_names)
        web = "perplexity_search" in names
        t = self._texts
        sections: list[str] = [t["base"]]

        # Without a mandatory first step the flow is on demand: described, not required.
        on_demand = not mandatory_first and "knowledge_base_search" in names
        if mandatory_first:
            sections.append(Template(t["rag_flow_first"]).substitute(first=mandatory_first))
        elif on_demand:
            sections.append(t["rag_flow_on_demand"])
        if web and (mandatory_first or on_demand):
            sections.append(t["rag_flow_external"])
        if mandatory_last:
            sections.append(Template(t["rag_flow_last"]).substitute(last=mandatory_last))

        if context_type == "workflow":
            new_canvas = is_new_workflow(context) if is_new is None else is_new
            sections.append(t["workflow_role"])
            if new_canvas:
                sections.append(t["workflow_guided_creation"])
            sections.extend((t["workflow_draft_builder"], t["workflow_concepts"]))
        elif context_type == "tables":
            new_canvas = False
            sections.extend((t["tables_role"], t["tables_operations"], t["tables_reference"]))
        else:
            new_canvas = False
            sections.append(t["knowledge_role"])

        if web and (mandatory_first or on_demand):
            sections.append(t["keyword_guidance"])
        sections.extend((t["rag_tool_rules"], t["response_formatting"]))

        context_section = self._context_section(context_type, ctx, new_canvas)
        if context_section:
            sections.append(context_section)
        if max_tool_calls is not None:
            sections.append(self.tool_budget_note(max_tool_calls, max_tool_calls))
        if plan_hint:
            hint = _clean(plan_hint)[:PLAN_HINT_CAP_CHARS]
            if hint:
                sections.append(f"{t['plan_hint']}\n{hint}")
        if tool_names:
            sections.append(
                "Tools available in this conversation: "
                + ", ".join(tool_names)
                + ". Call only these; any other tool named above is not available here."
            )
        return "\n\n".join(sections)

    def _context_section(self, context_type: str, ctx: Mapping[str, Any] | None, new_canvas: bool) -> str:
        if not ctx:
            return ""
        t = self._texts
        head: list[str] = []
        if context_type == "workflow":
            if new_canvas:
                return ""  # an empty canvas has no state worth showing
            head.append(t["workflow_context"])
            workflow_id = ctx.get("workflow_id")
            if isinstance(workflow_id, str) and workflow_id.strip():
                line = f"**Current workflow ID: `{_inline(workflow_id)}`**"
                rule_name = ctx.get("rule_name")
                if isinstance(rule_name, str) and rule_name.strip():
                    line += f" ({_inline(rule_name)})"
                head.append(line)
        elif context_type == "tables":
            head.append(t["tables_context"])
            config_id = ctx.get("config_id")
            if isinstance(config_id, str) and config_id.strip():
                head.append(f"**Current table configuration ID: `{_inline(config_id)}`**")
        else:
            head.append(t["knowledge_context"])
        return "\n\n".join(head) + "\n\n" + self.embed_context(ctx)

    def embed_context(self, ctx: Mapping[str, Any]) -> str:
        """The context as one line of compact JSON in a fenced block, cut past the cap.

        Backticks are written as ``\\u0060`` (valid JSON, since they can only occur inside
        strings) so no value can close the fence and smuggle text into the prompt.
        """
        try:
            raw = orjson.dumps(ctx, option=orjson.OPT_NON_STR_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            raw = orjson.dumps({"unreadable_context": True})
        raw = raw.replace(b"`", b"\\u0060")
        total = len(raw)
        note = ""
        if total > CONTEXT_CAP_BYTES:
            raw = raw[:CONTEXT_CAP_BYTES]
            note = "\n" + Template(self._texts["context_truncated"]).substitute(
                shown=CONTEXT_CAP_BYTES, total=total
            )
        body = _CONTROL.sub("", raw.decode("utf-8", errors="ignore"))
        return f"```json\n{body}\n```{note}"

    # --- fixed messages for the agent loop ---------------------------------------------

    def enforcement_message(self, tool: str, step: str) -> str:
        """What the model is told when it skipped a mandatory tool (seed 000)."""
        return Template(self._texts["enforcement"]).substitute(tool=_inline(tool), step=_inline(step))

    def perplexity_guidance(self) -> str:
        """Sent once the knowledge base was searched and the web search becomes available."""
        return self._texts["perplexity_guidance"]

    def keyword_requirement(self, perplexity_result_id: str | None = None) -> str:
        """Sent when the model tries to answer after a web search without indexing keywords."""
        hint = f" (perplexity_result_id: {_inline(perplexity_result_id)})" if perplexity_result_id else ""
        return Template(self._texts["keyword_requirement"]).substitute(result_hint=hint)

    def tool_budget_note(self, max_calls: int, left: int) -> str:
        """A reminder of how many tool calls the run may still make."""
        return Template(self._texts["tool_budget"]).substitute(max=max_calls, left=max(0, left))


def build_system_prompt(
    context_type: str,
    context: Mapping[str, Any] | None,
    *,
    tool_names: Sequence[str],
    mandatory_first: str | None = "knowledge_base_search",
    mandatory_last: str | None = "generate_response",
    max_tool_calls: int | None = None,
    plan_hint: str | None = None,
    is_new: bool | None = None,
    library: PromptLibrary | None = None,
) -> str:
    """Convenience wrapper around ``PromptLibrary.build_system_prompt``.

    Pass ``library`` on hot paths; without it the texts are read for this one call.
    """
    lib = library if library is not None else PromptLibrary()
    return lib.build_system_prompt(
        context_type,
        context,
        tool_names=tool_names,
        mandatory_first=mandatory_first,
        mandatory_last=mandatory_last,
        max_tool_calls=max_tool_calls,
        plan_hint=plan_hint,
        is_new=is_new,
    )


def enforcement_message(tool: str, step: str, *, library: PromptLibrary | None = None) -> str:
    """Convenience wrapper around ``PromptLibrary.enforcement_message``."""
    return (library if library is not None else PromptLibrary()).enforcement_message(tool, step)


def is_new_workflow(context: Mapping[str, Any] | str | bytes | object | None) -> bool:
    """Whether a workflow context is an empty canvas (guided creation).

    The same rules as ``agenttools.core.catalog.is_new_workflow`` (a test keeps the two in step;
    ``prompts`` may not import ``agenttools``): nothing or JSON ``null`` → new; not an object
    of the expected shape → not new; an explicit boolean ``is_new`` wins; otherwise new when
    there is no ``workflow_id`` and no ``nodes``.
    """
    if context is None:
        return True
    if isinstance(context, (bytes, bytearray, memoryview, str)):
        raw = context.encode() if isinstance(context, str) else bytes(context)
        if not raw.strip():
            return True
        try:
            context = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return False
        if context is None:
            return True
    if not isinstance(context, Mapping):
        return False
    is_new = context.get("is_new")
    workflow_id = context.get("workflow_id")
    nodes = context.get("nodes")
    if is_new is not None and not isinstance(is_new, bool):
        return False
    if workflow_id is not None and not isinstance(workflow_id, str):
        return False
    if nodes is not None and not isinstance(nodes, list):
        return False
    if isinstance(is_new, bool):
        return is_new
    return not workflow_id and not nodes


def _clean(text: str) -> str:
    return _CONTROL.sub("", text).strip()


def _inline(text: str) -> str:
    """A value safe to put inside inline code in the prompt: one line, no backticks, capped."""
    return _clean(str(text)).replace("`", "'").replace("\n", " ")[:ID_CAP_CHARS]
