"""Clause: capability sources an embedder supplied keep serving later generations.

A Host opened with ``capabilities=...`` must not fall back to the default sources
when a reload or a core promotion builds generation N+1 (runtime-composition:
sources are the embedder's; the runtime only decides when to ask). Supplied
sources close once they are replaced and no generation uses them, or with the Host.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hostkit.host import Host, RuntimeCapabilities
from hostkit.testing import Reply, ScriptedModel, capabilities
from tests.contract._config_apply import ObservedProviders, write_config
from tests.hosts import request

pytestmark = pytest.mark.anyio


def _supplied(reply: str) -> tuple[ObservedProviders, RuntimeCapabilities]:
    caps = capabilities(ScriptedModel([Reply(reply)], repeat_last=True))
    observed = ObservedProviders(caps.providers, at_close=_nothing)
    return observed, dataclasses.replace(caps, providers=observed)


async def _nothing() -> None:
    return None


async def test_a_reload_keeps_the_supplied_sources_and_replacing_them_closes_the_old(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path, reply="from the file's provider", times=4)
    first, caps = _supplied("from the supplied provider")
    async with Host.open(path, capabilities=caps) as host:
        before = await host.turns.run(request())
        path.write_text(path.read_text().replace("first revision", "second revision"))
        outcome = await host.reload()
        after = await host.turns.run(request())
        assert not first.closed.is_set()
        second, caps2 = _supplied("from the second supplied provider")
        await host.apply_config(host.declared_config, capabilities=caps2)
        replaced = await host.turns.run(request())
        # Replaced and no generation uses it any more: closed now, not with the Host.
        assert first.closed.is_set()
        assert not second.closed.is_set()
    assert second.closed.is_set()
    assert outcome.applied
    assert outcome.generation == 2
    assert before.text == after.text == "from the supplied provider"
    assert replaced.text == "from the second supplied provider"
