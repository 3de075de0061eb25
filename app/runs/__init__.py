"""The durable run engine: a run from admission to its one ``message_complete``.

A live run and its ordered event log (``run``), a follower reading it (``live_reader``),
the manager of this process's runs — admission, conversation order, cancellation,
shutdown and recovery (``manager``) — and its parts: the runs in memory (``registry``),
the per-replica admission gate (``admission``), a run's task and its one ending
(``launch``), leases, take-over and epoch fencing (``leases``), what a recovery does
with a stored run (``recovery``), the ending the store refused (``rescue``), shutdown's
drain (``drain``), the counters (``counters``);
the state between steps and its checkpoint encoding (``state``), cancels that cross
processes (``cancels``), followers of runs executing on another replica (``remote``), and
the small shared types of a run: what a chat asks for and who asks (``records``).
Imports ``app/ops`` only; the agent loop (``app/agent``) runs on top of it.
"""
