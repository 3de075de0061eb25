"""docs/configuration.md is generated from the settings in code (docs/config_docs.py): a
setting added, removed or changed without regenerating the page fails here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("config_docs", ROOT / "docs" / "config_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_configuration_page_is_up_to_date() -> None:
    generated = _generator().render()
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == generated, "docs/configuration.md is out of date: run python docs/config_docs.py"


def test_every_variable_the_settings_read_is_on_the_page() -> None:
    gen = _generator()
    module = gen.settings_module()
    names = {v.name for v in gen.settings_variables(module)}
    assert {"AGENT_LLM_PROVIDER", "AGENT_DATABASE_URL", "AGENT_MCP_SERVERS", "OTEL_EXPORTER_OTLP_ENDPOINT"} <= names
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name in names | {"AGENT_LOG_FORMAT", "AGENT_LOG_LEVEL"}:
        assert f"| `{name}` |" in page, name


def test_defaults_on_the_page_are_the_code_defaults() -> None:
    gen = _generator()
    variables = {v.name: v for v in gen.settings_variables(gen.settings_module())}
    assert variables["AGENT_MAX_RUNS_PER_USER"].default == gen.settings_module().Settings().max_runs_per_user
    assert variables["AGENT_MAX_RUNS_PER_USER"].field == "max_runs_per_user"
    assert variables["AGENT_RUN_LEASE_S"].lo == 0.5


def test_an_undescribed_setting_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _generator()
    real = gen.settings_variables

    def with_new(module):
        return [*real(module), gen.Variable("AGENT_SOMETHING_NEW", "integer", 3, field="something_new")]

    monkeypatch.setattr(gen, "settings_variables", with_new)
    with pytest.raises(SystemExit, match="AGENT_SOMETHING_NEW"):
        gen.render()
