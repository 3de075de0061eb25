"""Generate docs/configuration.md from the settings in code.

    python docs/config_docs.py           # rewrite docs/configuration.md
    python docs/config_docs.py --check   # exit 1 when the committed page is out of date

What comes from the code: every environment variable ``Settings.from_env`` reads (found by
running it with a reader that records each call: variable, reader kind, default, bounds,
allowed values), in the order it reads them, plus the variables other product modules read
themselves (``environ.get("NAME")``). What comes from ``configuration_notes.toml`` beside this
file: the meaning of each variable, its group on the page, and a readable default where the
code's is ``None``. A variable with no note falls back to the ``#:`` comment above its
settings field; a variable with neither, or a note naming a variable nothing reads, is an
error — so adding a setting without describing it and regenerating fails
``tests/test_config_docs.py``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import sys
import tomllib
import types
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
PAGE = DOCS / "configuration.md"
NOTES = DOCS / "configuration_notes.toml"
PRODUCT = ("events", "client", "app", "llm", "toolindex", "storage", "agenttools", "knowledge", "prompts", "backend")


@dataclass
class Variable:
    name: str
    kind: str                      # the reader method: text, integer, number, boolean, choice, …
    default: Any = None
    lo: Any = None
    hi: Any = None
    allowed: tuple[str, ...] = ()
    field: str | None = None       # the Settings field it fills, when there is one
    where: str = "Settings.from_env"


def settings_module() -> types.ModuleType:
    """The module defining ``Settings`` with ``from_env``: ``app.config``, else wherever under
    ``app`` it has moved (modules whose name mentions config or settings are tried first)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        module = importlib.import_module("app.config")
        if hasattr(getattr(module, "Settings", None), "from_env"):
            return module
    except ImportError:
        pass
    import app

    names = [m.name for m in pkgutil.walk_packages(app.__path__, "app.")]
    names.sort(key=lambda n: (not re.search(r"config|settings", n.rsplit(".", 1)[-1]), n))
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception:  # a module that does not import is not the one
            continue
        settings = getattr(module, "Settings", None)
        if settings is not None and getattr(settings, "__module__", None) == name and hasattr(settings, "from_env"):
            return module
    raise RuntimeError("no Settings class with from_env found under app/")


class _Quiet(list):
    def append(self, item: Any) -> None:  # the probes are not valid values; nothing to report
        pass


def _recording_reader(base: type, calls: list[Variable], probe: bool) -> type:
    """A subclass of the settings reader whose public methods record their arguments; with
    ``probe`` they return a marker string naming the variable instead of a value."""

    def wrap(method_name: str, method: Any) -> Any:
        signature = inspect.signature(method)

        def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            name = a.get("name")
            if name is not None:
                calls.append(Variable(name, method_name, a.get("default"), a.get("lo"), a.get("hi"),
                                      tuple(a.get("allowed") or ())))
            if probe and name is not None:
                return f"@probe:{name}"
            return method(self, *args, **kwargs)

        return recorded

    namespace = {n: wrap(n, m) for n, m in vars(base).items() if not n.startswith("_") and callable(m)}
    cls = type("RecordingReader", (base,), namespace)
    if probe:
        original_init = base.__init__

        def init(self: Any, env: Any) -> None:
            original_init(self, env)
            self.problems = _Quiet()

        cls.__init__ = init  # type: ignore[misc]
    return cls


def _run_from_env(module: types.ModuleType, reader: type) -> Any:
    """``Settings.from_env({})`` with ``reader`` in place of the module's own, on a copy of its
    globals (the module itself is left untouched)."""
    settings = module.Settings
    func = settings.from_env.__func__
    reader_name = _reader_class(module).__name__
    copy = types.FunctionType(func.__code__, {**vars(module), reader_name: reader}, func.__name__,
                              func.__defaults__, func.__closure__)
    return copy(settings, {})


def _reader_class(module: types.ModuleType) -> type:
    func = module.Settings.from_env.__func__
    for n in func.__code__.co_names:
        obj = getattr(module, n, None)
        if isinstance(obj, type) and n.lstrip("_").lower().endswith("reader"):
            return obj
    raise RuntimeError("Settings.from_env reads through no *Reader class")


def field_comments(module: types.ModuleType) -> dict[str, str]:
    """The ``#:`` comment lines above each field of ``Settings``, joined: in its own body
    or in a base class's that holds its fields (``app.config_fields.SettingsFields``)."""
    classes = [c for c in module.Settings.__mro__ if c is not object]
    source = "\n".join(inspect.getsource(c) for c in reversed(classes))
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        match = re.match(r"(\w+)\s*:", stripped)
        if match and pending:
            comments[match.group(1)] = " ".join(pending)
        pending = []
    return comments


def settings_variables(module: types.ModuleType) -> list[Variable]:
    base = _reader_class(module)
    calls: list[Variable] = []
    _run_from_env(module, _recording_reader(base, calls, probe=False))
    probes: list[Variable] = []
    probed = _run_from_env(module, _recording_reader(base, probes, probe=True))
    owner: dict[str, str] = {}
    for f in fields(probed):
        value = getattr(probed, f.name)
        text = str(value) if not isinstance(value, tuple) else ",".join(map(str, value))
        for found in re.findall(r"@probe:(\w+)", text):
            owner.setdefault(found, f.name)
    seen: dict[str, Variable] = {}
    for var in calls:
        if var.name not in seen:
            var.field = owner.get(var.name)
            seen[var.name] = var
    return list(seen.values())


