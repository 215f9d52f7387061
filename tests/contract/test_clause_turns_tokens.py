"""Turn tokens resolve (issue 12), named after the clause:

"Turn tokens resolve: cancellation, leases and delivery resolve the captured token,
and an unbound token fails closed." (HRC: "Delivery, prompt, approval, and asyncio
tasks created during the turn resolve the exact captured token; route rebinding
affects future turns only, and an unbound captured token fails closed.")

The cross-process case runs the turn in a real Host process and cancels it by its
token from this one, on the same database.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from hostkit.effects import ToolContext, tool
from hostkit.errors import InvalidValue, LeaseLost, NotFoundOrUnauthorized, UnboundToken
from hostkit.host import Host
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import PrincipalScope, TurnExecutionContext, TurnToken
from tests.hosts import child_store_url, config, open_host, request
from tests.support import child_process, facts

pytestmark = pytest.mark.anyio


async def owner_of(host: Host, conversation: str = "c1") -> PrincipalScope:
    return await host.authority.for_conversation(facts(conversation, "alice", "test"))


async def audit_reasons(host: Host, kind: str) -> list[str]:
    rows = await host.store.read(
        lambda c: c.execute("SELECT reason FROM audit WHERE kind = ?", [kind]).fetchall()
    )
    return [row[0] for row in rows]


async def test_each_captured_token_resolves_to_its_running_turn_and_is_unbound_after(
    tmp_path: Path,
) -> None:
    holder: dict[str, Host] = {}
    seen: dict[str, TurnExecutionContext] = {}

    @tool("look.around")
    async def look_around(ctx: ToolContext) -> str:
        """Resolves the turn's own tokens while it runs."""
        host = holder["host"]
        token = await host.turns.cancellation_token(ctx.turn_id, await owner_of(host))
        context = host.turns.resolve(token)
        # Every token the context captured resolves to that same running turn.
        for captured in (context.route_token, context.admission_lease_token):
            assert host.turns.resolve(captured) is context
        seen["context"] = context
        return "looked"

    model = ScriptedModel([CallTools(("look_around", {})), Reply("done")])
    route = {"channel": "test", "thread": "t-1"}
    async with open_host(tmp_path, model, tools=[look_around]) as host:
        holder["host"] = host
        result = await host.turns.run(request("go", route=route))
        assert result.outcome == "completed"
        context = seen["context"]
        assert context.turn_id == result.turn_id
        for token in (
            context.cancellation_token,
            context.route_token,
            context.admission_lease_token,
        ):
            with pytest.raises(UnboundToken):
                host.turns.resolve(token)
        with pytest.raises(UnboundToken):
            await host.turns.cancellation_token(result.turn_id, await owner_of(host))
        # The ended turn's token changes nothing.
        answer = await host.turns.cancel_token(context.cancellation_token, await owner_of(host))
        assert (answer.disposition, answer.outcome) == ("already_terminal", "completed")
        # Its delivery intent went to the route the route token captured.
        routes = await host.store.read(
            lambda c: c.execute(
                "SELECT route FROM outbox WHERE turn_id = ?", [result.turn_id]
            ).fetchall()
        )
    assert [json.loads(r[0]) for r in routes] == [route]


async def test_a_forged_or_misused_token_fails_closed_and_the_turn_runs_on(
    tmp_path: Path,
) -> None:
    holder: dict[str, Host] = {}
    checked = anyio.Event()
    outcomes: dict[str, object] = {}

    @tool("guarded.work")
    async def guarded_work(ctx: ToolContext) -> str:
        """Waits while the test presents forged tokens for this very turn."""
        host = holder["host"]
        owner = await owner_of(host)
        real = await host.turns.cancellation_token(ctx.turn_id, owner)
        forged = dataclasses.replace(real, nonce="0" * 32)
        with pytest.raises(UnboundToken):
            host.turns.resolve(forged)
        with pytest.raises(NotFoundOrUnauthorized):
            await host.turns.cancel_token(forged, owner)
        route = host.turns.resolve(real).route_token
        with pytest.raises(InvalidValue):
            await host.turns.cancel_token(route, owner)  # the right turn, the wrong kind
        # Someone else who learned the real token still cannot use it.
        stranger = await owner_of(host, "c2")
        with pytest.raises(NotFoundOrUnauthorized):
            await host.turns.cancel_token(real, stranger)
        outcomes["bound_after"] = host.turns.resolve(real).turn_id
        checked.set()
        return "finished"

    model = ScriptedModel([CallTools(("guarded_work", {})), Reply("all done")])
    async with open_host(tmp_path, model, tools=[guarded_work]) as host:
        holder["host"] = host
        result = await host.turns.run(request("work"))
        reasons = await audit_reasons(host, "principal_scope.owner_lookup_denied")
    assert checked.is_set()
    assert result.outcome == "completed"
    assert outcomes["bound_after"] == result.turn_id
    assert "token_unbound" in reasons


