"""Clause: live config apply builds generation N+1; running turns finish on N, new turns
use N+1, N's sources close after its last turn, and a turn waiting for its busy session
pins the generation current when it is admitted.

The Host is real (SQLite, a hostkit.toml on disk, the default capability
sources with a scripted provider); the only adapter is the observer around
the provider source of the first generation applied (generation 2), whose
model calls answer only once the test lets them: a turn is running for
certain while the test reloads, however loaded the machine.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.host import DefaultCapabilities, Host, RuntimeCapabilities, load_config
from hostkit.types import TurnResult
from tests.contract._config_apply import ObservedProviders, write_config
from tests.hosts import request, turn_rows

pytestmark = pytest.mark.anyio


async def observed_host(
    host: Host, monkeypatch: pytest.MonkeyPatch, *, hold: anyio.Event
) -> ObservedProviders:
    """Apply the file's configuration again (generation 2) on default sources whose provider
    source is observed: built by the Host itself, so the generation owns and closes them.
    Its model calls wait for ``hold``."""
    config = await anyio.to_thread.run_sync(load_config, host.config.source)
    built = DefaultCapabilities.from_config(config, store=host.store)

    async def statuses() -> list[tuple[str, str]]:
        return await turn_rows(host)

    observed = ObservedProviders(built.providers, statuses, hold=hold)
    defaults = DefaultCapabilities.from_config

    def once(*args: Any, **kwargs: Any) -> RuntimeCapabilities:
        monkeypatch.setattr(DefaultCapabilities, "from_config", defaults)
        return dataclasses.replace(built, providers=observed)

    monkeypatch.setattr(DefaultCapabilities, "from_config", once)
    assert await host.apply_config(config) == 2
    return observed


async def test_a_reload_mid_turn_leaves_the_running_turn_on_the_old_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, reply="from the old script")
    async with Host.open(path) as host:
        answer = anyio.Event()  # the slow turn's model answers only when this is set
        observed = await observed_host(host, monkeypatch, hold=answer)
        results: dict[str, TurnResult] = {}

        async def slow() -> None:
            results["slow"] = await host.turns.run(request("slow", conversation="a"))

        async with (
            host.events.subscribe(lambda e: e.kind == "turn.started") as started,
            anyio.create_task_group() as group,
        ):
            group.start_soon(slow)
            with anyio.fail_after(10):
                await started.receive()
            write_config(tmp_path, reply="from the new script", instructions="You are the second.")
            outcome = await host.reload()
            assert outcome.applied
            assert outcome.generation == host.generation == 3
            assert "providers.test" in outcome.changes
            assert "agents.assistant" in outcome.changes
            results["next"] = await host.turns.run(request("next", conversation="b"))
            # The slow turn still runs on generation 2: its sources stay open.
            assert "slow" not in results
            assert not observed.closed.is_set()
            answer.set()
        with anyio.fail_after(5):
            await observed.closed.wait()
    assert (results["slow"].generation, results["slow"].text) == (2, "from the old script")
    assert (results["next"].generation, results["next"].text) == (3, "from the new script")
    assert results["slow"].core_revision != results["next"].core_revision
    # Generation 2's provider source closed only once its last turn had its terminal record.
    assert sorted(status for _, status in observed.seen_at_close) == ["completed", "completed"]


async def test_a_turn_ending_while_a_reload_finishes_still_closes_its_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload installs the new generation, then closes what the old declarations had (MCP
    connections, which may take seconds). A turn of the old generation that ended in
    between was released into nothing: the old generation stayed open for good, its
    sources never closed."""
    path = write_config(tmp_path, reply="from the old script")
    async with Host.open(path) as host:
        answer = anyio.Event()
        observed = await observed_host(host, monkeypatch, hold=answer)
        prune = host.mcp.prune
        ended = anyio.Event()

        async def after_the_turn(declared: Any) -> None:
            answer.set()  # the old generation's turn ends now, while the reload finishes
            with anyio.fail_after(10):
                await ended.wait()
            await prune(declared)

        monkeypatch.setattr(host.mcp, "prune", after_the_turn)

        async def slow() -> None:
            await host.turns.run(request("slow", conversation="a"))
            ended.set()

        async with (
            host.events.subscribe(lambda e: e.kind == "turn.started") as started,
            anyio.create_task_group() as group,
        ):
            group.start_soon(slow)
            with anyio.fail_after(10):
                await started.receive()
            write_config(tmp_path, reply="from the new script", instructions="You are the second.")
            assert (await host.reload()).generation == 3
        with anyio.fail_after(5):
            await observed.closed.wait()
        assert [generation.number for generation in host._retired] == []


async def test_a_cancelled_apply_still_retires_the_generation_it_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled once the new generation was installed (a notebook interrupt, a caller's
    deadline), the apply left the old one neither current nor retired: never closed, not
    even by ``aclose``. What is installed is finished."""
    path = write_config(tmp_path, reply="from the old script")
    async with Host.open(path) as host:
        observed = await observed_host(host, monkeypatch, hold=anyio.Event())
        prune = host.mcp.prune

        async def slow_prune(declared: Any) -> None:
            await anyio.sleep(0.3)  # closing a changed MCP server's process tree
            await prune(declared)

        monkeypatch.setattr(host.mcp, "prune", slow_prune)
        write_config(tmp_path, reply="from the new script", instructions="You are the second.")
        config = await anyio.to_thread.run_sync(load_config, path)
        with anyio.move_on_after(0.05):
            await host.apply_config(config)
        assert host.generation == 3
        with anyio.fail_after(5):
            await observed.closed.wait()  # generation 2 ran no turn: closed with the apply
        assert host._retired == []


async def test_a_turn_waiting_for_its_busy_session_runs_on_the_generation_that_admits_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, reply="old")
    async with Host.open(path) as host:
        answer = anyio.Event()  # the first turn's model answers only when this is set
        await observed_host(host, monkeypatch, hold=answer)
        results: dict[str, TurnResult] = {}

        async def run(name: str) -> None:
            results[name] = await host.turns.run(request(name, conversation="same"))

        async with (
            host.events.subscribe(lambda e: e.kind == "turn.started") as started,
            anyio.create_task_group() as group,
        ):
            group.start_soon(run, "first")
            with anyio.fail_after(10):
                await started.receive()
            group.start_soon(run, "waiting")
            with anyio.fail_after(10):
                # Waiting for its session has no event of its own: the count is the signal.
                while host.turns.admission_holders < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            write_config(tmp_path, reply="new", times=2, instructions="You are the second.")
            assert (await host.reload()).generation == 3
            answer.set()  # the session frees only now: the waiting turn is admitted after the apply
        first, waiting = results["first"], results["waiting"]
        new_revision = (await host.turns.run(request("later", conversation="other"))).core_revision
    assert (first.generation, first.text) == (2, "old")
    # Pinned when admitted, after the apply: the new generation's revision and content together.
    assert (waiting.generation, waiting.text) == (3, "new")
    assert waiting.core_revision == new_revision != first.core_revision
    assert waiting.session_id == first.session_id
