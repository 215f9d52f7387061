"""A background ``terminal.run`` leaves no process behind: not on stop, not on Host close.

The command is the tree from ``test_process_tree``: a root and grandchildren
that all ignore SIGTERM, one of which called ``setsid()`` (with a child of
its own) and one that moved to its own process group. It is started through
the effect pipeline with ``argv[0]`` an absolute path (``sys.executable``),
which is a program, not a workspace path, and so is allowed.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import UNSANDBOXED, ProcessSupervisor, TerminalRuns
from hostkit.effects import EffectRuntime
from tests.contract.test_effects_terminal import KEY, Terminal, Tools, output
from tests.security.test_process_tree import TREE, TREE_SIZE, Record, survivors, wait_marks

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("end", ["stop", "host_close", "registry_close"])
async def test_no_process_of_a_background_run_survives_its_end(
    end: str, authority: AuthorityResolver, tmp_path: Path, reaper: list[Record]
) -> None:
    workspace, marks = tmp_path / "ws", tmp_path / "marks"
    await anyio.Path(workspace).mkdir()
    await anyio.Path(marks).mkdir()
    supervisor = ProcessSupervisor()
    runs = TerminalRuns(
        supervisor=supervisor,
        workspace=WorkspaceScope(workspace),
        artifact_root=tmp_path / "artifacts",
        artifact_key=KEY,
        grace_s=0.3,
        confirm_s=5.0,
    )
    try:
        runtime = EffectRuntime(toolsets=Tools(runs.tools(sandbox=UNSANDBOXED), workspace))
        session = await Terminal(
            runs, supervisor, runtime, authority, workspace, tmp_path
        ).session()
        started = await session.call(
            "terminal.run", argv=[sys.executable, "-c", TREE, str(marks)], background=True
        )
        assert started.status == "succeeded", started.error
        run_id = output(started)["run_id"]
        records = await wait_marks(marks, TREE_SIZE)
        reaper.extend(records)
        assert len(survivors(records)) == TREE_SIZE

        if end == "stop":
            stopped = await session.call("terminal.stop", run_id=run_id)
            assert stopped.status == "cancelled"  # only ever with cleanup confirmed
            assert output(stopped)["exit_code"] == -signal.SIGKILL  # the root ignored TERM
        elif end == "host_close":
            await supervisor.aclose()  # the Host's order: supervisor, then the registry
            await runs.aclose()
        else:
            await runs.aclose()
        assert survivors(records) == []
        final = await session.call("terminal.status", run_id=run_id)
        assert final.status == "cancelled"
        assert output(final)["stdout"]["tail"] == "tree started\n"
    finally:
        await supervisor.aclose()
        await runs.aclose()
