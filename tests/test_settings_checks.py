"""What an operator's walkthrough found in the settings (walkthrough 39):

- ``AGENT_BACKEND_URL=http://`` was accepted (``/readyz`` 200, every tool call failing
  later with ``UnsupportedProtocol``). Every URL setting goes through one check
  (``agenttools.core.urls``): an http(s) URL with a host, else one line at start and the
  exit code of any bad setting (2); an MCP server's ``url`` goes through the same check.
- ``AGENT_AUTHH=jwt AGENT_HOST=0.0.0.0`` served with no auth on every address and not one
  line: ``agentchat serve`` warns of each ``AGENT_*`` variable nothing reads (with the
  closest known name) and of ``AGENT_AUTH=none`` on an address other machines reach,
  once, from the process the operator started (not again from each ``--workers`` child).
- ``AGENT_MAX_MESSAGE_CHARS`` was named by the OpenAPI description but read by nothing:
  it is a setting now, on every face.
- ``AGENT_LOG_LEVEL=verbose`` said ``Unknown level: 'VERBOSE'``: the line names the
  variable and the values it takes.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx
import pytest

from app.config import ConfigError, Settings, known_variables
from tests.conftest import running_app
from tests.support.procs import OFFLINE_SERVE_ENV, AgentServer, child_env, run_cli
from tests.support.server import free_port

BAD_URLS = {
    "AGENT_BACKEND_URL": ["http://", "ftp://x", "localhost:8080", "http://:8080", "http://h:port", "http://a b"],
    "OLLAMA_HOST": ["http://", "https://:11434"],
    "OPENAI_BASE_URL": ["http://"],
    "PERPLEXITY_BASE_URL": ["mailto:x@y"],
    "GEMINI_BASE_URL": ["//no-scheme"],
    "AGENT_JWT_JWKS_URL": ["http://"],
}


def base_env(tmp_path: Path, **env: str) -> dict[str, str]:
    return {"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), **OFFLINE_SERVE_ENV, **env}


@pytest.mark.parametrize(("name", "value"), [(n, v) for n, values in BAD_URLS.items() for v in values])
def test_a_url_setting_must_be_an_http_url_with_a_host(tmp_path: Path, name: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(base_env(tmp_path, **{name: value}))
    [line] = [ln for ln in str(caught.value).splitlines() if name in ln]
    assert f"{name} must be an http(s) URL with a host" in line, line


def test_good_urls_pass_and_a_password_is_not_echoed(tmp_path: Path) -> None:
    s = Settings.from_env(base_env(
        tmp_path, AGENT_BACKEND_URL="https://backend.example:8443/api/", OLLAMA_HOST="localhost:11434",
        OPENAI_BASE_URL="http://[::1]:8080/v1", AGENT_JWT_JWKS_URL="https://idp.example/.well-known/jwks.json",
    ))
    assert s.backend_url == "https://backend.example:8443/api" and s.ollama_host == "http://localhost:11434"
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(base_env(tmp_path, AGENT_BACKEND_URL="http://user:pa55word@:80"))
    assert "pa55word" not in str(caught.value) and "http://***@:80" in str(caught.value)


@pytest.mark.parametrize("url", [
    "http://admin:s3cr@tp4ss@backend:80x/api",    # a raw '@' in the password, a bad port
    "http://admin:s3cr/tp4ss@backend:8080/api",   # a raw '/': urlsplit reads 's3cr' as the port
    "http://admin:s3cr#tp4ss@backend:8080/api",   # a raw '#': the same
    "http://admin:s3cr:tp4ss@backend:80x/api",    # a ':' in the password
    "http://admin:s3cr/t:p4ss@[::1/api",          # and a host that does not parse
    "http://admin:s3cr@tp4ss@[::1:8080/api",      # a "[" the host never closes
])
def test_no_part_of_a_password_is_in_the_bad_url_line(tmp_path: Path, url: str) -> None:
    """Review 39: the line masked up to the first '@' only and not across '/', and quoted
    urlsplit's own words, which hold the port as written ('s3cr' above)."""
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(base_env(tmp_path, AGENT_BACKEND_URL=url))
    [line] = [ln for ln in str(caught.value).splitlines() if "AGENT_BACKEND_URL" in ln]
    assert "s3cr" not in line and "p4ss" not in line and "admin" not in line, line
    assert line.endswith("'http://***@" + url.rpartition("@")[2] + "'"), line
    if "8080/api" in url and "[" not in url:
        assert "(the port is not a number; a '/', '?', '#' or '@' in a user name or password must be " \
            "percent-encoded" in line, line