async def test_a_token_of_an_ended_turn_never_reaches_the_next_turn_of_its_session(
    tmp_path: Path,
) -> None:
    holder: dict[str, Host] = {}
    tokens: list[TurnToken] = []
    answers: list[str] = []

    @tool("note.token")
    async def note_token(ctx: ToolContext) -> str:
        """Keeps this turn's token; in the second turn, presents the first turn's."""
        host = holder["host"]
        owner = await owner_of(host)
        tokens.append(await host.turns.cancellation_token(ctx.turn_id, owner))
        if len(tokens) == 2:
            answer = await host.turns.cancel_token(tokens[0], owner)
            answers.append(answer.disposition)
        return "noted"

    model = ScriptedModel(
        [CallTools(("note_token", {})), Reply("one"), CallTools(("note_token", {})), Reply("two")],
        repeat_last=False,
    )
    async with open_host(tmp_path, model, tools=[note_token]) as host:
        holder["host"] = host
        first = await host.turns.run(request("first"))
        second = await host.turns.run(request("second"))
    assert first.session_id == second.session_id
    assert answers == ["already_terminal"]
    assert second.outcome == "completed"
    assert second.text == "two"


async def test_a_lease_taken_over_unbinds_the_admission_token_and_its_writes_fail_closed(
    tmp_path: Path,
) -> None:
    """The first Host's lease lapses and a second Host takes the session over.

    From the moment the first Host's heartbeat learns it, the turn's admission
    token is unbound (every further fenced write fails closed before reaching
    the store) while its cancellation token still names the running turn.
    """
    holder: dict[str, Host] = {}
    entered = anyio.Event()
    observed: dict[str, object] = {}

    @tool("outlive.lease")
    async def outlive_lease(ctx: ToolContext) -> str:
        """Waits (shielded) until its lease is gone, then looks at its tokens."""
        host = holder["a"]
        token = await host.turns.cancellation_token(ctx.turn_id, await owner_of(host))
        context = host.turns.resolve(token)
        entered.set()
        with anyio.CancelScope(shield=True), anyio.fail_after(20):
            while True:
                try:
                    host.turns.resolve(context.admission_lease_token)
                except UnboundToken:
                    break
                await anyio.sleep(0.05)
            observed["cancellation"] = host.turns.resolve(token).turn_id
        observed["context"] = context
        return "outlived"

    first = config(tmp_path)
    first = first.model_copy(
        update={"host": first.host.model_copy(update={"session_lease_ttl_s": 1.5})}
    )
    model_a = ScriptedModel([CallTools(("outlive_lease", {})), Reply("never recorded")])
    async with Host.open(first, capabilities=capabilities(model_a, tools=[outlive_lease])) as a:
        holder["a"] = a
        results = []

        async def run_a() -> None:
            results.append(await a.turns.run(request("hold")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_a)
            await entered.wait()
            # The lease lapsed long ago, and that was noticed a ttl ago (as if the first
            # Host had stalled past its ttl twice) ...
            await a.store.write(
                lambda conn: conn.execute(
                    "UPDATE session_leases SET expires_at = 0, lapse_noticed_at = 0, "
                    "lapsed_expiry = 0"
                )
            )
            # ... and a second Host process's turn takes the session over.
            model_b = ScriptedModel([Reply("taken over")])
            async with Host.open(config(tmp_path), capabilities=capabilities(model_b)) as b:
                taken = await b.turns.run(request("mine now"))
                assert taken.outcome == "completed"
    # Taken over while its tool ran: that call, and so the turn, may have acted.
    assert results[0].outcome == "indeterminate"
    assert observed["cancellation"] == results[0].turn_id
    context = observed["context"]
    assert isinstance(context, TurnExecutionContext)
    with pytest.raises(UnboundToken):
        a.turns.resolve(context.cancellation_token)


CHILD = textwrap.dedent(
    """
    import json, sys
    import anyio
    from pathlib import Path
    from hostkit.effects import ToolContext, tool
    from hostkit.host import Host, parse_config
    from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
    from hostkit.types import ConversationFacts, TurnRequest

    root, token_file, result_file = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    url = sys.argv[4]
    facts = ConversationFacts(channel="test", conversation_key="c1", principal_key="alice")
    holder = {}

    @tool("slow.work")
    async def slow_work(ctx: ToolContext) -> str:
        \"\"\"Publishes its cancellation token, then works until cancelled.\"\"\"
        host = holder["host"]
        owner = await host.authority.for_conversation(facts)
        token = await host.turns.cancellation_token(ctx.turn_id, owner)
        fields = ("kind", "request_id", "turn_id", "session_id", "nonce")
        part = anyio.Path(f"{token_file}.part")  # whole or absent for the poller
        await part.write_text(json.dumps({name: getattr(token, name) for name in fields}))
        await part.rename(token_file)
        await anyio.sleep_forever()
        return "never"

    async def main():
        config = parse_config(
            {
                "host": {
                    "database": str(root / "hostkit.db"),
                    "workspace": str(root),
                    "session_lease_ttl_s": 0.6,
                },
                **({"store": {"url": url}} if url else {}),
                "providers": {"test": {"kind": "scripted"}},
                "agents": {"assistant": {"provider": "test", "memory": False}},
            },
            base_dir=root,
        )
        model = ScriptedModel([CallTools(("slow_work", {})), Reply("never")])
        async with Host.open(config, capabilities=capabilities(model, tools=[slow_work])) as host:
            holder["host"] = host
            result = await host.turns.run(
                TurnRequest(input="work", principal=facts, request_id="req-token")
            )
            await anyio.Path(result_file).write_text(result.outcome)

    anyio.run(main)
    """
)


@pytest.mark.slow
async def test_the_cancellation_token_cancels_its_turn_from_another_host_process(
    tmp_path: Path, store_adapter: str
) -> None:
    token_file = anyio.Path(tmp_path / "token.json")
    result_file = anyio.Path(tmp_path / "outcome")
    url = await child_store_url(tmp_path, store_adapter)
    argv = [sys.executable, "-c", CHILD, str(tmp_path), str(token_file), str(result_file), url]
    async with child_process(argv) as child:
        with anyio.fail_after(60):
            while not await token_file.exists():
                assert child.returncode is None, "the child Host exited before its turn ran"
                await anyio.sleep(0.05)
        token = TurnToken(**json.loads(await token_file.read_text()))
        model = ScriptedModel([Reply("unused")])
        async with Host.open(config(tmp_path), capabilities=capabilities(model)) as host:
            owner = await owner_of(host)
            # Not running here: the token is checked against the store, not this process.
            with pytest.raises(UnboundToken):
                host.turns.resolve(token)
            forged = dataclasses.replace(token, nonce="f" * 32)
            with pytest.raises(NotFoundOrUnauthorized):
                await host.turns.cancel_token(forged, owner)
            await anyio.sleep(1.0)  # a forged token stopped nothing: the turn still runs
            assert child.returncode is None
            assert not await result_file.exists()
            answer = await host.turns.cancel_token(token, owner)
            assert answer.disposition == "requested"
            with anyio.fail_after(30):
                await child.wait()
            state = await host.store.turns.state(owner, token.turn_id)
    # Stopped while its effect ran: "indeterminate" (the effect may have happened).
    assert child.returncode == 0
    assert await result_file.read_text() == "indeterminate"
    assert state.status == "indeterminate"


async def test_a_write_through_an_unbound_admission_token_is_lease_lost() -> None:
    from hostkit.turns._tokens import TurnTokens

    tokens = TurnTokens()
    with pytest.raises(LeaseLost):
        tokens.lease(TurnToken("admission", "r", "t", "s", "n"))
    with pytest.raises(InvalidValue):
        tokens.resolve(TurnToken("route", "r", "t", "s", "n"), "admission")
    assert len(tokens) == 0
