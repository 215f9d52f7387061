"""Clause: config applies are serialised, stop at close, and never take a half-written file.

One apply at a time, from reading the live revisions to installing: a reload that
read them before a promotion cannot install after the promotion's generation. A
Host closed during an apply installs nothing and closes every generation (the
reload says it was rejected). The watcher applies a changed ``hostkit.toml`` only
once it settled (two polls agree on it, or it is at least one interval old);
``trigger()`` (SIGHUP) stays immediate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

import hostkit.host._host as host_module
from hostkit.host import ConfigWatcher, Host, HostConfig
from tests.contract._config_apply import write_config
from tests.cores_support import commit, core_host_config, make_core, manifest_text, set_live
from tests.hosts import request

pytestmark = pytest.mark.anyio


def manifest(instructions: str) -> str:
    return manifest_text(
        {"id": "notes", "model": "test", "memory": False, "instructions": instructions}
    )


class SlowPrepare:
    """Holds the next apply in ``_prepare_workspaces`` (after it composed) until released."""

    def __init__(self, real: Callable[[HostConfig], Awaitable[tuple[str, ...]]]) -> None:
        self.real = real
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.armed = False

    async def __call__(self, config: HostConfig) -> tuple[str, ...]:
        if self.armed:
            self.armed = False
            self.entered.set()
            with anyio.fail_after(20):
                await self.release.wait()
        return await self.real(config)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> SlowPrepare:
    prepare = SlowPrepare(host_module._prepare_workspaces)
    monkeypatch.setattr(host_module, "_prepare_workspaces", prepare)
    return prepare


def three_revisions(tmp_path: Path) -> tuple[HostConfig, Path, str, str, str]:
    path, v1 = make_core(tmp_path, "notes", manifest=manifest("v1"))
    v2 = commit(path, {"agent.yaml": manifest("v2")}, "v2")
    v3 = commit(path, {"agent.yaml": manifest("v3")}, "v3")
    config = core_host_config(
        tmp_path, {"notes": path}, providers={"test": {"kind": "scripted", "script": []}}
    )
    return config, path, v1, v2, v3


async def test_a_promotion_during_a_slow_reload_is_not_overwritten(
    tmp_path: Path, slow: SlowPrepare
) -> None:
    config, path, _v1, v2, v3 = three_revisions(tmp_path)
    async with Host.open(config) as host:
        await anyio.to_thread.run_sync(set_live, path, v2)  # another process promoted v2
        slow.armed = True
        async with anyio.create_task_group() as group:
            group.start_soon(host.reload)
            with anyio.fail_after(20):
                await slow.entered.wait()  # the reload composed v2 and is preparing
            group.start_soon(lambda: host.cores.promote("notes", v3, actor="ops"))
            with anyio.fail_after(20):
                # The promotion is recorded and its apply either waits for the reload's
                # (serialised) or has installed its generation already (the race).
                while not (  # noqa: ASYNC110
                    host._apply_lock.statistics().tasks_waiting or host.generation > 1
                ):
                    await anyio.sleep(0.01)
            assert await host.store.cores.live_revision("notes") == v3
            slow.release.set()
        pinned = await host.pin("notes", None)
        await host.release(pinned)
        served = host.config.agents["notes"].instructions
    assert pinned.core_revision == v3
    assert served == "v3"


async def test_aclose_during_a_reload_closes_every_generation(
    tmp_path: Path, slow: SlowPrepare
) -> None:
    config, path, _v1, v2, _v3 = three_revisions(tmp_path)
    host = await Host.open(config)
    first = host._generation
    await anyio.to_thread.run_sync(set_live, path, v2)
    slow.armed = True
    outcomes = []

    async def reload() -> None:
        outcomes.append(await host.reload())

    async with anyio.create_task_group() as group:
        group.start_soon(reload)
        with anyio.fail_after(20):
            await slow.entered.wait()
        group.start_soon(host.aclose)
        with anyio.fail_after(20):
            while not host._closed:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        slow.release.set()
    (outcome,) = outcomes
    assert outcome.rejected
    assert outcome.reason == "the Host is closing"
    assert host._generation is first  # nothing was installed after close
    assert all(g._closed for g in (host._generation, *host._retired))


async def test_the_watcher_applies_a_file_only_once_it_settled(tmp_path: Path) -> None:
    path = write_config(tmp_path, reply="first")
    (tmp_path / "edited").mkdir()
    full = write_config(tmp_path / "edited", reply="second").read_text()
    async with Host.open(path) as host:
        watcher = ConfigWatcher(host, interval_s=60)
        async with anyio.create_task_group() as group:
            await group.start(watcher.run)
            cut = full.index("[agents.assistant]")
            with path.open("r+") as file:  # an in-place rewrite, seen half-way
                file.truncate(0)
                file.write(full[:cut])
                file.flush()
                half = await watcher.check()
                file.write(full[cut:])
            moving = await watcher.check()  # changed again since the previous poll
            settled = await watcher.check()  # two polls agree: applied
            await watcher.stop()
        result = await host.turns.run(request())
    assert half is None
    assert moving is None
    assert settled is not None
    assert (settled.applied, settled.generation) == (True, 2)
    assert result.text == "second"


async def test_a_trigger_or_an_old_enough_file_applies_at_once(tmp_path: Path) -> None:
    path = write_config(tmp_path, reply="first")
    now = [0.0]
    async with Host.open(path) as host:
        # The polls are the test's own: a running watcher, woken by the trigger, would
        # race them for the same file.
        watcher = ConfigWatcher(host, interval_s=60, clock=lambda: now[0])
        write_config(tmp_path, reply="second")
        watcher.trigger()  # SIGHUP: not debounced
        forced = await watcher.check()
        write_config(tmp_path, reply="third")
        now[0] = path.stat().st_mtime_ns / 1e9 + 61  # last written over an interval ago
        aged = await watcher.check()
    assert forced is not None
    assert (forced.applied, forced.generation) == (True, 2)
    assert aged is not None
    assert (aged.applied, aged.generation) == (True, 3)
