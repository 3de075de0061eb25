"""The agent's tools, in five rooms.

* ``core/`` — what every tool shares: the registry and ``ToolSpec``, the executor,
  argument validation, context ids, untrusted-text quoting, log redaction, result
  summaries, preview interception, the backend client, name resolution and drafts, and
  the catalog (every tool's definition, assembled per context).
* ``workflow/``, ``tables/`` — the handlers of the workflow and table-configuration tools.
* ``mcp/`` — MCP servers' tools in the catalog: configuration, connections, handlers.
* ``rag/`` — the mandatory RAG flow and the knowledge tools: search, Perplexity, keywords,
  citations, review, clarification, decomposition, the bucketed-corpus tools.

``workflow``, ``tables``, ``mcp`` and ``rag`` import ``core`` and never each other;
``backend_tools`` attaches the workflow and table handlers together for the app.
"""
