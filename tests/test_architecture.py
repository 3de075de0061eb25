"""The import table of docs/ARCHITECTURE.md, enforced: each room imports only the rooms its
"may import" column names, and no two files import each other, directly or round a loop.

Every ``import`` counts — module level, inside functions and under ``TYPE_CHECKING`` — since
each is a dependency a reader has to follow. The table is parsed from the Markdown, so
changing the rules means changing the document.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
# Rooms whose files may import anything; they are still read so a product file importing
# them (production code importing tests) is caught.
FREE_ROOMS_HINT = "anything"


@dataclass(frozen=True)
class Room:
    name: str
    may_import: frozenset[str]
    free: bool  # "anything"


def read_table(text: str) -> dict[str, Room]:
    """Rooms from the ``| folder | room | may import |`` table, in document order."""
    lines = text.splitlines()
    start = next(
        i
        for i, line in enumerate(lines)
        if [c.strip() for c in line.strip().strip("|").split("|")] == ["folder", "room", "may import"]
    )
    rooms: dict[str, Room] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        folders = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)/`", cells[0])
        rule = cells[-1]
        free = rule.startswith(FREE_ROOMS_HINT)
        if rule.startswith("everything above"):
            allowed = frozenset(rooms)
        elif free or rule.startswith("nothing"):
            allowed = frozenset()
        else:
            allowed = frozenset(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", rule))
        for folder in folders:
            rooms[folder] = Room(folder, allowed, free)
    return rooms


ROOMS = read_table(DOC.read_text(encoding="utf-8"))
PRODUCT = [name for name, room in ROOMS.items() if not room.free]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(room: str) -> Iterator[Path]:
    for path in sorted((ROOT / room).rglob("*.py")):
        if not any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(ROOT).parts):
            yield path


def imported_modules(path: Path) -> Iterator[tuple[int, str, str | None]]:
    """(line, dotted module, imported name) for every import in ``path``, relative imports
    made absolute; the name is None for ``import a.b`` (for ``from a import b``, ``b`` may
    be a submodule or a name defined in ``a``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                yield node.lineno, target, alias.name


def test_the_table_names_every_top_level_package() -> None:
    assert PRODUCT, "no rooms parsed from docs/ARCHITECTURE.md"
    assert ROOMS["llm"].may_import == frozenset() and ROOMS["app"].may_import >= {"llm", "storage", "knowledge"}
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    missing = sorted(packages - set(ROOMS))
    assert not missing, f"top-level packages missing from the import table in docs/ARCHITECTURE.md: {missing}"


def test_rooms_import_only_what_the_table_allows() -> None:
    ours = set(ROOMS)
    bad: list[str] = []
    for name in PRODUCT:
        allowed = ROOMS[name].may_import | {name}
        for path in python_files(name):
            seen: set[tuple[int, str]] = set()
            for line, target, _ in imported_modules(path):
                top = target.split(".")[0]
                if top in ours and top not in allowed and (line, top) not in seen:
                    seen.add((line, top))
                    bad.append(
                        f"{path.relative_to(ROOT)}:{line} imports {top} ({name}/ may import: "
                        f"{', '.join(sorted(ROOMS[name].may_import)) or 'nothing of ours'})"
                    )
    assert not bad, "imports the table in docs/ARCHITECTURE.md does not allow:\n" + "\n".join(bad)


def import_graph() -> dict[str, set[str]]:
    """Product module -> the product modules it imports (a package means its ``__init__``)."""
    files = {module_name(p): p for name in PRODUCT for p in python_files(name)}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        edges: set[str] = set()
        for _, target, name in imported_modules(path):
            if name is not None and f"{target}.{name}" in files:
                target = f"{target}.{name}"  # ``from pkg import submodule``
            if target in files and target != mod:
                edges.add(target)
        graph[mod] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_between_files() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
