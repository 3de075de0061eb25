"""What every tool shares, importing no other room of ``agenttools``.

The registry (``registry``: ``ToolSpec``, handlers, ``ToolContext``), the executor
(``executor``), argument validation (``validation``), context-id injection (``context_ids``,
``ids``), untrusted-text quoting (``untrusted``), log redaction (``log_redaction``), one-line
result summaries (``result_summary``), preview interception (``previews``); the backend
plumbing the workflow and table tools share (``backend_client``, ``resolution``, ``drafts``,
``tool_support``); and the catalog: every tool's definition (``catalog_workflow``,
``catalog_tables``, ``catalog_table_edits``, ``catalog_knowledge``, ``catalog_discovery``, built with
``catalog_schema``), assembled per context in ``catalog``.
"""
