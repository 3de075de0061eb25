"""The import table of docs/ARCHITECTURE.md, enforced: each room imports only the rooms its
"may import" column names, and no two files import each other, directly or round a loop.

Every ``import`` counts — module level, inside functions and under ``TYPE_CHECKING`` — since
each is a dependency a reader has to follow. The table is parsed from the Markdown, so
changing the rules means changing the document. The second table, inside ``app/`` and
``agenttools/``, is enforced the same way: each module belongs to one row, imports only the
rows its row names, and the rows' graph has no cycles.
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



def test_agenttools_takes_from_backend_only_the_package_the_table_names() -> None:
    """``agenttools`` may import ``backend`` for one package (the table rules both run):
    the agent must not grow a dependency on the reference backend's app."""
    rule = next(line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| `agenttools/` "))
    named = re.search(r"`backend` \(only `([A-Za-z0-9_/]+)/`", rule)
    assert named, "the agenttools row of docs/ARCHITECTURE.md no longer names its one backend package"
    allowed = named.group(1).replace("/", ".")
    package = ROOT / named.group(1)
    assert (package / "__init__.py").is_file(), f"{allowed} is not a package"
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in python_files("agenttools")
        for line, target, _name in imported_modules(path)
        if target.split(".")[0] == "backend" and target != allowed and not target.startswith(allowed + ".")
    ]
    assert not bad, f"agenttools may import only {allowed} from backend:\n" + "\n".join(bad)
    ours = [
        f"{path.relative_to(ROOT)} imports {target}"
        for path in sorted(package.glob("*.py"))
        for _, target, _ in imported_modules(path)
        if target.split(".")[0] in ROOMS and target != allowed and not target.startswith(allowed + ".")
    ]
    assert not ours, f"{allowed} must import nothing of ours outside itself (the agent loads it): {ours}"

# --- inside app/ and agenttools/: the rooms of the second table --------------------------------

INNER_HEADER = ["inside", "room", "may import"]
INNER_PATH = re.compile(r"`((?:[A-Za-z_][A-Za-z0-9_]*/)+(?:[A-Za-z_][A-Za-z0-9_]*\.py)?)`")


@dataclass(frozen=True)
class InnerRoom:
    paths: tuple[str, ...]  # folders end in "/", modules in ".py"
    may_import: tuple[str, ...]  # paths naming other rows
    everything: bool  # "everything in <package>"

    @property
    def name(self) -> str:
        return self.paths[0]

    @property
    def package(self) -> str:
        return self.paths[0].split("/")[0]


def read_inner_table(text: str) -> list[InnerRoom]:
    lines = text.splitlines()
    start = next(
        i for i, line in enumerate(lines) if [c.strip() for c in line.strip().strip("|").split("|")] == INNER_HEADER
    )
    rows: list[InnerRoom] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rule = cells[-1]
        rows.append(
            InnerRoom(
                tuple(INNER_PATH.findall(cells[0])),
                tuple(INNER_PATH.findall(rule)),
                rule.startswith("everything"),
            )
        )
    return rows


INNER = read_inner_table(DOC.read_text(encoding="utf-8"))


def inner_room_of(rel: str) -> InnerRoom | None:
    """The row holding the file ``rel`` (a path relative to the repository): the row naming
    the file itself, else the one naming its deepest folder."""
    best: tuple[int, InnerRoom] | None = None
    for room in INNER:
        for path in room.paths:
            if path == rel:
                return room
            if path.endswith("/") and rel.startswith(path) and (best is None or len(path) > best[0]):
                best = (len(path), room)
    return best[1] if best else None


def inner_allowed(room: InnerRoom) -> set[str]:
    if room.everything:
        return {r.name for r in INNER if r.package == room.package}
    named = set()
    for path in room.may_import:
        target = next((r for r in INNER if path in r.paths), None)
        assert target is not None, f"{room.name}: {path} is not a row of the table"
        named.add(target.name)
    return named | {room.name}


def module_file(module: str) -> str | None:
    """``a.b.c`` → ``a/b/c.py`` or ``a/b/c/__init__.py``, relative, if it exists."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return str(path.relative_to(ROOT))
    return None


def test_the_inner_table_places_every_module_once() -> None:
    assert {r.package for r in INNER} == {"app", "agenttools"}
    unplaced = [
        str(path.relative_to(ROOT))
        for package in ("app", "agenttools")
        for path in python_files(package)
        if path.parent != ROOT / package or path.name != "__init__.py"
        if inner_room_of(str(path.relative_to(ROOT))) is None
    ]
    assert not unplaced, f"modules no row of the inner table in docs/ARCHITECTURE.md holds: {unplaced}"
    listed = [p for r in INNER for p in r.paths]
    assert len(listed) == len(set(listed)), "a path is listed in two rows"
    missing = [p for p in listed if not (ROOT / p).exists()]
    assert not missing, f"rows name paths that do not exist: {missing}"


def test_inner_rooms_import_only_what_the_table_allows() -> None:
    bad: list[str] = []
    for package in ("app", "agenttools"):
        for path in python_files(package):
            rel = str(path.relative_to(ROOT))
            room = inner_room_of(rel)
            if room is None:
                continue  # the package's own __init__
            allowed = inner_allowed(room)
            for line, target, name in imported_modules(path):
                if target.split(".")[0] != package:
                    continue
                target_file = (name and module_file(f"{target}.{name}")) or module_file(target)
                other = inner_room_of(target_file) if target_file else None
                if other is not None and other.name not in allowed:
                    shown = f"{target}.{name}" if name and module_file(f"{target}.{name}") else target
                    bad.append(f"{rel}:{line} imports {shown} ({other.name}; "
                               f"{room.name} may import: {', '.join(sorted(allowed - {room.name})) or 'nothing'})")
    assert not bad, "imports the inner table in docs/ARCHITECTURE.md does not allow:\n" + "\n".join(bad)


def test_the_inner_rooms_have_no_cycles() -> None:
    graph = {room.name: inner_allowed(room) - {room.name} for room in INNER}
    found = cycles(graph)
    assert not found, "the inner table allows cycles between rooms:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_only_the_composition_imports_the_server() -> None:
    importers = {r.name for r in INNER if "app/server/" in inner_allowed(r)} - {"app/server/"}
    assert importers == {"app/wiring.py"}, importers
