"""The store's memory group, written against ``RuntimeStore`` and run on every adapter.

Items are partitioned by agent and owner; a recall query is the user's words,
never a query language: no text, however hostile, becomes FTS syntax, an
error from the database or a way into another owner's items. Each owner's
memory is bounded in items and characters, checked in the insert's own
transaction, so concurrent writers cannot pass the bound together. An owner's
items can be listed and forgotten (so a full memory can make room), each keeps
the session and turn that stored it, and a forget by a scope is audited.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.errors import InvalidValue, NotFoundOrUnauthorized, ScopeError
from hostkit.store import (
    MAX_MEMORY_CHARS,
    MAX_MEMORY_CHARS_PER_OWNER,
    MAX_MEMORY_ITEMS_PER_OWNER,
    MAX_MEMORY_LIST,
    MAX_RECALL,
    MemoryItem,
    MemoryStore,
)
from hostkit.store import _memory as memory_module
from hostkit.types import ConversationFacts
from tests.contract._store_adapters import StoreUnderTest, open_adapter

pytestmark = pytest.mark.anyio

AGENT = "assistant"


@pytest.fixture
async def sut(store_adapter: str, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    async with open_adapter(store_adapter, tmp_path) as opened:
        yield opened


@pytest.fixture
def memory(sut: StoreUnderTest) -> MemoryStore:
    return sut.store.memory


async def texts(memory: MemoryStore, query: str, owner: str = "alice", **kw: Any) -> list[str]:
    found = await memory.recall(agent=AGENT, owner=owner, query=query, **kw)
    assert isinstance(found, tuple)
    return [item.text for item in found]


async def test_a_remembered_item_is_recalled_by_any_of_its_words(memory: MemoryStore) -> None:
    item = await memory.remember(agent=AGENT, owner="alice", text="The cat sleeps on the mat")
    assert isinstance(item, MemoryItem)
    assert (item.agent, item.owner, item.text) == (AGENT, "alice", "The cat sleeps on the mat")
    assert item.created_at
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.text = "changed"  # type: ignore[misc]
    (found,) = await memory.recall(agent=AGENT, owner="alice", query="dog or CAT?")
    assert found == item
    assert await texts(memory, "dog") == []
    assert await texts(memory, "   ...   ") == []


async def test_items_are_partitioned_by_owner_and_agent(memory: MemoryStore) -> None:
    await memory.remember(agent=AGENT, owner="alice", text="alice keeps the launch codes")
    await memory.remember(agent=AGENT, owner="bob", text="bob likes launch parties")
    await memory.remember(agent="other", owner="alice", text="another agent's launch notes")
    assert await texts(memory, "launch") == ["alice keeps the launch codes"]
    assert await texts(memory, "launch", owner="bob") == ["bob likes launch parties"]
    assert await texts(memory, "codes", owner="bob") == []
    assert await texts(memory, "launch", owner="mallory") == []
    # An owner name that looks like a pattern or a predicate matches nothing extra.
    for owner in ("%", "*", "alice' OR '1'='1", "alice%"):
        assert await texts(memory, "launch", owner=owner) == []


async def test_better_matches_come_first_and_the_limit_holds(memory: MemoryStore) -> None:
    await memory.remember(agent=AGENT, owner="alice", text="river")
    await memory.remember(agent=AGENT, owner="alice", text="river boat on the river bank")
    for i in range(30):
        await memory.remember(agent=AGENT, owner="alice", text=f"note {i} about a river")
    found = await texts(memory, "river boat bank", limit=MAX_RECALL)
    assert len(found) == MAX_RECALL
    assert found[0] == "river boat on the river bank"
    assert len(await texts(memory, "river", limit=1)) == 1


HOSTILE = [
    '"',
    '""',
    '"cat',
    "cat*",
    "*",
    "c*t",
    "NEAR(cat mat)",
    "NEAR(cat mat, 1",
    "cat NEAR mat",
    "cat AND",
    "OR OR OR",
    "NOT cat",
    "AND",
    "((",
    "))",
    "(cat",
    "cat)",
    "text:cat",
    "{text}: cat",
    "- cat",
    "^cat",
    "cat + mat",
    "'; DROP TABLE memory_items; --",
    "memory_fts MATCH 'x'",
    "\x00cat",
    "\ud800",
    "cat\udfffmat",
    "\U0001f408 cat",
    "cat_mat",
    "_",
    "x" * 2_000,
    " ".join(["cat"] * 500)[:2_000],
]


@pytest.mark.parametrize("query", HOSTILE, ids=lambda q: repr(q)[:24])
async def test_no_query_text_becomes_fts_syntax_or_an_error(
    memory: MemoryStore, query: str
) -> None:
    await memory.remember(agent=AGENT, owner="alice", text="the cat sat on the mat")
    await memory.remember(agent=AGENT, owner="bob", text="bob's cat")
    found = await texts(memory, query)
    # Whatever matched is alice's, and only because one of the query's words is in it.
    assert set(found) <= {"the cat sat on the mat"}


async def test_no_query_reaches_another_owners_items_through_the_owner_column(
    memory: MemoryStore,
) -> None:
    """SQLite indexes each item's owner token (``o`` and the id of the owner's first item)
    in an FTS5 column that a recall matches: no words, however they name that column or
    another owner's token, search that column or any owner's texts but the asker's."""
    alice = await memory.remember(agent=AGENT, owner="alice", text="alice keeps a diary")
    bob = await memory.remember(agent=AGENT, owner="bob", text="bob keeps secrets")
    mine, theirs = f"o{alice.item_id}", f"o{bob.item_id}"
    for query in (
        theirs,
        f"owner_token:{theirs}",
        f"owner_token : {theirs} OR secrets",
        f"{{owner_token}}: {theirs}",
        "{owner_token text}: secrets",
        f"- owner_token : {theirs}",
        f'") OR owner_token : "{theirs}" OR ("',
        f"NEAR(owner_token {theirs})",
        "secrets",
    ):
        assert await texts(memory, query) == [], query
    # The asker's own token is no word of theirs either: it does not list every item.
    assert await texts(memory, mine) == []
    assert await texts(memory, f"owner_token:{mine} diary") == ["alice keeps a diary"]