def test_an_mcp_server_url_goes_through_the_same_check(tmp_path: Path) -> None:
    servers = tmp_path / "servers.toml"
    servers.write_text('[servers.a]\nurl = "http://"\n\n[servers.b]\nurl = "https://mcp.example/mcp"\n')
    with pytest.raises(ConfigError) as caught:
        Settings.from_env(base_env(tmp_path, AGENT_MCP_SERVERS=str(servers)))
    assert "'a': an HTTP server needs an http(s) url with a host (it names no host)" in str(caught.value)
    assert "'b'" not in str(caught.value)


async def test_serve_refuses_a_bad_url_and_a_bad_log_level_in_one_line_each(tmp_path: Path) -> None:
    args = ["serve", "--host", "127.0.0.1", "--port", str(free_port()), "--no-backend"]
    rc, out = await run_cli(args, child_env(base_env(tmp_path, AGENT_BACKEND_URL="http://", AGENT_LOG_FORMAT="text")))
    assert rc == 2, out
    said = [line for line in out.splitlines() if "AGENT_BACKEND_URL" in line]
    assert said == ["  - AGENT_BACKEND_URL must be an http(s) URL with a host, such as http://localhost:8080 "
                    "(it names no host); got 'http://'"], out
    assert "Traceback" not in out and "serving on" not in out

    rc, out = await run_cli(args, child_env(base_env(tmp_path, AGENT_LOG_LEVEL="verbose")))
    assert rc == 2, out
    assert out.strip() == (
        "agentchat: AGENT_LOG_LEVEL must be one of debug, info, warning, error, critical; got 'verbose'"
    ), out


def test_known_variables_are_the_settings_own_table() -> None:
    """Every variable the configuration reference lists (generated from the settings) is
    known, and so is every one docs/config_docs.py finds read outside the settings."""
    import importlib.util
    import inspect
    import sys

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("config_docs_known", root / "docs" / "config_docs.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen
    spec.loader.exec_module(gen)
    module = gen.settings_module()
    documented = {v.name for v in gen.settings_variables(module)}
    elsewhere = {v.name for v in gen.other_variables(Path(inspect.getfile(module)))}
    known = known_variables()
    assert documented | elsewhere <= known, sorted((documented | elsewhere) - known)
    on_page = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", (root / "docs" / "configuration.md").read_text(), re.M))
    assert {n for n in on_page if n.startswith("AGENT_")} <= known


async def test_max_message_chars_is_a_setting_on_every_face(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="AGENT_MAX_MESSAGE_CHARS must be between 1 and 10000000"):
        Settings.from_env(base_env(tmp_path, AGENT_MAX_MESSAGE_CHARS="0"))
    settings = Settings.from_env(base_env(tmp_path, AGENT_MAX_MESSAGE_CHARS="10"))
    long = "x" * 11
    async with running_app(settings) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as http:
        native = await http.post("/v1/agent/runs", json={"message": long, "context_type": "knowledge"})
        openai = await http.post("/v1/chat/completions", json={
            "model": "agentchat-knowledge", "messages": [{"role": "user", "content": long}]})
        ui = await http.post("/v1/agent/ui-stream", json={
            "id": "c-long", "context_type": "knowledge",
            "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": long}]}]})
        fits = await http.post("/v1/agent/runs", json={"message": "x" * 10, "context_type": "knowledge"})
        described = (await http.get("/openapi.json")).json()
    assert native.status_code == 400 and native.json()["detail"] == "message is longer than 10 characters"
    assert native.json()["error"] == "invalid_field"  # the native face's code for a field's value
    assert openai.status_code == 400 and "longer than 10 characters" in openai.json()["error"]["message"]
    # OpenAI's own code and param for a string past its limit, which its clients tell apart.
    said = openai.json()["error"]
    assert (said["type"], said["code"], said["param"]) == (
        "invalid_request_error", "string_above_max_length", "messages[0].content"), said
    assert ui.status_code == 400 and "longer than 10 characters" in ui.json()["detail"], ui.text
    assert fits.status_code == 201, fits.text
    assert described["components"]["schemas"]["ChatRequest"]["properties"]["message"]["maxLength"] == 10


