"""The ContextManager's per-session window: invisible in results, cheap per step.

Every prepared context here is compared with what a manager without any
cached window prepares from the same store: the window kept across turns,
Hosts and compactions changes costs, never messages or figures.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import random
import re
import sqlite3
import threading
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.context import (
    CharEstimator,
    ContextManager,
    EstimatorRegistry,
    SessionCompactor,
    TokenizerEstimator,
)
from hostkit.context._assemble import (
    UNANSWERED,
    CalibratedEstimator,
    Group,
    History,
    SizeMemo,
    group_history,
    prune_results,
)
from hostkit.context._window import SessionWindow
from hostkit.context._window import _held_chars as held_chars
from hostkit.errors import ConfigError, StoreError
from hostkit.store import ContextState, HistoryRow, LeaseOwner, RuntimeStore, SqliteStore
from hostkit.types import (
    Attachment,
    AttachmentPart,
    ContextReady,
    ContextRequest,
    ModelLimits,
    ModelMessage,
    PrincipalScope,
    ToolCall,
    ToolDefinition,
    TurnExecutionContext,
    Usage,
    UsageObservation,
    content_ref,
)
from tests.contract.test_context_basic import context_for
from tests.support import facts

pytestmark = pytest.mark.anyio

ROOMY = ModelLimits(context_window=64_000, max_output_tokens=1_000, safety_margin_tokens=100)
DEFS = (ToolDefinition("notes_read", "Read a note.", {"type": "object"}),)


# -- helpers ----------------------------------------------------------------------------


@dataclass
class Session:
    """One session seen through one store (each Host has its own scope for it)."""

    store: RuntimeStore
    scope: PrincipalScope

    @property
    def session_id(self) -> str:
        return self.scope.session_id or ""

    async def append(self, message: ModelMessage, turn_id: str) -> int:
        record = await self.store.append_message(
            self.scope,
            self.session_id,
            role=message.role,
            content=message.to_json(),
            turn_id=turn_id,
        )
        return record.seq


def request(
    scope: PrincipalScope,
    turn_id: str,
    messages: Sequence[ModelMessage],
    *,
    step: int = 0,
    limits: ModelLimits = ROOMY,
    **fields: Any,
) -> ContextRequest:
    return ContextRequest(
        context=context_for(scope, turn_id),
        step_id=step,
        limits=limits,
        messages=tuple(messages),
        definitions=DEFS,
        instructions="be brief",
        **fields,
    )


async def same_as_uncached(
    manager: ContextManager, store: RuntimeStore, ask: ContextRequest, **options: Any
) -> ContextReady:
    """``manager.prepare(ask)``, checked against a manager that never kept a window."""
    ready = await manager.prepare(ask)
    fresh = await ContextManager(store, **options).prepare(ask)
    assert isinstance(ready, ContextReady)
    assert isinstance(fresh, ContextReady)
    assert ready.messages == fresh.messages
    assert ready.layers == fresh.layers
    assert ready.estimated_input_tokens == fresh.estimated_input_tokens
    assert ready.summary_used == fresh.summary_used
    return ready


def contents(ready: ContextReady) -> list[str]:
    return [m.content for m in ready.messages]


def observation(
    ready: ContextReady, context: TurnExecutionContext, step: int, reported: int
) -> UsageObservation:
    return UsageObservation(
        decision_id=ready.decision_id,
        session_id=context.session_id,
        turn_id=context.turn_id,
        step_id=step,
        provider="p",
        model="m",
        usage=Usage(reported, 5),
    )


@dataclass
class Transactions:
    """Read and write transactions a store ran, and what each ``read_state`` returned."""

    reads: int = 0
    writes: int = 0
    states: list[ContextState] = field(default_factory=list)

    def reset(self) -> None:
        self.reads = self.writes = 0
        self.states.clear()


@contextmanager
def counting(store: RuntimeStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[Transactions]:
    """Count the store's transactions (each ``read``/``write`` of the adapter is one)."""
    assert isinstance(store, SqliteStore)
    seen = Transactions()
    read, write, read_state = store.read, store.write, store.context.read_state

    async def counted_read(fn: Callable[..., Any]) -> Any:
        seen.reads += 1
        return await read(fn)

    async def counted_write(fn: Callable[..., Any]) -> Any:
        seen.writes += 1
        return await write(fn)

    async def recorded_state(**kwargs: Any) -> ContextState:
        state = await read_state(**kwargs)
        seen.states.append(state)
        return state

    with monkeypatch.context() as patch:
        patch.setattr(store, "read", counted_read)
        patch.setattr(store, "write", counted_write)
        patch.setattr(store.context, "read_state", recorded_state)
        yield seen


# -- the incremental history is group_history -------------------------------------------


def random_rows(rng: random.Random, count: int) -> list[tuple[int, ModelMessage]]:
    """Transcript rows with tool groups, unanswered calls, orphans and stray results."""
    rows: list[tuple[int, ModelMessage]] = []
    calls: list[str] = []
    for seq in range(1, count + 1):
        kind = rng.random()
        if kind < 0.3:
            made = [
                ToolCall(f"c{seq}_{i}", "notes_read", {"n": i}) for i in range(rng.randint(1, 3))
            ]
            calls = [call.call_id for call in made]
            rows.append((seq, ModelMessage("assistant", "", tuple(made))))
        elif kind < 0.6 and calls:
            rows.append((seq, ModelMessage("tool", f"r{seq}", tool_call_id=rng.choice(calls))))
        elif kind < 0.65:
            rows.append((seq, ModelMessage("tool", "stray", tool_call_id=f"nobody{seq}")))
        else:
            role = rng.choice(["user", "assistant"])
            rows.append((seq, ModelMessage(role, f"m{seq}")))  # type: ignore[arg-type]
    return rows


