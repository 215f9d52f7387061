"""The promotion gates, in order: manifest, dependencies, mcp_review, tests, tools.

Each gate returns a ``GateOutcome`` recorded in the ``CoreEvent`` of the
attempt, so a refused promotion says which gate refused and why. The gates
that run no core code come first: a candidate that does not load stops at
the manifest gate, and the core's own tests run only once the dependency
and MCP gates passed (a refusal still carries the review token), so a
promotion an operator runs to learn the token never executes unreviewed
code. The tools gate, last, discovers the tools a core's ``tools:`` modules
define, as its generation would once live (Host promotions only).
"""

from __future__ import annotations

import ast
import logging
import os
import shutil
import stat
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from hostkit.cores._loaded import GATES_DIR, CoreLocation, LoadedCore, load_core
from hostkit.cores._test_gate import TestRun, TestSandbox, run_core_tests
from hostkit.errors import HostkitError, TurnRejected, bounded
from hostkit.types import GateOutcome

__all__ = [
    "Validate",
    "check_dependencies",
    "check_manifest",
    "check_mcp_review",
    "check_tests",
    "check_tools",
]

Validate = Callable[[LoadedCore], Awaitable[None]]
_log = logging.getLogger(__name__)
# The largest slot module the manifest gate reads as source: parsing costs memory many
# times the file's size (a 4 MiB file took 2.6 GB), and a slot is a few functions.
MAX_SLOT_SOURCE_BYTES = 1024 * 1024


async def check_manifest(
    location: CoreLocation, revision: str, *, cores_root: Path, validate: Validate | None
) -> tuple[GateOutcome, LoadedCore | None]:
    """The candidate loads (tree, agent.yaml, instructions) and the Host's ``validate`` passes."""
    try:
        loaded = await load_core(location, revision, cores_root=cores_root)
        await anyio.to_thread.run_sync(_check_slot_entries, loaded)
        await anyio.to_thread.run_sync(_check_tool_entries, loaded)
        if validate is not None:
            await validate(loaded)
    except HostkitError as exc:
        return GateOutcome("manifest", False, bounded(str(exc), 1_000)), None
    except Exception as exc:
        # A candidate no check foresaw (a corrupt object, a library bug): refused, never a crash.
        _log.exception("loading revision %s of core %r failed", revision[:12], location.core_id)
        return GateOutcome(
            "manifest", False, f"the revision cannot be read ({type(exc).__name__})"
        ), None
    return GateOutcome("manifest", True, f"agent.yaml of {revision[:12]} loads"), loaded


def _check_slot_entries(loaded: LoadedCore) -> None:
    """Each declared slot names a module of ``agent/`` that defines the function at its top
    level, read as source (nothing of the core runs here); else the ``ConfigError`` of
    ``slots.<slot>``. A typo would otherwise pass every gate and fail every turn."""
    slots = loaded.manifest.slots
    for slot in ("bootstrap", "input", "output"):
        entry = getattr(slots, slot)
        if entry is None:
            continue
        module, _, function = entry.partition(":")
        source, tree = _module_source(loaded, f"slots.{slot}", entry, module, kind="slot")
        bound = _top_level_names(tree)
        if bound is not None and function not in bound:
            raise loaded.problem(
                f"slots.{slot}",
                f"{entry!r}: agent/{source.relative_to(loaded.root / loaded.package)} "
                f"defines no {function!r}",
            )


def _check_tool_entries(loaded: LoadedCore) -> None:
    """Each ``tools:`` entry names a module of ``agent/`` that exists and parses, read as
    source like a slot's; else the ``ConfigError`` of ``tools``. A typo would otherwise
    pass every gate and leave the core unable to build its tools once live."""
    for name in loaded.manifest.tools:
        _module_source(loaded, "tools", name, name, kind="tool")


def _module_source(
    loaded: LoadedCore, key: str, entry: str, module: str, *, kind: str
) -> tuple[Path, ast.Module]:
    """The file of ``agent/<module>`` (a module, or a package's ``__init__.py``) and its
    parsed source; the ``ConfigError`` of ``key`` quoting ``entry`` when it does not exist,
    is too large to parse or does not parse."""
    package = loaded.root / loaded.package
    base = package.joinpath(*module.split("."))
    source = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
    if source is None:
        raise loaded.problem(key, f"{entry!r}: agent/{module.replace('.', '/')}.py does not exist")
    size = source.stat().st_size
    if size > MAX_SLOT_SOURCE_BYTES:
        raise loaded.problem(
            key,
            f"{entry!r}: agent/{source.relative_to(package)} holds {size} bytes; a {kind} "
            f"module may hold {MAX_SLOT_SOURCE_BYTES} (move the rest to another module)",
        )
    try:
        return source, ast.parse(source.read_bytes(), filename=str(source))
    except (SyntaxError, ValueError) as exc:
        raise loaded.problem(
            key,
            f"{entry!r}: agent/{source.relative_to(package)} does not parse "
            f"(line {getattr(exc, 'lineno', '?')})",
        ) from None


