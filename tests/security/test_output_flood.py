"""A tool printing 1 GiB through ``terminal.run`` keeps the Host's memory and disk bounded.

The whole stream goes to the private artifact file; the Host holds only the
12,000-character tails and a few queued chunks, and the model view stays
within its bound. (bench/effects_bench.py prints the same figure against
``subprocess.run``.) The artifact is the Host's own file, out of the
sandbox's reach: each stream is held to the agent's ``file_size_mb``, and a
run that passes it fails, as a process whose file passes the limit does.
"""

from __future__ import annotations

import sys

import anyio
import pytest

from hostkit.builtins.process import UNSANDBOXED, ResourceLimits, SandboxPolicy, probe_bubblewrap
from hostkit.effects import ToolContext, ToolOutcome
from hostkit.types import EffectResult
from tests.contract.test_effects_terminal import Terminal
from tests.parts import missing
from tests.support import peak_rss_growth

pytestmark = pytest.mark.anyio

MB = 1 << 20
GIB = 1 << 30
FLOOD = (
    "import sys\n"
    "block = b'z' * 1048576\n"
    f"for _ in range({GIB // MB}): sys.stdout.buffer.write(block)\n"
)


async def test_a_1_gib_flood_is_drained_with_bounded_memory(terminal: Terminal) -> None:
    session = await terminal.session()

    async def flood() -> EffectResult:
        with anyio.fail_after(240):
            return await session.call(
                "terminal.run", argv=[sys.executable, "-c", FLOOD], deadline_s=200
            )

    result, growth = await peak_rss_growth(flood)
    assert result.status == "succeeded", result.error
    # The model view is cut at its bound inside the stdout tail; the sizes come before it.
    view = result.views.model
    assert len(view) <= 8_200
    assert view.endswith("more characters]")
    stdout = view[view.index('"stdout"') :]
    assert f'"total_bytes": {GIB}' in stdout
    assert '"truncated": true' in stdout
    assert growth < 100 * MB, f"RSS grew by {growth / MB:.1f} MiB"


@pytest.mark.parametrize("sandboxed", [True, False], ids=["bubblewrap", "unsandboxed"])
async def test_an_endless_writer_stops_at_the_file_size_limit_of_the_host_disk(
    terminal: Terminal, sandboxed: bool
) -> None:
    if sandboxed and not (probe := await anyio.to_thread.run_sync(probe_bubblewrap)).ok:
        missing("sandbox", probe.reason)
    base = SandboxPolicy() if sandboxed else UNSANDBOXED
    policy = SandboxPolicy(mode=base.mode, limits=ResourceLimits(file_size_mb=1))
    tool = next(t for t in terminal.runs.tools(sandbox=policy) if t.name == "terminal.run")
    context = ToolContext("turn", "sess", "core", "owner", terminal.workspace)
    with anyio.fail_after(60):
        outcome = await tool.invoke(context, tool.validate({"argv": ["yes"], "deadline_s": 50}))
    assert isinstance(outcome, ToolOutcome)
    assert outcome.status == "failed"
    assert "stdout passed the output limit of 1 MiB" in (outcome.error or "")
    on_disk = [p for p in terminal.artifacts.rglob("*.stdout") if p.is_file()]
    assert [p.stat().st_size for p in on_disk] == [MB]
