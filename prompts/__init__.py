"""Prompt texts (``prompts/texts/*.md``) and the builder that composes them."""

from prompts.builder import (
    CONTEXT_CAP_BYTES,
    PromptLibrary,
    build_system_prompt,
    enforcement_message,
    is_new_workflow,
)

__all__ = [
    "CONTEXT_CAP_BYTES",
    "PromptLibrary",
    "build_system_prompt",
    "enforcement_message",
    "is_new_workflow",
]
