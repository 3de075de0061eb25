"""The mandatory RAG flow (seeds 000-002) and the knowledge tools (seed 004).

The flow's tools are attached by :mod:`agenttools.rag.tools`; one module per handler
(``kb_search``, ``perplexity_search``, ``index_keywords``, ``generate_response``), the run's
policy (``policy``), evidence sources (``sources``) and the handlers' dependencies
(``deps``). Beside them: the keyword index (``keywords``), the Perplexity client
(``perplexity``) and saved external answers (``external_results``), citation checks
(``citations``), the bucketed-corpus tools (``corpus_tools``), their review
(``review``), clarification requests (``clarification``) and query decomposition
(``decomposition``, with ``schemas/``). Imports ``agenttools.core`` and no other tool room.
This ``__init__`` stays empty of imports so a module here does not pull in the handlers.
"""
