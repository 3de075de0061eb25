"""The mandatory RAG flow's tools: wiring of the handlers into the tool registry.

The app factory builds the stores and clients and calls::

    storage = await open_sqlite_storage(db_path)        # one bundle per process
    keywords = KeywordIndex(storage.keywords, storage.external_results)
    perplexity = PerplexityClient.from_env(http, os.environ)      # None when no key
    register_rag_tools(registry, RagToolDeps(kb, keywords, storage.external_results, perplexity))

The agent loop asks :func:`missing_prerequisite` before running a tool and
:func:`next_required_tool` when it has to enforce the flow; both read the same run
state the handlers write.
"""

from __future__ import annotations

from agenttools.core.registry import ToolRegistry
from agenttools.rag.deps import KnowledgeSearcher, RagToolDeps, RagToolSettings
from agenttools.rag.generate_response import make_generate_response_handler
from agenttools.rag.index_keywords import make_index_keywords_handler
from agenttools.rag.kb_search import ORIGIN_INDEXED, make_kb_search_handler
from agenttools.rag.perplexity_search import make_perplexity_search_handler
from agenttools.rag.policy import (
    GENERATE_RESPONSE,
    INDEX_KEYWORDS,
    KB_SEARCH,
    PERPLEXITY_SEARCH,
    RAG_TOOL_NAMES,
    missing_prerequisite,
    next_required_tool,
    prerequisite_error,
)

__all__ = [
    "GENERATE_RESPONSE",
    "INDEX_KEYWORDS",
    "KB_SEARCH",
    "ORIGIN_INDEXED",
    "PERPLEXITY_SEARCH",
    "RAG_TOOL_NAMES",
    "KnowledgeSearcher",
    "RagToolDeps",
    "RagToolSettings",
    "missing_prerequisite",
    "next_required_tool",
    "prerequisite_error",
    "register_rag_tools",
]


def register_rag_tools(registry: ToolRegistry, deps: RagToolDeps) -> None:
    """Attach the four handlers. The catalog must already hold their specs (else UnknownToolError)."""
    registry.set_handler(KB_SEARCH, make_kb_search_handler(deps))
    registry.set_handler(PERPLEXITY_SEARCH, make_perplexity_search_handler(deps))
    registry.set_handler(INDEX_KEYWORDS, make_index_keywords_handler(deps))
    registry.set_handler(GENERATE_RESPONSE, make_generate_response_handler(deps))
