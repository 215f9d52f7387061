"""Clause: a provider outage defers the inbox backlog; it does not fail every queued message.

A turn that fails because its model provider could not be reached (a
retryable ``ProviderError`` after the adapter's retries) says so as a typed
fact, ``TurnResult.provider_unavailable`` (``before_output`` when nothing but
the user's message was recorded). The worker then opens that agent's breaker
(``ProviderOutages``): its inbounds are deferred, their attempts not spent,
with bounded exponential backoff; one probe at a time goes through when the
backoff ends, and a turn the model answers closes it. Deferral ends
``provider_wait_s`` after a message was received: past it, the message runs
like any other. Other agents are served meanwhile. The turn that found the
outage (and a probe that finds it still there) ends with the Host's notice,
as before: its request id is spent on a recorded failed turn.

The end-to-end test runs a real Host against a loopback OpenAI-compatible
server that answers 503 while down; the breaker's own rules run a worker
over the in-memory inbox on a clock the test moves.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.adapters.openai_chat import OpenAIChatProvider
from hostkit.adapters.scripted import CallTools, Fail, Reply, ScriptedModel
from hostkit.effects import AuthoredTool
from hostkit.errors import InvalidValue, ProviderError
from hostkit.host import Host, HostConfig, parse_config
from hostkit.inbox import ChannelInbox, InboxWorker, ProviderOutages, RetryPolicy, outage_checks
from hostkit.providers import RetryPolicy as ProviderRetries
from hostkit.testing import capabilities
from hostkit.types import (
    ConversationFacts,
    InboundEnvelope,
    InboundRecord,
    TurnRequest,
    TurnResult,
    new_id,
)
from tests.hosts import open_host
from tests.wire import Seen, WireServer, serve_wire
from tests.wire import openai_chat as wire_openai
from tests.wire.scenario import Answer

pytestmark = pytest.mark.anyio
# The breaker's own rules run over the in-memory inbox (and the policy is a value): no
# store engine runs, so the matrix's postgres leg would test nothing more.
IN_MEMORY = pytest.mark.sqlite_only("the in-memory inbox and the policy: no store engine runs")

DOWN_CHANNEL = "telegram.support"
OTHER_CHANNEL = "telegram.sales"
_events = iter(range(1, 1_000_000))


def envelope(text: str, *, channel: str = DOWN_CHANNEL, received_at: float) -> InboundEnvelope:
    event = next(_events)
    return InboundEnvelope(
        channel_instance_id=channel,
        platform_event_key=f"update-{event}",
        conversation_key=f"chat-{event}",
        principal_key="alice",
        authenticated_by="bot_token",
        received_at=received_at,
        payload=text,
    )


async def records(inbox: ChannelInbox, ids: list[str]) -> list[InboundRecord]:
    found = [await inbox.record(inbound_id) for inbound_id in ids]
    assert all(record is not None for record in found)
    return [record for record in found if record is not None]


async def until(check: Callable[[], Any], *, timeout_s: float = 20.0) -> None:
    with anyio.fail_after(timeout_s):
        while not await check():  # noqa: ASYNC110 (rows change in the store)
            await anyio.sleep(0.02)


async def turn_status(host: Host, turn_id: str | None) -> str:
    rows = await host.store.read(
        lambda c: c.execute("SELECT status FROM turns WHERE turn_id = ?", [turn_id]).fetchall()
    )
    return str(rows[0][0])


def backed_off(inbox: ChannelInbox, ids: list[str], count: int) -> Callable[[], Any]:
    """A check: ``count`` of ``ids`` wait out a breaker's long backoff (deferred at least a
    minute from now, no attempt spent)."""

    async def check() -> bool:
        later = time.time() + 60.0
        found = await records(inbox, ids)
        return sum(r.attempt == 0 and (r.due_at or 0) > later for r in found) == count

    return check


# -- end to end: a real Host, a loopback provider that is down, then back -------------


@dataclass
class Outage:
    """The loopback chat-completions server's state: 503 while ``down``, else an answer."""

    down: bool = True
    refused: int = 0
    answered: int = 0

    def respond(self, seen: Seen) -> wire_openai.Reply:
        if self.down:
            self.refused += 1
            return wire_openai.error_reply(503, "the upstream is overloaded")
        self.answered += 1
        return wire_openai.answer_reply(Answer(deltas=("back again",)), stream=True)


