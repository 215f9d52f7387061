"""The observer belongs to its configuration generation (issue 12), named after the clause:

"The observer (and every capability source) belongs to its configuration generation:
after ``apply_config``, new turns report to the new observer, running turns finish on
theirs."
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.host import Host
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import ModelRequest
from tests.hosts import config, request

pytestmark = pytest.mark.anyio


class Recorder:
    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    def notify(self, event: TurnEvent) -> None:
        self.events.append(event)

    def turns(self) -> set[str]:
        return {event.turn_id for event in self.events}


async def test_the_observer_belongs_to_its_configuration_generation(tmp_path: Path) -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def held(request: ModelRequest) -> Reply:
        if request.messages[-1].content == "long":
            entered.set()
            await release.wait()
        return Reply("ok")

    model = ScriptedModel([held], repeat_last=True)
    old, new = Recorder(), Recorder()
    host = await Host.open(config(tmp_path), capabilities=capabilities(model, observer=old))
    try:
        results = []

        async def long_turn() -> None:
            results.append(await host.turns.run(request("long", conversation="long")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_turn)
            await entered.wait()
            renewed = capabilities(model, observer=new)
            await host.apply_config(config(tmp_path), capabilities=renewed)
            after = await host.turns.run(request("short", conversation="short"))
            release.set()
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
