"""Clause: a dependency ratchet names the few allowed edges from the seams to anything concrete.

runtime-composition step 7: the seams (values, store, authority, providers,
cores, effects, context, inbox, delivery, channels, daemon, turns) may reach
something concrete (a hostkit front end, adapter or builtin family, or any
third-party package) only through the edges ``tests/dependency_ratchet.toml``
names, each with its reason. A new edge fails naming the edge and the module
that made it; a listed edge that no longer exists fails too, so the file
stays exact. The import graph is read statically (grimp), so an import inside
a function or under ``TYPE_CHECKING`` counts.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import grimp
import pytest

RATCHET = Path(__file__).resolve().parents[1] / "dependency_ratchet.toml"
SEAMS = (
    "types",
    "errors",
    "freeze",
    "store",
    "authority",
    "providers",
    "cores",
    "effects",
    "context",
    "inbox",
    "delivery",
    "channels",
    "daemon",
    "turns",
)
# hostkit's own concrete packages: what composes, adapts or presents the seams.
CONCRETE = (
    "hostkit.adapters",
    "hostkit.builtins",
    "hostkit.host",
    "hostkit.cli",
    "hostkit.notebook",
    "hostkit.inspect",
    "hostkit.testing",
)
Edge = tuple[str, str]


def _concrete_target(module: str) -> str | None:
    """The package ``module`` counts as when a seam imports it (None: not concrete)."""
    top = module.split(".", 1)[0]
    if top == "hostkit":
        return next((c for c in CONCRETE if module == c or module.startswith(c + ".")), None)
    return None if top in sys.stdlib_module_names else top


def _seam_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "hostkit" and len(parts) > 1 and parts[1] in SEAMS else None


def concrete_edges(graph: grimp.ImportGraph) -> dict[Edge, tuple[str, ...]]:
    """Each (seam, concrete package) edge of ``graph``, with the seam modules that make it."""
    found: dict[Edge, set[str]] = {}
    for module in graph.modules:
        seam = _seam_of(module)
        if seam is None:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            target = _concrete_target(imported)
            if target is not None:
                found.setdefault((seam, target), set()).add(module)
    return {edge: tuple(sorted(modules)) for edge, modules in sorted(found.items())}


def allowed_edges(text: str) -> dict[Edge, str]:
    """The ratchet file's edges and reasons; a malformed entry is a ``ValueError`` naming it."""
    allowed: dict[Edge, str] = {}
    for seam, table in tomllib.loads(text).items():
        if seam not in SEAMS or not isinstance(table, dict):
            raise ValueError(f"[{seam}] is not a seam table (seams: {', '.join(SEAMS)})")
        for target, reason in table.items():
            if _concrete_target(target) != target:
                raise ValueError(f"{seam} -> {target}: not a concrete package")
            if not isinstance(reason, str) or not reason.strip() or "\n" in reason:
                raise ValueError(f"{seam} -> {target}: the reason must be one non-empty line")
            allowed[(seam, target)] = reason
    return allowed


def ratchet_problems(
    found: Mapping[Edge, tuple[str, ...]], allowed: Mapping[Edge, str]
) -> list[str]:
    """Every edge not allowed (with its modules) and every allowed edge no longer found."""
    problems = [
        f"new edge {seam} -> {target} (from {', '.join(modules[:5])}): remove it, or name it "
        f"with its reason in {RATCHET.name}"
        for (seam, target), modules in found.items()
        if (seam, target) not in allowed
    ]
    problems.extend(
        f"{seam} -> {target} is listed in {RATCHET.name} but no longer exists: remove the line"
        for (seam, target) in allowed
        if (seam, target) not in found
    )
    return problems


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # No cache directory: the test leaves nothing behind in the tree.
    return grimp.build_graph("hostkit", include_external_packages=True, cache_dir=None)


@pytest.fixture(scope="module")
def allowed() -> dict[Edge, str]:
    return allowed_edges(RATCHET.read_text(encoding="utf-8"))


def test_the_seams_use_exactly_the_named_concrete_edges(
    graph: grimp.ImportGraph, allowed: dict[Edge, str]
) -> None:
    found = concrete_edges(graph)
    assert ratchet_problems(found, allowed) == []
    # The check sees the edges it names: the store's driver, the ingress framework.
    assert "hostkit.store._connection" in found[("store", "aiosqlite")]
    assert ("channels", "starlette") in found
    # The value packages stay pure: no concrete edge at all.
    assert not [edge for edge in found if edge[0] in ("types", "errors", "freeze")]


@pytest.mark.parametrize(
    ("importer", "imported", "named"),
    [
        ("hostkit.turns._execution", "hostkit.host", "turns -> hostkit.host"),
        ("hostkit.store._cores", "hostkit.notebook._theme", "store -> hostkit.notebook"),
        ("hostkit.types._cores", "anyio", "types -> anyio"),
        ("hostkit.effects._runtime", "requests", "effects -> requests"),
    ],
)
def test_a_new_edge_fails_naming_it_and_its_module(
    allowed: dict[Edge, str], importer: str, imported: str, named: str
) -> None:
    synthetic = grimp.build_graph("hostkit", include_external_packages=True, cache_dir=None)
    if imported not in synthetic.modules:
        synthetic.add_module(imported, is_squashed=not imported.startswith("hostkit."))
    synthetic.add_import(importer=importer, imported=imported)
    problems = ratchet_problems(concrete_edges(synthetic), allowed)
    assert len(problems) == 1
    assert problems[0].startswith(f"new edge {named} (from ")
    assert importer in problems[0]


def test_a_seam_importing_another_seam_or_the_stdlib_is_not_an_edge() -> None:
    synthetic = grimp.ImportGraph()
    for module in ("hostkit.turns._x", "hostkit.store", "hostkit.telemetry", "json", "dulwich"):
        synthetic.add_module(module)
    for imported in ("hostkit.store", "json", "dulwich"):
        synthetic.add_import(importer="hostkit.turns._x", imported=imported)
    assert concrete_edges(synthetic) == {("turns", "dulwich"): ("hostkit.turns._x",)}


def test_a_listed_edge_that_no_longer_exists_fails(
    graph: grimp.ImportGraph, allowed: dict[Edge, str]
) -> None:
    stale = {**allowed, ("types", "aiosqlite"): "a value package once read the database"}
    assert ratchet_problems(concrete_edges(graph), stale) == [
        "types -> aiosqlite is listed in dependency_ratchet.toml but no longer exists: "
        "remove the line"
    ]


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('[store]\naiosqlite = ""\n', "store -> aiosqlite: the reason must be one non-empty line"),
        ('[host]\nanyio = "x"\n', "[host] is not a seam table"),
        ('[store]\njson = "stdlib"\n', "store -> json: not a concrete package"),
        ('[store]\n"hostkit.turns" = "a seam"\n', "store -> hostkit.turns: not a concrete"),
    ],
)
def test_every_listed_edge_is_a_concrete_edge_with_a_reason(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint.replace("[", r"\[").replace("]", r"\]")):
        allowed_edges(text)
