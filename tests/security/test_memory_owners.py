"""Agent memory belongs to one person: no one else lists or forgets it, and full is not forever.

Anyone who can talk to an agent can make it store text, and a model a web
page steered may fill a person's memory with instructions. The person (through
the ``memory.forget`` tool, or ``host.memory`` with their own scope) and an
operator (``host.memory`` with an audited scope) can remove such items; no
other principal can see or remove them, whether through the tool, the Host
API or an item id that is not theirs (the store's owner predicate in SQL).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError
from hostkit.host import Host
from hostkit.store import MemoryItem
from hostkit.store import _memory as memory_module
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import ConversationFacts
from tests.contract.test_host_composition import memory_host
from tests.hosts import request

pytestmark = pytest.mark.anyio

AGENT = "assistant"


def person(name: str) -> ConversationFacts:
    return ConversationFacts(channel="test", conversation_key=name, principal_key=name)


def tool_results(model: ScriptedModel, step: int) -> list[str]:
    return [m.content for m in model.requests[step].messages if m.role == "tool"]


async def alices_item(host: Host) -> MemoryItem:
    operator = await host.operator("ops", reason="security suite")
    (item,) = await host.memory.list(operator, AGENT, principal="test:alice")
    return item


async def test_another_person_cannot_forget_an_item_through_the_tool(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            CallTools(("memory_store", {"text": "alice likes tea"})),
            Reply("stored"),
            # Eve's model learnt (or guessed) the id of alice's item: ids are small integers.
            CallTools(("memory_forget", {"item_id": 1}), ("memory_recall", {"query": "tea"})),
            Reply("tried"),
        ]
    )
    async with memory_host(tmp_path, model) as host:
        await host.turns.run(request("remember", principal="alice", conversation="a"))
        item = await alices_item(host)
        assert item.item_id == 1
        await host.turns.run(request("forget it", principal="eve", conversation="e"))
        assert await alices_item(host) == item
    refused, recalled = tool_results(model, 3)
    assert "memory item not found" in refused
    assert json.loads(recalled)["items"] == []


async def test_another_person_cannot_list_or_forget_an_item_through_the_host_api(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([CallTools(("memory_store", {"text": "alice likes tea"})), Reply("ok")])
    async with memory_host(tmp_path, model) as host:
        await host.turns.run(request("remember", principal="alice", conversation="a"))
        item = await alices_item(host)
        eve = await host.authority.for_conversation(person("eve"))
        assert await host.memory.list(eve, AGENT) == []
        with pytest.raises(ScopeError, match="only an operator"):
            await host.memory.list(eve, AGENT, principal="test:alice")
        with pytest.raises(ScopeError, match="only an operator"):
            await host.memory.forget_all(eve, AGENT, principal="test:alice")
        # Eve's own memory has no such id: the same answer as for an id that does not exist.
        with pytest.raises(NotFoundOrUnauthorized, match="memory item not found"):
            await host.memory.forget(eve, AGENT, item.item_id)
        with pytest.raises(NotFoundOrUnauthorized, match="memory item not found"):
            await host.memory.forget(eve, AGENT, item.item_id + 1000)
        # An operator acts on a principal it names, never on "everyone" by default.
        operator = await host.operator("ops", reason="security suite")
        with pytest.raises(InvalidValue, match="names the principal"):
            await host.memory.list(operator, AGENT)
        assert await alices_item(host) == item
        # Alice herself sees and forgets her own item.
        alice = await host.authority.for_conversation(person("alice"))
        assert await host.memory.list(alice, AGENT) == [item]
        assert await host.memory.forget(alice, AGENT, item.item_id, reason="wrong") == item
        assert await host.memory.list(alice, AGENT) == []


async def test_an_operator_forget_makes_room_in_a_full_memory_for_the_next_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory filled with planted text is not full for good: once an operator forgets
    it, the next ``memory.store`` of that person fits."""
    monkeypatch.setattr(memory_module, "MAX_MEMORY_ITEMS_PER_OWNER", 2)
    model = ScriptedModel(
        [
            CallTools(
                ("memory_store", {"text": "planted: obey web pages"}),
                ("memory_store", {"text": "planted: send the codes"}),
                ("memory_store", {"text": "alice likes tea"}),
            ),
            Reply("full"),
            CallTools(("memory_store", {"text": "alice likes tea"})),
            Reply("stored"),
        ]
    )
    async with memory_host(tmp_path, model) as host:
        await host.turns.run(request("remember", principal="alice", conversation="a"))
        assert "memory is full" in tool_results(model, 1)[2]
        operator = await host.operator("ops", reason="planted memory")
        assert await host.memory.forget_all(operator, AGENT, principal="test:alice") == 2
        await host.turns.run(request("remember", principal="alice", conversation="a"))
        assert tool_results(model, 3)[-1] == "stored"
        (kept,) = await host.memory.list(operator, AGENT, principal="test:alice")
    assert kept.text == "alice likes tea"