def unreachable(wire: WireServer, *, attempts: int) -> OpenAIChatProvider:
    """The OpenAI-compatible provider ``wire`` serves (503 while its ``Outage`` is down),
    trying each request ``attempts`` times at once."""
    return OpenAIChatProvider(
        model="gpt-4o",
        base_url=f"{wire.base_url}/v1",
        api_key="sk-test-outage",
        retry=ProviderRetries(max_attempts=attempts, base_delay_s=0.0, max_delay_s=0.0),
    )


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


async def test_a_queued_backlog_waits_out_the_outage_and_is_answered_after_it(
    tmp_path: Path, wire: WireServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Five messages queued while the provider answers 503: the first finds the outage
    (its turn fails, typed ``before_output``), the other four wait unspent and are all
    answered once the provider is back; none is dead-lettered; another agent on a healthy
    provider is answered during the outage; the log names the outage once, and its end."""
    outage = Outage()
    wire.respond = outage.respond
    policy = RetryPolicy(
        max_attempts=2, base_delay_s=1.0, max_delay_s=2.0, jitter=0.0, provider_wait_s=60.0
    )
    provider = unreachable(wire, attempts=2)
    healthy = ScriptedModel([Reply("the other agent answers")], repeat_last=True)
    caplog.set_level(logging.INFO, logger="hostkit.inbox")
    async with (
        provider,
        open_host(
            tmp_path, {"assistant": provider, "sales": healthy}, agents=("assistant", "sales")
        ) as host,
    ):
        inbox = ChannelInbox.on_store(host.store, policy=policy)
        now = time.time()
        queued = [
            (await inbox.accept(envelope(f"question {n}", received_at=now))).inbound_id
            for n in range(5)
        ]
        other = (
            await inbox.accept(envelope("hello sales", channel=OTHER_CHANNEL, received_at=now))
        ).inbound_id
        worker = host.inbox_worker(
            inbox=inbox,
            route=lambda channel: "sales" if channel == OTHER_CHANNEL else "assistant",
            concurrency=1,
            idle_poll_s=0.02,
        )
        async with worker:

            async def opened() -> bool:
                return bool(worker.outages.views(inbox.now()))

            await until(opened)
            # While the breaker is open the readiness view names the agent and the reason.
            (view,) = worker.outages.views(inbox.now())
            assert view.agent == "assistant"
            check = outage_checks(worker.outages.views(inbox.now()), inbox.now())["assistant"]
            assert check.startswith("model provider unreachable for ")
            assert "503" in check

            async def waiting() -> bool:
                # The other agent answered; the four behind the outage deferred, unspent.
                found = await records(inbox, [other, *queued])
                deferred = [
                    r
                    for r in found[1:]
                    if (r.state, r.attempt) == ("ready", 0) and (r.due_at or 0) > time.time()
                ]
                return found[0].state == "completed" and len(deferred) == 4

            await until(waiting, timeout_s=10.0)
            outage.down = False

            async def all_ended() -> bool:
                return all(r.state == "completed" for r in await records(inbox, queued))

            await until(all_ended)
        assert not worker.outages.views(inbox.now())
        ended = await records(inbox, queued)
        assert all(r.attempt == 1 for r in ended), "deferrals spend no attempt"
        statuses = [await turn_status(host, r.turn_id) for r in ended]
        assert sorted(statuses) == ["completed"] * 4 + ["failed"]
        assert await turn_status(host, (await records(inbox, [other]))[0].turn_id) == "completed"
        assert outage.answered == 4
    messages = [r.getMessage() for r in caplog.records]
    assert sum("model provider is unreachable" in m for m in messages) == 1, messages
    assert sum("model provider answers again" in m for m in messages) == 1, messages


async def test_applying_a_fixed_provider_answers_the_backlog_without_waiting_the_backoff(
    tmp_path: Path, wire: WireServer
) -> None:
    """A Host's worker: the provider answers 503 and the breaker opens for ten minutes; an
    operator moves the agent to another provider (``apply_config``, as a reload): the
    deferred messages are answered in seconds, not after the backoff."""
    outage = Outage()
    wire.respond = outage.respond
    policy = RetryPolicy(
        max_attempts=2, base_delay_s=600.0, max_delay_s=600.0, jitter=0.0, provider_wait_s=3600.0
    )
    provider = unreachable(wire, attempts=1)
    fallback = ScriptedModel([Reply("the fallback answers")], repeat_last=True)
    async with provider, open_host(tmp_path, provider) as host:
        inbox = ChannelInbox.on_store(host.store, policy=policy)
        now = time.time()
        queued = [
            (await inbox.accept(envelope(f"question {n}", received_at=now))).inbound_id
            for n in range(3)
        ]
        worker = host.inbox_worker(
            inbox=inbox, route=lambda channel: "assistant", concurrency=1, idle_poll_s=0.02
        )
        async with worker:
            # The first found the outage; the two behind it wait out its backoff.
            await until(backed_off(inbox, queued, 2), timeout_s=10.0)
            await host.apply_config(host.declared_config, capabilities=capabilities(fallback))

            async def all_ended() -> bool:
                return all(r.state == "completed" for r in await records(inbox, queued))

            await until(all_ended, timeout_s=10.0)
        statuses = [await turn_status(host, r.turn_id) for r in await records(inbox, queued)]
        assert sorted(statuses) == ["completed", "completed", "failed"]
        assert outage.answered == 0


@pytest.mark.sqlite_only("which agents a reload changed; the wake runs on both engines above")
async def test_a_reloaded_file_that_moves_the_agent_to_another_provider_probes_at_once(
    tmp_path: Path, wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``hostkit serve`` reloads: the configuration is read again and applied, the agent
    now on another provider. Its breaker probes at once; an agent whose provider did not
    change keeps its backoff (a reload that touches nothing of it is no news of it)."""
    outage = Outage()
    wire.respond = outage.respond
    monkeypatch.setenv("HOSTKIT_TEST_OUTAGE_KEY", "sk-test-outage")
    down = {"kind": "openai", "base_url": f"{wire.base_url}/v1", "model": "gpt-4o"}
    down["api_key_env"] = "HOSTKIT_TEST_OUTAGE_KEY"

    def written(provider: str) -> HostConfig:
        return parse_config(
            {
                "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
                "providers": {
                    "down": down,
                    "fixed": {"kind": "scripted", "script": [{"reply": "the fixed one"}]},
                },
                "agents": {
                    "assistant": {"provider": provider, "memory": False},
                    "sales": {"provider": "down", "memory": False},
                },
            },
            base_dir=tmp_path,
        )

    policy = RetryPolicy(
        max_attempts=2, base_delay_s=600.0, max_delay_s=600.0, jitter=0.0, provider_wait_s=3600.0
    )
    async with Host.open(written("down")) as host:
        inbox = ChannelInbox.on_store(host.store, policy=policy)
        now = time.time()
        queued = [
            (await inbox.accept(envelope(f"question {n}", received_at=now))).inbound_id
            for n in range(2)
        ]
        sales = [
            (
                await inbox.accept(envelope(f"s{n}", channel=OTHER_CHANNEL, received_at=now))
            ).inbound_id
            for n in range(2)
        ]
        worker = host.inbox_worker(
            inbox=inbox,
            route=lambda channel: "sales" if channel == OTHER_CHANNEL else "assistant",
            concurrency=1,
            idle_poll_s=0.02,
        )
        async with worker:
            # One message of each agent found the outage; the other of each waits it out.
            await until(backed_off(inbox, [*queued, *sales], 2), timeout_s=20.0)
            await host.apply_config(written("fixed"))

            async def answered() -> bool:
                return all(r.state == "completed" for r in await records(inbox, queued))

            await until(answered, timeout_s=10.0)
            assert [v.agent for v in worker.outages.views(inbox.now())] == ["sales"]
            (waiting,) = [r for r in await records(inbox, sales) if r.attempt == 0]
            assert (waiting.due_at or 0) > time.time() + 60.0


# -- the breaker's rules: a worker over the in-memory inbox, on a moved clock --------


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Turns:
    """A turn runner whose agent ``down`` fails as an unreachable provider while ``outage``."""

    outage: bool = True
    # The provider's Retry-After while it is down.
    retry_after: float | None = None
    ran: list[tuple[str, str]] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)
    # As a Host: a request id already recorded returns its turn, run again nothing.
    recorded: dict[str, TurnResult] = field(default_factory=dict)

    async def find(self, request: TurnRequest) -> str | None:
        found = self.recorded.get(request.request_id)
        return None if found is None else found.turn_id

    async def run(self, request: TurnRequest) -> TurnResult:
        if request.request_id in self.recorded:
            return self.recorded[request.request_id]
        self.ran.append((request.core_id, request.input))
        failed = self.outage and request.core_id == "down"
        result = TurnResult(
            request_id=request.request_id,
            turn_id=new_id("turn"),
            session_id="ses_1",
            core_id=request.core_id,
            core_revision="r1",
            outcome="failed" if failed else "completed",
            text="" if failed else "answered",
            error="provider failed: down: HTTP 503" if failed else None,
            provider_unavailable="before_output" if failed else None,
            provider_retry_after_s=self.retry_after if failed else None,
        )
        self.outcomes[result.turn_id] = result.outcome
        self.recorded[request.request_id] = result
        return result


