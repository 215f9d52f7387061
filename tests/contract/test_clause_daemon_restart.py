"""Daemon clause: a daemon that raises or returns is restarted with backoff; peers keep running.

The supervisor reports each failure (state ``backoff``, the restart count,
the redacted error, when the restart is due), waits the policy's
exponential delay, starts the daemon again, and resets the backoff after a
healthy run. A ``HostkitError`` that is not ``retryable`` (a ``ConfigError``,
a refused bot token) leaves the daemon ``failed``; a retryable one restarts.
No failure touches the other daemons.
"""

from __future__ import annotations

import anyio
import pytest

from hostkit.daemon import DaemonRegistry, RestartPolicy, Supervisor
from hostkit.errors import ConfigError, PollError, RuntimeFailure
from tests.contract._daemons import Changes, Scripted

pytestmark = pytest.mark.anyio

FAST = RestartPolicy(initial_s=0.01, max_s=0.05, factor=2.0, healthy_after_s=60.0)
WALL = 1_000.0


async def test_a_failing_daemon_restarts_with_backoff_and_peers_keep_running() -> None:
    log: list[str] = []
    flaky = Scripted(
        "flaky",
        log,
        failures=(
            RuntimeError("boom api_key=sk-live-0123456789abcdef0123"),
            RuntimeError("again"),
            None,
        ),
    )
    steady = Scripted("steady", log)
    registry = DaemonRegistry()
    registry.register("steady", steady)
    registry.register("flaky", flaky)
    changes = Changes()
    supervisor = Supervisor(registry, policy=FAST, wall_clock=lambda: WALL, on_change=changes)
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        await changes.wait_for("flaky", "running", count=3)
        assert supervisor.ready
        status = supervisor.status("flaky")
        assert status.restarts == 2
        assert status.last_error == "RuntimeError: again"
        backoffs = [s for s in changes.of("flaky") if s.state == "backoff"]
        assert [s.restarts for s in backoffs] == [1, 2]
        # The delay doubles between consecutive failures.
        assert [s.next_restart_at for s in backoffs] == [WALL + 0.01, WALL + 0.02]
        # The error is redacted before any status shows it.
        assert backoffs[0].last_error is not None
        assert "sk-live" not in backoffs[0].last_error
        assert backoffs[0].last_error.startswith("RuntimeError: boom")
        # The peer started once and never left running.
        assert steady.runs == 1
        assert [s.state for s in changes.of("steady")] == ["running"]
        exit_ = await supervisor.shutdown(5)
    assert exit_.code == 0
    assert flaky.runs == 3


async def test_a_daemon_that_returns_is_restarted() -> None:
    log: list[str] = []
    quitter = Scripted("quitter", log, returns=True)
    registry = DaemonRegistry()
    registry.register("quitter", quitter)
    changes = Changes()
    supervisor = Supervisor(registry, policy=FAST, on_change=changes)
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        await changes.wait_for("quitter", "backoff", count=2)
        assert supervisor.status("quitter").last_error == "returned without being asked to stop"
        await supervisor.shutdown(5)
    assert quitter.runs >= 2
    assert supervisor.status("quitter").state == "stopped"


async def test_while_in_backoff_the_status_says_so_and_readiness_is_false() -> None:
    log: list[str] = []
    registry = DaemonRegistry()
    registry.register("steady", Scripted("steady", log))
    registry.register("flaky", Scripted("flaky", log, failures=(OSError("port busy"),)))
    slow = RestartPolicy(initial_s=30.0, max_s=60.0)
    supervisor = Supervisor(registry, policy=slow, wall_clock=lambda: WALL)
    async with anyio.create_task_group() as group:
        # started() follows every daemon's first start, failed ones included.
        await group.start(supervisor.run)
        status = supervisor.status("flaky")
        assert (status.state, status.restarts, status.next_restart_at) == ("backoff", 1, WALL + 30)
        assert status.last_error == "OSError: port busy"
        assert supervisor.status("steady").state == "running"
        assert not supervisor.ready
        # A shutdown cuts the 30 s backoff short: no restart, stopped at once.
        with anyio.fail_after(5):
            exit_ = await supervisor.shutdown(10)
    assert exit_.cut == ()
    assert supervisor.status("flaky").state == "stopped"
    assert log.count("run:flaky") == 1


async def test_backoff_resets_after_a_healthy_run() -> None:
    now = [0.0]
    log: list[str] = []
    failing = Scripted(
        "failing",
        log,
        failures=(RuntimeError("1"), RuntimeError("2"), None, RuntimeError("4")),
    )
    registry = DaemonRegistry()
    registry.register("failing", failing)
    changes = Changes()
    policy = RestartPolicy(initial_s=0.01, max_s=1.0, factor=4.0, healthy_after_s=50.0)
    supervisor = Supervisor(
        registry, policy=policy, clock=lambda: now[0], wall_clock=lambda: WALL, on_change=changes
    )
    # The third run serves until told to fail: by then it has run "healthily" for 100 s.
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        await changes.wait_for("failing", "running", count=3)
        now[0] += 100.0
        await failing.stop()  # the test daemon's run returns: a failure after a healthy run
        await changes.wait_for("failing", "running", count=4)
        await changes.wait_for("failing", "backoff", count=4)
        delays = [
            round(s.next_restart_at - WALL, 6)
            for s in changes.of("failing")
            if s.state == "backoff" and s.next_restart_at is not None
        ]
        await supervisor.shutdown(5)
    # 0.01, 0.04 (consecutive), then back to 0.01 after the healthy run, then 0.04 again.
    assert delays == [0.01, 0.04, 0.01, 0.04]


@pytest.mark.parametrize(
    "error", [ConfigError("no token"), PollError("no token", status=401, retryable=False)]
)
async def test_a_permanent_error_leaves_the_daemon_failed_and_the_rest_running(
    error: Exception,
) -> None:
    log: list[str] = []
    steady = Scripted("steady", log)
    registry = DaemonRegistry()
    registry.register("steady", steady)
    registry.register("misconfigured", Scripted("bad", log, failures=(error,)))
    supervisor = Supervisor(registry, policy=FAST)
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        status = supervisor.status("misconfigured")
        assert (status.state, status.restarts) == ("failed", 0)
        assert status.last_error == f"{type(error).__name__}: no token"
        # Not restarted, even after many backoff periods.
        await anyio.sleep(0.1)
        assert log.count("run:bad") == 1
        assert supervisor.status("steady").state == "running"
        assert not supervisor.ready
        exit_ = await supervisor.shutdown(5)
    assert exit_.code == 0
    assert steady.runs == 1


async def test_when_every_daemon_failed_the_run_ends_with_code_1() -> None:
    registry = DaemonRegistry()
    registry.register("only", Scripted("only", [], failures=(ConfigError("bad"),)))
    supervisor = Supervisor(registry, policy=FAST)
    with anyio.fail_after(5):
        exit_ = await supervisor.run()
    assert exit_.code == 1
    assert "every daemon failed" in exit_.reason


async def test_a_retryable_hostkit_error_is_restarted() -> None:
    registry = DaemonRegistry()
    daemon = Scripted("store", [], failures=(RuntimeFailure("busy", retryable=True), None))
    registry.register("store", daemon)
    changes = Changes()
    supervisor = Supervisor(registry, policy=FAST, on_change=changes)
    async with anyio.create_task_group() as group:
        await group.start(supervisor.run)
        await changes.wait_for("store", "running", count=2)
        assert supervisor.status("store").restarts == 1
        await supervisor.shutdown(5)
    assert daemon.runs == 2
