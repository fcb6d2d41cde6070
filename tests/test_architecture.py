"""The package's shape, checked from its source: no import cycle among its modules or among its parts, no module
too long to read in one sitting, and figures that need no chapter and no server.

An import is any `import` or `from ... import` statement naming a module of llmperf, wherever it stands: at a
module's top, inside a function (a lazy import is still a dependency; it hides a cycle, it does not end one) or
under `if TYPE_CHECKING:`. `from package import name` is an import of the module package.name where there is
one, else of the package. Two graphs are built from them:

- modules: llmperf.fast.fused -> llmperf.fast.numpy_step;
- parts: each module counted as the part of llmperf it belongs to (llmperf.chapters.serving.sweep as
  llmperf.chapters, llmperf.metrics as itself), so that two parts may not import each other even through
  different modules.

Nothing is imported or run: the source is parsed with `ast`.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "llmperf"
MAX_LINES = 330  # "about 300 lines at most" (shared/DESIGN.md), with a margin

# Modules allowed over MAX_LINES for now (none). A module here that is no longer too long fails the test, so that
# it leaves.
TOO_LONG_FOR_NOW: set[str] = set()


def module_name(path: Path) -> str:
    """llmperf/fast/fused.py -> "llmperf.fast.fused"; llmperf/fast/__init__.py -> "llmperf.fast"."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


def imported(name: str, path: Path, known) -> list[tuple[str, int]]:
    """(module, line) of every llmperf module that module `name` (at `path`) imports; `known`: every module's
    name."""
    found = []
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]  # what `.` means here
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "llmperf"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "llmperf":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in known else target, node.lineno))
    return [(target, line) for target, line in found if target in known and target != name]


def module_graph() -> dict[str, dict[str, str]]:
    """{module: {module it imports: where ("llmperf/x.py:12")}}."""
    known = modules()
    graph: dict[str, dict[str, str]] = {}
    for name, path in known.items():
        where = path.relative_to(PACKAGE.parent).as_posix()
        graph[name] = {}
        for target, line in imported(name, path, known):
            graph[name].setdefault(target, f"{where}:{line}")
    return graph


def part(name: str) -> str:
    """The part of llmperf a module belongs to: "llmperf.chapters.serving.sweep" -> "llmperf.chapters"."""
    return ".".join(name.split(".")[:2])


def part_graph(graph: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The module graph with each module counted as its part; an import inside a part is left out."""
    parts: dict[str, dict[str, str]] = {}
    for source, targets in graph.items():
        parts.setdefault(part(source), {})
        for target, where in targets.items():
            if part(target) != part(source):
                parts[part(source)].setdefault(part(target), where)
    return parts


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """One cycle [a, b, ..., a] through each strongly connected set of nodes of two or more (Tarjan's algorithm
    finds the sets; a breadth-first search from one member back to itself, the shortest cycle through it)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # recursion depth: the longest import chain, a few dozen
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(shortest_cycle(graph, min(members), set(members)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def shortest_cycle(graph, start: str, members: set[str]) -> list[str]:
    """The shortest path from `start` back to itself within `members`: [start, ..., start]."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph.get(node, {})):
            if nxt == start:
                path = [node]
                while came_from[path[-1]] is not None:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt in members and nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is in a cycle but no path leads back to it")


def described(cycle: list[str], graph) -> str:
    """A cycle as lines "a -> b   (file:line)"."""
    return "\n".join(f"  {a} -> {b}   ({graph[a][b]})" for a, b in zip(cycle, cycle[1:]))


def reachable(graph, start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen, queue = set(), deque([start])
    while queue:
        for nxt in graph.get(queue.popleft(), {}):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def test_no_module_imports_itself_through_others():
    graph = module_graph()
    found = cycles(graph)
    assert not found, "Import cycles among llmperf's modules:\n" + "\n\n".join(described(c, graph) for c in found)


def test_no_part_of_the_package_imports_itself_through_others():
    graph = part_graph(module_graph())
    found = cycles(graph)
    assert not found, ("Import cycles among llmperf's parts (each subpackage counted as one; the line shown is "
                       "one import of each step):\n" + "\n\n".join(described(c, graph) for c in found))


def test_the_figures_import_no_chapter_and_no_server():
    """The figures draw records given to them: they need neither the experiments that made them nor a server."""
    graph = module_graph()
    banned = {"llmperf.chapters", "llmperf.reference", "llmperf.serve", "llmperf.engine", "llmperf.scheduler"}
    for name in graph:
        if part(name) == "llmperf.plots":
            bad = sorted(m for m in reachable(graph, name) if part(m) in banned)
            assert not bad, f"{name} imports, directly or through others: {', '.join(bad)}"


def test_no_module_is_too_long_to_read_in_one_sitting():
    lengths = {path.relative_to(PACKAGE.parent).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
               for path in modules().values()}
    over = {name: n for name, n in sorted(lengths.items()) if n > MAX_LINES and name not in TOO_LONG_FOR_NOW}
    assert not over, (f"Modules over {MAX_LINES} lines (split a concept that outgrows one file):\n"
                      + "\n".join(f"  {name}: {n} lines" for name, n in over.items()))
    done = sorted(name for name in TOO_LONG_FOR_NOW if lengths.get(name, 0) <= MAX_LINES)
    assert not done, f"No longer over {MAX_LINES} lines (or gone): remove from TOO_LONG_FOR_NOW: {', '.join(done)}"


def test_the_checks_see_a_cycle_and_name_its_imports():
    graph = {"a": {"b": "a.py:1"}, "b": {"c": "b.py:2"}, "c": {"a": "c.py:3", "d": "c.py:4"}, "d": {}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert described(["a", "b", "c", "a"], graph).splitlines()[-1] == "  c -> a   (c.py:3)"
    assert cycles({"a": {"b": ""}, "b": {}}) == []
    assert part("llmperf.chapters.serving.sweep") == "llmperf.chapters" and part("llmperf") == "llmperf"
