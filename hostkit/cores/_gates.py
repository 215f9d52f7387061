"""The promotion gates, in order: manifest, tests, dependencies, mcp_review.

Each gate returns a ``GateOutcome`` recorded in the ``CoreEvent`` of the
attempt, so a refused promotion says which gate refused and why. A candidate
that does not load stops at the manifest gate (there is nothing to test); a
failing test suite still computes the dependency and MCP gates, so the
operator sees every reason, and the review token, in one attempt.
"""

from __future__ import annotations

import logging
import shutil
import stat
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from hostkit.cores._loaded import CoreLocation, LoadedCore, load_core
from hostkit.cores._test_gate import run_core_tests
from hostkit.errors import HostkitError, bounded
from hostkit.types import GateOutcome

__all__ = [
    "Validate",
    "check_dependencies",
    "check_manifest",
    "check_mcp_review",
    "check_tests",
]

Validate = Callable[[LoadedCore], Awaitable[None]]
_log = logging.getLogger(__name__)

# Scratch materializations for the test gate, inside the Host's cores dir (a state path).
_SCRATCH = ".gates"


async def check_manifest(
    location: CoreLocation, revision: str, *, cores_root: Path, validate: Validate | None
) -> tuple[GateOutcome, LoadedCore | None]:
    """The candidate loads (tree, agent.yaml, instructions) and the Host's ``validate`` passes."""
    try:
        loaded = await load_core(location, revision, cores_root=cores_root)
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


async def check_tests(
    location: CoreLocation,
    loaded: LoadedCore,
    *,
    cores_root: Path,
    environ: Mapping[str, str] | None = None,
) -> GateOutcome:
    """Run the candidate's ``tests/`` in a fresh materialization; no ``tests/`` passes."""
    if not await anyio.Path(loaded.root / "tests").is_dir():
        return GateOutcome("tests", True, "no tests")
    # Fresh: the suite must not see (or leave) anything in the directory turns import from.
    scratch = cores_root / _SCRATCH / uuid.uuid4().hex
    try:
        fresh = await load_core(location, loaded.revision, cores_root=scratch)
        run = await run_core_tests(
            fresh.root, timeout_s=loaded.manifest.limits.test_timeout_s, environ=environ
        )
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove_tree, scratch)
    if run.timed_out:
        limit = loaded.manifest.limits.test_timeout_s
        return GateOutcome("tests", False, f"timed out after {limit:g} s\n{run.tail}")
    if run.passed:
        return GateOutcome("tests", True, run.tail.strip().splitlines()[-1] if run.tail else "")
    return GateOutcome("tests", False, f"pytest exited {run.returncode}\n{run.tail}")


def check_dependencies(changes: tuple[str, ...], *, accept: bool, actor: str) -> GateOutcome:
    """Changed dependencies pass only when the operator accepted them (``--reviewed-deps``)."""
    if not changes:
        return GateOutcome("dependencies", True, "unchanged")
    listed = "; ".join(changes)
    if accept:
        return GateOutcome("dependencies", True, f"flagged, accepted by {actor}: {listed}")
    return GateOutcome(
        "dependencies", False, f"changed, needs manual review (--reviewed-deps): {listed}"
    )


def check_mcp_review(diff: Mapping[str, Any], *, token: str, review: str | None) -> GateOutcome:
    """An MCP declaration change passes only with the exact token of this diff."""
    if not diff:
        return GateOutcome("mcp_review", True, "MCP declarations unchanged")
    servers = ", ".join(f"{name} {entry['change']}" for name, entry in diff["servers"].items())
    if review == token:
        return GateOutcome("mcp_review", True, f"reviewed: {servers}")
    why = "missing" if review is None else "stale (it reviews another change)"
    return GateOutcome("mcp_review", False, f"review token {why}; pass {token}: {servers}")


def _remove_tree(path: Path) -> None:
    """Delete a materialization, which is read-only by design: writable first, then gone."""
    if not path.exists():
        return
    for entry in (path, *path.rglob("*")):
        if entry.is_dir() and not entry.is_symlink():
            entry.chmod(entry.stat().st_mode | stat.S_IWUSR | stat.S_IXUSR | stat.S_IRUSR)
    shutil.rmtree(path, ignore_errors=True)