def test_the_kept_history_is_group_history_after_every_append_and_trim() -> None:
    rng = random.Random(20240610)
    base = CharEstimator()
    plain = CalibratedEstimator(base, 1.3)
    for _ in range(40):
        rows = random_rows(rng, 60)
        limit = rng.randint(1, 12)
        history = History()
        # Counts carried from view to view (each new one starts from the last) stay exact.
        counted = CalibratedEstimator(base, 1.3, SizeMemo(10_000))
        held: list[tuple[int, ModelMessage]] = []
        for seq, message in rows:
            history.append(seq, message)
            held.append((seq, message))
            while len(history) > limit:
                history.popleft()
                held.pop(0)
            called = [c.call_id for _, m in held for c in m.tool_calls]
            answered = frozenset(rng.sample(called, min(len(called), rng.randint(0, 2))))
            for now in (frozenset(), answered):
                expected = group_history(held, now)
                assert history.groups(now) == expected
                view = history.view(now)
                assert list(view.groups) == expected
                assert view.messages == tuple(m for g in expected for m in g.messages)
                counts, total = counted.raw_view(view)
                assert counts == tuple(base.message(m) for m in view.messages)
                assert total == sum(counts)
                assert counted.view(view) == sum(plain.message(m) for m in view.messages)
            assert history.rows == tuple(held)
    # Unchanged groups are the same objects from one view to the next (their counts are kept).
    history = History(random_rows(random.Random(7), 30))
    before = history.view()
    history.append(31, ModelMessage("user", "new"))
    after = history.view()
    assert before is not after
    kept = after.groups[: len(before.groups)]
    assert all(a is b for a, b in zip(before.groups, kept, strict=True))
    assert any(UNANSWERED in m.content for m in after.messages) == any(
        UNANSWERED in m.content for m in before.messages
    )


# -- across Hosts, turns and compactions --------------------------------------------------


async def test_two_hosts_appending_to_one_session_each_see_everything_the_other_appended(
    db_path: Path,
) -> None:
    window = 6  # small, so the other Host's appends push the window along and past it
    async with (
        await RuntimeStore.open(db_path) as store_a,
        await RuntimeStore.open(db_path) as store_b,
        AuthorityResolver.bind(store_a) as authority_a,
        AuthorityResolver.bind(store_b) as authority_b,
    ):
        a = Session(store_a, await authority_a.for_conversation(facts("shared")))
        b = Session(store_b, await authority_b.for_conversation(facts("shared")))
        assert a.session_id == b.session_id
        hosts = {
            "a": (a, ContextManager(store_a, history_window=window)),
            "b": (b, ContextManager(store_b, history_window=window)),
        }
        appended: list[ModelMessage] = []

        def newest_window() -> list[str]:
            """What a full read gives: the newest rows before this turn, grouped."""
            rows = list(enumerate(appended[:-1]))[-window:]
            return [m.content for group in group_history(rows) for m in group.messages]

        rng = random.Random(11)
        for turn in range(14):
            name = "a" if turn % 3 != 2 else "b"  # a runs most turns; b now and then
            session, manager = hosts[name]
            turn_id = f"turn_{turn}_{name}"
            user = ModelMessage("user", f"{name} asks {turn}")
            await session.append(user, turn_id)
            appended.append(user)
            ready = await same_as_uncached(
                manager,
                session.store,
                request(session.scope, turn_id, [user]),
                history_window=window,
            )
            # Everything appended before this turn, by either Host, newest window of it.
            assert contents(ready)[1:-1] == newest_window()
            call = ToolCall(f"call_{turn}", "notes_read", {"turn": turn})
            steps = [
                user,
                ModelMessage("assistant", "", (call,)),
                ModelMessage("tool", f"note {turn}", tool_call_id=call.call_id, name="notes_read"),
            ]
            for message in steps[1:]:
                await session.append(message, turn_id)
            later = await same_as_uncached(
                manager,
                session.store,
                request(session.scope, turn_id, steps, step=1),
                history_window=window,
            )
            assert contents(later)[-3:] == [user.content, "", f"note {turn}"]
            assert contents(later)[1:-3] == contents(ready)[1:-1]  # own rows are not history
            appended += steps[1:]
            if rng.random() < 0.4:
                # The other Host appends a burst between turns (more than one window, at times).
                other, _ = hosts["b" if name == "a" else "a"]
                for index in range(rng.randint(1, 2 * window)):
                    burst = ModelMessage("user", f"burst {turn}.{index}")
                    await other.append(burst, f"turn_{turn}_burst")
                    appended.append(burst)