@dataclass
class Bench:
    inbox: ChannelInbox
    clock: Clock
    turns: Turns
    worker: InboxWorker

    async def accept(self, text: str, *, channel: str = DOWN_CHANNEL) -> str:
        receipt = await self.inbox.accept(envelope(text, channel=channel, received_at=self.clock()))
        return receipt.inbound_id

    async def state(self, inbound_id: str) -> tuple[str, int, str | None]:
        (record,) = await records(self.inbox, [inbound_id])
        return record.state, record.attempt, self.turns.outcomes.get(record.turn_id or "")


def bench(**policy: Any) -> Bench:
    clock = Clock()
    inbox = ChannelInbox.in_memory(
        policy=RetryPolicy(
            **{"max_attempts": 2, "base_delay_s": 1.0, "max_delay_s": 4.0, "jitter": 0.0, **policy}
        ),
        clock=clock,
    )
    turns = Turns()
    worker = InboxWorker(
        inbox,
        turns.run,
        route=lambda channel: "up" if channel == OTHER_CHANNEL else "down",
        concurrency=1,
        idle_poll_s=0.01,
        clock=clock,
        find_turn=turns.find,
    )
    return Bench(inbox, clock, turns, worker)


@IN_MEMORY
async def test_the_breaker_backs_off_lets_one_probe_through_and_closes_when_answered() -> None:
    """The first failure opens it (backoff = base delay); a probe that fails doubles it;
    each waiting inbound is deferred to the next probe, attempt unspent; a probe the model
    answers closes it and the rest run. Another agent is served all along."""
    b = bench()
    first = await b.accept("m0")
    assert await b.worker.drain() == 1
    assert await b.state(first) == ("completed", 1, "failed")
    ids = {text: await b.accept(text) for text in ("m1", "m2")}
    other = await b.accept("hi", channel=OTHER_CHANNEL)
    assert await b.worker.drain() == 3
    assert b.turns.ran == [("down", "m0"), ("up", "hi")]
    assert await b.state(other) == ("completed", 1, "completed")
    for waiting in ids.values():
        record = (await records(b.inbox, [waiting]))[0]
        assert (record.state, record.attempt) == ("ready", 0)
        assert record.due_at == pytest.approx(b.clock() + 1.0)  # delay(1) = base_delay_s
    (view,) = b.worker.outages.views(b.clock())
    assert (view.failures, view.next_probe_at) == (1, pytest.approx(b.clock() + 1.0))

    assert await b.worker.drain() == 0  # nothing due before the backoff ends
    b.clock.advance(1.0)
    assert await b.worker.drain() == 2  # one probe (fails again), the other deferred
    assert len(b.turns.ran) == 3
    probe = b.turns.ran[-1][1]
    rest = "m2" if probe == "m1" else "m1"
    assert await b.state(ids[probe]) == ("completed", 1, "failed")
    (view,) = b.worker.outages.views(b.clock())
    assert (view.failures, view.next_probe_at) == (2, pytest.approx(b.clock() + 2.0))
    assert (await b.state(ids[rest]))[:2] == ("ready", 0)

    b.turns.outage = False
    b.clock.advance(2.0)
    assert await b.worker.drain() == 1
    assert b.turns.ran[3:] == [("down", rest)]
    assert await b.state(ids[rest]) == ("completed", 1, "completed")
    assert not b.worker.outages.views(b.clock())
    fourth = await b.accept("m3")
    assert await b.worker.drain() == 1
    assert await b.state(fourth) == ("completed", 1, "completed")


