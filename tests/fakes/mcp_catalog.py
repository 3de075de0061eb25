"""A generated catalog of MCP tools, deterministic, for the MCP tests and the benchmark.

Ten business domains × ten entities × five verbs = 500 tools, each with a name
(``<domain>_<verb>_<entity>``), a description and a parameter list that depend only on
those three, and one labelled user request per tool, worded differently from the
description (other verbs, the domain's everyday name, concrete ids and people), so
finding the tool means matching meaning, not copying text. A *family* is one domain:
recall is reported per family too.

Nothing here imports the ``mcp`` SDK: ``tests/fakes/mcp_server.py`` turns these
definitions into a real server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DOMAINS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    # (prefix, system as the description says it, how people call it, entities)
    ("crm", "the CRM", "our customer database", (
        "contact", "lead", "customer account", "sales opportunity", "price quote",
        "email campaign", "meeting note", "email template", "sales territory", "reseller partner")),
    ("hr", "the HR system", "HR", (
        "employee record", "leave request", "job opening", "job candidate", "interview slot",
        "payslip", "expense claim", "training course", "performance review", "onboarding checklist")),
    ("devops", "the deployment platform", "our infrastructure", (
        "deployment", "build pipeline", "container image", "kubernetes cluster", "feature flag",
        "incident", "on-call schedule", "secret", "load balancer", "database backup")),
    ("finance", "the accounting ledger", "accounting", (
        "invoice", "customer payment", "vendor bill", "department budget", "purchase order",
        "tax rate", "bank account", "refund", "journal entry", "cost center")),
    ("logistics", "the shipping system", "logistics", (
        "shipment", "warehouse", "delivery route", "freight carrier", "parcel label",
        "return authorization", "pallet", "customs declaration", "stock transfer", "pickup slot")),
    ("support", "the helpdesk", "customer support", (
        "support ticket", "reply macro", "help center article", "SLA policy", "escalation",
        "satisfaction survey", "chat transcript", "agent group", "ticket tag", "outage notice")),
    ("marketing", "the marketing suite", "marketing", (
        "newsletter", "landing page", "social media post", "promo code", "audience segment",
        "webinar", "press release", "brand asset", "A/B test", "event sponsorship")),
    ("facilities", "the facilities portal", "the office", (
        "meeting room", "room booking", "parking spot", "visitor pass", "desk reservation",
        "maintenance request", "equipment loan", "floor plan", "cleaning schedule", "fire drill")),
    ("analytics", "the analytics workspace", "BI", (
        "dashboard", "scheduled report", "KPI metric", "data source connection", "saved SQL query",
        "chart", "data export job", "anomaly rule", "user cohort", "conversion funnel")),
    ("legal", "the legal hub", "legal", (
        "contract", "NDA", "policy document", "compliance audit", "risk register entry",
        "consent record", "data retention rule", "signature request", "trademark filing", "litigation hold")),
)

VERBS: tuple[str, ...] = (
    "list", "get", "create", "update", "delete", "archive", "export", "search", "assign", "approve",
)

PEOPLE = ("Maria Lopez", "Chen Wei", "Amara Okafor", "Jonas Berg", "Priya Nair", "Tom Walsh", "Sofia Rossi")
NAMES = ("Atlas", "Bluebird", "Cedar", "Delta", "Ember", "Falcon", "Granite", "Harbor")
WORDS = ("renewal", "overdue", "priority", "berlin", "q3", "migration", "holiday", "audit")


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str  # string | integer | enum
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None


@dataclass(frozen=True, slots=True)
class GeneratedTool:
    name: str
    family: str
    verb: str
    entity: str
    description: str
    params: tuple[Param, ...]
    query: str

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema an MCP server built from this tool lists (for unit checks)."""
        props: dict[str, Any] = {}
        for p in self.params:
            if p.kind == "enum":
                props[p.name] = {"type": "string", "enum": list(p.choices), "description": p.description}
            elif p.kind == "integer":
                props[p.name] = {"type": "integer", "minimum": p.minimum, "maximum": p.maximum,
                                 "description": p.description}
            else:
                props[p.name] = {"type": "string", "description": p.description}
        return {"type": "object", "properties": props, "required": [p.name for p in self.params if p.required]}


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_").replace("__", "_")


def _plural(entity: str) -> str:
    if entity.endswith(("s", "x", "ch", "sh")):
        return entity + "es"
    if entity.endswith("y") and entity[-2] not in "aeiou":
        return entity[:-1] + "ies"
    return entity + "s"


