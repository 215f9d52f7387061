"""The sandbox's own root is read-only: no memory outside ``tmp_mb`` to fill.

bwrap builds the sandbox's ``/`` in a tmpfs of its own, writable and
unbounded: ``tmp_mb`` bounded ``/tmp`` and ``/dev/shm`` while ``/big`` (or a
file beside the directories leading to the workspace) took the host's memory
without limit. Once everything is mounted the root is read-only; ``/tmp``,
``/dev/shm`` and the workspace are mounts of their own and stay writable.
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from hostkit.builtins.process import SandboxPolicy, probe_bubblewrap
from tests.parts import missing
from tests.security.test_sandbox import PY3, Sandbox, open_sandbox, stdout

pytestmark = pytest.mark.anyio

WRITE = """
import os, sys
for path in sys.argv[1:]:
    try:
        if path.endswith("/"):
            os.mkdir(path)
        else:
            with open(path, "wb") as out:
                out.write(b"x" * 4096)
        print(path, "written")
    except OSError as exc:
        print(path, "refused", exc.errno)
"""


def _outside_tmp() -> Path | None:
    """Blocking: a directory whose parents the sandbox makes in its root, not in /tmp."""
    for base in ("/var/tmp", "/srv"):
        try:
            return Path(tempfile.mkdtemp(dir=base, prefix="hk-root-"))
        except OSError:
            continue
    return None


@pytest.fixture
async def elsewhere() -> AsyncIterator[tuple[Sandbox, Path]]:
    """A sandbox whose workspace is not under /tmp (``tmp_path`` is)."""
    probe = await anyio.to_thread.run_sync(probe_bubblewrap)
    if not probe.ok:
        missing("sandbox", probe.reason)
    top = await anyio.to_thread.run_sync(_outside_tmp)
    if top is None:
        pytest.skip("no writable directory outside /tmp for a workspace")
    try:
        async for opened in open_sandbox(top):
            yield opened, top
    finally:
        await anyio.to_thread.run_sync(shutil.rmtree, top)


async def test_nothing_can_be_written_to_the_sandboxs_own_root(
    elsewhere: tuple[Sandbox, Path],
) -> None:
    sandbox, top = elsewhere
    beside = top / "beside-the-workspace"  # in a directory bwrap made for the bind
    targets = ["/x", "/newdir/", "/usr-copy", str(beside), str(top.parent / "filler")]
    outcome = await sandbox.run(SandboxPolicy(), PY3, "-c", WRITE, *targets)
    assert outcome.status == "succeeded", outcome
    assert stdout(outcome).splitlines() == [f"{t} refused {errno.EROFS}" for t in targets]
    assert not await anyio.Path(beside).exists()


async def test_tmp_dev_shm_and_the_workspace_stay_writable(
    elsewhere: tuple[Sandbox, Path],
) -> None:
    sandbox, _ = elsewhere
    ws = str(sandbox.workspace)
    targets = ["/tmp/a", "/tmp/dir/", "/dev/shm/b", f"{ws}/c", f"{ws}/d/", "e"]
    outcome = await sandbox.run(SandboxPolicy(), PY3, "-c", WRITE, *targets)
    assert outcome.status == "succeeded", outcome
    assert stdout(outcome).splitlines() == [f"{t} written" for t in targets]
    assert (await anyio.Path(sandbox.workspace / "e").stat()).st_size == 4096
    assert await anyio.Path(sandbox.workspace / "d").is_dir()
