"""The observer belongs to its configuration generation (issue 12), named after the clause:

"The observer (and every capability source) belongs to its configuration generation:
after ``apply_config``, new turns report to the new observer, running turns finish on
theirs."
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from rich.console import Console

from hostkit.cli._turn import stream_turn
from hostkit.host import EventBus, Host
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import ModelRequest, TurnRequest, TurnResult
from tests.hosts import config, event_kinds, request

pytestmark = pytest.mark.anyio


class Recorder:
    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    def notify(self, event: TurnEvent) -> None:
        self.events.append(event)

    def turns(self) -> set[str]:
        return {event.turn_id for event in self.events}


@dataclass
class HeldModel:
    """A scripted model that answers "ok", except that the call for ``held`` waits until
    ``release`` is set (``entered`` says it got there)."""

    held: str
    entered: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)

    def model(self) -> ScriptedModel:
        async def answer(request: ModelRequest) -> Reply:
            if request.messages[-1].content == self.held:
                self.entered.set()
                await self.release.wait()
            return Reply("ok")

        return ScriptedModel([answer], repeat_last=True)


async def test_the_observer_belongs_to_its_configuration_generation(tmp_path: Path) -> None:
    gate = HeldModel("long")
    model = gate.model()
    old, new = Recorder(), Recorder()
    host = await Host.open(config(tmp_path), capabilities=capabilities(model, observer=old))
    try:
        results = []

        async def long_turn() -> None:
            results.append(await host.turns.run(request("long", conversation="long")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_turn)
            await gate.entered.wait()
            renewed = capabilities(model, observer=new)
            await host.apply_config(config(tmp_path), capabilities=renewed)
            after = await host.turns.run(request("short", conversation="short"))
            gate.release.set()
        running = results[0]
    finally:
        await host.aclose()
    # The running turn finished on its own generation's observer, start to end.
    assert running.turn_id in old.turns()
    assert running.turn_id not in new.turns()
    kinds = [e.kind for e in old.events if e.turn_id == running.turn_id]
    assert kinds[0] == "turn.started"
    assert kinds[-1] == "turn.completed"
    # The turn admitted after apply_config reported to the new observer only.
    assert after.turn_id in new.turns()
    assert after.turn_id not in old.turns()


class Quiet(Recorder):
    """An observer that says it would drop everything for now."""

    listening = False


async def test_no_event_is_built_for_observers_that_are_not_listening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody subscribed and a quiet observer: the turn builds (and freezes) no event.

    An observer without a ``listening`` attribute receives every event, and a
    subscriber of the Host's bus gets them from the moment it subscribes.
    """
    import hostkit.turns._execution as execution

    built: list[str] = []

    class Counted(TurnEvent):
        def __post_init__(self) -> None:
            built.append(self.kind)
            super().__post_init__()

    monkeypatch.setattr(execution, "TurnEvent", Counted)
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    quiet = Quiet()
    async with Host.open(config(tmp_path), capabilities=capabilities(model, observer=quiet)) as h:
        assert (await h.turns.run(request("one"))).outcome == "completed"
        assert built == []
        assert quiet.events == []
        async with h.events.subscribe() as events:
            second = await h.turns.run(request("two"))
            assert built[0] == "turn.started"
            assert built[-1] == "turn.completed"
            received = []
            while True:
                try:
                    received.append(events.receive_nowait())
                except anyio.WouldBlock:
                    break
        assert [e.kind for e in received] == built
        assert {e.turn_id for e in received} == {second.turn_id}
    loud = Recorder()
    async with Host.open(config(tmp_path), capabilities=capabilities(model, observer=loud)) as h:
        third = await h.turns.run(request("three"))
    assert [e.kind for e in loud.events][-1] == "turn.completed"
    assert loud.turns() == {third.turn_id}


class Broken(Recorder):
    """An observer whose ``listening`` fails: it still gets the events, the turn goes on."""

    @property
    def listening(self) -> bool:
        raise RuntimeError("listening is broken")