async def test_compaction_moving_the_cutoff_is_seen_at_the_next_turn(
    store: RuntimeStore, authority: AuthorityResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Session(store, await authority.for_conversation(facts("compacted")))
    for index in range(8):
        await session.append(ModelMessage("user", f"old {index}"), "turn_old")
    manager = ContextManager(store)
    first = await same_as_uncached(
        manager, store, request(session.scope, "t1", [ModelMessage("user", "q1")])
    )
    assert not first.summary_used
    assert contents(first)[1:4] == ["old 0", "old 1", "old 2"]

    # Another Host's compactor folds the first six messages into a summary.
    owner = await anyio.to_thread.run_sync(LeaseOwner.current, "elsewhere")
    compactor = SessionCompactor(store, owner=owner, cooldown_s=0)
    pairs = [
        (r.seq, r.message)
        for r in (
            await store.context.read_state(
                session_id=session.session_id, turn_id="none", window=100
            )
        ).rows
    ]
    outcome = await compactor.compact(
        session.session_id, messages=pairs[:6], expected_cutoff=None, summarizer=None, force=True
    )
    assert outcome.kind == "committed"
    with counting(store, monkeypatch) as seen:
        second = await same_as_uncached(
            manager, store, request(session.scope, "t2", [ModelMessage("user", "q2")])
        )
    assert second.summary_used
    assert contents(second)[2:] == ["old 6", "old 7", "q2"]
    # The kept window's read came back whole: the cutoff it was read under had moved.
    assert seen.states[0].after is None

    # Again, with the cutoff moving once more after new messages.
    await session.append(ModelMessage("user", "q2"), "t2")
    await session.append(ModelMessage("assistant", "a2"), "t2")
    outcome = await compactor.compact(
        session.session_id,
        messages=[(pairs[6][0], pairs[6][1])],
        expected_cutoff=pairs[5][0],
        summarizer=None,
        force=True,
    )
    assert outcome.kind == "committed"
    third = await same_as_uncached(
        manager, store, request(session.scope, "t3", [ModelMessage("user", "q3")])
    )
    assert contents(third)[2:] == ["old 7", "q2", "a2", "q3"]


async def test_the_window_cache_is_bounded_and_an_evicted_session_reads_again(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    manager = ContextManager(store, window_cache=2)
    sessions = []
    for index in range(4):
        session = Session(store, await authority.for_conversation(facts(f"lru {index}")))
        await session.append(ModelMessage("user", f"hello {index}"), "turn_old")
        sessions.append(session)
        await same_as_uncached(
            manager, store, request(session.scope, f"t{index}", [ModelMessage("user", "q")])
        )
        assert manager.cached_sessions == min(index + 1, 2)
    # The first session's window was evicted; it is read again, and still right.
    await sessions[0].append(ModelMessage("assistant", "later"), "turn_old")
    again = await same_as_uncached(
        manager, store, request(sessions[0].scope, "t9", [ModelMessage("user", "q")])
    )
    assert contents(again)[1:] == ["hello 0", "later", "q"]
    assert manager.cached_sessions == 2
    with pytest.raises(ConfigError) as refused:
        ContextManager(store, window_cache=0)
    assert refused.value.key == "window_cache"


async def test_the_window_cache_is_bounded_by_the_text_it_holds(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """Few sessions of long messages are bounded too: 256 windows of 200 messages of
    100,000 characters would otherwise be gigabytes in a long-running Host."""
    manager = ContextManager(store, window_cache=100, window_cache_chars=80_000)
    sessions = []
    for index in range(5):
        session = Session(store, await authority.for_conversation(facts(f"big {index}")))
        await session.append(ModelMessage("user", f"{index}" * 20_000), "turn_old")
        sessions.append(session)
        await same_as_uncached(
            manager, store, request(session.scope, f"t{index}", [ModelMessage("user", "q")])
        )
        # Two windows of about 20,000 characters (and what holding them costs, some 10,000)
        # fit in 80,000; a third does not.
        assert manager.cached_sessions == min(index + 1, 2)
        assert 20_000 * manager.cached_sessions < manager.cached_chars <= 80_000
    # An evicted session reads again, and still right.
    again = await same_as_uncached(
        manager, store, request(sessions[0].scope, "t9", [ModelMessage("user", "q")])
    )
    assert contents(again)[1] == "0" * 20_000
    assert manager.cached_sessions == 2
    # A window over the bound alone is kept for the turn using it, and only it.
    alone = ContextManager(store, window_cache_chars=10_000)
    for session in sessions[:3]:
        await same_as_uncached(
            alone, store, request(session.scope, "t10", [ModelMessage("user", "q")])
        )
        assert alone.cached_sessions == 1
        assert alone.cached_chars > 20_000
    with pytest.raises(ConfigError) as refused:
        ContextManager(store, window_cache_chars=0)
    assert refused.value.key == "window_cache_chars"


@pytest.mark.parametrize(
    "said",
    [pytest.param("hi", id="ascii"), pytest.param("\N{GRINNING FACE}" * 600, id="emoji")],
)
async def test_the_window_cache_bound_is_the_memory_it_takes(
    store: RuntimeStore, authority: AuthorityResolver, said: str
) -> None:
    """``window_cache_chars`` bounds what the cached windows take in memory as tracemalloc
    measures it, not only their text: a held message's objects (row, group, view, counts)
    take about 1.4 KB beyond its text, and a cache of short messages used to take six
    times its bound. Text is counted as Python stores it: an emoji takes four bytes, and
    counted as one, a cache of them took 1.3 times its bound."""
    sessions = []
    for index in range(6):
        session = Session(store, await authority.for_conversation(facts(f"memory {index}")))
        for turn in range(15):
            call = ToolCall(f"call_{turn}", "notes_read", {"text": "ping"})
            for message in (
                ModelMessage("user", said),
                ModelMessage("assistant", "", (call,)),
                ModelMessage("tool", "echo: ping", tool_call_id=call.call_id, name="notes_read"),
                ModelMessage("assistant", said),
            ):
                await session.append(message, f"h{turn}")
        sessions.append(session)
    # What the first prepare of a process builds once (tables, caches) is not the windows'.
    warm = ContextManager(store)
    await warm.prepare(request(sessions[0].scope, "t_warm", [ModelMessage("user", "q")]))
    await warm.flush("t_warm")
    del warm
    bound = 400_000
    manager = ContextManager(store, history_window=60, window_cache_chars=bound)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index, session in enumerate(sessions):
            for step in range(2):
                ask = request(session.scope, f"t{index}", [ModelMessage("user", "q")], step=step)
                await manager.prepare(ask)
            await manager.flush(f"t{index}")
        gc.collect()
        taken = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 1 < manager.cached_sessions < len(sessions)  # the bound evicted some
    assert manager.cached_chars <= bound
    assert bound // 2 < taken <= bound, taken


def test_a_held_text_counts_the_same_however_often_it_is_asked() -> None:
    """A message's size is added when its row comes and taken off when it goes: the two
    must agree. ``sys.getsizeof`` of a non-ASCII string grows once something (sqlite's
    binding, a tokenizer's) asks it for its UTF-8 form, which it then keeps, so the
    count would drift; the size is the text's, not the object's."""
    text = "\N{GRINNING FACE}\u4e2d" * 500 + "é"
    message = ModelMessage("user", text)
    before = held_chars(message)
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        conn.execute("SELECT ?", (text,)).fetchone()  # caches the string's UTF-8 form
    assert held_chars(message) == before
    assert before >= 3 * len(text)  # two to four bytes a character, not one


async def test_the_text_a_window_holds_is_counted_as_rows_come_and_go(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """Rows trimmed past the history window leave the count; a turn's own rows moving to
    history are not counted twice: the figure follows the window, it does not creep."""
    manager = ContextManager(store, history_window=4)
    session = Session(store, await authority.for_conversation(facts("counted")))
    figures = []
    for turn in range(12):
        turn_id = f"turn_{turn}"
        for step, role in enumerate(("user", "assistant")):
            message = ModelMessage(role, chr(ord("a") + turn) * 1_000)
            await session.append(message, turn_id)
            await same_as_uncached(
                manager,
                store,
                request(session.scope, turn_id, [message], step=step),
                history_window=4,
            )
        figures.append(manager.cached_chars)
    # Four history rows and what this turn's rows the window holds: 1,000 characters each,
    # what holding each costs (some 1,500) and the window's own (some 9,000), the same
    # figure at every turn.
    assert all(4_000 < figure < 6 * (1_000 + 2_000) + 10_000 for figure in figures[3:])
    assert len(set(figures[3:])) == 1


# -- decisions: one write per observed step; the unobserved ones are not lost -----------


async def test_a_step_reads_at_most_once_and_writes_once_and_reads_only_what_is_new(
    store: RuntimeStore, authority: AuthorityResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Session(store, await authority.for_conversation(facts("costs")))
    for index in range(40):
        await session.append(ModelMessage("user", f"history {index}"), "turn_old")
    manager = ContextManager(store)
    for turn in range(3):
        turn_id = f"turn_{turn}"
        user = ModelMessage("user", f"question {turn}")
        await session.append(user, turn_id)
        context = context_for(session.scope, turn_id)
        with counting(store, monkeypatch) as seen:
            first = await manager.prepare(request(session.scope, turn_id, [user]))
            assert isinstance(first, ContextReady)
            assert (seen.reads, seen.writes) == (1, 0)
            if turn > 0:
                # Only the rows since the last read: the previous turn's answer and this
                # turn's question, never the 40 before them.
                (state,) = seen.states
                assert state.after is not None
                assert [r.message.content for r in state.rows] == [
                    f"answer {turn - 1}",
                    f"question {turn}",
                ]
            await manager.observe(observation(first, context, 0, 100))
            assert (seen.reads, seen.writes) == (1, 1)
            answer = ModelMessage("assistant", f"answer {turn}")
            await session.append(answer, turn_id)
            seen.reset()
            second = await manager.prepare(request(session.scope, turn_id, [user, answer], step=1))
            assert isinstance(second, ContextReady)
            assert (seen.reads, seen.writes) == (0, 0)  # the turn's later steps read nothing
            await manager.observe(observation(second, context, 1, 120))
            assert (seen.reads, seen.writes) == (0, 1)
        # Both decisions and both observations are durable, together.
        for ready, reported in ((first, 100), (second, 120)):
            recorded = await store.context.decision(ready.decision_id)
            assert recorded is not None
            assert recorded.estimated_input_tokens == ready.estimated_input_tokens
            assert not await store.context.record_usage(observation(ready, context, 0, reported))
        assert await manager.flush(turn_id)
    assert manager.pending_decisions == 0


async def test_the_calibration_an_observation_moves_is_used_by_the_next_step(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    session = Session(store, await authority.for_conversation(facts("calibrated")))
    await session.append(ModelMessage("user", "w" * 3_500), "turn_old")
    manager = ContextManager(store)
    snapshot = {"provider": "p", "model": "m", "effects": ()}
    user = ModelMessage("user", "now")
    ask = request(session.scope, "t1", [user])
    ask = replace(ask, context=replace(ask.context, capability_snapshot=snapshot))
    first = await manager.prepare(ask)
    assert isinstance(first, ContextReady)
    await manager.observe(observation(first, ask.context, 0, first.estimated_input_tokens // 2))
    answer = ModelMessage("assistant", "a")
    later = replace(ask, step_id=1, messages=(user, answer))
    second = await manager.prepare(later)
    fresh = await ContextManager(store).prepare(later)
    assert isinstance(second, ContextReady)
    assert isinstance(fresh, ContextReady)
    assert second.estimated_input_tokens == fresh.estimated_input_tokens
    # The provider counted half: the ratio falls as far as MIN_RATIO (0.8).
    assert second.estimated_input_tokens < first.estimated_input_tokens * 0.85


class ThreadNoting(CharEstimator):
    """A CharEstimator that notes, for each message with attachments, where it was counted."""

    def __init__(self) -> None:
        super().__init__()
        self.counted: list[tuple[int, bool]] = []

    def message(self, message: ModelMessage) -> int:
        if message.attachments:
            size = sum(part.attachment.size for part in message.attachments)
            self.counted.append((size, threading.current_thread() is threading.main_thread()))
        return super().message(message)


async def test_long_attached_text_is_counted_once_off_the_event_loop(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """Megabytes of attached text took the estimate a second or more of the event loop,
    every other session's too: a long text attachment is counted in a worker thread, once,
    and the figure is the same; a short one is counted where it is."""
    session = Session(store, await authority.for_conversation(facts("attached")))
    noting = ThreadNoting()
    manager = ContextManager(store, estimators=EstimatorRegistry(default=noting))
    long_text, short_text = b"a line of notes\n" * 9_000, b"a line of notes\n"
    parts = tuple(
        AttachmentPart(
            Attachment(
                ref=content_ref(hashlib.sha256(data).hexdigest()),
                name=f"{len(data)}.txt",
                media_type="text/plain",
                size=len(data),
            ),
            data,
        )
        for data in (long_text, short_text)
    )
    messages = [ModelMessage("user", "read these", attachments=(part,)) for part in parts]
    ask = request(session.scope, "t1", messages)
    ready = await manager.prepare(ask)
    again = await manager.prepare(replace(ask, step_id=1))
    assert isinstance(ready, ContextReady)
    assert isinstance(again, ContextReady)
    assert again.estimated_input_tokens == ready.estimated_input_tokens
    plain = await ContextManager(store).prepare(ask)
    assert isinstance(plain, ContextReady)
    assert plain.estimated_input_tokens == ready.estimated_input_tokens
    assert noting.counted == [(len(long_text), False), (len(short_text), True)]


async def test_a_refusal_raises_the_calibration_the_next_prepare_uses(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """The provider refused a prepared request as too long: the decision is written at
    once, the session's ratio rises, and the step prepared again is estimated higher (a
    fresh manager reads the same). When that write fails, the session is estimated
    conservatively instead, as after a failed observation."""
    session = Session(store, await authority.for_conversation(facts("refused")))
    await session.append(ModelMessage("user", "w" * 3_500), "turn_old")
    manager = ContextManager(store)
    snapshot = {"provider": "p", "model": "m", "effects": ()}
    ask = request(session.scope, "t1", [ModelMessage("user", "now")])
    ask = replace(ask, context=replace(ask.context, capability_snapshot=snapshot))
    first = await manager.prepare(ask)
    assert isinstance(first, ContextReady)
    assert await manager.refused(first.decision_id)
    recorded = await store.context.decision(first.decision_id)
    assert recorded is not None
    assert recorded.kind == "ready"
    again = await manager.prepare(ask)
    fresh = await ContextManager(store).prepare(ask)
    assert isinstance(again, ContextReady)
    assert isinstance(fresh, ContextReady)
    assert again.estimated_input_tokens == fresh.estimated_input_tokens
    assert again.estimated_input_tokens > first.estimated_input_tokens * 1.2
    assert not await manager.refused(first.decision_id)  # once per decision

    async def fail(decision: object) -> object:
        raise StoreError("disk full", retryable=True)

    other = ContextManager(store)
    before = await other.prepare(ask)
    assert isinstance(before, ContextReady)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store.context, "record_refusal", fail)
        assert not await other.refused(before.decision_id)
    degraded = await other.prepare(ask)
    assert isinstance(degraded, ContextReady)
    assert degraded.estimated_input_tokens > before.estimated_input_tokens * 1.2
    assert other.pending_decisions == 2  # the refused one is written when its turn ends


async def test_a_decision_whose_step_is_never_observed_is_durable_after_the_turn(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    session = Session(store, await authority.for_conversation(facts("unobserved")))
    manager = ContextManager(store)
    user = ModelMessage("user", "q")
    failed = await manager.prepare(request(session.scope, "t_failed", [user]))
    assert isinstance(failed, ContextReady)
    # The provider call failed: no observation. Held until the turn ends ...
    assert await store.context.decision(failed.decision_id) is None
    assert await manager.flush("t_failed")
    recorded = await store.context.decision(failed.decision_id)
    assert recorded is not None
    assert (recorded.kind, recorded.turn_id, recorded.step_id, recorded.layers) == (
        "ready",
        "t_failed",
        0,
        failed.layers,
    )
    # A late observation still records usage (against the recorded decision), once.
    late = observation(failed, context_for(session.scope, "t_failed"), 0, 10)
    await manager.observe(late)
    assert not await store.context.record_usage(late)

    # A flush whose write fails keeps the decision; this manager's next store call writes it.
    cancelled = await manager.prepare(request(session.scope, "t_cancelled", [user]))
    assert isinstance(cancelled, ContextReady)

    async def refuse(decisions: object) -> int:
        raise StoreError("disk full", retryable=True)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store.context, "record_decisions", refuse)
        assert not await manager.flush("t_cancelled")
    assert manager.pending_decisions == 1
    assert await store.context.decision(cancelled.decision_id) is None
    await manager.prepare(request(session.scope, "t_next", [user]))
    assert await store.context.decision(cancelled.decision_id) is not None
    # Closing the manager writes whatever is still held.
    await manager.aclose()
    assert manager.pending_decisions == 0


async def test_held_decisions_are_bounded(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    session = Session(store, await authority.for_conversation(facts("bounded")))
    manager = ContextManager(store, pending_decisions=2)
    user = ModelMessage("user", "q")
    prepared = [
        await manager.prepare(request(session.scope, f"t{index}", [user])) for index in range(4)
    ]
    # The oldest were pushed out and written at once; two stay held.
    assert manager.pending_decisions == 2
    for ready in prepared[:2]:
        assert await store.context.decision(ready.decision_id) is not None
    for ready in prepared[2:]:
        assert await store.context.decision(ready.decision_id) is None
    assert await manager.flush()
    for ready in prepared:
        assert await store.context.decision(ready.decision_id) is not None


# -- estimates: each message counted once, the figures unchanged -----------------------


@dataclass
class Counting:
    """A CharEstimator that counts how often each message is estimated."""

    inner: CharEstimator = field(default_factory=CharEstimator)
    calls: dict[str, int] = field(default_factory=dict)
    definition_counts: int = 0

    @property
    def estimator_id(self) -> str:
        return "counting"

    def text(self, text: str) -> int:
        return self.inner.text(text)

    def message(self, message: ModelMessage) -> int:
        self.calls[message.content] = self.calls.get(message.content, 0) + 1
        return self.inner.message(message)

    def definitions(self, definitions: Sequence[ToolDefinition]) -> int:
        self.definition_counts += 1
        return self.inner.definitions(definitions)

    def request(
        self, messages: Sequence[ModelMessage], definitions: Sequence[ToolDefinition] = ()
    ) -> int:
        return self.inner.request(messages, definitions)


async def test_each_history_message_is_estimated_once_and_the_figures_do_not_change(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    session = Session(store, await authority.for_conversation(facts("estimates")))
    for index in range(30):
        await session.append(ModelMessage("user", f"history {index} " + "x" * index), "turn_old")
    counting_estimator = Counting()
    registry = EstimatorRegistry()
    registry.register(counting_estimator)
    limits = ModelLimits(64_000, 1_000, estimator_id="counting", safety_margin_tokens=100)
    manager = ContextManager(store, estimators=registry)
    for turn in range(3):
        turn_id = f"t{turn}"
        user = ModelMessage("user", f"ask {turn}")
        messages = [user]
        for step in range(3):
            ask = request(session.scope, turn_id, messages, step=step, limits=limits)
            ready = await manager.prepare(ask)
            assert isinstance(ready, ContextReady)
            await manager.observe(observation(ready, ask.context, step, 900 + 50 * step))
            # The raw estimate is the base estimator's whole request, as before.
            recorded = await store.context.decision(ready.decision_id)
            assert recorded is not None
            assert recorded.raw_input_tokens == counting_estimator.inner.request(
                ready.messages, DEFS
            )
            answer = ModelMessage("assistant", f"answer {turn}.{step}")
            await session.append(answer, turn_id)
            messages.append(answer)
        await manager.flush(turn_id)
    # History rows: counted once each, however many steps and turns used them. A turn's
    # messages: once in the turn; read back as history (new objects), they take that count.
    assert all(count == 1 for count in counting_estimator.calls.values()), counting_estimator.calls


def test_a_row_read_back_takes_the_count_of_the_message_its_turn_asked_with() -> None:
    """The rows a turn wrote come back from the store as new objects, equal to what its
    last step asked with: they take those counts. A message equal in Python whose
    arguments are other JSON (True or 1.0 for 1, keys in another order) is counted anew,
    and a message with attached bytes (a row holds only their reference) is not kept."""
    counting_estimator = Counting()
    memo = SizeMemo(100)
    estimate = CalibratedEstimator(counting_estimator, 1.0, memo)
    call = ToolCall("c1", "notes_read", {"n": 1, "k": "v"})
    data = b"attached text"
    ref = Attachment(
        ref=content_ref(hashlib.sha256(data).hexdigest()),
        name="a.txt",
        media_type="text/plain",
        size=len(data),
    )
    asked = [
        ModelMessage("user", "ask", attachments=(AttachmentPart(ref, data),)),
        ModelMessage("assistant", "calling", (call,)),
        ModelMessage("tool", "result", tool_call_id="c1", name="notes_read"),
    ]
    sizes = [estimate.raw(message) for message in asked]
    memo.retire(asked)
    assert not any(id(message) in memo.messages for message in asked)
    for arguments in ({"n": True, "k": "v"}, {"n": 1.0, "k": "v"}, {"k": "v", "n": 1}):
        other = ModelMessage("assistant", "calling", (ToolCall("c1", "notes_read", arguments),))
        assert other == asked[1]
        assert estimate.raw(other) == counting_estimator.inner.message(other)
    assert counting_estimator.calls["calling"] == 4
    rows = [ModelMessage.from_json(m.role, m.to_json()) for m in asked]
    assert [estimate.raw(row) for row in rows[1:]] == sizes[1:]
    assert estimate.raw(rows[0]) == counting_estimator.inner.message(rows[0])
    assert counting_estimator.calls == {"ask": 2, "calling": 4, "result": 1}
    # Taken once: the rows hold the counts now, and the retired copies' text is let go.
    assert not memo.retired


async def test_history_over_the_window_is_estimated_once_and_its_pruning_kept(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """History that fits only pruned: each row and each result's stub is counted once,
    however many turns use them, and the figures are those of a manager that never kept
    a window. Each step used to build new stubs (counted anew, every group's memo entry
    missed) and the memo, filled with them, started afresh every few turns."""
    session = Session(store, await authority.for_conversation(facts("over the window")))
    counting_estimator = Counting()
    registry, fresh_registry = EstimatorRegistry(), EstimatorRegistry()
    registry.register(counting_estimator)
    fresh_registry.register(Counting())
    limits = ModelLimits(3_000, 256, estimator_id="counting", safety_margin_tokens=100)
    options: dict[str, Any] = {"history_window": 16}
    manager = ContextManager(store, estimators=registry, **options)
    for turn in range(14):
        call = ToolCall(f"c{turn}", "notes_read", {"n": turn})
        for message in (
            ModelMessage("user", f"history ask {turn}"),
            ModelMessage("assistant", f"reading {turn}", (call,)),
            ModelMessage(
                "tool", "r" * (4_000 + turn), tool_call_id=call.call_id, name="notes_read"
            ),
            ModelMessage("assistant", f"history answer {turn}"),
        ):
            await session.append(message, f"h{turn}")
        ask = request(
            session.scope, f"t{turn}", [ModelMessage("user", f"ask {turn}")], limits=limits
        )
        ready = await same_as_uncached(manager, store, ask, estimators=fresh_registry, **options)
        await manager.flush(f"t{turn}")
        history = next(layer for layer in ready.layers if layer.name == "history")
        assert turn < 3 or history.pruned >= 2  # old results are stubs
    assert any(text.startswith("[pruned:") for text in counting_estimator.calls)
    assert all(count == 1 for count in counting_estimator.calls.values()), {
        text[:40]: count for text, count in counting_estimator.calls.items() if count > 1
    }


def test_a_full_size_memo_drops_its_oldest_count_not_every_count() -> None:
    """Past its limit a memo drops its oldest entry; it used to start afresh, and every
    message of the window was counted again."""
    counting_estimator = Counting()
    memo = SizeMemo(4)
    estimate = CalibratedEstimator(counting_estimator, 1.0, memo)
    messages = [ModelMessage("user", f"m{index}") for index in range(5)]
    groups = [Group((message,), (index,)) for index, message in enumerate(messages)]
    for group in groups:
        estimate.raw_group(group)
    for group in groups[1:]:
        estimate.raw_group(group)
    assert counting_estimator.calls == {f"m{index}": 1 for index in range(5)}
    assert len(memo.messages) == len(memo.groups) == 4


def test_what_leaves_a_window_leaves_its_memo_and_its_stubs_are_kept() -> None:
    """Rows trimmed from a window take their counts, their groups' and their stubs' with
    them; a held group's pruned form is the same object at every step (counted once)."""
    rows: list[HistoryRow] = []
    for turn in range(12):
        call = ToolCall(f"c{turn}", "notes_read", {"n": turn})
        rows += [
            HistoryRow(3 * turn + 1, ModelMessage("assistant", f"call {turn}", (call,)), "old"),
            HistoryRow(
                3 * turn + 2,
                ModelMessage("tool", "r" * (500 + turn), tool_call_id=call.call_id, name="n"),
                "old",
            ),
            HistoryRow(3 * turn + 3, ModelMessage("assistant", f"answer {turn}"), "old"),
        ]
    window = SessionWindow(ContextState(None, None, tuple(rows[:9]), False, None, None, "t"), 9)
    counting_estimator = Counting()
    memo = window.memo(counting_estimator.estimator_id)
    estimate = CalibratedEstimator(counting_estimator, 1.0, memo)
    for end in range(9, len(rows) + 1, 3):
        state = ContextState(None, None, tuple(rows[end - 3 : end]), False, None, None, "t")
        assert end == 9 or window.extend(replace(state, after=end - 3))
        for _ in range(2):  # two steps
            groups, pruned = prune_results(
                window.history.view().groups, protect_tail=2, prune=window.pruned
            )
            assert pruned == 2
            for group in groups:
                estimate.raw_group(group)
        # The memo holds only what the window holds: its rows and groups, their stubs.
        pruned_forms = [found[1] for found in window.pruned_groups.values()]
        messages = [message for _, message in window.history.rows]
        messages += [m for group in pruned_forms for m in group.messages]
        held = {id(message) for message in messages}
        held_groups = {id(group) for group in (*window.history.view().groups, *pruned_forms)}
        assert {id(entry[0]) for entry in memo.messages.values()} <= held
        assert {id(entry[0]) for entry in memo.groups.values()} <= held_groups
        assert len(window.pruned_groups) == 2
    assert all(count == 1 for count in counting_estimator.calls.values())


async def test_tool_schemas_are_counted_once_while_they_stay_the_same(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    """Each turn's catalog wraps the same schema objects in new definitions: one count.

    A changed schema, description or name is counted again, and every figure is
    the one a manager that never counted before arrives at.
    """
    session = Session(store, await authority.for_conversation(facts("schemas")))
    counting_estimator = Counting()
    registry = EstimatorRegistry()
    registry.register(counting_estimator)
    limits = ModelLimits(64_000, 1_000, estimator_id="counting", safety_margin_tokens=100)
    manager = ContextManager(store, estimators=registry)
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    frozen = ToolDefinition("notes_read", "Read a note.", schema).parameters
    other = ToolDefinition("notes_read", "Read a note.", {"type": "object"}).parameters
    turns: list[tuple[str, str, str, Any, int]] = [
        ("t0", "notes_read", "Read a note.", frozen, 1),
        ("t1", "notes_read", "Read a note.", frozen, 1),  # new definitions, same schema
        ("t2", "notes_read", "Read a note.", dict(schema), 1),  # an equal schema
        ("t3", "notes_read", "Read a note.", other, 2),  # another schema
        ("t4", "notes_read", "Read one note.", other, 3),
        ("t5", "notes_list", "Read one note.", other, 4),
    ]
    for turn_id, name, description, parameters, counted in turns:
        definitions = (ToolDefinition(name, description, parameters),)
        ask = request(session.scope, turn_id, [ModelMessage("user", "hi")], limits=limits)
        ask = replace(ask, definitions=definitions)
        ready = await manager.prepare(ask)
        assert isinstance(ready, ContextReady)
        assert counting_estimator.definition_counts == counted
        fresh_registry = EstimatorRegistry()
        fresh_registry.register(Counting())
        fresh = await ContextManager(store, estimators=fresh_registry).prepare(
            replace(ask, step_id=1)
        )
        assert isinstance(fresh, ContextReady)
        assert ready.estimated_input_tokens == fresh.estimated_input_tokens
        await manager.flush(turn_id)


async def test_the_raw_estimate_is_the_whole_request_for_every_estimator_kind(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    session = Session(store, await authority.for_conversation(facts("raw")))
    await session.append(ModelMessage("user", "earlier"), "turn_old")
    call = ToolCall("c1", "notes_read", {"name": "a"})
    await session.append(ModelMessage("assistant", "", (call,)), "turn_old")
    await session.append(
        ModelMessage("tool", "text", tool_call_id="c1", name="notes_read"), "turn_old"
    )
    tokenizer = TokenizerEstimator(
        lambda text: len(text.split()) + 1,
        estimator_id="words",
        message_overhead={"system": 3, "user": 4, "assistant": 5},
        request_overhead=7,
        implicit_system_tokens=11,
    )
    registry = EstimatorRegistry()
    registry.register(tokenizer)
    for estimator, limits in (
        (CharEstimator(), ROOMY),
        (tokenizer, ModelLimits(64_000, 1_000, estimator_id="words", safety_margin_tokens=100)),
    ):
        manager = ContextManager(store, estimators=registry)
        for instructions in ("be brief", ""):  # opening with a system message, and without
            ask = request(session.scope, "t", [ModelMessage("user", "now")], limits=limits)
            ask = replace(ask, instructions=instructions)
            ready = await manager.prepare(ask)
            assert isinstance(ready, ContextReady)
            assert await manager.flush("t")
            recorded = await store.context.decision(ready.decision_id)
            assert recorded is not None
            assert recorded.raw_input_tokens == estimator.request(ready.messages, DEFS)
            framing = next(layer for layer in ready.layers if layer.name == "framing")
            first = ready.messages[:1]
            assert framing.tokens == estimator.request(first, ()) - sum(
                estimator.message(m) for m in first
            )


def test_nothing_in_the_store_rewrites_or_deletes_transcript_rows() -> None:
    """The window kept across reads relies on it: transcripts are append-only.

    One exception: erasing a session deletes its transcript, and first commits an empty
    summary whose cutoff covers every deleted row, in the same transaction; a cached
    window sees its cutoff move and reads the session again (tests/contract/
    test_store_session_erase.py checks the next turn's request holds nothing erased).
    """
    root = Path(__file__).resolve().parents[2] / "hostkit" / "store"
    rewrite = re.compile(
        r"(UPDATE|DELETE\s+FROM|REPLACE\s+INTO|INSERT\s+OR\s+REPLACE\s+INTO)\s+messages\b", re.I
    )
    found = [path.name for path in root.glob("*.py") if rewrite.search(path.read_text())]
    assert found == ["_erase.py"]
    erase = (root / "_erase.py").read_text()
    cut = erase.index("    _cut_history(conn, session_id)\n")
    assert cut < erase.index('"DELETE FROM messages WHERE session_id = ?"')
