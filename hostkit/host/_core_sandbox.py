"""The promotion test gate's sandbox: a core's pytest in the bubblewrap of agent processes.

``hostkit.cores`` may not import ``hostkit.builtins`` (layers), so the Host
builds this launcher and hands it to ``CoreRegistry(sandbox=...)``. The suite
gets what a sandboxed ``terminal.run`` gets (own PID namespace: no Host in
``/proc``; no network; ``--die-with-parent``; Host state masked; the
``[host.limits]``), with the materialized revision read-only as its working
directory, and read-only the interpreter (``sys.prefix``, its base) and the
hostkit package the Host runs. ``/tmp`` is private and the suite's home.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from hostkit.builtins.process import (
    ResourceLimits,
    SandboxPolicy,
    SandboxProbe,
    SandboxUnavailable,
    mask_plan,
    probe_bubblewrap,
    sandbox_argv,
)
from hostkit.cores import TestSandbox
from hostkit.host._config import HostConfig

__all__ = ["core_test_sandbox"]

# The hostkit package this Host runs (hostkit/host/_core_sandbox.py -> hostkit/).
_HOSTKIT_PACKAGE = Path(__file__).resolve().parents[1]


def core_test_sandbox(config: HostConfig, *, bwrap: str = "bwrap") -> TestSandbox:
    """The ``TestSandbox`` for ``config``'s Host; it raises ``SandboxUnavailable``
    (nothing started) where bubblewrap cannot run."""
    limits = config.host.limits
    policy = SandboxPolicy(
        network=False,
        limits=ResourceLimits(**limits.model_dump()),
        hidden=config.state_paths(),
    )

    async def sandboxed(argv: Sequence[str], root: Path) -> Sequence[str]:
        probe = await anyio.to_thread.run_sync(probe_bubblewrap, bwrap)
        if not probe.ok:
            raise SandboxUnavailable(probe.reason)
        return await anyio.to_thread.run_sync(_plan, probe, policy, list(argv), root)

    return sandboxed


def _plan(probe: SandboxProbe, policy: SandboxPolicy, argv: list[str], root: Path) -> list[str]:
    """Blocking: bwrap's argv. The revision is the (then read-only) workspace."""
    revision = root.resolve()
    read_only = _runtime_roots()
    masks = mask_plan(revision, policy.hidden, roots=read_only)
    masks += ["--remount-ro", str(revision)]
    masks += ["--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    return sandbox_argv(
        probe,
        policy,
        argv,
        workspace=revision,
        workdir=revision,
        masks=masks,
        read_only=read_only,
    )


def _runtime_roots() -> tuple[Path, ...]:
    """What the suite's interpreter needs: its prefixes and the hostkit package, outermost only."""
    found = {
        Path(os.path.realpath(path))
        for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    }
    found.add(Path(os.path.realpath(sys.executable)).parent.parent)
    found.add(_HOSTKIT_PACKAGE)
    existing = sorted(path for path in found if path.is_dir())
    return tuple(
        path
        for path in existing
        if not any(other != path and path.is_relative_to(other) for other in existing)
    )
