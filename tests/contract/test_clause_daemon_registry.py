"""Daemon clause: a registry holds uniquely named daemons in dependency order.

Names are lower-case words, optionally ``prefix:<channel id>``; a bad or
taken name, or something that is no daemon, is ``InvalidValue`` and leaves
the registry as it was. A restart policy refuses nonsense bounds.
"""

from __future__ import annotations

from typing import Any

import pytest

from hostkit.daemon import DaemonRegistry, RestartPolicy
from hostkit.errors import InvalidValue
from tests.contract._daemons import Scripted

pytestmark = pytest.mark.anyio


async def test_names_are_kept_in_registration_order() -> None:
    registry = DaemonRegistry()
    log: list[str] = []
    for name in ("delivery", "inbox", "poll:tg-main", "webhooks"):
        registry.register(name, Scripted(name, log))
    assert registry.names() == ("delivery", "inbox", "poll:tg-main", "webhooks")
    assert "inbox" in registry
    assert len(registry) == 4
    assert [entry.name for entry in registry] == list(registry.names())


@pytest.mark.parametrize(
    "name",
    ["", "Inbox", "in box", "1inbox", "inbox:", ":x", "a" * 33, "poll:" + "x" * 101, "x:y:z"],
)
async def test_bad_names_are_refused(name: str) -> None:
    registry = DaemonRegistry()
    with pytest.raises(InvalidValue, match="daemon name"):
        registry.register(name, Scripted("x", []))
    assert len(registry) == 0


async def test_a_taken_name_is_refused_and_the_first_kept() -> None:
    registry = DaemonRegistry()
    first = Scripted("inbox", [])
    registry.register("inbox", first)
    with pytest.raises(InvalidValue, match="already registered"):
        registry.register("inbox", Scripted("inbox", []))
    assert registry.entries()[0].daemon is first


async def test_a_function_is_a_daemon_and_other_values_are_not() -> None:
    registry = DaemonRegistry()

    async def serve(*, task_status: Any) -> None:
        task_status.started()

    entry = registry.register("timer", serve)
    assert hasattr(entry.daemon, "stop")
    with pytest.raises(InvalidValue, match="run\\(\\) and stop\\(\\)"):
        registry.register("broken", object())  # type: ignore[arg-type]
    with pytest.raises(InvalidValue, match="linger"):
        registry.register("other", serve, linger="yes")  # type: ignore[arg-type]
    assert registry.names() == ("timer",)


@pytest.mark.parametrize(
    "options",
    [
        {"initial_s": 0},
        {"initial_s": -1},
        {"initial_s": float("nan")},
        {"max_s": float("inf")},
        {"initial_s": 5, "max_s": 1},
        {"factor": 0.5},
        {"factor": True},
        {"healthy_after_s": 0},
    ],
)
async def test_restart_policy_refuses_bad_bounds(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidValue):
        RestartPolicy(**options)


async def test_restart_delay_grows_exponentially_up_to_the_cap() -> None:
    policy = RestartPolicy(initial_s=0.5, max_s=5.0, factor=2.0)
    assert [policy.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert policy.delay(10_000) == 5.0