async def test_an_owners_items_are_found_after_the_first_of_them_is_forgotten(
    memory: MemoryStore,
) -> None:
    """The owner token is the first item's id, kept by the others when it goes; an owner
    whose memory was emptied starts a new one."""
    first = await memory.remember(agent=AGENT, owner="alice", text="tea at first")
    await memory.remember(agent=AGENT, owner="alice", text="tea later")
    await memory.remember(agent=AGENT, owner="bob", text="bob's tea")
    await memory.forget(agent=AGENT, owner="alice", item_id=first.item_id)
    await memory.remember(agent=AGENT, owner="alice", text="tea again")
    assert sorted(await texts(memory, "tea")) == ["tea again", "tea later"]
    assert await memory.forget_all(agent=AGENT, owner="alice") == 2
    await memory.remember(agent=AGENT, owner="alice", text="tea anew")
    assert await texts(memory, "tea") == ["tea anew"]
    assert await texts(memory, "tea", owner="bob") == ["bob's tea"]


@pytest.mark.sqlite_only("FTS5's work for a recall, counted in SQLite VM steps")
async def test_a_recall_walks_its_owners_items_not_everyones(sut: StoreUnderTest) -> None:
    """A recall matched the whole FTS index, ranked every owner's matches, and only then
    dropped the others': 73 ms for one item among 50,000 of other people's, with the
    one reader connection held meanwhile. Its work is now the owner's items'."""
    store, memory = sut.store, sut.store.memory
    await memory.remember(agent=AGENT, owner="alice", text="she likes tea in the morning")
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    async def recall_steps() -> int:
        steps[0] = 0
        await store.read(lambda c: c.set_progress_handler(step, 1))
        try:
            found = await texts(memory, "tea morning")
        finally:
            await store.read(lambda c: c.set_progress_handler(None, 0))
        assert found == ["she likes tea in the morning"]
        return steps[0]

    alone = await recall_steps()
    crowd = [(AGENT, f"p{n % 50}", f"tea in the morning {n}") for n in range(5_000)]
    await store.write(
        lambda c: c.executemany(
            "INSERT INTO memory_items (agent, principal_id, text, created_at) "
            "VALUES (?, ?, ?, '2026-01-01T00:00:00.000Z')",
            crowd,
        )
    )
    assert await texts(memory, "tea", owner="p7", limit=MAX_RECALL) != []
    crowded = await recall_steps()
    # Matching the whole index stepped through the crowd's every item (~36,000 steps).
    assert crowded < len(crowd) // 2, (alone, crowded)


