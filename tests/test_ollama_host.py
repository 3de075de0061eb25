"""``OLLAMA_HOST`` is read as Ollama reads it (review 39): a host with no port is port
11434, not a URL's 80. ``OLLAMA_HOST=127.0.0.1`` (or ``0.0.0.0``, or ``ollama``, the
forms an operator sets for ``ollama serve``) called ``http://127.0.0.1:80``, found no
Ollama and fell silently to the offline answerer; ``:11434`` and a bare ``::1`` were
refused with a confusing line. One rule (``toolindex.ollama_host.normalise_host``) for the
settings, the embedder and the probe, and it is the ``ollama`` client's own
(``ollama._client._parse_host``) wherever that client accepts the value."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from ollama._client import _parse_host

from app.config import ConfigError, Settings
from tests.conftest import running_app
from tests.fakes import FakeOllama, Text, running_fake
from tests.support.deadline import within
from toolindex.ollama_host import normalise_host

READ_AS = {
    "127.0.0.1": "http://127.0.0.1:11434",
    "0.0.0.0": "http://0.0.0.0:11434",
    "ollama": "http://ollama:11434",
    ":11434": "http://127.0.0.1:11434",
    ":8080": "http://127.0.0.1:8080",
    "localhost:11434/": "http://localhost:11434",
    "[::1]": "http://[::1]:11434",
    "[::1]:8080": "http://[::1]:8080",
    "::1": "http://[::1]:11434",  # a bare IPv6 address, as Ollama's CLI reads it
    "ollama.internal/prefix/": "http://ollama.internal:11434/prefix",
    "http://ollama": "http://ollama",  # a scheme keeps its own port (80), as Ollama's does
    "https://ollama.example.com/": "https://ollama.example.com",
}


@pytest.mark.parametrize(("value", "url"), READ_AS.items())
def test_ollama_host_is_read_as_ollama_reads_it(tmp_path: Path, value: str, url: str) -> None:
    settings = Settings.from_env({"OLLAMA_HOST": value, "AGENT_DB_PATH": str(tmp_path / "a.sqlite3")})
    assert settings.ollama_host == url
    assert normalise_host(url) == url  # the embedder and the probe read the settings' value unchanged
    if "://" not in value and value != "::1":  # the ollama client refuses a bare IPv6 address
        assert url == _parse_host(value).rstrip("/")


@pytest.mark.parametrize("value", ["ollama:port", "[::1", "localhost:99999"])
def test_a_host_that_is_none_is_refused_in_words(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"OLLAMA_HOST": value, "AGENT_DB_PATH": str(tmp_path / "a.sqlite3")})
    [line] = [ln for ln in str(caught.value).splitlines() if "OLLAMA_HOST" in ln]
    assert "OLLAMA_HOST must be an http(s) URL with a host" in line and "Port could not" not in line, line


async def test_a_port_alone_reaches_the_ollama_on_this_machine(tmp_path: Path) -> None:
    """``OLLAMA_HOST=:PORT`` (Ollama's form: this machine) finds the Ollama there: ``auto``
    chooses it and a chat streams its answer (before: refused at start)."""
    fake = FakeOllama(models=["qwen3:4b"])
    fake.add_turn([Text("answered by the Ollama on this machine")])
    async with running_fake(fake.app) as base_url:
        port = httpx.URL(base_url).port
        settings = Settings.from_env({
            "OLLAMA_HOST": f":{port}", "AGENT_LLM_PROVIDER": "auto", "AGENT_EMBEDDER": "none",
            "AGENT_INGEST_SAMPLE_KB": "false", "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_DB_PATH": str(tmp_path / "a.sqlite3"),
        })
        assert settings.ollama_host == f"http://127.0.0.1:{port}"
        async with running_app(settings) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as http:
            ready = await within(http.get("/readyz"), "readyz", 30)
            provider = ready.json()["checks"]["provider"]
            assert provider["name"] == "ollama", provider
            run = await http.post("/v1/agent/chat", json={"message": "hello", "context_type": "workflow"})
    assert run.status_code == 200 and "answered by the Ollama on this machine" in run.text, run.text
