"""A Host nobody closed does not keep its interpreter alive.

A script that returns without ``aclose()``, an IPython session that exits and a
kernel asked to shut down all end by interpreter exit. Python joins every
non-daemon thread before it runs atexit hooks, so a store thread that waits for
work forever would hang the process (and keep the notebook's emergency stop from
ever running). What the turn committed before the exit is kept.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from hostkit.host import Host, parse_config
    from hostkit.testing import Reply, ScriptedModel, capabilities
    from hostkit.types import ConversationFacts, TurnRequest, new_id

    async def main(root: Path) -> None:
        config = parse_config(
            {
                "host": {"database": str(root / "host.db"), "workspace": str(root)},
                "providers": {"scripted": {"kind": "scripted"}},
                "agents": {"assistant": {"provider": "scripted", "memory": False}},
            },
            base_dir=root,
        )
        host = await Host.open(config, capabilities=capabilities(ScriptedModel([Reply("hi")])))
        facts = ConversationFacts(channel="cli", conversation_key="c", principal_key="me")
        request = TurnRequest(input="hello", principal=facts, request_id=new_id("req"))
        result = await host.turns.run(request)
        print(result.outcome, flush=True)
        # Returns without host.aclose(): the store's connections stay open.

    asyncio.run(main(Path(sys.argv[1])))
    print("main returned", flush=True)
    """
)


def test_a_script_that_never_closes_its_host_exits(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["completed", "main", "returned"]
    with closing(sqlite3.connect(tmp_path / "host.db")) as conn:
        statuses = [row[0] for row in conn.execute("SELECT status FROM turns")]
    assert statuses == ["completed"]
