"""The builtin tool families sit above the effect seam, import one way and export an interface.

``hostkit.builtins`` holds one subpackage per family (process, files, web, mcp).
The seams never import it; a family reaches ``hostkit.effects`` and another
family through their public ``__init__`` only; inside a family the modules
form a chain with no import cycle. The import graph is read statically
(grimp, which import-linter ships), so an import guarded by
``TYPE_CHECKING`` counts too: a cycle hidden behind one is still a cycle.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import grimp
import pytest

BUILTINS = "hostkit.builtins"
FAMILIES = [
    "hostkit.builtins.process",
    "hostkit.builtins.files",
    "hostkit.builtins.web",
    "hostkit.builtins.mcp",
]
# The packages below the builtins (runtime-composition step 7: no seam knows a tool family).
SEAMS = [
    "hostkit.types",
    "hostkit.errors",
    "hostkit.freeze",
    "hostkit.store",
    "hostkit.authority",
    "hostkit.providers",
    "hostkit.context",
    "hostkit.effects",
    "hostkit.turns",
]
# Which other families a family may use (through their interface).
USES = {
    "hostkit.builtins.process": {"hostkit.builtins.files"},
    "hostkit.builtins.files": set(),
    "hostkit.builtins.web": set(),
    "hostkit.builtins.mcp": {"hostkit.builtins.process", "hostkit.builtins.web"},
}
# Each family's private modules, highest first: a module imports only modules after it.
# Modules sharing a tuple are siblings and import neither each other.
LAYERS: dict[str, list[tuple[str, ...]]] = {
    "hostkit.builtins.process": [
        ("_terminal",),
        ("_terminal_checks", "_terminal_journal"),
        ("_process", "_owned", "_sandbox"),
        ("_process_streams", "_process_tree", "_mounts"),
        ("_reaper", "_seccomp", "_artifact_retention"),
    ],
    "hostkit.builtins.files": [("_files",), ("_workspace",), ("_openat",), ("_errors",)],
    "hostkit.builtins.web": [("_web",), ("_extract",), ("_fetch",), ("_urlpolicy",), ("_errors",)],
    "hostkit.builtins.mcp": [
        ("_connector",),
        ("_connection", "_http", "_stdio"),
        ("_listing",),
        ("_launch", "_render"),
        ("_errors",),
    ],
}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # No cache directory: the test leaves nothing behind in the tree.
    return grimp.build_graph("hostkit", cache_dir=None)


def _builtin_imports(graph: grimp.ImportGraph) -> Iterator[tuple[str, str]]:
    for importer in sorted(graph.find_descendants(BUILTINS) | {BUILTINS}):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            yield importer, imported


def _family(module: str) -> str | None:
    return next((f for f in FAMILIES if module == f or module.startswith(f + ".")), None)


def test_builtins_have_no_import_cycles(graph: grimp.ImportGraph) -> None:
    assert _cycles(graph) == [], f"import cycles in {BUILTINS}"


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        # The two circles this layout broke: the policy used to import the fetch, and
        # the link-safe walk looked its error classes up on the workspace module.
        ("hostkit.builtins.web._urlpolicy", "hostkit.builtins.web._fetch"),
        ("hostkit.builtins.files._openat", "hostkit.builtins.files._workspace"),
        ("hostkit.builtins.process._process", "hostkit.builtins.process"),
    ],
)
def test_the_cycle_check_sees_a_cycle(importer: str, imported: str) -> None:
    graph = grimp.build_graph("hostkit", cache_dir=None)
    graph.add_import(importer=importer, imported=imported)
    assert any(importer in cycle and imported in cycle for cycle in _cycles(graph))


@pytest.mark.parametrize("seam", SEAMS)
def test_no_seam_imports_the_builtins(graph: grimp.ImportGraph, seam: str) -> None:
    chain = graph.find_shortest_chain(importer=seam, imported=BUILTINS, as_packages=True)
    assert chain is None, f"{seam} reaches {BUILTINS}: {' -> '.join(chain or ())}"


def test_builtins_use_only_the_public_interface_of_effects(graph: grimp.ImportGraph) -> None:
    private = [
        (importer, imported)
        for importer, imported in _builtin_imports(graph)
        if imported.startswith("hostkit.effects.")
    ]
    assert private == [], "builtins must import hostkit.effects, never its private modules"


def test_families_use_each_other_only_through_their_interfaces(graph: grimp.ImportGraph) -> None:
    wrong = []
    for importer, imported in _builtin_imports(graph):
        source, target = _family(importer), _family(imported)
        if source is None or target is None or source == target:
            continue
        if target not in USES[source] or imported != target:
            wrong.append((importer, imported))
    assert wrong == [], f"imports between families outside their interfaces: {wrong}"


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_imports_one_way(graph: grimp.ImportGraph, family: str) -> None:
    rank = {
        f"{family}.{name}": level for level, names in enumerate(LAYERS[family]) for name in names
    }
    assert set(rank) == graph.find_children(family), "LAYERS must list every module"
    upward = [
        (importer, imported)
        for importer in rank
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported in rank and rank[imported] <= rank[importer]
    ]
    assert upward == [], f"{family}: imports against the layer order {upward}"


@pytest.mark.parametrize("name", [BUILTINS, *FAMILIES])
def test_family_exports_exactly_its_interface(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names missing {attr}"
        assert not attr.startswith("_"), f"{name} exports private {attr}"
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_") and not isinstance(value, type(importlib))
    }
    assert public <= set(exported), f"{name} leaks {sorted(public - set(exported))}"


@pytest.mark.parametrize("name", FAMILIES)
def test_family_helpers_are_private(name: str) -> None:
    module = importlib.import_module(name)
    for info in pkgutil.iter_modules(module.__path__):
        assert info.name.startswith("_"), f"{name}.{info.name} should be a private module"


def test_builtins_holds_the_families_only() -> None:
    package = importlib.import_module(BUILTINS)
    children = {f"{BUILTINS}.{info.name}" for info in pkgutil.iter_modules(package.__path__)}
    assert children == set(FAMILIES)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every import cycle among the builtins modules, as sorted lists of module names."""
    modules = graph.find_descendants(BUILTINS) | {BUILTINS}
    edges = {
        module: sorted(graph.find_modules_directly_imported_by(module) & modules)
        for module in modules
    }
    cycles = [scc for scc in _strongly_connected(edges) if len(scc) > 1]
    return cycles + [[module] for module, targets in edges.items() if module in targets]


def _strongly_connected(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the strongly connected components of ``edges``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(sorted(component))
    return found
