"""How a stdio server is started: its resolved command, exact environment and sandbox.

Blocking (it looks at the file system): the connector runs ``plan_launch`` in a
worker thread. The child's environment is exactly the Host allowlist's values
plus the declaration's ``env`` (bwrap adds ``PWD``, the working directory).
In bubblewrap mode the child sees only the system directories, the
workspace (its working directory) and, read-only, what its program needs
when it lives in a virtualenv: the environment's root (the directory holding
``pyvenv.cfg``) and the base interpreter's prefix when it is not a system
directory. Host state under any of those is masked.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hostkit.builtins.mcp._errors import McpCommandNotFound
from hostkit.builtins.process import (
    MountedTree,
    SandboxPolicy,
    mask_plan,
    probe_bubblewrap,
    sandbox_argv,
    visible_roots,
)
from hostkit.effects import McpServerDeclaration
from hostkit.errors import bounded

__all__ = ["Launch", "plan_launch"]


@dataclass(frozen=True, slots=True)
class Launch:
    """Everything needed to spawn one stdio server, decided before it is spawned."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: Path
    sandboxed: bool
    program: str
    read_only: tuple[Path, ...] = ()


def plan_launch(
    declaration: McpServerDeclaration,
    *,
    workspace: Path,
    sandbox: SandboxPolicy,
    environ: Mapping[str, str],
    allowlist: Sequence[str],
    hidden: Sequence[Path],
    bwrap: str = "bwrap",
) -> Launch:
    """Blocking: resolve the command and build the sandboxed argument vector.

    Raises ``McpCommandNotFound`` for a command that does not exist or that
    the sandbox could not show, ``SandboxUnavailable`` when the agent's mode is
    bubblewrap and bubblewrap cannot run here.
    """
    root = workspace.resolve()
    env = {name: environ[name] for name in allowlist if name in environ}
    env.update(declaration.env)
    program = _resolve(declaration, root, environ.get("PATH", os.defpath))
    command = [str(program), *declaration.command[1:]]
    if not sandbox.sandboxed:
        return Launch(tuple(command), env, root, False, str(program))
    probe = probe_bubblewrap(bwrap)
    shown = visible_roots(root)
    state = (*sandbox.hidden, *hidden)
    read_only = _program_roots(program, shown, workspace=root, state=state, environ=environ)
    _check_visible(declaration.name, program, (*shown, *read_only))
    policy = dataclasses.replace(sandbox, network=declaration.network)
    masks = mask_plan(root, state, roots=read_only)
    argv = sandbox_argv(
        probe, policy, command, workspace=root, workdir=root, masks=masks, read_only=read_only
    )
    return Launch(tuple(argv), env, root, True, str(program), read_only)


def _resolve(declaration: McpServerDeclaration, workspace: Path, path: str) -> Path:
    """argv[0] made absolute: a bare name through PATH, a relative path from the workspace."""
    name = declaration.command[0]
    shown = bounded(name, 120)
    if not name or "\0" in name:
        raise McpCommandNotFound(f"server {declaration.name!r}: the command is empty or invalid")
    if "/" in name:
        candidate = Path(name) if os.path.isabs(name) else workspace / name
        found = str(candidate) if os.access(candidate, os.X_OK) and candidate.is_file() else None
    else:
        found = shutil.which(name, path=path)
    if found is None:
        raise McpCommandNotFound(
            f"server {declaration.name!r}: command {shown!r} was not found "
            "(or is not executable) on the Host's PATH"
        )
    return Path(os.path.abspath(found))