#: The prefixes of the variables the service reads.
_PREFIXES = r"(AGENT|OLLAMA|GEMINI|OPENAI|PERPLEXITY|OTEL)_"


def other_variables(settings_file: Path) -> list[Variable]:
    """Variables product modules read themselves: ``environ.get("X")`` / ``getenv("X")`` /
    ``env.get("X")`` with a literal upper-case name, outside the settings module. Only a
    file whose text opens a string with one of the prefixes is parsed (such a literal is
    written out in its file, a quote before it): parsing and walking all ~430 files was
    nearly all of a render's ~1.9 s."""
    found: dict[str, Variable] = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.resolve() == settings_file.resolve():
                continue
            text = path.read_text(encoding="utf-8")
            if not re.search("[\"']" + _PREFIXES, text):
                continue
            tree = ast.parse(text)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in {"get", "getenv"} and node.args
                        and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                        and re.fullmatch(_PREFIXES + r"[A-Z0-9_]+", node.args[0].value)):
                    target = ast.unparse(node.func.value)
                    if target.endswith(("environ", "env", "os")):
                        name = node.args[0].value
                        found.setdefault(name, Variable(name, "text", where=str(path.relative_to(ROOT))))
    return list(found.values())


def _literal(value: Any) -> str:
    if value is None or value == () or value == "":
        return "—"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, tuple):
        value = ",".join(map(str, value))
    return f"`{value}`"


def _bound(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}".replace(",", " ") if isinstance(value, int) and abs(value) >= 10_000 else str(value)


def accepted(var: Variable) -> str:
    if var.kind in {"choice", "subset"}:
        many = "comma-separated, among " if var.kind == "subset" else ""
        extra = " (`none`: no entry)" if var.kind == "subset" else ""
        return many + " \\| ".join(f"`{a}`" for a in var.allowed) + extra
    if var.kind in {"integer", "number"}:
        word = "integer" if var.kind == "integer" else "number"
        if var.lo is not None and var.hi is not None:
            return f"{word} {_bound(var.lo)}–{_bound(var.hi)}"
        if var.lo is not None:
            return f"{word} ≥ {_bound(var.lo)}"
        return word
    return {
        "boolean": "`true` \\| `false` (also 1/0, yes/no, on/off)",
        "url": "http(s) URL with a host",
        "optional_url": "http(s) URL with a host",
        "database_url": "`postgresql://` URL",
        "listing": "comma-separated list",
    }.get(var.kind, "text")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("\\\\|", "\\|")


def render() -> str:
    module = settings_module()
    settings_file = Path(inspect.getfile(module))
    notes = tomllib.loads(NOTES.read_text(encoding="utf-8"))
    described: dict[str, Any] = notes.get("variables", {})
    comments = field_comments(module)
    variables = settings_variables(module)
    known = {v.name for v in variables}
    variables += [v for v in other_variables(settings_file) if v.name not in known]
    problems: list[str] = []
    rows: dict[str, list[str]] = {}
    for var in variables:
        note = described.get(var.name, {})
        meaning = note.get("meaning") or (comments.get(var.field or "") if var.field else None)
        if not meaning:
            problems.append(f"{var.name} ({var.where}): no meaning — add it to {NOTES.name} or a #: comment")
            continue
        default = note.get("default") or _literal(var.default)
        group = note.get("group", "Other")
        rows.setdefault(group, []).append(
            f"| `{var.name}` | {_cell(default)} | {_cell(note.get('accepted') or accepted(var))} | {_cell(meaning)} |"
        )
    names = {v.name for v in variables}
    problems += [f"{NOTES.name}: {n} is read by nothing" for n in described if n not in names]
    if problems:
        raise SystemExit("configuration docs:\n  " + "\n  ".join(problems))
    module_name = module.__name__
    out = [
        "# Configuration",
        "",
        f"<!-- Generated by `python docs/config_docs.py` from `{module_name}.Settings.from_env` and",
        "     docs/configuration_notes.toml; edit those, not this page (tests/test_config_docs.py",
        "     fails when it is out of date). -->",
        "",
        notes.get("intro", "").strip(),
        "",
    ]
    groups = list(notes.get("groups", [])) + [g for g in rows if g not in notes.get("groups", [])]
    out += ["Contents: " + " · ".join(f"[{g}](#{_anchor(g)})" for g in groups if g in rows), ""]
    for group in groups:
        if group not in rows:
            continue
        out += [f"## {group}", "", "| variable | default | accepted | meaning |", "|---|---|---|---|"]
        out += rows[group]
        out.append("")
    outro = notes.get("outro", "").strip()
    if outro:
        out += [outro, ""]
    return "\n".join(out).rstrip() + "\n"


def _anchor(title: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", title.lower()).strip()
    return slug.replace(" ", "-")


def main(argv: list[str]) -> int:
    page = render()
    if "--check" in argv:
        if PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE} is out of date: run python docs/config_docs.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
