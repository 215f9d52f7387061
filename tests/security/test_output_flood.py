"""A tool printing 1 GiB through ``terminal.run`` keeps the Host's memory bounded.

The whole stream goes to the private artifact file; the Host holds only the
12,000-character tails and a few queued chunks, and the model view stays
within its bound. (bench/effects_bench.py prints the same figure against
``subprocess.run``.)
"""

from __future__ import annotations

import sys

import anyio
import psutil
import pytest

from tests.contract.test_effects_terminal import Terminal

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
    host = psutil.Process()
    baseline = host.memory_info().rss
    peak = baseline
    done = anyio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, host.memory_info().rss)
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(sample)
        with anyio.fail_after(240):
            result = await session.call(
                "terminal.run", argv=[sys.executable, "-c", FLOOD], deadline_s=200
            )
        done.set()

    assert result.status == "succeeded", result.error
    # The model view is cut at its bound inside the stdout tail; the sizes come before it.
    view = result.views.model
    assert len(view) <= 8_200
    assert view.endswith("more characters]")
    stdout = view[view.index('"stdout"') :]
    assert f'"total_bytes": {GIB}' in stdout
    assert '"truncated": true' in stdout
    assert peak - baseline < 100 * MB, f"RSS grew by {(peak - baseline) / MB:.1f} MiB"