async def _warnings_of(server: AgentServer) -> list[str]:
    """The WARNING lines (text format) of ``server``'s start, once it answers."""
    await server.wait_healthy(timeout=90)
    server.send(signal.SIGTERM)
    assert await server.wait_exit(60) is not None, server.tail()
    return [line for line in server.lines() if " WARNING " in line]


def _serve(tmp_path: Path, name: str, host: str, **env: str) -> AgentServer:
    full = base_env(tmp_path / name, AGENT_LOG_FORMAT="text", **env)
    (tmp_path / name).mkdir()
    server = AgentServer(tmp_path / name, full, name=name)
    server.argv[server.argv.index("--host") + 1] = host
    return server


async def test_serve_warns_of_a_variable_nothing_reads_and_of_no_auth_off_loopback(tmp_path: Path) -> None:
    open_server = _serve(tmp_path, "open", "0.0.0.0", AGENT_AUTHH="jwt", AGENT_FRBNIZ="1")
    workers = _serve(tmp_path, "workers", "127.0.0.1", AGENT_AUTHH="jwt", AGENT_WORKERS="2")
    try:
        open_server.start()
        opened = await _warnings_of(open_server)
        workers.start()
        local = await _warnings_of(workers)
    finally:
        open_server.close()
        workers.close()

    def about(lines: list[str], text: str) -> list[str]:
        return [line.split(" WARNING ", 1)[1].rstrip() for line in lines if text in line]

    assert about(opened, "AGENT_AUTHH") == [
        "agentchat.cli: AGENT_AUTHH is not a setting: nothing reads it, and it changes nothing; "
        "did you mean AGENT_AUTH?"
    ], opened
    assert about(opened, "AGENT_FRBNIZ") == [
        "agentchat.cli: AGENT_FRBNIZ is not a setting: nothing reads it, and it changes nothing"
    ], opened
    assert len(about(opened, "AGENT_AUTH=none on 0.0.0.0")) == 1, opened
    # Its advice - loopback behind a proxy - names the Host guard that proxy meets there.
    assert "forwards in AGENT_ALLOWED_HOSTS" in about(opened, "AGENT_AUTH=none on 0.0.0.0")[0], opened
    # Two workers, one supervisor: said once; on loopback no word about auth.
    assert len(about(local, "AGENT_AUTHH is not a setting")) == 1, local
    assert about(local, "AGENT_AUTH=none") == [], local


async def test_an_agent_variable_the_mcp_file_reads_is_not_warned_of(tmp_path: Path) -> None:
    """Review 39: ``headers = { Authorization = "Bearer ${AGENT_TICKETS_TOKEN}" }`` in the
    MCP servers file reads that variable; it was warned of as one nothing reads. A
    variable the file names only in a disabled server is not read, and still said."""
    servers = tmp_path / "mcp.toml"
    servers.write_text(
        '[servers.tickets]\nurl = "http://127.0.0.1:9/mcp"\n'
        'headers = { Authorization = "Bearer ${AGENT_TICKETS_TOKEN}" }\n'
        'contexts = ["knowledge"]\n\n'
        '[servers.off]\nurl = "http://127.0.0.1:9/${AGENT_OFF_PATH}"\nenabled = false\n'
    )
    server = _serve(tmp_path, "mcp", "127.0.0.1", AGENT_MCP_SERVERS=str(servers), AGENT_TICKETS_TOKEN="s3cret-42",
                    AGENT_OFF_PATH="x", AGENT_FRBNIZ="1")
    try:
        server.start()
        said = await _warnings_of(server)
    finally:
        server.close()
    assert not [line for line in said if "AGENT_TICKETS_TOKEN" in line], said
    assert [line for line in said if "AGENT_FRBNIZ is not a setting" in line], said
    assert [line for line in said if "AGENT_OFF_PATH is not a setting" in line], said
    assert not [line for line in server.lines() if "s3cret-42" in line]
    settings = Settings.from_env(base_env(tmp_path, AGENT_MCP_SERVERS=str(servers), AGENT_TICKETS_TOKEN="t",
                                          AGENT_OFF_PATH="x"))
    assert settings.mcp_servers[0].variables == ("AGENT_TICKETS_TOKEN",)
    assert "AGENT_TICKETS_TOKEN" in known_variables(settings) and "AGENT_TICKETS_TOKEN" not in known_variables()
