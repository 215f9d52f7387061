"""Clause: capability sources an embedder supplied keep serving later generations.

A Host opened with ``capabilities=...`` must not fall back to the default sources
when a reload or a core promotion builds generation N+1 (runtime-composition:
sources are the embedder's; the runtime only decides when to ask). Supplied
sources close once they are replaced and no generation uses them, or with the Host.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest

from hostkit.errors import ProviderError, TurnRejected
from hostkit.host import Host, ProviderRequest, RuntimeCapabilities
from hostkit.providers import ModelProvider
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


@dataclasses.dataclass
class _FailingProviders:
    """A provider source whose every request waits for ``fail``, then fails (an outage)."""

    entered: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    fail: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    closed: anyio.Event = dataclasses.field(default_factory=anyio.Event)

    async def model_provider(self, request: ProviderRequest) -> ModelProvider:
        self.entered.set()
        await self.fail.wait()
        raise ProviderError("the provider is down", provider="failing")

    async def aclose(self) -> None:
        self.closed.set()


async def test_a_generation_replaced_while_its_last_pin_fails_closes(tmp_path: Path) -> None:
    """A pin that fails after an apply replaced its generation drops the last use of it:
    the generation and the sources only it used close then, not with the Host."""
    path = write_config(tmp_path, reply="x")
    failing = _FailingProviders()
    caps = dataclasses.replace(capabilities(ScriptedModel([Reply("x")])), providers=failing)
    async with Host.open(path, capabilities=caps) as host:
        _, replacement = _supplied("from the replacement")
        async with anyio.create_task_group() as group:

            async def doomed() -> None:
                with pytest.raises(TurnRejected, match="the provider is down"):
                    await host.turns.run(request())

            group.start_soon(doomed)
            with anyio.fail_after(10):
                await failing.entered.wait()  # pinning generation 1
            assert await host.apply_config(host.declared_config, capabilities=replacement) == 2
            assert not failing.closed.is_set()  # still pinned while the pin runs
            failing.fail.set()
        with anyio.fail_after(5):
            await failing.closed.wait()
        answered = await host.turns.run(request(conversation="after"))
    assert (answered.generation, answered.text) == (2, "from the replacement")
