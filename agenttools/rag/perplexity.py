"""Perplexity Sonar client: one grounded web answer plus the sources behind it.

Wire format (Perplexity's OpenAI-compatible Chat Completions API):
``POST {PERPLEXITY_BASE_URL}/chat/completions`` with ``Authorization: Bearer <key>`` and
``{"model": "sonar", "messages": [...]}``; the answer is ``choices[0].message.content``,
the sources are ``search_results: [{title, url, date, last_updated?, snippet?}]``
(current) or ``citations: [url]`` (the older field). The answer's ``[n]`` markers are
1-based positions in that list, which :class:`~agenttools.rag.external_results.Citation`
keeps as ``index``.

Failures never escape as transport exceptions: everything becomes a
:class:`PerplexityError` with a ``kind`` the tool handler turns into a readable tool
error (the run then answers from the knowledge base only). No retries here: a 429 or a
timeout is reported at once so the run is not stalled; the model decides what to do.

``search(..., before_send=hook)``: ``hook`` is awaited once the request holds a connection
of Perplexity's pool, right before it leaves (``llm.pool.ON_SEND``) — the moment a paid
call counts as made. Over a client without such a pool it is awaited before the request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import orjson

from agenttools.rag.external_results import Citation
from llm.pool import ON_SEND, SendHook, honours_on_send

DEFAULT_BASE_URL = "https://api.perplexity.ai"
DEFAULT_MODEL = "sonar"
DEFAULT_TIMEOUT_S = 30.0
MAX_CONTEXT_CHARS = 4_000

SYSTEM_PROMPT = (
    "You are a precise research assistant. Answer the question factually and concisely, "
    "citing your sources with [n] markers. If the answer is uncertain, say so."
)

ErrorKind = Literal["rate_limited", "timeout", "unavailable", "auth", "bad_request", "bad_response"]

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


class PerplexityError(Exception):
    """A failed Perplexity call. ``kind`` drives the message the model gets."""

    def __init__(
        self,
        kind: ErrorKind,
        detail: str,
        *,
        status: int | None = None,
        retry_after: str | None = None,
    ) -> None:
        super().__init__(f"perplexity {kind}: {detail}")
        self.kind = kind
        self.detail = detail
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class PerplexityAnswer:
    answer: str
    citations: tuple[Citation, ...]
    model: str
    response_id: str | None = None


class PerplexityClient:
    """Calls Perplexity over the service's shared ``httpx.AsyncClient``."""

    provider = "perplexity"

    def __init__(
        self,
        http: httpx.AsyncClient,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        model: str = DEFAULT_MODEL,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if not api_key:
            raise ValueError("a Perplexity API key is required (leave the client None instead)")
        self._http = http
        self._api_key = api_key
        self._url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._timeout = httpx.Timeout(timeout_s)
        self._pooled = honours_on_send(http)

    @classmethod
    def from_env(
        cls, http: httpx.AsyncClient, env: Mapping[str, str], **kwargs: Any
    ) -> PerplexityClient | None:
        """Built from ``PERPLEXITY_API_KEY`` / ``PERPLEXITY_BASE_URL``; None when no key is set."""
        key = (env.get("PERPLEXITY_API_KEY") or "").strip()
        if not key:
            return None
        base_url = (env.get("PERPLEXITY_BASE_URL") or "").strip() or DEFAULT_BASE_URL
        return cls(http, key, base_url=base_url, **kwargs)

    def build_request(self, query: str, context: str | None = None) -> dict[str, Any]:
        user = query.strip()
        if context and context.strip():
            user += (
                "\n\nWhat our internal knowledge base already says (for context; "
                "look for what is missing or more recent):\n" + context.strip()[:MAX_CONTEXT_CHARS]
            )
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": user},
            ],
        }

    async def search(
        self, query: str, context: str | None = None, *, before_send: SendHook | None = None
    ) -> PerplexityAnswer:
        body = orjson.dumps(self.build_request(query, context))
        extensions: dict[str, Any] = {}
        if before_send is not None:
            if self._pooled:
                extensions[ON_SEND] = before_send
            else:
                await before_send()
        try:
            response = await self._http.post(
                self._url,
                content=body,
                headers={
                    "Authorization": f"Bearer {self._api_key}",
                    "Content-Type": "application/json",
                    "Accept": "application/json",
                },
                timeout=self._timeout,
                extensions=extensions or None,
            )
        except httpx.TimeoutException as exc:
            raise PerplexityError("timeout", type(exc).__name__) from exc
        except httpx.HTTPError as exc:
            raise PerplexityError("unavailable", f"{type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise _status_error(response)
        return parse_response(response.content, default_model=self.model)


def _status_error(response: httpx.Response) -> PerplexityError:
    status = response.status_code
    detail = f"HTTP {status}: {_error_message(response.content)}"
    if status == 429:
        return PerplexityError(
            "rate_limited", detail, status=status, retry_after=response.headers.get("retry-after")
        )
    if status in (401, 403):
        return PerplexityError("auth", detail, status=status)
    if status >= 500:
        return PerplexityError("unavailable", detail, status=status)
    return PerplexityError("bad_request", detail, status=status)


def _error_message(body: bytes) -> str:
    """Perplexity errors look like ``{"error": {"message", "type", "code"}}``; be lenient."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:200].decode("utf-8", "replace")
    if isinstance(data, dict):
        err = data.get("error", data.get("detail"))
        if isinstance(err, dict):
            return str(err.get("message") or err)[:200]
        if err is not None:
            return str(err)[:200]
    return str(data)[:200]


def parse_response(body: bytes, *, default_model: str = DEFAULT_MODEL) -> PerplexityAnswer:
    """Decode a Chat Completions body into an answer and its numbered citations."""
    try:
        data = orjson.loads(body)
        content = data["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        raise PerplexityError("bad_response", f"unexpected body: {body[:200]!r}") from exc
    if not isinstance(content, str):
        raise PerplexityError("bad_response", "message content is not text")
    answer = _THINK_BLOCK.sub("", content).strip()  # reasoning models prepend <think> blocks
    if not answer:
        raise PerplexityError("bad_response", "empty answer")
    return PerplexityAnswer(
        answer=answer,
        citations=tuple(_citations(data)),
        model=str(data.get("model") or default_model),
        response_id=str(data["id"]) if data.get("id") else None,
    )


def _citations(data: dict[str, Any]) -> list[Citation]:
    """Citations from ``search_results`` (preferred) or the legacy ``citations`` URL list.

    Entries without a usable URL are skipped but keep their number, so ``[n]`` in the
    answer still points at the right citation.
    """
    out: list[Citation] = []
    results = data.get("search_results")
    if isinstance(results, list) and results:
        for i, item in enumerate(results, start=1):
            if not isinstance(item, dict) or not _is_url(item.get("url")):
                continue
            out.append(
                Citation(
                    index=i,
                    url=str(item["url"]),
                    title=str(item.get("title") or "")[:300],
                    date=_opt_str(item.get("date") or item.get("last_updated")),
                    snippet=_opt_str(item.get("snippet"), 500),
                )
            )
        return out
    legacy = data.get("citations")
    if isinstance(legacy, list):
        for i, url in enumerate(legacy, start=1):
            if isinstance(url, dict):  # some gateways send {url, title}
                title, url = str(url.get("title") or ""), url.get("url")
            else:
                title = ""
            if _is_url(url):
                out.append(Citation(index=i, url=str(url), title=title[:300]))
    return out


def _is_url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://"))


def _opt_str(value: object, limit: int = 100) -> str | None:
    return str(value)[:limit] if value else None
