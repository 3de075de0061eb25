"""Catalog entries for the knowledge tools: the mandatory RAG flow (knowledge base search,
web search, keyword indexing, the final answer) and the bucketed corpus search tools.

The four flow tools belong to every context (mandatory in ``knowledge`` by default, on
demand elsewhere: ``AGENT_MANDATORY_CONTEXTS``); the corpus search tools belong to
``knowledge`` only.
"""

from __future__ import annotations

from typing import Unpack

from agenttools.core.catalog_schema import (
    DOC_ID_PATTERN,
    SQL_IDENTIFIER_PATTERN,
    array,
    boolean,
    free_object,
    integer,
    number,
    obj,
    string,
)
from agenttools.core.registry import ToolFacts, ToolSpec
from llm.types import ToolDefinition

EVERY_CONTEXT = frozenset({"workflow", "tables", "knowledge"})
KNOWLEDGE = frozenset({"knowledge"})

_FILTERS = (
    "Optional metadata conditions, one key per metadata field, all of which must hold: "
    "{field: value} for equality, {field: [v1, v2]} for any of several values, or "
    "{field: {op: value}} with op one of =, !=, >, >=, <, <=, in, nin, like; alternatives "
    "go in {\"$or\": [filter, ...]}. E.g. {\"year\": 2023, \"total_amount\": {\">\": 1000}}. "
    "Use it whenever the user names a date, company, type or other attribute."
)


def _spec(
    name: str,
    description: str,
    parameters: dict,
    examples: tuple[str, ...],
    groups: frozenset[str],
    **facts: Unpack[ToolFacts],
) -> ToolSpec:
    return ToolSpec(ToolDefinition(name, description, parameters), groups, examples, **facts)


def _search_params(context_chars: int) -> dict:
    return obj(
        {
            "bucket": string(
                "The collection to search, e.g. invoices, contracts, datasheets, certificates, generic.",
                max_length=63,
                pattern=SQL_IDENTIFIER_PATTERN,
            ),
            "query": string("What to look for.", max_length=500, min_length=1),
            "filters": free_object(_FILTERS),
            "top_k": integer("How many passages to return.", minimum=1, maximum=50, default=10),
            "context_chars": integer(
                "Characters of text around each hit.", minimum=50, maximum=4000, default=context_chars
            ),
            "doc_id": string("Search inside this one document only.", max_length=200, pattern=DOC_ID_PATTERN),
        },
        ("bucket", "query"),
    )