def _describe(verb: str, entity: str, plural: str, system: str) -> str:
    return {
        "list": f"List the {plural} in {system}, newest first, optionally filtered by status and owner.",
        "get": f"Get one {entity} from {system} by its id, with every field and its change history.",
        "create": f"Create a new {entity} in {system} from a name, an owner and optional notes.",
        "update": f"Update an existing {entity} in {system}: change its name, status or notes.",
        "delete": f"Delete a {entity} from {system} permanently; this cannot be undone.",
        "archive": f"Archive a {entity} in {system} so it is hidden from active views but kept for audits.",
        "export": f"Export {plural} from {system} as a CSV or JSON file for a date range.",
        "search": f"Search {plural} in {system} by free-text keywords in their name and notes.",
        "assign": f"Assign a {entity} in {system} to a person, who becomes its owner and is notified.",
        "approve": f"Approve a pending {entity} in {system} so that it takes effect.",
    }[verb]


def _query(verb: str, entity: str, plural: str, alias: str, i: int) -> str:
    ref = f"{entity} #{1000 + 37 * i % 9000}"
    person, name, word = PEOPLE[i % len(PEOPLE)], NAMES[i % len(NAMES)], WORDS[i % len(WORDS)]
    return {
        "list": f"show me every {entity} we have in {alias}, most recent on top",
        "get": f"pull up the full details and history of {ref}",
        "create": f"set up a brand new {entity} called {name} in {alias} for {person}",
        "update": f"rename {ref} to {name} and mark it as done",
        "delete": f"permanently remove {ref}, we will never need it again",
        "archive": f"hide {ref} from the active views but keep it around for the auditors",
        "export": f"download a spreadsheet file of all {plural} from {alias} for last quarter",
        "search": f"find any {entity} in {alias} that mentions {word}",
        "assign": f"make {person} the owner of {ref} and let them know",
        "approve": f"sign off on the pending {ref} so it goes live",
    }[verb]


def _params(verb: str, entity: str) -> tuple[Param, ...]:
    key = f"{_slug(entity)}_id"
    ident = Param(key, "string", f"The id of the {entity}.", required=True)
    return {
        "list": (Param("status", "enum", "Only items in this state.", choices=("open", "closed", "all")),
                 Param("owner", "string", "Only items owned by this person."),
                 Param("limit", "integer", "How many to return.", minimum=1, maximum=100)),
        "get": (ident,),
        "create": (Param("name", "string", f"The new {entity}'s name.", required=True),
                   Param("owner", "string", "Who owns it."),
                   Param("notes", "string", "Free-text notes.")),
        "update": (ident, Param("name", "string", "A new name."),
                   Param("status", "enum", "A new state.", choices=("open", "in_progress", "done")),
                   Param("notes", "string", "Replacement notes.")),
        "delete": (ident, Param("reason", "string", "Why it is deleted.")),
        "archive": (ident,),
        "export": (Param("format", "enum", "File format.", required=True, choices=("csv", "json")),
                   Param("since_days", "integer", "How many days back.", minimum=1, maximum=3650)),
        "search": (Param("query", "string", "Keywords to look for.", required=True),
                   Param("limit", "integer", "How many to return.", minimum=1, maximum=50)),
        "assign": (ident, Param("assignee", "string", "The new owner.", required=True)),
        "approve": (ident, Param("comment", "string", "An approval comment.")),
    }[verb]


def generate_tools(domains: range | None = None) -> list[GeneratedTool]:
    """The catalog (or the part of it for ``domains``, indexes into ``DOMAINS``), in a fixed order.

    Each entity gets five of the ten verbs, a different five for neighbouring entities,
    so a family mixes reads and writes of many kinds.
    """
    out: list[GeneratedTool] = []
    for d in domains if domains is not None else range(len(DOMAINS)):
        prefix, system, alias, entities = DOMAINS[d]
        for e, entity in enumerate(entities):
            plural = _plural(entity)
            for k in range(5):
                verb = VERBS[(d + e + 2 * k) % len(VERBS)]
                i = d * 50 + e * 5 + k  # the same for a tool whatever part is generated
                out.append(GeneratedTool(
                    name=f"{prefix}_{verb}_{_slug(entity)}",
                    family=prefix,
                    verb=verb,
                    entity=entity,
                    description=_describe(verb, entity, plural, system),
                    params=_params(verb, entity),
                    query=_query(verb, entity, plural, alias, i),
                ))
    return out


def labelled_queries(tools: list[GeneratedTool]) -> list[dict[str, str]]:
    """One request per tool: ``{"message", "needed", "family"}``."""
    return [{"message": t.query, "needed": t.name, "family": t.family} for t in tools]