def _top_level_names(tree: ast.Module) -> set[str] | None:
    """Names a module may bind when imported: definitions, assignment targets and imports
    anywhere outside function and class bodies (under ``if``, ``try``, ``with`` too);
    None when the source alone cannot tell (``import *``, a module ``__getattr__``)."""
    names: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue  # what a body binds is its own
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        pending.extend(ast.iter_child_nodes(node))
    return None if "__getattr__" in names else names


async def check_tests(
    location: CoreLocation,
    loaded: LoadedCore,
    *,
    cores_root: Path,
    sandbox: TestSandbox | None,
    environ: Mapping[str, str] | None = None,
) -> GateOutcome:
    """Run the candidate's ``tests/`` sandboxed in a fresh materialization; no ``tests/`` passes.

    Where ``sandbox`` is None or cannot run here, the suite runs unsandboxed
    only when the candidate's manifest says ``sandbox: none`` (its agent
    processes run unsandboxed anyway); otherwise the gate fails closed.
    """
    if not await anyio.Path(loaded.root / "tests").is_dir():
        return GateOutcome("tests", True, "no tests")
    # Fresh: the suite must not see (or leave) anything in the directory turns import from.
    # The pid in the name lets a later load remove it once this process is gone.
    scratch = cores_root / GATES_DIR / f"{os.getpid()}-{uuid.uuid4().hex}"
    limit = loaded.manifest.limits.test_timeout_s
    note = ""
    try:
        fresh = await load_core(location, loaded.revision, cores_root=scratch)
        run: TestRun | None = None
        unavailable = "no sandbox is configured for the test gate"
        if sandbox is not None:
            try:
                run = await run_core_tests(
                    fresh.root, timeout_s=limit, sandbox=sandbox, environ=environ
                )
            except HostkitError as exc:  # the sandbox cannot run here: nothing started
                unavailable = str(exc)
        if run is None:
            if loaded.manifest.sandbox != "none":
                return GateOutcome(
                    "tests", False, bounded(f"the tests cannot run sandboxed: {unavailable}", 1_000)
                )
            note = bounded(f"UNSANDBOXED (sandbox: none; {unavailable})", 300) + "\n"
            run = await run_core_tests(fresh.root, timeout_s=limit, sandbox=None, environ=environ)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove_tree, scratch)
    if run.timed_out:
        return GateOutcome("tests", False, f"{note}timed out after {limit:g} s\n{run.tail}")
    if run.passed:
        last = run.tail.strip().splitlines()[-1] if run.tail.strip() else ""
        return GateOutcome("tests", True, f"{note}{last}")
    return GateOutcome("tests", False, f"{note}pytest exited {run.returncode}\n{run.tail}")


async def check_tools(loaded: LoadedCore, build: Validate) -> GateOutcome:
    """The candidate's tools build as its generation would build them (``build``, the
    Host's): each ``tools:`` module discovered, no two tools under one name, no policy
    rule that only the model's spelling of a tool matches.

    Discovering a module runs its code (in the child process turns discover with,
    never in the Host's), so this runs after the tests gate. ``TurnRejected`` (the
    Host closed under the build, ending it) is raised, not a verdict.
    """
    try:
        await build(loaded)
    except TurnRejected:
        raise  # the Host closed under the gate: no verdict, so nothing to record
    except HostkitError as exc:
        return GateOutcome("tools", False, bounded(str(exc), 1_000))
    except Exception as exc:
        # A failure no check foresaw: refused, never a crash (and never live).
        _log.exception("building the tools of core %r failed", loaded.core_id)
        return GateOutcome("tools", False, f"the tools cannot be built ({type(exc).__name__})")
    listed = ", ".join(loaded.manifest.tools)
    return GateOutcome("tools", True, bounded(f"{listed} build; no two tools share a name", 300))


def check_dependencies(
    changes: tuple[str, ...], *, token: str, review: str | None, actor: str
) -> GateOutcome:
    """Changed dependencies pass only with the exact ``deps-review:`` token of this change."""
    if not changes:
        return GateOutcome("dependencies", True, "unchanged")
    listed = "; ".join(changes)
    if review == token:
        return GateOutcome("dependencies", True, f"flagged, reviewed by {actor}: {listed}")
    why = "missing" if review is None else "stale (it reviews another change)"
    return GateOutcome(
        "dependencies",
        False,
        f"changed, needs manual review: review token {why} (pass --reviewed-deps {token}); "
        f"changed: {listed}",
    )


def check_mcp_review(diff: Mapping[str, Any], *, token: str, review: str | None) -> GateOutcome:
    """An MCP declaration change passes only with the exact token of this diff."""
    if not diff:
        return GateOutcome("mcp_review", True, "MCP declarations unchanged")
    servers = ", ".join(f"{name} {entry['change']}" for name, entry in diff["servers"].items())
    if review == token:
        return GateOutcome("mcp_review", True, f"reviewed: {servers}")
    why = "missing" if review is None else "stale (it reviews another change)"
    return GateOutcome(
        "mcp_review", False, f"review token {why} (pass --review {token}); changed: {servers}"
    )


def _remove_tree(path: Path) -> None:
    """Delete a materialization, which is read-only by design: writable first, then gone."""
    if not path.exists():
        return
    for entry in (path, *path.rglob("*")):
        if entry.is_dir() and not entry.is_symlink():
            entry.chmod(entry.stat().st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
    shutil.rmtree(path, ignore_errors=True)