@dataclass
class Gated:
    """A bench whose worker runs four at a time and holds every turn after the opener
    until ``gate`` is set; it counts the worker's claim rounds and deferrals."""

    b: Bench
    gate: anyio.Event = field(default_factory=anyio.Event)
    entered: list[str] = field(default_factory=list)
    rounds: int = 0
    deferred: list[str] = field(default_factory=list)


def gated() -> Gated:
    g = Gated(bench())
    plain, claim, postpone = g.b.turns.run, g.b.inbox.claim_batch, g.b.inbox.postpone

    async def slow(request: TurnRequest) -> TurnResult:
        g.entered.append(request.input)
        if len(g.entered) > 1:
            await g.gate.wait()
        return await plain(request)

    async def counted_claim(limit: int) -> Any:
        g.rounds += 1
        return await claim(limit)

    async def counted_postpone(claimed: Any, *, until: float) -> bool:
        g.deferred.append(claimed.envelope.payload)
        return await postpone(claimed, until=until)

    g.b.inbox.claim_batch = counted_claim  # type: ignore[method-assign]
    g.b.inbox.postpone = counted_postpone  # type: ignore[method-assign]
    g.b.worker = InboxWorker(
        g.b.inbox,
        slow,
        route=lambda channel: "down",
        concurrency=4,
        idle_poll_s=0.01,
        clock=g.b.clock,
    )
    return g


