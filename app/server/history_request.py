"""The bodies of a user's history routes (issue 25), declared once as msgspec structs:
they decode the body (``parse_rename``, ``parse_feedback``) and are the OpenAPI schemas
(``RenameConversationRequest``, ``RunFeedbackRequest``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from app.server.body_structs import ABSENT, body_schema, decode_fields
from app.server.problems import HTTPProblem

MAX_TITLE_CHARS = 200
MAX_COMMENT_CHARS = 2000


class RenameConversationRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Any other member is a 400 `unknown_field`."""

    title: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=MAX_TITLE_CHARS,
            pattern=r"\S",
            description="The conversation's new title; not only white space (trimmed).",
        ),
    ]


class RunFeedbackRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Any other member is a 400 `unknown_field`. A second post replaces the first."""

    score: Annotated[Literal[1, -1], Meta(description="1: thumbs up; -1: thumbs down.")]
    comment: Annotated[
        Annotated[str, Meta(max_length=MAX_COMMENT_CHARS)] | None,
        Meta(description="What was good or wrong (optional)."),
    ] = None


def rename_schema() -> dict[str, Any]:
    return body_schema(RenameConversationRequest)


def feedback_schema() -> dict[str, Any]:
    return body_schema(RunFeedbackRequest)


def parse_rename(body: dict[str, Any]) -> str:
    """The new title, trimmed; a 400 naming the fault."""

    def refuse(name: str, raw: Any) -> HTTPProblem:
        if raw is ABSENT or raw is None:
            return HTTPProblem(400, "invalid_field", "title is required")
        return title_problem(raw)

    return decode_fields(body, RenameConversationRequest, refuse).title.strip()


def title_problem(raw: Any) -> HTTPProblem:
    """The 400 for a title given but not acceptable: the rename's and the chat body's."""
    if not isinstance(raw, str):
        return HTTPProblem(400, "invalid_field", "title must be a string")
    return HTTPProblem(400, "invalid_field", f"title must be 1-{MAX_TITLE_CHARS} characters, not only white space")


def parse_feedback(body: dict[str, Any]) -> tuple[int, str | None]:
    """(score, comment or ``None``); a 400 naming the first field at fault."""

    def refuse(name: str, raw: Any) -> HTTPProblem:
        if name == "score":
            return HTTPProblem(400, "invalid_field", "score must be 1 or -1")
        if not isinstance(raw, str):
            return HTTPProblem(400, "invalid_field", "comment must be a string")
        return HTTPProblem(400, "invalid_field", f"comment is longer than {MAX_COMMENT_CHARS} characters")

    request = decode_fields(body, RunFeedbackRequest, refuse)
    comment = request.comment.strip() if request.comment is not None else None
    return int(request.score), comment or None


__all__ = [
    "MAX_COMMENT_CHARS",
    "MAX_TITLE_CHARS",
    "RenameConversationRequest",
    "RunFeedbackRequest",
    "feedback_schema",
    "parse_feedback",
    "parse_rename",
    "rename_schema",
]
