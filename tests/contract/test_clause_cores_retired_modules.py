"""Clause: a core revision's modules leave ``sys.modules`` once no generation runs it.

Each revision is imported under its own package (``hkcore_<id>_<sha12>``),
so a long-running Host that is promoted and reloaded for weeks would
otherwise keep every revision's modules, and all their globals, for good.
"""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import anyio
import pytest

from hostkit.host import Host
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, TurnRequest, new_id
from tests.cores_support import commit, core_host_config, make_core, set_live

pytestmark = pytest.mark.anyio

SLOTS = "DATA = ['revision {i}'] * 1000\n\nasync def boot(ctx):\n    return 'revision {i}'\n"
MANIFEST = {
    "model": "test",
    "instructions": "x",
    "slots": {"bootstrap": "slots:boot"},
    "memory": False,
}


def core_modules() -> list[str]:
    return sorted(name for name in sys.modules if name.startswith("hkcore_notes_"))


async def test_reloads_keep_only_the_live_revisions_modules(tmp_path: Path) -> None:
    path, _ = make_core(
        tmp_path, "notes", manifest=MANIFEST, files={"agent/slots.py": SLOTS.format(i=0)}
    )
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    config = core_host_config(tmp_path, {"notes": path})
    facts = ConversationFacts(channel="c", conversation_key="k", principal_key="p")
    retired: list[weakref.ref[object]] = []
    async with Host.open(config, capabilities=capabilities(model)) as host:
        for i in range(1, 6):
            request = TurnRequest(
                input="hi", principal=facts, request_id=new_id("req"), core_id="notes"
            )
            result = await host.turns.run(request)
            assert result.outcome == "completed", result
            (slots,) = [name for name in core_modules() if name.endswith(".slots")]
            retired.append(weakref.ref(sys.modules[slots]))
            sha = commit(path, {"agent/slots.py": SLOTS.format(i=i)}, f"revision {i}")
            await anyio.to_thread.run_sync(set_live, path, sha)
            assert (await host.reload()).applied
            assert len(core_modules()) <= 2  # the live revision's package and slots only
        gc.collect()
        # Every retired revision's module is gone, not only out of sys.modules.
        assert [ref() for ref in retired] == [None] * len(retired)
    assert core_modules() == []
