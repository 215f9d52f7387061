"""A tool printing 1 GiB through ``terminal.run`` keeps the Host's memory bounded.

The whole stream goes to the private artifact file; the Host holds only the
12,000-character tails and a few queued chunks, and the model view stays
within its bound. (bench/effects_bench.py prints the same figure against
``subprocess.run``.)
"""

from __future__ import annotations

import sys

import anyio
import pytest

from hostkit.types import EffectResult
from tests.contract.test_effects_terminal import Terminal
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
