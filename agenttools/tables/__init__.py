"""The table-configuration tools: their handlers (``tools``), the local ``apply_*`` edits
(``ops``) and the config validation rules (``config_rules``). Imports ``agenttools.core`` only."""
