"""Provider-neutral LLM types and providers (Gemini, Ollama, extractive, scripted)."""

from llm.provider import Provider, ProviderHealth
from llm.types import (
    ChatRequest,
    ContentDelta,
    Message,
    MessageComplete,
    MessageStart,
    StreamError,
    StreamEvent,
    ThinkingDelta,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolUseInput,
    ToolUseStart,
    Usage,
)

__all__ = [
    "ChatRequest",
    "ContentDelta",
    "Message",
    "MessageComplete",
    "MessageStart",
    "Provider",
    "ProviderHealth",
    "StreamError",
    "StreamEvent",
    "ThinkingDelta",
    "ToolCall",
    "ToolDefinition",
    "ToolResult",
    "ToolUseInput",
    "ToolUseStart",
    "Usage",
]
