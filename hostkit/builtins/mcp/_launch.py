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
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hostkit.builtins.mcp._errors import McpCommandNotFound
from hostkit.builtins.process import (
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
    read_only = _program_roots(program, shown)
    _check_visible(declaration.name, program, (*shown, *read_only))
    policy = dataclasses.replace(sandbox, network=declaration.network)
    masks = mask_plan(root, (*sandbox.hidden, *hidden), roots=read_only)
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


def _program_roots(program: Path, shown: Sequence[Path]) -> tuple[Path, ...]:
    """The virtualenv root and base interpreter prefix ``program`` needs, if it lives in one
    (those the sandbox does not show already)."""
    roots: list[Path] = []
    for candidate in (program, Path(os.path.realpath(program))):
        venv = next((p for p in candidate.parents if (p / "pyvenv.cfg").is_file()), None)
        if venv is None:
            continue
        roots.append(venv)
        home = _venv_home(venv / "pyvenv.cfg")
        if home is not None:
            prefix = home.parent if home.name == "bin" else home
            roots.append(Path(os.path.realpath(prefix)))
    kept: list[Path] = []
    for root in roots:
        if _under(root, shown) or root in kept:
            continue
        kept.append(root)
    return tuple(kept)


def _venv_home(config: Path) -> Path | None:
    for line in config.read_text(encoding="utf-8", errors="replace").splitlines():
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
