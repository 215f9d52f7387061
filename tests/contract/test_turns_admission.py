"""Admission: one transaction, the resolver mints the scope, busy sessions wait (bounded)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest

from hostkit.authority import AdmittedTurn
from hostkit.errors import ScopeError, TurnRejected
from hostkit.host import Host, HostConfig, parse_config
from hostkit.store import (
    Admitted,
    ConversationTarget,
    LeaseOwner,
    SessionLease,
    TurnAdmission,
)
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import TurnResult, new_id
from tests.hosts import request, turn_rows
from tests.support import facts

pytestmark = pytest.mark.anyio

# A Host on another machine: only its lease's expiry or release can free its sessions.
REMOTE = LeaseOwner("another-machine", 4242, 1.0, "remote-instance")


def host_config(tmp_path: Path, *, admission_timeout_s: float = 600.0) -> HostConfig:
    return parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(tmp_path),
                "admission_timeout_s": admission_timeout_s,
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=tmp_path,
    )


def turn_for(principal_id: str, session: ConversationTarget | str) -> TurnAdmission:
    return TurnAdmission(
        turn_id=new_id("turn"),
        request_id=new_id("req"),
        principal_id=principal_id,
        core_id="assistant",
        core_revision="cfg-remote",
        generation=1,
        session=session,
    )


async def hold_remotely(host: Host, conversation: str) -> SessionLease:
    """Another Host (on another machine) runs a turn in the conversation's session."""
    admitted = await host.store.turns.admit(
        turn_for("test:alice", ConversationTarget("test", conversation)), owner=REMOTE, ttl_s=600
    )
    assert isinstance(admitted, Admitted)
    return admitted.lease


async def test_the_resolver_mints_the_scope_from_the_admission_it_ran(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("x")])
    async with Host.open(host_config(tmp_path), capabilities=capabilities(model)) as host:
        conversation = facts("c1", "alice", "test")
        target = ConversationTarget("test", "c1")
        outcome = await host.authority.admit_conversation(
            conversation, turn_for("test:alice", target), owner=REMOTE, ttl_s=60
        )
        assert isinstance(outcome, AdmittedTurn)
        scope = host.authority.verify(outcome.scope)
        assert scope.session_id == outcome.admitted.session_id
        assert scope.allowed_session_ids == frozenset({outcome.admitted.session_id})
        assert (scope.principal_id, scope.authority) == ("test:alice", "conversation")
        # It names exactly the conversation whose binding the admission resolved.
        assert (await host.authority.for_conversation(conversation)).session_id == scope.session_id


@pytest.mark.parametrize(
    ("principal_id", "target"),
    [
        ("test:alice", ConversationTarget("test", "someone-elses")),
        ("test:alice", ConversationTarget("other-channel", "c1")),
        ("test:mallory", ConversationTarget("test", "c1")),
        ("test:alice", "ses_some_session"),
    ],
)
async def test_an_admission_that_does_not_name_the_conversation_is_refused(
    tmp_path: Path, principal_id: str, target: ConversationTarget | str
) -> None:
    async with Host.open(
        host_config(tmp_path), capabilities=capabilities(ScriptedModel([]))
    ) as host:
        attempt = turn_for(principal_id, target)
        with pytest.raises(ScopeError):
            await host.authority.admit_conversation(
                facts("c1", "alice", "test"), attempt, owner=REMOTE, ttl_s=60
            )
        assert await host.store.turns.find(principal_id, attempt.request_id) is None
        assert await turn_rows(host) == []


async def test_a_session_held_by_another_host_rejects_after_the_admission_timeout(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("never")])
    config = host_config(tmp_path, admission_timeout_s=0.5)
    async with Host.open(config, capabilities=capabilities(model)) as host:
        held = await hold_remotely(host, "c1")
        started = anyio.current_time()
        with anyio.fail_after(10), pytest.raises(TurnRejected, match="busy"):
            await host.turns.run(request(conversation="c1"))
        assert anyio.current_time() - started >= 0.5
        assert model.requests == []
        assert [turn_id for turn_id, _ in await turn_rows(host)] == [held.turn_id]
        assert host.turns.admission_holders == 0
        assert host.turns.admitted_sessions == 0


async def test_a_waiting_turn_runs_once_the_other_host_releases_the_session(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Reply("after the other host")])
    async with Host.open(host_config(tmp_path), capabilities=capabilities(model)) as host:
        held = await hold_remotely(host, "c1")
        results: list[TurnResult] = []

        async def run() -> None:
            results.append(await host.turns.run(request(conversation="c1")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            # A local waiting-room entry exists only while a turn waits for a busy session.
            while host.turns.admitted_sessions < 1:
                await anyio.lowlevel.checkpoint()
            assert model.requests == []
            # The other Host's turn ends: the waiting turn notices at its next poll.
            done = TurnResult(
                request_id="req-remote",
                turn_id=held.turn_id,
                session_id=held.session_id,
                core_id="assistant",
                core_revision="cfg-remote",
                outcome="completed",
                text="remote answer",
                durable_result_ref=held.turn_id,
            )
            with anyio.fail_after(10):
                await host.store.turns.finish(held, done, event_seq=2)
        assert results[0].outcome == "completed"
        assert results[0].session_id == held.session_id
        admitted_token = await host.store.read(
            lambda c: c.execute(
                "SELECT token FROM session_leases WHERE session_id = ?", [held.session_id]
            ).fetchone()[0]
        )
        assert admitted_token == held.token + 1


async def test_an_admission_whose_owner_row_disagrees_is_ended_and_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should an adapter ever answer with another owner, the turn still gets one record."""
    model = ScriptedModel([Reply("never")], repeat_last=True)
    async with Host.open(host_config(tmp_path), capabilities=capabilities(model)) as host:
        admit = host.store.turns.admit

        async def disagreeing(admission: TurnAdmission, **options: object) -> object:
            outcome = await admit(admission, **options)  # type: ignore[arg-type]
            assert isinstance(outcome, Admitted)
            assert outcome.next_event_seq == 3  # the input was written with the admission
            owner = dataclasses.replace(outcome.owner, conversation_key="someone-else")
            return dataclasses.replace(outcome, owner=owner)

        monkeypatch.setattr(host.store.turns, "admit", disagreeing)
        with pytest.raises(TurnRejected):
            await host.turns.run(request("hi", conversation="c-odd"))
        monkeypatch.undo()
        (row,) = await turn_rows(host)
        assert row[1] == "failed"
        assert model.requests == []
        # The session is free again: the next turn of the conversation runs.
        assert (await host.turns.run(request("hi", conversation="c-odd"))).text == "never"
