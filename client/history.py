"""The client's history methods (issue 25): your conversations (list, rename, delete),
your runs (look one up, list), feedback on a run. Mixed into ``AgentClient``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from client.errors import APIError
from client.types import Attachment, ConversationPage, ConversationSummary, RunFeedback, RunInfo, RunPage


def _summary(d: Mapping[str, Any]) -> ConversationSummary:
    return ConversationSummary(
        id=str(d["id"]),
        title=d.get("title"),
        created_at=float(d["created_at"]),
        updated_at=float(d["updated_at"]),
        last_run_status=d.get("last_run_status"),
    )


def run_info(d: Mapping[str, Any]) -> RunInfo:
    fb = d.get("feedback")
    return RunInfo(
        run_id=str(d["run_id"]),
        conversation_id=str(d["conversation_id"]),
        status=str(d["status"]),
        created_at=float(d["created_at"]),
        finished_at=d.get("finished_at"),
        turns=d.get("turns"),
        usage=d.get("usage"),
        tool_call_count=d.get("tool_call_count"),
        ending=d.get("ending"),
        feedback=RunFeedback(fb["score"], fb.get("comment"), float(fb["at"])) if fb else None,
        raw=d,
    )


def _attachment(d: Mapping[str, Any]) -> Attachment:
    return Attachment(
        id=str(d["id"]),
        filename=str(d["filename"]),
        size=int(d["size"]),
        media_type=str(d["media_type"]),
        chunks=int(d["chunks"]),
        created_at=str(d["created_at"]),
        title=d.get("title"),
    )


def _page(limit: int | None, cursor: str | None, **extra: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    if limit is not None:
        params["limit"] = limit
    if cursor:
        params["cursor"] = cursor
    return params


class HistoryMethods:
    """Needs ``_json``, ``http``, ``url`` and ``headers`` (``AgentClient`` has them)."""

    http: httpx.AsyncClient

    if TYPE_CHECKING:

        async def _json(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]: ...

        def url(self, path: str) -> str: ...

        def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]: ...

    async def conversations(self, *, limit: int | None = None, cursor: str | None = None) -> ConversationPage:
        """Your conversations, newest first; page on with ``next_cursor``."""
        _, data = await self._json("GET", "/v1/agent/conversations", params=_page(limit, cursor))
        return ConversationPage(tuple(_summary(c) for c in data["conversations"]), data.get("next_cursor"))

    async def rename_conversation(self, conversation_id: str, title: str) -> ConversationSummary:
        _, data = await self._json(
            "PATCH", f"/v1/agent/conversations/{quote(conversation_id, safe='')}", json={"title": title}
        )
        return _summary(data)

    async def delete_conversation(self, conversation_id: str) -> None:
        """Delete it and everything of it (its live runs are cancelled first); ``APIError``
        404 when it is not yours, 503 while a run of it is still ending (retry)."""
        response = await self.http.delete(
            self.url(f"/v1/agent/conversations/{quote(conversation_id, safe='')}"), headers=self.headers()
        )
        if response.status_code >= 400:
            raise APIError.from_response(response)

    async def get_run(self, run_id: str) -> RunInfo:
        _, data = await self._json("GET", f"/v1/agent/runs/{quote(run_id, safe='')}")
        return run_info(data)

    async def runs(
        self, conversation_id: str | None = None, *, limit: int | None = None, cursor: str | None = None
    ) -> RunPage:
        """Your runs (of one conversation when named), newest first."""
        params = _page(limit, cursor, conversation_id=conversation_id)
        _, data = await self._json("GET", "/v1/agent/runs", params=params)
        return RunPage(tuple(run_info(r) for r in data["runs"]), data.get("next_cursor"))

    async def feedback(self, run_id: str, score: int, comment: str | None = None) -> RunInfo:
        """Thumbs up (1) or down (-1) on a finished run; a second call replaces the first."""
        body: dict[str, Any] = {"score": score}
        if comment is not None:
            body["comment"] = comment
        _, data = await self._json("POST", f"/v1/agent/runs/{quote(run_id, safe='')}/feedback", json=body)
        return run_info(data)

    async def attach(
        self, conversation_id: str, data: bytes, filename: str, media_type: str | None = None
    ) -> Attachment:
        """Attach a file (PDF, HTML, Markdown or text) to your conversation, creating the
        conversation when it is new; its questions then search it. ``APIError`` 413 past
        the server's size limit, 415 for a kind it does not read or binary content."""
        part = (filename, data, media_type) if media_type else (filename, data)
        path = f"/v1/agent/conversations/{quote(conversation_id, safe='')}/attachments"
        _, body = await self._json("POST", path, files={"file": part})
        return _attachment(body)

    async def attachments(self, conversation_id: str) -> tuple[Attachment, ...]:
        """Your conversation's attachments, oldest first."""
        path = f"/v1/agent/conversations/{quote(conversation_id, safe='')}/attachments"
        _, body = await self._json("GET", path)
        return tuple(_attachment(a) for a in body["attachments"])

    async def delete_attachment(self, conversation_id: str, attachment_id: str) -> None:
        path = f"/v1/agent/conversations/{quote(conversation_id, safe='')}/attachments/{quote(attachment_id, safe='')}"
        response = await self.http.delete(self.url(path), headers=self.headers())
        if response.status_code >= 400:
            raise APIError.from_response(response)


__all__ = ["HistoryMethods", "run_info"]
