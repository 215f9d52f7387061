"""Daemon clause: a graceful shutdown stops daemons in reverse order, bounded by one deadline.

Readiness is false from the moment a shutdown begins. Each daemon, last
registered first, gets ``stop()`` and then its ``run()`` must end, within
what is left of the deadline; a daemon still running at the deadline is
cancelled and named in ``DaemonExit.cut``. A lingering daemon (the HTTP
listener) is asked to stop in its turn but ended last, after the others
drained.
"""

from __future__ import annotations

import time

import anyio
import pytest

from hostkit.daemon import DaemonRegistry, RestartPolicy, Supervisor
from hostkit.errors import InvalidValue
from tests.contract._daemons import Scripted

pytestmark = pytest.mark.anyio


async def test_daemons_stop_in_reverse_registration_order_and_readiness_drops_first() -> None:
    log: list[str] = []
    registry = DaemonRegistry()
    supervisor: Supervisor | None = None
    readiness_at_stop: list[tuple[str, bool]] = []

    def seen(name: str) -> None:
        assert supervisor is not None
        readiness_at_stop.append((name, supervisor.ready))

    for name in ("delivery", "inbox", "webhooks"):
        registry.register(name, Scripted(name, log, on_stop=lambda n=name: seen(n)))
    supervisor = Supervisor(registry)
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        assert supervisor.ready
        assert [s.state for s in supervisor.statuses()] == ["running"] * 3
        exit_ = await supervisor.shutdown(5, reason="SIGTERM")
    assert log[3:] == [
        "stop:webhooks",
        "end:webhooks",
        "stop:inbox",
        "end:inbox",
        "stop:delivery",
        "end:delivery",
    ]
    assert readiness_at_stop == [("webhooks", False), ("inbox", False), ("delivery", False)]
    assert (exit_.code, exit_.reason, exit_.cut) == (0, "SIGTERM", ())
    assert [s.state for s in supervisor.statuses()] == ["stopped"] * 3
    assert supervisor.exit == exit_


async def test_a_daemon_that_ignores_stop_is_cut_at_the_deadline() -> None:
    log: list[str] = []
    stubborn = Scripted("stubborn", log, ignore_stop=True)
    polite = Scripted("polite", log)
    registry = DaemonRegistry()
    registry.register("stubborn", stubborn)
    registry.register("polite", polite)
    supervisor = Supervisor(registry)
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        began = time.monotonic()
        exit_ = await supervisor.shutdown(0.3)
        elapsed = time.monotonic() - began
    # The polite one stopped by itself; the stubborn one ran into the deadline.
    assert exit_.cut == ("stubborn",)
    assert "cut at the 0.3s deadline: stubborn" in exit_.reason
    assert exit_.code == 0
    assert stubborn.cancelled == 1
    assert polite.cancelled == 0
    assert 0.3 <= elapsed < 3.0
    assert log[-4:] == ["stop:polite", "end:polite", "stop:stubborn", "end:stubborn"]


async def test_a_lingering_daemon_is_stopped_first_and_ended_last() -> None:
    log: list[str] = []
    registry = DaemonRegistry()
    registry.register("inbox", Scripted("inbox", log))
    listener = Scripted("webhooks", log, ignore_stop=True)
    registry.register("webhooks", listener, linger=True)
    supervisor = Supervisor(registry)
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        exit_ = await supervisor.shutdown(5)
    # Asked first (it stops accepting), still serving while the inbox drained, ended last.
    assert log[2:] == ["stop:webhooks", "stop:inbox", "end:inbox", "end:webhooks"]
    assert exit_.cut == ()
    assert listener.cancelled == 1


async def test_a_function_daemon_is_stopped_by_cancellation() -> None:
    ended = anyio.Event()
    registry = DaemonRegistry()

    async def ticker(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            ended.set()

    registry.register("ticker", ticker)
    supervisor = Supervisor(registry)
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        exit_ = await supervisor.shutdown(5)
    assert ended.is_set()
    assert exit_.cut == ()
    assert supervisor.status("ticker").state == "stopped"


async def test_no_restart_after_a_shutdown_began_and_bad_deadlines_are_refused() -> None:
    log: list[str] = []
    registry = DaemonRegistry()
    registry.register("one", Scripted("one", log))
    supervisor = Supervisor(registry, policy=RestartPolicy(initial_s=0.01))
    with pytest.raises(InvalidValue, match="deadline_s"):
        supervisor.request_shutdown(deadline_s=-1)
    with pytest.raises(InvalidValue, match="deadline_s"):
        supervisor.request_shutdown(deadline_s=float("nan"))
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        await supervisor.shutdown(5)
    assert log == ["run:one", "stop:one", "end:one"]
    with pytest.raises(InvalidValue, match="runs once"):
        await supervisor.run()
