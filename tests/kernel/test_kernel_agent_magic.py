"""A real kernel running cells as *Run All* does: an ``%%agent`` cell with no Host yet, and the
next cell sent at once. That next cell finds the kernel's Host open (``hn.current()``), with a
useful repr, while the turn still fills the first cell's panel."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.kernel.frontend import KernelChoice, running_kernel

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HOSTKIT_TOML = """
[providers.scripted]
kind = "scripted"
script = [{ reply = "hello from a real kernel" }]

[agents.assistant]
provider = "scripted"
memory = false
"""
NEXT_CELL = """\
import hostkit.notebook as hn
print(hn.current() is not None)
view = _  # the panel the %%agent cell returned
result = await view
nb = hn.current()
print(repr(nb))
print(result.text)"""
CELL_TIMEOUT_S = 30.0


async def test_the_cell_after_an_agent_cell_finds_the_host_open(
    kernel: KernelChoice, tmp_path: Path
) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(HOSTKIT_TOML)
    async with running_kernel(kernel, cwd=tmp_path) as frontend:
        load = frontend.execute("%load_ext hostkit")
        await frontend.finished(load, timeout_s=CELL_TIMEOUT_S)
        agent = frontend.execute("%%agent\nSay hello.")
        after = frontend.execute(NEXT_CELL)  # sent at once, as Run All does
        await frontend.finished(agent, timeout_s=CELL_TIMEOUT_S)
        [shown] = frontend.outputs(agent, "execute_result")
        assert "application/vnd.jupyter.widget-view+json" in shown.content["data"]
        await frontend.finished(after, timeout_s=CELL_TIMEOUT_S)
        ready, *described, answer = frontend.stdout(after).splitlines()
        database = str(tmp_path / "hostkit.db")
        await frontend.finished(frontend.execute("await nb.aclose()"), timeout_s=CELL_TIMEOUT_S)

    assert ready == "True"
    assert described[:3] == [
        "NotebookHost",
        f"  database: {database}",
        "  agents: assistant (default)",
    ]
    assert answer == "hello from a real kernel"
