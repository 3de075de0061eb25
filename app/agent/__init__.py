"""The agent loop: what happens inside one run.

The loop as named, checkpointed steps (``loop``), one streamed model turn (``turn``), the
tool step that executes a turn's calls (``tool_step``), the three-stage tool selector
(``selector``) and ``find_tools`` (``find_tools``), the optional query planner
(``planner``), the token budget (``budget``), caps on model output (``output_caps``), the
prompt builder's adapter (``prompting``) and the protocols the loop depends on (``deps``).
Imports ``app/runs`` and ``app/ops``.
"""