def knowledge_specs() -> list[ToolSpec]:
    """The seven knowledge tools, in catalog order (the four flow tools first)."""
    return [
        _spec(
            "knowledge_base_search",
            "Searches the internal knowledge base and returns the most relevant passages, each "
            "with a source_id (what you cite), doc_id, title, text, a relevance score from 0 to "
            "1 and metadata, plus any previously stored web answers to a related question "
            "(external sources with their web URLs: cite them instead of searching the web again). "
            "Where the system prompt makes the knowledge flow mandatory, call it first for every "
            "user request, before any other tool; elsewhere, call it whenever the answer may be "
            "in the documentation. Do not "
            "pass the user's words verbatim: rewrite them into a focused search query (core "
            "concepts, synonyms, domain terms). Then judge whether the passages answer the "
            "question: if so, answer with generate_response; if not, you may search the web "
            "with perplexity_search.",
            obj(
                {
                    "query": string("A search query tailored for retrieval.", max_length=500, min_length=1),
                    "kb_id": string(
                        "Which knowledge base to search.", max_length=64, pattern=DOC_ID_PATTERN, default="default_kb"
                    ),
                    "top_k": integer("How many passages to return.", minimum=1, maximum=20, default=5),
                },
                ("query",),
            ),
            (
                "how do I configure the service",
                "what does the documentation say about authentication",
                "explain how tool selection works",
                "what is our refund policy",
                "where is the setting for the database path",
            ),
            EVERY_CONTEXT,
            read_only=True,
            knowledge_search=True,
            closed_by_enough=True,
            core_in=KNOWLEDGE,
        ),
        _spec(
            "perplexity_search",
            "Searches the public web through Perplexity and returns an answer with a result id "
            "and its citations (each with a source_id and URL). Use it only after knowledge_base_search, and "
            "only when those passages cannot answer the question fully (recent events, public "
            "facts, topics the internal documents do not cover). Write a query aimed at the "
            "web, different from the knowledge base query, and pass a short summary of what "
            "the knowledge base already said as context. Afterwards you must call "
            "index_keywords with keywords from the answer before generate_response. If it "
            "fails, answer from the knowledge base alone.",
            obj(
                {
                    "query": string("A search query tailored for the web.", max_length=500, min_length=1),
                    "context": string("A short summary of what the knowledge base returned.", max_length=2000),
                },
                ("query",),
            ),
            (
                "what is the latest version of this library",
                "what happened in the market this week",
                "current exchange rate of euro to dollar",
                "look this up online, our docs don't cover it",
                "recent news about the supplier",
            ),
            EVERY_CONTEXT,
            read_only=True,
            at_most_once=True,
            starts_at_send=True,
            closed_by_enough=True,
            core_in=KNOWLEDGE,
            core_rank=4,
        ),
        _spec(
            "index_keywords",
            "Stores 3 to 10 keywords that describe a web answer from perplexity_search, so "
            "future questions on the same topic find that answer through "
            "knowledge_base_search. Required after every perplexity_search, before "
            "generate_response. Each keyword: 2 to 50 characters, specific (e.g. 'EU VAT "
            "reverse charge', '2026 freight rates'), not a filler word. Returns which "
            "keywords were stored or merged with existing ones and, for rejected ones, why; "
            "fix and resend rejected ones if needed.",
            obj(
                {
                    "keywords": array(
                        "3 to 10 specific keywords or short phrases.",
                        string("A keyword or short phrase.", max_length=100, min_length=1),
                        max_items=10,
                        min_items=3,
                    ),
                    "query": string(
                        "The user's original question the web search answered (seed 000); "
                        "the keywords are tied to this run's query.",
                        max_length=2000,
                    ),
                    "query_id": string(
                        "Id of the query the web search answered, if known.", max_length=200, pattern=DOC_ID_PATTERN
                    ),
                    "perplexity_result_id": string(
                        "The result id returned by perplexity_search.", max_length=200, pattern=DOC_ID_PATTERN
                    ),
                },
                ("keywords",),
            ),
            (
                "remember these topics for next time",
                "index the key terms from the web answer",
                "tag this external result with keywords",
                "store keywords for the search result",
            ),
            EVERY_CONTEXT,
            core_in=KNOWLEDGE,
            core_rank=5,
        ),
        _spec(
            "generate_response",
            "Delivers your final answer to the user. Required whenever the knowledge was searched "
            "(and for every request where the system prompt makes the flow mandatory): end with "
            "exactly this call; never write that answer as plain text. Put the complete answer in "
            "answer, list in sources the source_id of every passage and web citation you used, "
            "exactly as the search results gave it, and say whether the internal knowledge base "
            "and the web were used. Sources you did not retrieve in this conversation are "
            "rejected. If nothing relevant was found, say so in answer with empty sources.",
            obj(
                {
                    "answer": string("The complete answer for the user.", max_length=20_000, min_length=1),
                    "sources": array(
                        "The source_id of each passage or web citation used; empty if none.",
                        string("A source_id from a search result.", max_length=500, min_length=1),
                        max_items=50,
                    ),
                    "confidence_score": number("How sure you are of the answer, 0 to 1.", minimum=0.0, maximum=1.0),
                    "used_internal_kb": boolean("True if the answer uses knowledge base passages."),
                    "used_external_kb": boolean("True if the answer uses web search results."),
                },
                ("answer", "sources", "used_internal_kb", "used_external_kb"),
            ),
            (
                "give me the answer",
                "summarise what you found",
                "reply to the user with citations",
                "tell me the final result",
            ),
            EVERY_CONTEXT,
            core_in=KNOWLEDGE,
            core_rank=6,
        ),
        _spec(
            "search_text",
            "Keyword search inside one document collection (bucket) of a large corpus: best "
            "for exact terms, names, part numbers, invoice or contract numbers and quoted "
            "phrases. Returns ranked passages with source_id, doc_id, title, the surrounding "
            "text and metadata. Narrow with filters (dates, companies, types) and doc_id. If "
            "nothing matches, try search_semantic or relax the filters; if there are far too "
            "many hits, add filters or ask the user to narrow the question.",
            _search_params(400),
            (
                "find invoice INV-2023-0042",
                "which contracts mention a termination fee",
                "datasheets for part number BC547",
                "certificates issued to ACME in 2022",
                "search the contracts for 'force majeure'",
            ),
            KNOWLEDGE,
            read_only=True,
            knowledge_search=True,
            closed_by_enough=True,
            core_in=KNOWLEDGE,
            core_rank=1,
        ),
        _spec(
            "search_semantic",
            "Meaning-based search inside one document collection (bucket) of a large corpus: "
            "best for conceptual questions phrased in natural language, where the documents "
            "may use other words. Returns ranked passages with source_id, doc_id, title, text "
            "and metadata. Narrow with filters and doc_id. Combine with search_text for exact "
            "terms.",
            _search_params(500),
            (
                "which suppliers offer extended warranties",
                "contracts that let us cancel early",
                "transistors suitable for high-frequency amplifiers",
                "invoices about consulting services last year",
                "what do our policies say about remote work",
            ),
            KNOWLEDGE,
            read_only=True,
            knowledge_search=True,
            closed_by_enough=True,
            core_in=KNOWLEDGE,
            core_rank=2,
        ),
        _spec(
            "get_document_metadata",
            "Returns all metadata of one document by its doc_id: bucket, title, source, dates, "
            "parties, amounts, types and any other extracted fields. Use it to check whether a "
            "document found by a search really meets the user's criteria (date range, "
            "company, type) before citing it.",
            obj(
                {"doc_id": string("The doc_id from a search result.", max_length=200, pattern=DOC_ID_PATTERN)},
                ("doc_id",),
            ),
            (
                "when was this contract signed",
                "who issued that certificate",
                "what is the total of the invoice you found",
                "show the details of document contract_123",
            ),
            KNOWLEDGE,
            read_only=True,
            knowledge_search=True,
            core_in=KNOWLEDGE,
            core_rank=3,
        ),
    ]
