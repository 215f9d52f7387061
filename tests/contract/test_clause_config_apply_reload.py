"""Clause: ``host.reload()`` re-reads hostkit.toml and applies a new generation only when
something changed; a configuration that fails validation leaves generation N serving and
says why; ``ConfigWatcher`` reloads on a changed file (not on a touch) and on ``trigger()``;
``nb.reload()`` returns (and shows) the outcome.

Real Hosts on real files; nothing is faked.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import anyio
import pytest

from hostkit.errors import InvalidValue
from hostkit.host import ConfigWatcher, Host, ReloadOutcome, parse_config
from hostkit.notebook import NotebookHost
from hostkit.notebook._approver import WidgetApprover
from hostkit.types import InboundEnvelope
from tests.contract._config_apply import write_config
from tests.hosts import request

pytestmark = pytest.mark.anyio


async def test_reload_with_nothing_changed_makes_no_generation(tmp_path: Path) -> None:
    path = write_config(tmp_path, reply="same", times=2)
    async with Host.open(path) as host:
        unchanged = await host.reload()
        # A comment and a different key order are the same configuration.
        text = path.read_text().replace("[serve]", "# reordered\n[serve]")
        path.write_text(text)
        os.utime(path, ns=(1, 1))
        commented = await host.reload()
        answered = await host.turns.run(request())
    assert unchanged == ReloadOutcome(generation=1, applied=False)
    assert commented == ReloadOutcome(generation=1, applied=False)
    assert str(unchanged) == "nothing changed; generation 1 keeps serving"
    assert (answered.generation, answered.text) == (1, "same")


async def test_a_host_built_in_code_reloads_the_same_configuration(tmp_path: Path) -> None:
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db")},
            "providers": {"test": {"kind": "scripted", "script": [{"reply": "x"}]}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=tmp_path,
    )
    async with Host.open(config) as host:
        assert await host.reload() == ReloadOutcome(generation=1, applied=False)
        assert host.generation == 1


BAD = {
    "not TOML": ("[agents.assistant\nprovider = 1", "is not valid TOML"),
    "an unknown provider": (
        '[providers.p]\nkind = "scripted"\n[agents.assistant]\nprovider = "missing"',
        "agents.assistant.provider",
    ),
    "a bad value": (
        '[providers.p]\nkind = "scripted"\n[agents.assistant]\nprovider = "p"\nmax_steps = 0',
        "agents.assistant.max_steps",
    ),
    "an unknown key": (
        '[providers.p]\nkind = "scripted"\n[agents.assistant]\nprovider = "p"\nprovder = "p"',
        "unknown key 'provder' in [agents.assistant]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
async def test_an_invalid_config_leaves_generation_n_serving_and_says_why(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    text, named = BAD[case]
    path = write_config(tmp_path, reply="still here", times=2)
    good = path.read_text()
    async with Host.open(path) as host:
        path.write_text(text)
        with caplog.at_level(logging.WARNING, logger="hostkit.host"):
            outcome = await host.reload()
        served = await host.turns.run(request())
        path.write_text(good.replace("still here", "fixed"))
        fixed = await host.reload()
    assert outcome.rejected
    assert not outcome.applied
    assert outcome.generation == 1
    assert outcome.reason is not None
    assert named in outcome.reason
    assert len(outcome.reason) <= 500
    assert str(outcome).startswith("config rejected: ")
    assert str(outcome).endswith("; generation 1 keeps serving")
    assert [r.getMessage() for r in caplog.records if r.name == "hostkit.host"] == [str(outcome)]
    # Nothing was half-applied: the same generation, the same provider, serving on.
    assert (served.generation, served.text) == (1, "still here")
    # The next valid file is generation 2: a rejected one took no number.
    assert (fixed.applied, fixed.generation, fixed.changes) == (True, 2, ("providers.test",))


async def test_a_missing_file_is_rejected_too(tmp_path: Path) -> None:
    path = write_config(tmp_path, reply="x")
    async with Host.open(path) as host:
        path.unlink()
        outcome = await host.reload()
    assert outcome.rejected
    assert outcome.reason is not None
    assert "no configuration file" in outcome.reason


async def test_the_watcher_reloads_a_changed_file_but_not_a_touched_one(tmp_path: Path) -> None:
    path = write_config(tmp_path, reply="first")
    send, outcomes = anyio.create_memory_object_stream[ReloadOutcome](10)
    async with Host.open(path) as host, send, outcomes:
        watcher = ConfigWatcher(host, interval_s=0.1, on_outcome=send.send_nowait)
        async with anyio.create_task_group() as group:
            await group.start(watcher.run)
            write_config(tmp_path, reply="second")
            with anyio.fail_after(10):
                edited = await outcomes.receive()
            # A touch moves the mtime only: the hash is the same, so no reload at all.
            os.utime(path, ns=(10**18, 10**18))
            checked = await watcher.check()
            watcher.trigger()
            with anyio.fail_after(10):
                triggered = await outcomes.receive()
            await watcher.stop()
        answer = await host.turns.run(request())
    assert edited.applied
    assert edited.generation == 2
    assert checked is None
    # trigger() (SIGHUP) asks the Host even when nothing changed; the Host says so.
    assert triggered == ReloadOutcome(generation=2, applied=False)
    assert watcher.last == triggered
    assert (answer.generation, answer.text) == (2, "second")


async def test_the_serve_daemon_shows_the_generation_and_the_last_reload(tmp_path: Path) -> None:
    path = write_config(tmp_path, reply="first", serve="reload_interval_s = 0")
    async with Host.open(path) as host:
        with pytest.raises(InvalidValue, match=r"use host\.reload"):
            host.serve(port=0).reload_now()
        async with host.serve(port=0, watch=True) as daemon:
            assert daemon.ready
            before = await daemon.status()
            path.write_text("[agents")
            daemon.reload_now()
            with anyio.fail_after(10):
                # The watcher reports only to the daemon's status: read it as a status line does.
                while (await daemon.status()).reload is None:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            after = await daemon.status()
    assert "reload" in {d.name for d in before.daemons}
    assert (before.generation, before.reload) == (1, None)
    assert after.generation == 1
    assert after.reload is not None
    assert after.reload.rejected


async def test_nb_reload_returns_the_outcome(tmp_path: Path) -> None:
    path = write_config(tmp_path, reply="first")
    async with Host.open(path) as host:
        nb = NotebookHost(host, WidgetApprover())
        write_config(tmp_path, reply="second", instructions="You are the second.")
        outcome = await nb.reload(display=False)
        again = await nb.reload(display=False)
    assert (outcome.applied, outcome.generation) == (True, 2)
    assert set(outcome.changes) == {"providers.test", "agents.assistant"}
    assert str(outcome) == "generation 2 applied (providers.test; agents.assistant)"
    assert "generation 2 applied" in outcome._repr_html_()
    assert again == ReloadOutcome(generation=2, applied=False)


async def test_an_unreadable_core_does_not_blind_the_watcher_to_the_file(tmp_path: Path) -> None:
    not_a_repository = tmp_path / "gone"
    not_a_repository.mkdir()
    extra = f'[cores.notes]\npath = "{not_a_repository}"'
    path = write_config(tmp_path, reply="first", extra=extra)
    async with Host.open(path) as host:
        watcher = ConfigWatcher(host, interval_s=60)
        async with anyio.create_task_group() as group:
            await group.start(watcher.run)
            unchanged = await watcher.check()
            write_config(tmp_path, reply="second", extra=extra)
            settling = await watcher.check()  # just written: the next poll must agree
            edited = await watcher.check()
            await watcher.stop()
        reasons = host.warnings
    assert unchanged is None
    assert settling is None
    # The edit is seen and applied; the core that was never promoted stays unavailable.
    assert edited is not None
    assert (edited.applied, edited.generation) == (True, 2)
    assert any("core 'notes' has no live revision" in line for line in reasons)


HOOKS = """
[agents.helper]
provider = "test"
memory = false

