"""Unsafe requests from another origin's page are refused (``app/server/origin_check.py``):
``403 cross_origin_request``.

A page the developer visits can send a local ``AGENT_AUTH=none`` server a multipart form
(an attachment upload to a conversation id of its choosing) or a bodiless POST (a run's
cancel) with no CORS preflight. Browsers say where it came from (``Sec-Fetch-Site``,
``Origin``); a request from the server's own page, the address bar, an origin listed in
``AGENT_CORS_ORIGINS``, or no browser at all (curl, SDKs) is served. Over a real server,
and once in headless Chromium (a page on ``localhost`` posting to ``127.0.0.1``: two sites).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from app.config import Settings
from app.server.origin_check import origin_rule
from tests.browser.cdp import find_chromium, launch
from tests.conftest import running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.server import serve_app
from tests.test_browser import js
from tests.test_compat_faces_owners import bearer, env

EVIL = "https://evil.example"
APP = "https://app.example.com"
BOUNDARY = "----WebKitFormBoundaryq8ZJk3Xv0cLwR2bN"
NOTE = b"# Planted\n\nThe page that sent this file was not the user's.\n"


def chromium_form(origin: str | None, site: str | None) -> dict[str, str]:
    """The headers Chromium sends with a form's multipart POST (``<form method=post
    enctype=multipart/form-data>`` submitted on a page of ``origin``)."""
    head = {
        "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
        "Cache-Control": "max-age=0",
        "Upgrade-Insecure-Requests": "1",
        "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8",
        "User-Agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0",
    }
    if origin is not None:
        head |= {"Origin": origin, "Referer": origin + "/"}
    if site is not None:
        head |= {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document",
                 "Sec-Fetch-User": "?1"}
    return head


def multipart(name: str, data: bytes) -> bytes:
    """A multipart body with one ``file`` part, as Chromium frames it."""
    return (
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
        f"Content-Type: text/markdown\r\n\r\n"
    ).encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()


def _settings(tmp_path: Path, **extra: str) -> Settings:
    """``AGENT_AUTH=none`` (what ``make run`` serves), a knowledge base without vectors."""
    return Settings.from_env(env(tmp_path, AGENT_AUTH="none", AGENT_MANDATORY_CONTEXTS="none", **extra))


async def upload(http: httpx.AsyncClient, conversation: str, head: dict[str, str], name: str) -> httpx.Response:
    return await http.post(f"/v1/agent/conversations/{conversation}/attachments",
                           content=multipart(name, NOTE), headers=head)


async def stored(http: httpx.AsyncClient, conversation: str) -> list[str]:
    listed = await http.get(f"/v1/agent/conversations/{conversation}/attachments")
    if listed.status_code == 404:
        return []
    assert listed.status_code == 200, listed.text
    return [a["filename"] for a in listed.json()["attachments"]]


#: (Sec-Fetch-Site, Origin relative to the server's own, method, refused?) with no
#: AGENT_CORS_ORIGINS; "own" stands for the server's own origin.
CASES = [
    ("cross-site", EVIL, "POST", True),
    ("same-site", "http://localhost:3000", "POST", True),  # another port of localhost
    ("cross-site", None, "POST", True),
    ("CROSS-SITE", EVIL, "DELETE", True),
    ("something-new", EVIL, "PATCH", True),  # not one of the values that say "own": refused
    ("same-origin", "own", "POST", False),
    ("none", None, "POST", False),  # typed in the address bar
    ("cross-site", EVIL, "GET", False),
    ("cross-site", EVIL, "HEAD", False),
    ("cross-site", EVIL, "OPTIONS", False),  # a CORS preflight
    (None, EVIL, "POST", True),  # a browser without Sec-Fetch-Site: Origin decides
    (None, "null", "POST", True),  # a sandboxed or file: page
    (None, "https://127.0.0.1:8000", "POST", True),  # another scheme is another origin
    (None, "http://127.0.0.1:8001", "POST", True),
    (None, "http://127.0.0.1:8000/", "POST", True),  # not an origin
    (None, "own", "POST", False),
    (None, "http://127.0.0.1:8000", "PUT", False),
    (None, None, "POST", False),  # curl, SDKs, servers
]


@pytest.mark.parametrize(("site", "origin", "method", "refused"), CASES)
def test_the_rule(site: str | None, origin: str | None, method: str, refused: bool) -> None:
    rule = origin_rule(())
    assert rule is not None
    sent = "http://127.0.0.1:8000" if origin == "own" else origin
    assert rule.refuses(method, site, sent, "http", "127.0.0.1:8000") is refused, (site, origin, method)


def test_the_own_origin_is_the_scheme_and_host_default_port_omitted() -> None:
    rule = origin_rule(())
    assert rule is not None
    for origin, scheme, host in [
        ("http://localhost", "http", "localhost:80"),
        ("https://dev.box", "https", "DEV.box:443"),
        ("http://[::1]:8000", "http", "[::1]:8000"),
        ("https://agent.example.com", "https", "agent.example.com"),
    ]:
        assert not rule.refuses("POST", None, origin, scheme, host), (origin, host)
    assert rule.refuses("POST", None, "http://agent.example.com", "https", "agent.example.com")
    assert rule.refuses("POST", None, "http://localhost", "http", None)  # nothing to compare with


def test_agent_cors_origins_are_trusted_and_a_wildcard_turns_the_check_off() -> None:
    rule = origin_rule((APP,))
    assert rule is not None
    assert not rule.refuses("POST", "cross-site", APP, "http", "127.0.0.1:8000")
    assert not rule.refuses("POST", None, APP, "http", "127.0.0.1:8000")
    assert rule.refuses("POST", "cross-site", EVIL, "http", "127.0.0.1:8000")
    assert rule.refuses("POST", "cross-site", APP + "/", "http", "127.0.0.1:8000")  # as CORS compares
    assert origin_rule(("*",)) is None


async def test_a_cross_site_multipart_upload_is_403_and_stores_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agentchat.http")
    async with running_app(_settings(tmp_path)) as (base, _), \
            httpx.AsyncClient(base_url=base, timeout=30) as http:
        own = base  # http://127.0.0.1:<port>
        forged = await upload(http, "c-planted", chromium_form(EVIL, "cross-site"), "planted.md")
        assert forged.status_code == 403, forged.text
        problem = forged.json()
        assert problem["error"] == "cross_origin_request"
        assert "AGENT_CORS_ORIGINS" in problem["detail"] and "\n" not in problem["detail"]
        assert EVIL in problem["detail"]
        assert await stored(http, "c-planted") == []
        # The same form from the server's own page (the playground), from a page on another
        # port of localhost (same-site), and from a browser that sends no Sec-Fetch-Site.
        assert (await upload(http, "c-planted", chromium_form("http://localhost:3000", "same-site"),
                             "sibling.md")).status_code == 403
        assert (await upload(http, "c-planted", chromium_form(EVIL, None), "old-browser.md")).status_code == 403
        assert await stored(http, "c-planted") == []
        mine = await upload(http, "c-planted", chromium_form(own, "same-origin"), "mine.md")
        assert mine.status_code == 201, mine.text
        older = await upload(http, "c-planted", chromium_form(own, None), "older.md")
        assert older.status_code == 201, older.text
        curl = await http.post("/v1/agent/conversations/c-planted/attachments",
                               files={"file": ("curl.md", NOTE, "text/markdown")})
        assert curl.status_code == 201, curl.text
        assert await stored(http, "c-planted") == ["mine.md", "older.md", "curl.md"]
        # The OpenAI-compatible face refuses it in OpenAI's shape (before its 415 for the form).
        completion = await http.post("/v1/chat/completions", content=b"x=1", headers={
            "Content-Type": "application/x-www-form-urlencoded", "Origin": EVIL, "Sec-Fetch-Site": "cross-site"})
        assert completion.status_code == 403
        assert completion.json()["error"]["code"] == "cross_origin_request"
        assert completion.json()["error"]["type"] == "permission_error"
        # A cross-site GET is no forgery (it changes nothing): served.
        assert (await http.get("/v1/agent/conversations", headers={"Origin": EVIL,
                                                                   "Sec-Fetch-Site": "cross-site"})).status_code == 200
    refusals = [r for r in caplog.records if r.getMessage().startswith("refused a cross-origin request")]
    assert len(refusals) == 4  # one line a refused request
    assert [r.levelno for r in refusals] == [logging.WARNING, logging.WARNING, logging.INFO, logging.INFO]


async def test_a_cross_site_cancel_is_403_and_the_run_goes_on(tmp_path: Path) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["Working. ", gate, "Done."])])
    async with running_app(_settings(tmp_path), provider=provider) as (base, _), \
            httpx.AsyncClient(base_url=base, timeout=30) as http:
        started = await http.post("/v1/agent/runs", json={"message": "plan", "context_type": "workflow"})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        await within(gate.reached.wait(), "the run to reach its gate")
        head = {"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors",
                "Sec-Fetch-Dest": "empty", "Content-Type": "text/plain;charset=UTF-8"}
        cancel = await http.post(f"/v1/agent/runs/{run_id}/cancel", content=b"", headers=head)
        assert cancel.status_code == 403 and cancel.json()["error"] == "cross_origin_request", cancel.text
        gate.open()
        run = await within(_finished(http, run_id), "the run to finish")
        assert run["status"] == "completed", run


async def _finished(http: httpx.AsyncClient, run_id: str) -> dict[str, object]:
    while True:
        run: dict[str, object] = (await http.get(f"/v1/agent/runs/{run_id}")).json()
        if run["status"] not in ("queued", "running"):
            return run
        await asyncio.sleep(0.05)


async def test_an_origin_in_agent_cors_origins_may_upload(tmp_path: Path) -> None:
    async with running_app(_settings(tmp_path, AGENT_CORS_ORIGINS=APP)) as (base, _), \
            httpx.AsyncClient(base_url=base, timeout=30) as http:
        trusted = await upload(http, "c-app", chromium_form(APP, "cross-site"), "from-app.md")
        assert trusted.status_code == 201, trusted.text
        assert trusted.headers.get("access-control-allow-origin") == APP
        assert (await upload(http, "c-app", chromium_form(EVIL, "cross-site"), "evil.md")).status_code == 403
        assert await stored(http, "c-app") == ["from-app.md"]
    # "*": any page may call it, by the operator's choice.
    async with running_app(_settings(tmp_path / "any", AGENT_CORS_ORIGINS="*")) as (base, _), \
            httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await upload(http, "c-any", chromium_form(EVIL, "cross-site"), "any.md")).status_code == 201


async def test_with_jwt_too(tmp_path: Path) -> None:
    """One rule in every auth mode: a page that somehow holds a token is refused the same."""
    alice = bearer("alice")
    async with running_app(Settings.from_env(env(tmp_path))) as (base, _), \
            httpx.AsyncClient(base_url=base, timeout=30) as http:
        forged = await upload(http, "c-jwt", alice | chromium_form(EVIL, "cross-site"), "planted.md")
        assert forged.status_code == 403 and forged.json()["error"] == "cross_origin_request"
        assert (await upload(http, "c-jwt", alice | chromium_form(base, "same-origin"), "mine.md")).status_code == 201


async def test_headless_chromium_page_of_another_site_cannot_upload(tmp_path: Path) -> None:
    """A real page of another site (a second server, browsed as ``http://localhost:<port>``:
    another site than ``127.0.0.1``) sends the upload as a hostile page would,
    ``fetch(no-cors)`` with a FormData body: no preflight, so before this guard the file was
    stored. The playground, the server's own page, uploads (tests/test_browser_attachments)."""
    binary = find_chromium()
    if binary is None:
        pytest.skip("no chromium binary (install Debian's `chromium` package; .ci/run does)")
    send = (
        "(async (url, name) => { const form = new FormData();"
        f" form.append('file', new File([{js(NOTE.decode())}], name, {{type: 'text/markdown'}}));"
        " const r = await fetch(url, {method: 'POST', mode: 'no-cors', body: form, credentials: 'include'});"
        " return r.type; })"
    )
    hostile = Starlette(routes=[Route("/", lambda _: HTMLResponse("<!doctype html><title>a page</title>"))])
    async with running_app(_settings(tmp_path)) as (base, _), serve_app(hostile, lifespan="off") as elsewhere, \
            launch(binary) as browser, httpx.AsyncClient(base_url=base, timeout=30) as http:
        page = await browser.new_page()
        await page.navigate(elsewhere.replace("127.0.0.1", "localhost") + "/")
        target = f"{base}/v1/agent/conversations/c-browser/attachments"
        assert await page.evaluate(f"{send}({js(target)}, 'planted.md')") == "opaque"
        assert await stored(http, "c-browser") == []
        # The same page's request to itself is same-origin; the server's own page's is too.
        await page.navigate(f"{base}/healthz")
        assert await page.evaluate(f"{send}({js(target)}, 'mine.md')") == "basic"
        assert await stored(http, "c-browser") == ["mine.md"]