async def test_operator_words_are_searched_as_plain_words(memory: MemoryStore) -> None:
    await memory.remember(agent=AGENT, owner="alice", text="meet NEAR the old mill")
    await memory.remember(agent=AGENT, owner="alice", text="this AND that")
    await memory.remember(agent=AGENT, owner="alice", text="nothing relevant")
    assert await texts(memory, "NEAR") == ["meet NEAR the old mill"]
    assert await texts(memory, '"AND"') == ["this AND that"]
    assert await texts(memory, "mill*") == ["meet NEAR the old mill"]


# The items of the parity cases below, one owner's; each query finds the same items on
# every adapter and server locale (PostgreSQL's parser kept emails, URLs, paths and
# versions whole, and folded case and accents, or not, by the server's locale).
PARITY_ITEMS = (
    "email bob@example.com please",
    "repo at https://github.com/acme/widgets now",
    "config in /etc/hostkit/app.toml",
    "python 3.11 installed",
    "call +1-555-0100 today",
    "café au lait",
    "ÉCOLE normale",
    "foo_bar baz",
    "bar then foo",
    "don't panic",
    "well-known fact",
    "Straße closed",
    "東京タワー visit",
    "Москва river",
    "ﬁle ligature",
    "İstanbul trip",
)
PARITY = [
    ("bob", ["email bob@example.com please"]),
    ("example", ["email bob@example.com please"]),
    (
        "bob@example.com",
        ["email bob@example.com please", "repo at https://github.com/acme/widgets now"],
    ),
    ("acme", ["repo at https://github.com/acme/widgets now"]),
    ("github", ["repo at https://github.com/acme/widgets now"]),
    ("app.toml", ["config in /etc/hostkit/app.toml"]),
    ("toml", ["config in /etc/hostkit/app.toml"]),
    ("11", ["python 3.11 installed"]),
    ("3.11", ["python 3.11 installed"]),
    ("555", ["call +1-555-0100 today"]),
    ("cafe", ["café au lait"]),
    ("CAFÉ", ["café au lait"]),
    ("école", ["ÉCOLE normale"]),
    ("ecole", ["ÉCOLE normale"]),
    ("foo_bar", ["foo_bar baz"]),
    ("bar_foo", []),
    ("foo", ["bar then foo", "foo_bar baz"]),
    ("_", []),
    ("don't", ["don't panic"]),
    ("t", ["don't panic"]),
    ("known", ["well-known fact"]),
    ("well_known", ["well-known fact"]),
    ("strasse", ["Straße closed"]),
    ("東京タワー", ["東京タワー visit"]),
    ("москва", ["Москва river"]),
    ("москва".upper(), ["Москва river"]),
    ("file", ["ﬁle ligature"]),
    ("istanbul", ["İstanbul trip"]),
    ("x" * 70, []),
]


@pytest.mark.parametrize(("query", "expected"), PARITY, ids=lambda v: repr(v)[:24])
async def test_the_same_words_find_the_same_items_on_every_adapter(
    memory: MemoryStore, query: str, expected: list[str]
) -> None:
    for text in PARITY_ITEMS:
        await memory.remember(agent=AGENT, owner="alice", text=text)
    assert sorted(await texts(memory, query, limit=MAX_RECALL)) == sorted(expected)


