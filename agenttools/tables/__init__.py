"""The table-configuration tools: their handlers (``tools``), the local ``apply_*`` edits
(``ops``) and the config check (``config_rules``: the backend's own rules, ``backend.table_rules``).
Imports ``agenttools.core`` and ``backend.table_rules`` only."""