async def test_an_observer_whose_listening_fails_breaks_nothing(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    broken = Broken()
    async with Host.open(config(tmp_path), capabilities=capabilities(model, observer=broken)) as h:
        result = await h.turns.run(request("one"))
    assert (result.outcome, result.text) == ("completed", "ok")
    assert [e.kind for e in broken.events][-1] == "turn.completed"


class Raising(Recorder):
    """An embedder's observer with a bug: every ``notify`` raises (after recording)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def notify(self, event: TurnEvent) -> None:
        super().notify(event)
        raise KeyError(self.message)


async def test_an_observer_that_raises_is_logged_once_per_observer_and_the_turn_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An observer never raises into the turn, yet its failure is not silent: its first
    one is a warning on ``hostkit.turns`` (type, bounded message), once per observer
    object however many events and turns fail, so a broken notebook callback is seen and
    does not flood the log. The generation's observer and the Host's (``Host.open``'s,
    through its event bus) are both covered."""
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    pinned = Raising("typo in the generation's observer")
    forwarded = Raising("x" * 5000)
    caps = capabilities(model, observer=pinned)
    with caplog.at_level(logging.WARNING, logger="hostkit.turns"):
        async with Host.open(config(tmp_path), capabilities=caps, observer=forwarded) as host:
            results = [await host.turns.run(request(text)) for text in ("one", "two")]
    assert [(r.outcome, r.text) for r in results] == [("completed", "ok")] * 2
    assert len(pinned.events) == len(forwarded.events) > 4
    assert pinned.turns() == forwarded.turns() == {r.turn_id for r in results}
    logged = [r for r in caplog.records if r.name == "hostkit.turns"]
    assert [r.levelno for r in logged] == [logging.WARNING] * 2
    messages = sorted(r.getMessage() for r in logged)
    assert all("Raising raised KeyError on turn.started" in m for m in messages), messages
    assert any("typo in the generation's observer" in m for m in messages)
    assert max(len(m) for m in messages) < 600  # the 5,000-character message is cut


class Unreferenceable:
    """A broken observer that cannot be weakly referenced (slots, no ``__weakref__``)."""

    __slots__ = ()

    def notify(self, event: TurnEvent) -> None:
        raise ValueError("no weakref")


def test_each_broken_observer_object_is_logged_once_and_the_next_still_hears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Once per observer object, not per class or per event: a new broken object (a
    notebook cell run again) is said again; one that cannot be weakly referenced too.
    On the Host's event bus, the observer after a broken one hears every event."""
    event = TurnEvent("turn.started", "req_1", "turn_1", "ses_1")
    first, second, after = Raising("first"), Raising("second"), Recorder()
    odd = Unreferenceable()
    bus = EventBus(forward=[first, second, odd, after])
    with caplog.at_level(logging.WARNING, logger="hostkit.turns"):
        for _ in range(5):
            bus.notify(event)
    assert len(after.events) == 5
    said = [r.getMessage() for r in caplog.records if r.name == "hostkit.turns"]
    assert len(said) == 3, said
    assert ["KeyError" in said[0], "KeyError" in said[1], "ValueError" in said[2]] == [True] * 3


class Unprintable(Exception):
    """An exception whose message cannot be read: ``str`` raises too."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


class RaisingUnprintable:
    def notify(self, event: TurnEvent) -> None:
        raise Unprintable


def test_an_observer_whose_exception_cannot_be_printed_is_still_kept_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Logging a failure must not fail in its turn: an exception whose ``str`` raises
    is logged by its type, and the observers after it still hear the event."""
    event = TurnEvent("turn.started", "req_1", "turn_1", "ses_1")
    after = Recorder()
    bus = EventBus(forward=[RaisingUnprintable(), after])
    with caplog.at_level(logging.WARNING, logger="hostkit.turns"):
        bus.notify(event)
    assert len(after.events) == 1
    said = [r.getMessage() for r in caplog.records if r.name == "hostkit.turns"]
    assert len(said) == 1, said
    assert "Unprintable" in said[0], said


async def test_a_turn_waiting_for_its_busy_session_says_so_live(tmp_path: Path) -> None:
    """Before its admission, a turn whose session runs another turn is heard as
    ``turn.waiting`` (session, holder): a front end can say so instead of blaming the
    model. It is live only: nothing of it is persisted."""
    gate = HeldModel("first")
    model = gate.model()
    second = request("second", conversation="shared")
    results: dict[str, TurnResult] = {}
    async with Host.open(config(tmp_path), capabilities=capabilities(model)) as host:
        waiting = host.events.subscribe(lambda event: event.kind == "turn.waiting")
        async with waiting as heard, anyio.create_task_group() as tg:

            async def run(name: str, turn: TurnRequest) -> None:
                results[name] = await host.turns.run(turn)

            tg.start_soon(run, "first", request("first", conversation="shared"))
            with anyio.fail_after(10):
                await gate.entered.wait()
            tg.start_soon(run, "second", second)
            with anyio.fail_after(10):
                event = await heard.receive()
            gate.release.set()
        kinds = await event_kinds(host, results["second"].turn_id)
    assert event.request_id == second.request_id
    assert event.session_id == results["first"].session_id
    assert event.data["holder_turn_id"] == results["first"].turn_id
    assert event.turn_id == results["second"].turn_id
    assert [r.outcome for r in results.values()] == ["completed", "completed"]
    assert "turn.waiting" not in kinds


async def test_a_turn_waiting_on_another_hosts_turn_says_so_once_not_per_look(
    tmp_path: Path,
) -> None:
    """Another Host's turn is watched by polling the store, each look finding it busy
    again: the waiting turn says so once per holder, not once per look (a flood would
    push later events out of a subscriber's buffer)."""
    gate = HeldModel("first")
    model = gate.model()
    heard: list[TurnEvent] = []
    results: list[TurnResult] = []
    async with (
        Host.open(config(tmp_path), capabilities=capabilities(model)) as holder,
        Host.open(config(tmp_path), capabilities=capabilities(model)) as waiter,
        waiter.events.subscribe(lambda event: event.kind == "turn.waiting") as events,
        anyio.create_task_group() as tg,
    ):

        async def run(host: Host, text: str) -> None:
            results.append(await host.turns.run(request(text, conversation="shared")))

        tg.start_soon(run, holder, "first")
        with anyio.fail_after(10):
            await gate.entered.wait()
        tg.start_soon(run, waiter, "second")
        with anyio.fail_after(10):
            heard.append(await events.receive())
        await anyio.sleep(1.5)  # several looks at the store (every 0.01 s, growing to 0.25 s)
        while True:
            try:
                heard.append(events.receive_nowait())
            except anyio.WouldBlock:
                break
        gate.release.set()
    assert len(heard) == 1, [event.data for event in heard]
    assert heard[0].data["holder_turn_id"] == results[0].turn_id
    assert [result.outcome for result in results] == ["completed", "completed"]


async def test_a_cli_turn_waiting_without_a_terminal_says_so_in_one_line(tmp_path: Path) -> None:
    """`hostkit run` piped (a script, a log) shows no spinner; why it waits is one line."""
    gate = HeldModel("first")
    shown = io.StringIO()
    progress = Console(file=shown, force_terminal=False, width=200)
    results: list[TurnResult] = []
    async with (
        Host.open(config(tmp_path), capabilities=capabilities(gate.model())) as host,
        anyio.create_task_group() as tg,
    ):

        async def run(text: str, console: Console | None) -> None:
            turn = stream_turn(
                host,
                text,
                agent="assistant",
                conversation="shared",
                out=io.StringIO(),
                progress=console,
            )
            results.append(await turn)

        tg.start_soon(run, "first", None)
        with anyio.fail_after(10):
            await gate.entered.wait()
        tg.start_soon(run, "second", progress)
        with anyio.fail_after(10):
            await anyio.wait_all_tasks_blocked()
        waited = shown.getvalue()
        gate.release.set()
    session = results[0].session_id
    assert waited == f"waiting for session {session}: another turn runs in it\n"
    assert shown.getvalue() == waited  # said once, and nothing else on a pipe
    assert [r.outcome for r in results] == ["completed", "completed"]