def _program_roots(
    program: Path,
    shown: Sequence[Path],
    *,
    workspace: Path,
    state: Sequence[Path],
    environ: Mapping[str, str],
) -> tuple[Path, ...]:
    """The virtualenv root and base interpreter prefix ``program`` needs, if it lives in one
    (those the sandbox does not show already).

    Only a ``pyvenv.cfg`` outside the workspace counts: one the agent could have
    written never adds a bind. A program inside the workspace needs nothing but
    the workspace (its path or its target there gets no extra root). "Inside"
    counts every path a mount shows the workspace at.
    """
    ws = Path(os.path.realpath(workspace))
    tree = MountedTree(ws)
    candidates = (program, Path(os.path.realpath(program)))
    if any(_under(Path(os.path.abspath(c)), (workspace,)) for c in candidates) or any(
        tree.holds(Path(os.path.realpath(c))) for c in candidates
    ):
        return ()
    guarded = _Guarded(tree, state, environ)
    roots: list[Path] = []
    for candidate in candidates:
        venv = next((p for p in candidate.parents if (p / "pyvenv.cfg").is_file()), None)
        if venv is None or not guarded.venv_ok(venv):
            continue
        roots.append(venv)
        prefix = _venv_prefix(venv / "pyvenv.cfg")
        if prefix is not None and guarded.prefix_ok(prefix):
            roots.append(prefix)
    kept: list[Path] = []
    for root in roots:
        if _under(root, shown) or root in kept:
            continue
        kept.append(root)
    return tuple(kept)


class _Guarded:
    """What an extra read-only root must never be, hold, or sit inside (all resolved)."""

    __slots__ = ("homes", "inside", "workspace")

    def __init__(
        self, workspace: MountedTree, state: Sequence[Path], environ: Mapping[str, str]
    ) -> None:
        homes = {os.path.expanduser("~")}
        if environ.get("HOME", "").startswith("/"):
            homes.add(environ["HOME"])
        self.workspace = workspace
        self.inside = (workspace.root, *(Path(os.path.realpath(p)) for p in state))
        self.homes = tuple(Path(os.path.realpath(h)) for h in sorted(homes))

    def _within(self, path: Path) -> bool:
        """Inside the workspace (at any mount path of it) or Host state."""
        return _under(path, self.inside) or self.workspace.holds(path)

    def _refused(self, root: Path) -> bool:
        """``/``, inside the workspace or Host state, or holding one of them or a home."""
        if root == Path("/") or self._within(root):
            return True
        return any(p.is_relative_to(root) for p in (*self.inside, *self.homes))

    def venv_ok(self, venv: Path) -> bool:
        config = Path(os.path.realpath(venv / "pyvenv.cfg"))
        return not self._within(config) and not self._refused(Path(os.path.realpath(venv)))

    def prefix_ok(self, prefix: Path) -> bool:
        return not self._refused(prefix)


_PYTHON = re.compile(r"python(3(\.\d+)?)?")


def _holds_python(directory: Path) -> bool:
    """``directory`` holds an executable ``python``, ``python3`` or ``python3.N``."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return False
    return any(
        _PYTHON.fullmatch(e.name) is not None and e.is_file() and os.access(e, os.X_OK)
        for e in entries
    )


def _venv_prefix(config: Path) -> Path | None:
    """The base interpreter's install prefix the ``home =`` line names, resolved: None
    unless ``home`` is an absolute, existing directory other than ``/`` that holds a
    Python interpreter (a real installation, never just any directory)."""
    home = _venv_home(config)
    if home is None or not home.is_absolute():
        return None
    resolved = Path(os.path.realpath(home))
    if resolved == Path("/") or not resolved.is_dir() or not _holds_python(resolved):
        return None
    prefix = resolved.parent if resolved.name == "bin" else resolved
    return None if prefix == Path("/") else prefix


def _venv_home(config: Path) -> Path | None:
    try:
        text = config.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "home" and value.strip():
            return Path(value.strip())
    return None


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or path.is_relative_to(r) for r in roots)


def _check_visible(server: str, program: Path, roots: Sequence[Path]) -> None:
    """The program (and what its links point to) must be inside what the sandbox shows."""
    shown = [*roots, *(Path(os.path.realpath(p)) for p in roots)]
    for path in (program, Path(os.path.realpath(program))):
        if not _under(path, shown):
            raise McpCommandNotFound(
                f"server {server!r}: {bounded(str(program), 160)} is outside what the sandbox "
                "shows (system directories, the workspace, a virtualenv)"
            )