@IN_MEMORY
async def test_while_a_probe_runs_the_others_wait_for_it_and_its_answer_wakes_them() -> None:
    """Half-open lets exactly one turn through: with room for four, the rest are deferred,
    each once, however long the probe takes (its verdict, not a guess of its length,
    ends their wait); the probe answered, the backlog is due at once (the clock not
    moved), in its order: what arrived during the probe comes after it."""
    g = gated()
    b = g.b
    await b.accept("opener")
    assert await b.worker.drain() == 1
    waiting = [await b.accept(f"w{n}") for n in range(3)]
    b.clock.advance(1.0)
    b.turns.outage = False
    async with anyio.create_task_group() as group:
        group.start_soon(b.worker.drain)
        await until(lambda: _true(len(g.entered) == 2 and len(g.deferred) == 2))
        b.clock.advance(3.0)  # a slow probe: past any backoff but the longest
        rounds = g.rounds
        await until(lambda: _true(g.rounds >= rounds + 3))
        assert len(g.entered) == 2, "one probe at a time"
        assert len(g.deferred) == 2, "a deferred message waits for the probe's verdict"
        fresh = await b.accept("fresh")
        await until(lambda: _true(len(g.deferred) == 3))
        g.gate.set()
    probe = g.entered[1]
    assert [await b.state(w) for w in waiting] == [("completed", 1, "completed")] * 3
    assert await b.state(fresh) == ("completed", 1, "completed")
    backlog = [w for w in ("w0", "w1", "w2") if w != probe]
    assert g.entered[2:] == [*backlog, "fresh"], "the backlog first, in its order"
    assert sorted(g.deferred) == sorted([*backlog, "fresh"]), "each deferred once"
    assert not b.worker.outages.views(b.clock())


async def _true(value: bool) -> bool:
    return value


