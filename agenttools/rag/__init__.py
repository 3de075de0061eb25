"""Building blocks of the mandatory RAG flow (seeds 000-002).

The public entry point is :mod:`agenttools.rag_tools`; the modules here each do one job
(SQLite plumbing, run-state policy, evidence sources, one module per tool handler).
This package ``__init__`` stays empty on purpose so the stores can import the SQLite
helpers without pulling the handlers in (and without import cycles).
"""
