"""``docker-compose.yml`` publishes the replicas' port (nginx, 8080): the settings it gives
them must be safe as they stand. It defaulted ``AGENT_AUTH`` to ``none`` (one demo user
for everyone, which docs/security.md says never to expose) and passed no
``AGENT_ADMIN_USERS`` (in jwt mode nobody could use the knowledge-base admin routes).
Here the agent's environment is resolved as compose resolves it (``${VAR:-default}``,
``${VAR:?message}``) from what an operator exports, and read by ``Settings.from_env``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config import ConfigError, Settings

COMPOSE = Path(__file__).resolve().parents[1] / "docker-compose.yml"
_VAR = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def agent_environment(exported: dict[str, str]) -> dict[str, str]:
    """The agent replicas' environment with ``exported`` in the shell, as compose makes it."""
    spec: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    env = spec["x-agent"]["environment"]

    def resolve(match: re.Match[str]) -> str:
        name, how, rest = match.group(1), match.group(2), match.group(3) or ""
        value = exported.get(name, "")
        if how == "?" and not value:
            raise ValueError(f"compose refuses to start: {rest}")
        return value if value or how != "-" else rest

    return {k: _VAR.sub(resolve, str(v).replace("$$", "$")) for k, v in env.items()}


def test_the_published_replicas_check_callers_by_default() -> None:
    env = agent_environment({"AGENT_SECRET_KEY": "k" * 44})
    assert env["AGENT_AUTH"] == "jwt"
    with pytest.raises(ConfigError, match="AGENT_AUTH=jwt needs AGENT_JWT_SECRET"):
        Settings.from_env(env)  # no way to check tokens: refused at start, in one line


def test_jwt_and_admin_users_reach_the_replicas() -> None:
    exported = {"AGENT_SECRET_KEY": "k" * 44, "AGENT_JWT_SECRET": "j" * 44, "AGENT_ADMIN_USERS": "alice,bob"}
    env = agent_environment(exported)
    settings = Settings.from_env(env)
    assert settings.auth == "jwt" and settings.jwt_secret == "j" * 44
    assert settings.admin_users == ("alice", "bob")


def test_a_demo_without_auth_is_asked_for_explicitly() -> None:
    env = agent_environment({"AGENT_SECRET_KEY": "k" * 44, "AGENT_AUTH": "none"})
    assert Settings.from_env(env).auth == "none"


def test_the_replicas_share_one_reference_backend() -> None:
    """An operator review: without AGENT_BACKEND_URL each replica started its own reference
    backend on its own volume, so a workflow drafted through one replica was unknown to
    the others. The replicas now name one `backend` service, which the compose file runs."""
    env = agent_environment({"AGENT_SECRET_KEY": "k" * 44, "AGENT_JWT_SECRET": "j" * 44})
    settings = Settings.from_env(env)
    assert settings.backend_url == "http://backend:8001"
    spec: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    backend = spec["services"]["backend"]
    assert backend["command"][:2] == ["agentchat", "backend"] and "8001" in backend["command"]
    for name in ("agent1", "agent2", "agent3"):
        assert spec["services"][name]["depends_on"]["backend"] == {"condition": "service_healthy"}
    real = agent_environment({"AGENT_SECRET_KEY": "k" * 44, "AGENT_BACKEND_URL": "https://ichor.example"})
    assert real["AGENT_BACKEND_URL"] == "https://ichor.example"


def test_postgres_has_room_for_a_parallel_graph_build() -> None:
    """A parallel HNSW build allocates its whole ``maintenance_work_mem`` (up to
    ``HNSW_BUILD_MEMORY_KB``) as one segment in ``/dev/shm``; Docker's 64 MB default failed
    every build on this compose file (``docs/knowledge-base.md``, "a build's memory")."""
    from storage.postgres.kb_graphs import HNSW_BUILD_MEMORY_KB

    spec: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    size = str(spec["services"]["postgres"].get("shm_size", "64m")).lower()
    m = re.fullmatch(r"(\d+)([kmg])b?", size)
    assert m, size
    kb = int(m.group(1)) * {"k": 1, "m": 1024, "g": 1024 * 1024}[m.group(2)]
    assert kb > HNSW_BUILD_MEMORY_KB, size


def test_postgres_keeps_the_vector_graphs_in_its_shared_buffers() -> None:
    """A vector search walks its bucket's HNSW graph through random pages (2,048 bytes a
    vector at 384 dimensions, ``docs/scaling.md``); with 64 MB of ``shared_buffers`` half
    the pages of a walk at 100k chunks (graphs of 196 MB) came from the OS and the search
    took about twice as long (``bench/results/corpus_pg_shared_buffers_ab_s43_100k.json``).
    PostgreSQL's own default is 128 MB; the compose file sets room for 250k vectors' graphs
    at least, and an operator can size it (``PG_SHARED_BUFFERS``)."""
    spec: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    command = [str(x) for x in spec["services"]["postgres"].get("command", [])]
    settings = [command[i + 1] for i, x in enumerate(command[:-1]) if x == "-c"]
    given = [s.split("=", 1)[1] for s in settings if s.startswith("shared_buffers=")]
    assert command[:1] == ["postgres"] and len(given) == 1, command
    default = _VAR.sub(lambda m: m.group(3) or "", given[0])
    m = re.fullmatch(r"(\d+)(kB|MB|GB)", default)
    assert m, default
    size = int(m.group(1)) * {"kB": 1024, "MB": 1024**2, "GB": 1024**3}[m.group(2)]
    assert size >= 250_000 * 2048, default
    override = _VAR.sub(lambda m: "4GB" if m.group(1) == "PG_SHARED_BUFFERS" else "", given[0])
    assert override == "4GB"
