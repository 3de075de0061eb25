"""MCP servers' tools: the ``AGENT_MCP_SERVERS`` file (``config``), one kept-alive connection
per server (``client``) and their tools in the catalog (``catalog``). Imports
``agenttools.core`` only."""