@IN_MEMORY
def test_a_probe_that_ends_without_a_verdict_frees_the_half_open_slot() -> None:
    """A probe whose claim was lost or whose handler failed tells nothing: the next turn
    is the probe, the backoff unchanged; a failure of a turn begun before the opening is
    not counted as a probe's."""
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=8.0, jitter=0.0)
    outages = ProviderOutages(policy)
    assert outages.admit("a", 0.0) == (None, None)
    outages.ended("a", 0.0, "unavailable", probe=None, reason="HTTP 503")
    outages.ended("a", 0.1, "unavailable", probe=None, reason="HTTP 503")  # begun before
    assert outages.views(0.1)[0].failures == 1
    assert outages.admit("a", 0.5) == (1.0, None)
    due, probe = outages.admit("a", 1.0)
    assert due is None
    assert probe is not None
    assert outages.admit("a", 1.0) == (9.0, None)  # waits for the probe's verdict
    outages.ended("a", 1.5, None, probe=probe, reason="no reason recorded")
    due, probe = outages.admit("a", 1.5)
    assert due is None
    assert probe is not None
    outages.ended("a", 2.0, "unavailable", probe=probe, reason="HTTP 503")
    (view,) = outages.views(2.0)
    assert (view.failures, view.next_probe_at) == (2, 4.0)
    assert outages.admit("b", 2.0) == (None, None), "another agent is not held"
    outages.ended("a", 2.5, "reached", probe=None, reason="")
    assert outages.views(2.5) == ()
    assert outages.admit("a", 2.5) == (None, None)


@IN_MEMORY
async def test_the_next_probe_waits_at_least_what_the_provider_asked() -> None:
    """A 429 (or 503) whose Retry-After outlasts the backoff holds the next probe back that
    long: a probe sooner would cost a user the failure notice for nothing."""
    b = bench()
    b.turns.retry_after = 3.0
    await b.accept("m0")
    waiting = await b.accept("m1")
    assert await b.worker.drain() == 2
    (view,) = b.worker.outages.views(b.clock())
    assert view.next_probe_at == pytest.approx(b.clock() + 3.0)  # not delay(1) = 1 s
    (record,) = await records(b.inbox, [waiting])
    assert (record.state, record.due_at) == ("ready", pytest.approx(b.clock() + 3.0))
    b.clock.advance(1.0)
    assert await b.worker.drain() == 0, "no probe before the provider's Retry-After"
    assert len(b.turns.ran) == 1
    b.clock.advance(2.0)
    assert await b.worker.drain() == 1
    (view,) = b.worker.outages.views(b.clock())
    # The probe failed: max(delay(2) = 2 s, Retry-After 3 s).
    assert (view.failures, view.next_probe_at) == (2, pytest.approx(b.clock() + 3.0))
    outages = ProviderOutages(RetryPolicy(base_delay_s=1.0, max_delay_s=8.0, jitter=0.0))
    outages.ended("a", 0.0, "unavailable", probe=None, reason="429", retry_after=1e9)
    assert outages.views(0.0)[0].next_probe_at == RetryPolicy().provider_wait_s


@IN_MEMORY
async def test_a_recorded_failed_turn_found_again_opens_no_breaker() -> None:
    """An inbound whose earlier attempt's turn failed with the provider down (the Host
    died before the inbound's end was recorded) comes back when the provider is up: the
    recorded turn is its answer, an old verdict that opens nothing, so the next message
    runs at once."""
    b = bench()
    first = await b.accept("m0")
    (claimed,) = await b.inbox.claim_batch(1)
    claimed = await b.inbox.reserve_turn(claimed)
    failed = await b.turns.run(
        TurnRequest(
            input="m0",
            principal=ConversationFacts(DOWN_CHANNEL, "c", "alice"),
            request_id=claimed.turn_request_id,
            core_id="down",
        )
    )
    assert failed.provider_unavailable == "before_output"
    b.turns.outage = False
    b.clock.advance(b.inbox.policy.lease_s + 1.0)  # the Host died: its lease runs out
    assert await b.worker.drain() == 1
    assert await b.state(first) == ("completed", 2, "failed")
    assert not b.worker.outages.views(b.clock())
    second = await b.accept("m1")
    assert await b.worker.drain() == 1
    assert await b.state(second) == ("completed", 1, "completed")


