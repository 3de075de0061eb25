"""The workflow tools: their handlers (``tools``), the model's payload turned into the
backend's request (``payload``) and compact views of backend workflow data (``summaries``).
Imports ``agenttools.core`` only."""
