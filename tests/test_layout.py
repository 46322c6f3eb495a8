"""The layout shows the architecture: no import cycles, and the maps of it stay true.

Every module of kernelexec is parsed (not imported) and its imports read:
module-level and function-level ones alike, since a function-level import
that closes a cycle is a cycle deferred, not removed. Only the imports under
``if TYPE_CHECKING:`` are left out: they never run.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "kernelexec"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement below ``node``, but those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                found.extend(_imports(ast.Module(body=[other], type_ignores=[])))
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            found.append(child)
        found.extend(_imports(child))
    return found


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """Each module of kernelexec under ``root``: the modules of kernelexec it imports, and where.

    ``from package import name`` is an edge to the submodule ``name`` when
    there is one, else to the package. Importing a submodule also runs its
    parent packages' ``__init__``; those implicit edges are not drawn (every
    module would then sit in a cycle with ``kernelexec/__init__.py``), so a
    package ``__init__`` that imports its own submodules is on its own
    honour: it can still close a cycle through what they import.
    """
    paths = {module_name(p, root): p for p in (root / "kernelexec").rglob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in paths else source
                    for alias in node.names
                ]
            for target in targets:
                if target in paths and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def loops(component: list[str], graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The shortest way round from each module of a component back to itself."""
    members, found = set(component), []
    for start in component:
        paths = {start: [start]}
        queue = [start]
        while queue:
            module = queue.pop(0)
            for target in sorted(graph[module]):
                if target == start:
                    loop = paths[module]
                    turn = loop.index(min(loop))  # one rotation per loop, to drop repeats
                    found.append(loop[turn:] + loop[:turn])
                    queue = []
                    break
                if target in members and target not in paths:
                    paths[target] = [*paths[module], target]
                    queue.append(target)
    return sorted({tuple(loop): loop for loop in found}.values())


def describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    """Each loop of a cycle as the imports that make it: ``a:LINE -> b:LINE -> a``."""
    lines = []
    for loop in loops(component, graph):
        steps = [f"{m}:{graph[m][n]}" for m, n in zip(loop, [*loop[1:], loop[0]], strict=True)]
        lines.append("  " + " -> ".join([*steps, loop[0]]))
    return "\n".join(lines)


def test_kernelexec_has_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the whole package was read
    found = cycles(graph)
    assert not found, "import cycles (break them; do not hide them in functions):\n" + "\n".join(
        describe(component, graph) for component in found
    )


def rooms(graph: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """The graph between the package's rooms: its subpackages and top-level modules."""

    def room(module: str) -> str:
        return ".".join(module.split(".")[:2])

    between: dict[str, dict[str, int]] = {room(m): {} for m in graph}
    for module, targets in graph.items():
        for target in targets:
            if room(target) != room(module):
                between[room(module)].setdefault(room(target), 0)
                between[room(module)][room(target)] += 1
    return between


def test_the_rooms_are_layered() -> None:
    # One room may use another, or be used by it, not both: _execution uses
    # _backends (a run drives a backend), so a backend takes nothing from
    # _execution (the message cap's default is _backends/_caps.py's).
    graph = rooms(import_graph())
    found = cycles(graph)
    assert not found, "rooms that import each other:\n" + "\n".join(
        f"  {room} -> {other} ({graph[room][other]} imports)"
        for component in found
        for room in component
        for other in sorted(graph[room])
        if other in component
    )


def test_the_cycle_check_sees_function_level_imports(tmp_path: Path) -> None:
    package = tmp_path / "kernelexec"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_a.py").write_text("from ._b import B\n\nA = 1\n")
    (package / "_b.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from ._c import C\n\n"
        "def b():\n    from ._a import A\n    return A\n"
    )
    (package / "_c.py").write_text("from . import _b\n")
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["kernelexec._a", "kernelexec._b"]]
    assert graph["kernelexec._b"] == {"kernelexec._a": 7}  # not _c: TYPE_CHECKING only
    assert describe(["kernelexec._a", "kernelexec._b"], graph) == (
        "  kernelexec._a:1 -> kernelexec._b:7 -> kernelexec._a"
    )


# -- kernel-side code: the standard library and ipykernel only

# What ipykernel brings with it; the kernel's Python may have nothing else. And
# cloudpickle, which only a checkpoint needs: imported where it is used, and a
# kernel without it is told how to install it.
_KERNEL_MAY_IMPORT = {"ipykernel", "IPython", "zmq", "cloudpickle"}


def test_kernel_side_code_imports_only_the_standard_library_and_ipykernel() -> None:
    # kernelexec/_kernel/ runs under whatever Python hosts the kernel, which
    # may lack kernelexec: boot.py loads its siblings by path, and
    # checkpoint.py is sent to the kernel as source.
    wrong = []
    for path in sorted((PACKAGE / "_kernel").glob("*.py")):
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                wrong.append(f"{path.name}:{node.lineno}: a relative import")
                continue
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in _KERNEL_MAY_IMPORT:
                    wrong.append(f"{path.name}:{node.lineno}: imports {name}")
    assert not wrong, wrong


# -- the maps: every path CONTRIBUTING.md and docs/design.md name exists

# A path from the repository's root, anywhere in the text; one going on with ``<`` or ``*``
# is a pattern (``tests/test_<module>.py``, ``tests/_*.py``), not a path.
_ROOTED = re.compile(r"\b(?:kernelexec|tests|bench|docs)/[\w/.-]*\w(?![\w<*])")
# A module or folder of the package in backticks, named from kernelexec/: `_backends/_local.py`.
_IN_PACKAGE = re.compile(r"`(_[\w/]*?(?:\.py|/))`")


def named_paths(text: str) -> list[str]:
    """The paths a document names, each from the repository's root."""
    rooted = set(_ROOTED.findall(text))
    in_package = {f"kernelexec/{path}" for path in _IN_PACKAGE.findall(text)}
    return sorted(rooted | in_package)


def test_named_paths_are_read_from_the_root_or_the_package() -> None:
    text = (
        "`_backends/_local.py`, `_kernel/`, `AsyncSession`, kernelexec/_cli/run.py, "
        "`tests/test_<module>.py`, `tests/_*.py`, tests/conftest.py"
    )
    assert named_paths(text) == [
        "kernelexec/_backends/_local.py",
        "kernelexec/_cli/run.py",
        "kernelexec/_kernel/",
        "tests/conftest.py",
    ]


@pytest.mark.parametrize("document", ["CONTRIBUTING.md", "docs/design.md"])
def test_every_path_a_map_names_exists(document: str) -> None:
    named = named_paths((ROOT / document).read_text(encoding="utf-8"))
    assert len(named) > 10, f"{document} names only {named}"
    missing = [path for path in named if not (ROOT / path).exists()]
    assert not missing, f"{document} names paths that do not exist: {missing}"
