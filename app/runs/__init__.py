"""The durable run engine: a run from admission to its one ``message_complete``.

A live run and its ordered event log (``run``), the manager of this process's runs —
admission, conversation order, cancellation, leases, shutdown and recovery (``manager``),
the state between steps and its checkpoint encoding (``state``), cancels that cross
processes (``cancels``), followers of runs executing on another replica (``remote``), and
the small shared types of a run: what a chat asks for and who asks (``records``).
Imports ``app/ops`` only; the agent loop (``app/agent``) runs on top of it.
"""
