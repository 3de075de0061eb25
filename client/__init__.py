"""A small typed Python client of the agent service's HTTP API.

    import events
    from client import AgentClient

    async with AgentClient("http://127.0.0.1:8000") as agent:   # token=... with AGENT_AUTH=jwt
        run = await agent.start_run("How do I resume a stream?", "knowledge")
        async for event in agent.stream(run.run_id):   # resumes by Last-Event-ID on drops
            if isinstance(event, events.ContentChunk):
                print(event.chunk, end="")

Events are the ``events`` classes (the same ones the server emits); refusals raise
``APIError`` carrying the server's problem JSON.
"""

from __future__ import annotations

from client.agent import AgentClient, EventStream
from client.errors import AgentClientError, APIError, StreamInterrupted
from client.types import (
    ApprovalAccepted,
    Attachment,
    Conversation,
    ConversationMessage,
    ConversationPage,
    ConversationSummary,
    RunFeedback,
    RunInfo,
    RunPage,
    RunState,
    StartedRun,
)

__all__ = [
    "APIError",
    "AgentClient",
    "AgentClientError",
    "ApprovalAccepted",
    "Attachment",
    "Conversation",
    "ConversationMessage",
    "ConversationPage",
    "ConversationSummary",
    "EventStream",
    "RunFeedback",
    "RunInfo",
    "RunPage",
    "RunState",
    "StartedRun",
    "StreamInterrupted",
]