async def test_only_the_first_words_of_a_query_are_searched(memory: MemoryStore) -> None:
    await memory.remember(agent=AGENT, owner="alice", text="needle")
    filler = " ".join(f"w{i}" for i in range(16))
    assert await texts(memory, f"{filler} needle") == []
    assert await texts(memory, f"needle {filler}") == ["needle"]


@pytest.mark.parametrize(
    ("kwargs", "what"),
    [
        ({"query": "x" * 2_001}, "query"),
        ({"query": None}, "query"),
        ({"limit": 0}, "limit"),
        ({"limit": MAX_RECALL + 1}, "limit"),
        ({"limit": True}, "limit"),
        ({"owner": ""}, "owner"),
        ({"owner": "o" * 301}, "owner"),
        ({"owner": "\ud800"}, "owner"),
        ({"agent": ""}, "agent"),
    ],
)
async def test_bad_recall_arguments_are_typed_errors(
    memory: MemoryStore, kwargs: dict[str, Any], what: str
) -> None:
    call: dict[str, Any] = {"agent": AGENT, "owner": "alice", "query": "cat", **kwargs}
    with pytest.raises(InvalidValue) as refused:
        await memory.recall(**call)
    assert what in str(refused.value)
    assert len(str(refused.value)) <= 500


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n\t",
        "x" * (MAX_MEMORY_CHARS + 1),
        "half a \ud800 surrogate",
        None,
        b"bytes",
        "a\x00b",
        "\x00",
        "kept item \x00",
    ],
    ids=["empty", "blank", "too-long", "surrogate", "none", "bytes", "nul", "only-nul", "nul-end"],
)
async def test_bad_items_are_refused_and_nothing_accepted_is_lost(
    memory: MemoryStore, text: Any
) -> None:
    await memory.remember(agent=AGENT, owner="alice", text="kept item one")
    with pytest.raises(InvalidValue) as refused:
        await memory.remember(agent=AGENT, owner="alice", text=text)
    assert len(str(refused.value)) <= 500
    assert await texts(memory, "kept item") == ["kept item one"]
    edge = ("edge " * MAX_MEMORY_CHARS)[:MAX_MEMORY_CHARS]
    await memory.remember(agent=AGENT, owner="alice", text=edge)  # the bound itself is fine
    assert await texts(memory, "edge") == [edge]
    assert await texts(memory, "kept") == ["kept item one"]