@IN_MEMORY
def test_a_probe_of_an_earlier_opening_reports_into_no_later_one() -> None:
    """A probe still in flight when its outage closed (another turn was answered) and a new
    one opened: its failure neither frees the new opening's half-open slot (two probes at
    once) nor counts as the new probe's failure."""
    outages = ProviderOutages(RetryPolicy(base_delay_s=1.0, max_delay_s=8.0, jitter=0.0))
    outages.ended("a", 0.0, "unavailable", probe=None, reason="HTTP 503")
    _, old = outages.admit("a", 1.0)
    assert old is not None
    outages.ended("a", 1.5, "reached", probe=None, reason="")  # a turn begun earlier
    outages.ended("a", 2.0, "unavailable", probe=None, reason="HTTP 503")  # opens anew
    _, new = outages.admit("a", 3.0)
    assert new is not None
    assert new != old
    assert outages.ended("a", 3.5, "unavailable", probe=old, reason="HTTP 503") is None
    assert outages.views(3.5)[0].failures == 1
    due, again = outages.admit("a", 3.5)
    assert (due, again) == (3.5 + 8.0, None), "the new probe still holds the slot"
    outages.ended("a", 4.0, "unavailable", probe=new, reason="HTTP 503")
    assert outages.views(4.0)[0].failures == 2


@IN_MEMORY
async def test_a_changed_provider_is_probed_at_once_with_the_backlog_due_again() -> None:
    """A reload that fixes the agent's provider (or moves it to another one during the
    outage) does not leave the backlog waiting out a backoff of up to ``max_delay_s``: the
    breaker probes at once, and the inbounds it deferred are due now, in their order."""
    b = bench(base_delay_s=600.0, max_delay_s=600.0)
    await b.accept("m0")
    assert await b.worker.drain() == 1  # finds the outage: the breaker opens for 600 s
    waiting = [await b.accept(text) for text in ("m1", "m2")]
    assert await b.worker.drain() == 2  # both deferred, unspent
    assert [(await b.state(i))[:2] for i in waiting] == [("ready", 0)] * 2
    b.turns.outage = False  # the new configuration's provider answers
    b.clock.advance(1.0)
    assert await b.worker.drain() == 0  # without a reload: still the backoff

    await b.worker.providers_changed(["down", "up"])
    assert await b.worker.drain() == 2
    assert [text for _, text in b.turns.ran[1:]] == ["m1", "m2"]
    assert not b.worker.outages.views(b.clock())


@IN_MEMORY
def test_a_probe_begun_before_the_provider_changed_counts_for_nothing() -> None:
    """A probe still running on the old provider when the new one came: its failure
    neither backs the new provider off nor frees the slot of the probe that went at once."""
    outages = ProviderOutages(RetryPolicy(base_delay_s=60.0, max_delay_s=60.0, jitter=0.0))
    outages.ended("a", 0.0, "unavailable", probe=None, reason="HTTP 503")
    _, old = outages.admit("a", 61.0)
    assert old is not None
    assert outages.probe_now(["a", "b"], 62.0) == []  # nothing was deferred
    due, new = outages.admit("a", 62.0)
    assert (due, new is not None, new != old) == (None, True, True)
    assert outages.ended("a", 63.0, "unavailable", probe=old, reason="HTTP 503") is None
    (view,) = outages.views(63.0)
    assert view.failures == 1
    assert outages.admit("a", 63.0)[1] is None, "the new probe still holds the slot"


@IN_MEMORY
def test_a_breaker_no_message_asks_about_is_forgotten() -> None:
    """An agent that gets no more messages (rerouted, or quiet) keeps no outage in
    ``/readyz``: a breaker no turn asked about for two longest backoffs after its next
    probe was due is forgotten; one whose messages still wait is not."""
    outages = ProviderOutages(RetryPolicy(base_delay_s=1.0, max_delay_s=8.0, jitter=0.0))
    outages.ended("quiet", 0.0, "unavailable", probe=None, reason="HTTP 503")
    outages.ended("busy", 0.0, "unavailable", probe=None, reason="HTTP 503")
    assert outages.admit("busy", 0.5) == (1.0, None)  # a message deferred
    assert outages.admit("busy", 16.0)[1] is not None  # the probe, still running
    assert [v.agent for v in outages.views(17.0)] == ["busy", "quiet"]  # 16 s past due
    assert [v.agent for v in outages.views(17.5)] == ["busy"]
    assert list(outage_checks(outages.views(40.0), 40.0)) == ["busy"]
    assert outages.admit("quiet", 17.5) == (None, None), "its next turn runs"


