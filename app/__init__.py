"""The service: the rooms a request passes through, and the thin top that builds them.

* ``app/server/`` — the HTTP faces (native routes, OpenAI-compatible, AI SDK UI stream),
  OpenAPI, auth, limits, the playground; and ``Services``, what one app instance owns.
* ``app/runs/`` — the durable run engine: a run's event log, the manager, checkpoints,
  cross-process cancels and followers of runs on other replicas.
* ``app/agent/`` — the agent loop: one model turn, the tool step, tool selection, the
  planner, the token budget and output caps.
* ``app/ops/`` — operations: metrics, logs and their context, tracing, secret masking,
  the embedder's readiness.
* ``app/cli/`` — the ``agentchat`` command.
* here — settings (``config``), the service's keys (``keyring``), the tool rooms
  (``rooms``, ``mcp_room``), keyword pruning, and the composition: ``wiring`` builds the
  services, ``factory`` the Starlette app.

docs/ARCHITECTURE.md has the table of what each room may import; tests/test_architecture.py
enforces it.
"""
