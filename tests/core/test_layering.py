"""No import circles in megatron_overlay: no module imports, directly or through others, a
module that imports it back.

Read from the source with ``ast``, never imported (ops/ needs Triton, processors/ torch),
so this runs without megatron or a GPU. Every import counts, a function-level one too: a
lazy import still runs, just later. So does a ``"megatron_overlay.x:attr"`` string (the
processors' table of built-ins), which is imported on first use of its name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "megatron_overlay"
TARGET_STRING = re.compile(r"^(megatron_overlay(?:\.\w+)+):\w+$")


def _modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its file.

    ``from X import a`` imports X.a when that is a module, else X itself; a parent
    package that Python imports on the way is not counted (it is already being imported
    whenever one of its modules is)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            if node.level == 0:
                base = node.module
            elif node.module:
                base = f"{base}.{node.module}"
            targets |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                        for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = TARGET_STRING.match(node.value)
            if match:
                targets.add(match.group(1))
    return {t for t in targets if t in modules and t != name}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import path around each strongly connected group of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_path_around(graph, group) for group in groups]


def _path_around(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """start -> ... -> start within ``group`` (breadth first: a shortest one)."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & group):
            if nxt == start:
                return paths[node] + [start]
            if nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")


def test_the_walker_sees_every_kind_of_import():
    graph = import_graph()
    assert "megatron_overlay.patching.core" in graph["megatron_overlay.patching"]  # from .core
    assert "megatron_overlay.patching" in graph["megatron_overlay.cli"]  # from . import patching
    assert "megatron_overlay.patching" in graph["megatron_overlay.probe"]  # in a function
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_module_imports_itself_back():
    found = cycles(import_graph())
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


# Who may import whom (docs/ARCHITECTURE.md): the longest matching prefix of a module's name
# decides; a module may always import its own package's modules. A call flows down the
# floors patching -> hook contract -> processors -> ops -> kernels, imports never flow up.
P = "megatron_overlay"
MAY_IMPORT = {
    f"{P}.patching": {f"{P}.patching"},
    f"{P}.hook": set(),
    f"{P}.utils": {f"{P}.utils"},
    f"{P}.model_builder": set(),
    f"{P}.probe": {f"{P}.hook", f"{P}.patching", f"{P}.processors"},
    f"{P}.processors": {f"{P}.processors", f"{P}.hook", f"{P}.ops"},
    f"{P}.ops": {f"{P}.ops"},
    # the kernels share four leaves with the torch implementation, nothing else above them
    f"{P}.ops.kernels": {f"{P}.ops.kernels", f"{P}.ops.batch_invariance",
                         f"{P}.ops.topk_merge", f"{P}.ops.row_flags", f"{P}.ops.temperature"},
    f"{P}.ops.batch_invariance": {f"{P}.ops.env_flags"},
    f"{P}.ops.topk_merge": set(),
    f"{P}.ops.row_flags": set(),
    f"{P}.ops.temperature": set(),
    f"{P}.ops.env_flags": set(),
}


def _rule(module: str) -> set[str] | None:
    """What ``module`` may import (None: an application, e.g. the CLI: anything)."""
    matches = [prefix for prefix in MAY_IMPORT
               if module == prefix or module.startswith(prefix + ".")]
    return MAY_IMPORT[max(matches, key=len)] if matches else None


def _allowed(target: str, allowed: set[str]) -> bool:
    return any(target == prefix or target.startswith(prefix + ".") for prefix in allowed)


def test_no_floor_imports_one_above_it():
    wrong = [f"{module} imports {target}"
             for module, targets in sorted(import_graph().items())
             if (allowed := _rule(module)) is not None
             for target in sorted(targets) if not _allowed(target, allowed)]
    assert not wrong, "imports against docs/ARCHITECTURE.md's floors:\n" + "\n".join(wrong)


def test_the_floor_rules_catch_an_upward_import():
    assert not _allowed(f"{P}.processors.registry", _rule(f"{P}.ops.linear_logprob"))
    assert not _allowed(f"{P}.ops.stages", _rule(f"{P}.ops.kernels.triton_impl"))
    assert _allowed(f"{P}.ops.kernels.triton_impl", _rule(f"{P}.ops.stages"))
    assert _rule(f"{P}.cli") is None


def test_nothing_outside_tests_imports_from_them():
    """The package, tools/ and examples/ stand on their own: tests may import them, never
    the other way round."""
    root = PACKAGE_DIR.parent
    offenders = []
    for folder in ("megatron_overlay", "tools", "examples"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom) and
                         node.level == 0 else [])
                offenders += [f"{path.relative_to(root)}: {n}" for n in names
                              if n == "tests" or n.startswith("tests.")]
    assert not offenders, offenders