@IN_MEMORY
async def test_past_provider_wait_s_a_message_runs_and_gets_the_notice() -> None:
    """Deferral is bounded from when the message was received: past ``provider_wait_s``
    it runs like any other (its turn fails while the provider is down), not dead-lettered."""
    b = bench(provider_wait_s=3.0)
    await b.accept("opener")
    late = await b.accept("late")
    assert await b.worker.drain() == 2
    assert (await b.state(late))[:2] == ("ready", 0)
    b.clock.advance(3.0)
    assert await b.worker.drain() == 1
    assert b.turns.ran[-1] == ("down", "late")
    assert await b.state(late) == ("completed", 1, "failed")


@IN_MEMORY
async def test_a_failure_that_is_not_an_outage_opens_nothing() -> None:
    """A failed turn without ``provider_unavailable`` (a refused request, a bug) is the
    message's answer as before: the messages behind it run."""
    b = bench()

    async def refused(request: TurnRequest) -> TurnResult:
        return dataclasses.replace(await b.turns.run(request), provider_unavailable=None)

    b.worker = InboxWorker(
        b.inbox, refused, route=lambda channel: "down", idle_poll_s=0.01, clock=b.clock
    )
    ids = [await b.accept(f"m{n}") for n in range(3)]
    assert await b.worker.drain() == 3
    assert [await b.state(i) for i in ids] == [("completed", 1, "failed")] * 3
    assert not b.worker.outages.views(b.clock())


# -- the typed fact: where in the turn its provider failed -----------------------------


async def _noop() -> str:
    """Does nothing."""
    return "ok"


def _request(text: str) -> TurnRequest:
    return TurnRequest(
        input=text,
        principal=ConversationFacts("test", "c1", "alice"),
        request_id=new_id("req"),
    )


UNREACHABLE = ProviderError("HTTP 503: overloaded", provider="test", status=503, retryable=True)
SLOW_DOWN = ProviderError(
    "HTTP 429: slow down", provider="test", status=429, retryable=True, retry_after=30.0
)


async def test_a_turn_says_its_provider_was_unreachable_before_or_after_output(
    tmp_path: Path,
) -> None:
    noop = AuthoredTool("notes.noop", _noop)
    model = ScriptedModel(
        [
            Fail(UNREACHABLE),
            CallTools(("notes.noop", {})),
            Fail(UNREACHABLE),
            Fail(ProviderError("HTTP 400: bad request", provider="test", status=400)),
            Fail(SLOW_DOWN),
        ]
    )
    async with open_host(tmp_path, model, tools=[noop]) as host:
        before = await host.turns.run(_request("one"))
        after = await host.turns.run(_request("two"))
        refused = await host.turns.run(_request("three"))
        limited = await host.turns.run(_request("four"))
    assert (before.outcome, before.provider_unavailable) == ("failed", "before_output")
    assert (after.outcome, after.provider_unavailable) == ("failed", "after_output")
    assert (refused.outcome, refused.provider_unavailable) == ("failed", None)
    assert TurnResult.from_json(before.to_json()).provider_unavailable == "before_output"
    assert "provider_unavailable" not in refused.to_json()
    # The provider's Retry-After is kept as a typed fact too (the breaker waits it out).
    assert (limited.provider_unavailable, limited.provider_retry_after_s) == ("before_output", 30.0)
    assert TurnResult.from_json(limited.to_json()).provider_retry_after_s == 30.0
    assert before.provider_retry_after_s is None
    assert "provider_retry_after_s" not in before.to_json()


# -- the policy ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [0, -1.0, float("nan"), float("inf"), True, "60", 8 * 24 * 3600.0]
)
@IN_MEMORY
def test_a_bad_provider_wait_s_is_refused_with_a_typed_bounded_error(value: object) -> None:
    with pytest.raises(InvalidValue) as caught:
        RetryPolicy(provider_wait_s=value)  # type: ignore[arg-type]
    assert caught.value.message.startswith("provider_wait_s must ")
    assert len(caught.value.message) < 120


@IN_MEMORY
def test_provider_wait_s_defaults_to_an_hour() -> None:
    assert RetryPolicy().provider_wait_s == 3_600.0