[channels.hooks]
kind = "webhook"
agent = "helper"
secret_env = "RELOAD_HOOK_SECRET"
"""


async def test_a_channel_a_reload_removed_answers_nothing_by_another_agent(
    tmp_path: Path,
) -> None:
    """The daemon's routes stay until a restart; a message that still arrives for a removed
    channel is dead-lettered, never answered by the default agent with its own tools."""
    path = write_config(tmp_path, reply="answered", times=4, extra=HOOKS)
    env = {"RELOAD_HOOK_SECRET": "hook-secret-for-reload-7c1d"}
    async with Host.open(path) as host, host.serve(port=0, env=env):
        write_config(tmp_path, reply="answered", times=4)  # [channels.hooks] is gone
        outcome = await host.reload()
        assert outcome.applied, outcome
        receipt = await host.inbox.accept(
            InboundEnvelope(
                channel_instance_id="hooks",
                platform_event_key="late-1",
                conversation_key="room:bob",
                principal_key="bob",
                authenticated_by="hmac-sha256",
                received_at=time.time(),
                payload="hello",
            )
        )
        with anyio.fail_after(20):
            while True:
                record = await host.inbox.record(receipt.inbound_id)
                assert record is not None
                if record.state not in ("ready", "claimed"):
                    break
                await anyio.sleep(0.05)
    assert record.state == "dead_lettered", record
    assert record.turn_id is None
    assert "no longer configured" in record.failure_message
