"""One outbound POST on a shared ``httpx.AsyncClient``, without the client's per-request layers.

Why (issue 23): ``AsyncClient.stream`` / ``post`` build each request by merging the
client's base URL, headers, cookies and params (the cookie header through the stdlib's
``http.cookiejar``), then run it through the auth flow and the redirect loop, and store
the answer's cookies in the client's jar (``http.cookiejar`` again). Measured on this
machine that is several hundred microseconds per request, most of it the cookie jar —
about 6 % of a run's start, where every new conversation makes two model calls (its
turn and its title). A model endpoint is a plain POST: so the request is built the way
the client would build it (its base URL, its headers, its timeout) and handed straight
to the transport the client would pick for that URL (its proxy mounts included); the
answer is the transport's own streamed ``httpx.Response`` (transport errors are httpx's,
mapped by the transport), closed by its reader, which releases the connection.

Nothing the client does is lost silently: a client with ``auth``, event hooks, query
parameters or cookies in its jar, or a closed one, takes the client's own path; an
answer that sets a cookie has it stored in the jar as the client would (so the next
request takes the client's path and sends it); a redirect answer, with
``follow_redirects`` on, is closed and its location requested the client's way, which
follows any further redirect (the server sees the POST once).
"""

from __future__ import annotations

import httpx


def _plain(http: httpx.AsyncClient) -> bool:
    """Whether a request on ``http`` needs none of the layers skipped here. A closed
    client takes the client's path, which refuses it (the transport would open a pooled
    connection nothing closes); a client with query parameters too (merged there)."""
    hooks = http.event_hooks
    return (
        http.auth is None
        and not hooks["request"]
        and not hooks["response"]
        and not http.cookies
        and not http.params
        and not http.is_closed
    )


def endpoint(http: httpx.AsyncClient, path: str) -> httpx.URL:
    """``path`` on the client's base URL, as the client merges it — worth keeping: the
    merge builds a new ``httpx.URL`` (a parse) every time."""
    return http._merge_url(path)


async def post_stream(http: httpx.AsyncClient, path: str | httpx.URL, body: bytes) -> httpx.Response:
    """``POST path`` (relative to the client's base URL, or an :func:`endpoint` of it) with
    ``body`` as its content; the answer with its body not read yet (read it or ``aclose``
    it)."""
    if _plain(http):
        url = path if isinstance(path, httpx.URL) else http._merge_url(path)
        request = httpx.Request(
            "POST", url, headers=http.headers, content=body, extensions={"timeout": http.timeout.as_dict()}
        )
        response = await http._transport_for_url(url).handle_async_request(request)
        response.request = request
        if "set-cookie" in response.headers:
            http.cookies.extract_cookies(response)
        if not (http.follow_redirects and response.has_redirect_location):
            return response
        await response.aclose()
        # Followed from here as the client would (same method rules, its redirect limit
        # for what comes next); sending the POST again from the start would make the
        # server see it twice.
        return await http.send(http._build_redirect_request(request, response), stream=True)
    return await http.send(http.build_request("POST", path, content=body), stream=True)


__all__ = ["endpoint", "post_stream"]