@pytest.fixture
def small_bounds(monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Per-owner bounds small enough to reach quickly (the real ones are checked below)."""
    monkeypatch.setattr(memory_module, "MAX_MEMORY_ITEMS_PER_OWNER", 5)
    monkeypatch.setattr(memory_module, "MAX_MEMORY_CHARS_PER_OWNER", 100)
    return 5, 100


def test_the_per_owner_bounds_are_generous_but_finite() -> None:
    assert MAX_MEMORY_ITEMS_PER_OWNER == 1_000
    assert MAX_MEMORY_CHARS_PER_OWNER == 1_000_000


async def test_an_owner_past_its_item_bound_is_refused_and_nothing_is_stored(
    memory: MemoryStore, small_bounds: tuple[int, int]
) -> None:
    for i in range(5):
        await memory.remember(agent=AGENT, owner="alice", text=f"fact{i} kept")
    with pytest.raises(InvalidValue) as refused:
        await memory.remember(agent=AGENT, owner="alice", text="fact5 kept")
    message = str(refused.value)
    assert message.startswith("memory is full: 5 items / 50 characters for this person and agent")
    assert len(message) <= 500
    assert await texts(memory, "fact5") == []
    assert len(await texts(memory, "kept", limit=MAX_RECALL)) == 5
    # Another principal of the agent, and another agent of the principal, have their own room.
    await memory.remember(agent=AGENT, owner="bob", text="fact5 kept")
    await memory.remember(agent="other", owner="alice", text="fact5 kept")
    assert await texts(memory, "fact5", owner="bob") == ["fact5 kept"]


async def test_an_owner_past_its_character_bound_is_refused(
    memory: MemoryStore, small_bounds: tuple[int, int]
) -> None:
    await memory.remember(agent=AGENT, owner="alice", text="a" * 60)
    with pytest.raises(InvalidValue, match="memory is full: 1 items / 60 characters"):
        await memory.remember(agent=AGENT, owner="alice", text="b" * 41)
    await memory.remember(agent=AGENT, owner="alice", text="c" * 40)  # exactly the bound
    with pytest.raises(InvalidValue, match="memory is full"):
        await memory.remember(agent=AGENT, owner="alice", text="d")
    assert await texts(memory, "b" * 41) == []
    assert await texts(memory, "c" * 40) == ["c" * 40]


async def test_concurrent_writers_cannot_pass_the_bound_together(
    memory: MemoryStore, small_bounds: tuple[int, int]
) -> None:
    outcomes: list[bool] = []

    async def remember(i: int) -> None:
        try:
            await memory.remember(agent=AGENT, owner="alice", text=f"race{i} shared")
        except InvalidValue:
            outcomes.append(False)
        else:
            outcomes.append(True)

    async with anyio.create_task_group() as group:
        for i in range(20):
            group.start_soon(remember, i)
    assert outcomes.count(True) == 5
    assert len(await texts(memory, "shared", limit=MAX_RECALL)) == 5


async def test_concurrent_items_are_all_kept(memory: MemoryStore) -> None:
    async def remember(i: int) -> None:
        await memory.remember(agent=AGENT, owner="alice", text=f"fact{i} shared")

    async with anyio.create_task_group() as group:
        for i in range(40):
            group.start_soon(remember, i)
    for i in range(40):
        assert await texts(memory, f"fact{i}") == [f"fact{i} shared"]
    assert len(await texts(memory, "shared", limit=MAX_RECALL)) == MAX_RECALL


def test_the_interface_is_abstract_and_documented() -> None:
    methods = {"remember", "recall", "list_items", "forget", "forget_all"}
    assert MemoryStore.__abstractmethods__ == methods
    for name in methods:
        assert getattr(MemoryStore, name).__doc__


# -- provenance, listing and forgetting -----------------------------------------------
#
# A full memory refuses every new item, and an item a steered model stored keeps
# steering it: an owner's items can be listed (newest first, with the session and turn
# that stored each) and forgotten, one or all, always under the (agent, owner) predicate.


async def test_an_item_keeps_the_session_and_turn_that_stored_it(memory: MemoryStore) -> None:
    stored = await memory.remember(
        agent=AGENT, owner="alice", text="planted order", session_id="ses_a", turn_id="turn_a"
    )
    assert (stored.session_id, stored.turn_id) == ("ses_a", "turn_a")
    untraced = await memory.remember(agent=AGENT, owner="alice", text="no turn stored this")
    assert (untraced.session_id, untraced.turn_id) == (None, None)
    (recalled,) = await memory.recall(agent=AGENT, owner="alice", query="planted")
    assert recalled == stored
    assert await memory.list_items(agent=AGENT, owner="alice") == (untraced, stored)


async def test_list_items_is_newest_first_paged_and_only_the_owners(memory: MemoryStore) -> None:
    mine = [await memory.remember(agent=AGENT, owner="alice", text=f"a{i}") for i in range(7)]
    await memory.remember(agent=AGENT, owner="bob", text="bob's")
    await memory.remember(agent="other", owner="alice", text="another agent's")
    first = await memory.list_items(agent=AGENT, owner="alice", limit=3)
    assert [item.text for item in first] == ["a6", "a5", "a4"]
    second = await memory.list_items(agent=AGENT, owner="alice", limit=3, before=first[-1].item_id)
    assert [item.text for item in second] == ["a3", "a2", "a1"]
    last = await memory.list_items(agent=AGENT, owner="alice", before=second[-1].item_id)
    assert last == (mine[0],)
    assert await memory.list_items(agent=AGENT, owner="alice", before=mine[0].item_id) == ()
    assert len(await memory.list_items(agent=AGENT, owner="alice", limit=MAX_MEMORY_LIST)) == 7
    for owner in ("%", "*", "alice' OR '1'='1", "alice%", "mallory"):
        assert await memory.list_items(agent=AGENT, owner=owner) == ()


async def test_forget_removes_one_item_of_its_owner_and_no_one_elses(
    memory: MemoryStore,
) -> None:
    item = await memory.remember(agent=AGENT, owner="alice", text="the secret plan")
    kept = await memory.remember(agent=AGENT, owner="alice", text="the other plan")
    # Another owner, or the same owner of another agent: not found, and nothing goes.
    for agent, owner in ((AGENT, "bob"), ("other", "alice"), (AGENT, "alice%")):
        with pytest.raises(NotFoundOrUnauthorized, match="memory item not found"):
            await memory.forget(agent=agent, owner=owner, item_id=item.item_id)
    assert await texts(memory, "secret") == ["the secret plan"]
    assert await memory.forget(agent=AGENT, owner="alice", item_id=item.item_id) == item
    assert await texts(memory, "plan") == ["the other plan"]  # gone from the search too
    assert await memory.list_items(agent=AGENT, owner="alice") == (kept,)
    with pytest.raises(NotFoundOrUnauthorized, match="memory item not found"):
        await memory.forget(agent=AGENT, owner="alice", item_id=item.item_id)


async def test_forget_all_empties_one_owners_memory_of_one_agent(memory: MemoryStore) -> None:
    for i in range(3):
        await memory.remember(agent=AGENT, owner="alice", text=f"note {i}")
    await memory.remember(agent=AGENT, owner="bob", text="note bob")
    await memory.remember(agent="other", owner="alice", text="note other")
    assert await memory.forget_all(agent=AGENT, owner="alice") == 3
    assert await memory.list_items(agent=AGENT, owner="alice") == ()
    assert await texts(memory, "note") == []
    assert await texts(memory, "note", owner="bob") == ["note bob"]
    assert [i.text for i in await memory.list_items(agent="other", owner="alice")] == ["note other"]
    assert await memory.forget_all(agent=AGENT, owner="alice") == 0


async def test_forgetting_makes_room_in_a_full_memory(
    memory: MemoryStore, small_bounds: tuple[int, int]
) -> None:
    planted = [
        await memory.remember(agent=AGENT, owner="alice", text=f"obey {i}") for i in range(5)
    ]
    with pytest.raises(InvalidValue, match="memory is full"):
        await memory.remember(agent=AGENT, owner="alice", text="a real fact")
    await memory.forget(agent=AGENT, owner="alice", item_id=planted[0].item_id)
    await memory.remember(agent=AGENT, owner="alice", text="a real fact")
    assert await memory.forget_all(agent=AGENT, owner="alice") == 5
    for i in range(5):
        await memory.remember(agent=AGENT, owner="alice", text=f"fresh {i}")


async def test_a_forgotten_items_id_is_never_given_to_another(memory: MemoryStore) -> None:
    """An id read before a forget must not name a newer item after it."""
    first = await memory.remember(agent=AGENT, owner="alice", text="first")
    await memory.forget(agent=AGENT, owner="alice", item_id=first.item_id)
    second = await memory.remember(agent=AGENT, owner="alice", text="second")
    assert second.item_id > first.item_id
    with pytest.raises(NotFoundOrUnauthorized):
        await memory.forget(agent=AGENT, owner="alice", item_id=first.item_id)
    assert await texts(memory, "second") == ["second"]


async def test_a_forget_by_a_scope_is_audited_in_its_own_transaction(
    sut: StoreUnderTest, memory: MemoryStore
) -> None:
    item = await memory.remember(
        agent=AGENT, owner="test:alice", text="never in the audit", session_id="ses_x"
    )
    await memory.remember(agent=AGENT, owner="test:alice", text="another")
    forgotten = await memory.forget(
        agent=AGENT,
        owner="test:alice",
        item_id=item.item_id,
        by=sut.operator,
        reason="planted by a web page",
    )
    assert forgotten == item
    assert (
        await memory.forget_all(
            agent=AGENT, owner="test:alice", by=sut.operator, reason="the person asked"
        )
        == 1
    )
    one, every = await sut.store.read_audit(sut.operator, kind="memory.forgotten")
    assert (one.principal_id, one.authority) == (sut.operator.principal_id, "operator")
    assert one.reason == "planted by a web page"
    assert (one.subject, one.session_id) == (f"memory:{item.item_id}", "ses_x")
    assert dict(one.detail) == {
        "agent": AGENT,
        "owner": "test:alice",
        "item_id": item.item_id,
        "count": 1,
    }
    assert (every.reason, every.detail["count"], every.detail["item_id"]) == (
        "the person asked",
        1,
        None,
    )
    assert "never in the audit" not in repr((one, every))
    with pytest.raises(InvalidValue, match="reason"):
        await memory.forget_all(agent=AGENT, owner="test:alice", by=sut.operator)


async def test_a_persons_scope_forgets_only_its_own_principals_items(
    sut: StoreUnderTest, memory: MemoryStore
) -> None:
    alice = await sut.authority.for_conversation(
        ConversationFacts(channel="test", conversation_key="c-a", principal_key="alice")
    )
    bobs = await memory.remember(agent=AGENT, owner="test:bob", text="bob's note")
    own = await memory.remember(agent=AGENT, owner="test:alice", text="alice's note")
    with pytest.raises(NotFoundOrUnauthorized):
        await memory.forget(
            agent=AGENT, owner="test:bob", item_id=bobs.item_id, by=alice, reason="mine now"
        )
    with pytest.raises(NotFoundOrUnauthorized):
        await memory.forget_all(agent=AGENT, owner="test:bob", by=alice, reason="mine now")
    assert await memory.list_items(agent=AGENT, owner="test:bob") == (bobs,)
    assert (
        await memory.forget(
            agent=AGENT, owner="test:alice", item_id=own.item_id, by=alice, reason="outdated"
        )
        == own
    )
    forged = dataclasses.replace(alice, principal_id="test:bob")
    with pytest.raises(ScopeError):
        await memory.forget_all(agent=AGENT, owner="test:bob", by=forged, reason="forged")
    assert await memory.list_items(agent=AGENT, owner="test:bob") == (bobs,)
    audit = await sut.store.read_audit(sut.operator, kind="memory.forgotten")
    assert [(a.principal_id, a.authority, a.reason) for a in audit] == [
        ("test:alice", alice.authority, "outdated")
    ]


@pytest.mark.parametrize(
    ("call", "what"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": MAX_MEMORY_LIST + 1}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": "5"}, "limit"),
        ({"before": 0}, "id"),
        ({"before": -1}, "id"),
        ({"before": True}, "id"),
        ({"before": "7"}, "id"),
        ({"owner": ""}, "owner"),
        ({"agent": "a" * 301}, "agent"),
    ],
)
async def test_bad_list_arguments_are_typed_errors(
    memory: MemoryStore, call: dict[str, Any], what: str
) -> None:
    with pytest.raises(InvalidValue) as refused:
        await memory.list_items(**{"agent": AGENT, "owner": "alice", **call})
    assert what in str(refused.value)
    assert len(str(refused.value)) <= 500


@pytest.mark.parametrize("item_id", [0, -1, True, "1", 1.0, None, 2**63])
async def test_a_bad_item_id_is_a_typed_error_and_nothing_goes(
    memory: MemoryStore, item_id: Any
) -> None:
    await memory.remember(agent=AGENT, owner="alice", text="kept")
    with pytest.raises(InvalidValue, match="a memory item id is a positive integer"):
        await memory.forget(agent=AGENT, owner="alice", item_id=item_id)
    assert await texts(memory, "kept") == ["kept"]


@pytest.mark.parametrize(
    "provenance",
    [{"session_id": ""}, {"turn_id": "t" * 257}, {"session_id": "ses_\ud800"}, {"turn_id": 7}],
)
async def test_bad_provenance_is_refused_and_nothing_is_stored(
    memory: MemoryStore, provenance: dict[str, Any]
) -> None:
    with pytest.raises(InvalidValue, match=r"memory (session_id|turn_id)"):
        await memory.remember(agent=AGENT, owner="alice", text="traced", **provenance)
    assert await memory.list_items(agent=AGENT, owner="alice") == ()


def _holding(word: str) -> Callable[[Any], int]:
    """How many blocks of the FTS5 index hold ``word`` (its shadow table memory_fts_data)."""

    def read(conn: Any) -> int:
        sql = "SELECT count(*) FROM memory_fts_data WHERE instr(block, CAST(? AS BLOB)) > 0"
        return int(conn.execute(sql, [word]).fetchone()[0])

    return read


@pytest.mark.sqlite_only("the FTS5 shadow table memory_fts_data of the SQLite file")
@pytest.mark.parametrize("forget_all", [False, True], ids=["forget", "forget_all"])
async def test_a_forgotten_items_words_leave_the_index_by_the_purge_docs_store_md_gives(
    sut: StoreUnderTest, forget_all: bool
) -> None:
    """A forget leaves no way to recall the item; its words may stay in older FTS5
    segments (as a deleted row's bytes in freed pages) until the documented purge."""
    memory = sut.store.memory
    # Several segments, as a store that has served a while has.
    for i in range(5):
        await memory.remember(agent=AGENT, owner=f"u{i}", text=f"user {i} likes green tea")
    item = await memory.remember(agent=AGENT, owner="alice", text="passport ZEBRAFISH")
    await memory.remember(agent=AGENT, owner="bob", text="bob likes tea")
    assert await sut.store.read(_holding("zebrafish")) > 0
    if forget_all:
        assert await memory.forget_all(agent=AGENT, owner="alice") == 1
    else:
        await memory.forget(agent=AGENT, owner="alice", item_id=item.item_id)
    assert await texts(memory, "zebrafish") == []
    await sut.store.write(
        lambda c: c.execute("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')")
    )
    assert await sut.store.read(_holding("zebrafish")) == 0
    assert await texts(memory, "tea", owner="bob") == ["bob likes tea"]
    # The table keeps the format every SQLite since FTS5's first reads (no secure-delete).
    config = await sut.store.read(
        lambda c: dict(c.execute("SELECT k, v FROM memory_fts_config").fetchall())
    )
    assert config.get("version") == 4
    assert "secure-delete" not in config


@pytest.mark.sqlite_only("the WAL file of the SQLite database")
async def test_a_forget_writes_what_follows_the_item_not_every_owners_index(
    sut: StoreUnderTest, tmp_path: Path
) -> None:
    """The model may call ``memory.forget`` at will: a forget must not rewrite the whole
    full-text index (every owner's memory) on the one write lock each time."""
    memory = sut.store.memory
    words = " ".join(f"word{n}" for n in range(60))
    for owner in range(60):
        for n in range(20):
            await memory.remember(agent=AGENT, owner=f"u{owner}", text=f"{n} {words}")
    item = await memory.remember(agent=AGENT, owner="alice", text="passport ZEBRAFISH")
    index = await sut.store.read(
        lambda c: int(c.execute("SELECT sum(length(block)) FROM memory_fts_data").fetchone()[0])
    )
    database = tmp_path / "hostkit.db"

    def checkpoint() -> tuple[int, int, int]:
        with contextlib.closing(sqlite3.connect(database)) as conn:
            return conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()

    assert (await anyio.to_thread.run_sync(checkpoint))[0] == 0  # not busy: the WAL is empty
    await memory.forget(agent=AGENT, owner="alice", item_id=item.item_id)
    wal = await anyio.Path(f"{database}-wal").stat()
    assert wal.st_size < index / 4, (wal.st_size, index)
