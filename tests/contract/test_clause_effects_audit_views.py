"""Clause: audit views of terminal runs and web effects are persisted.

"Audit views: terminal runs record working directory, environment keys and
resolved executable; web effects record origin and validated addresses; both
persisted." Terminal runs go through a real Host (real bubblewrap or prlimit,
real children); ``web.extract`` through the real EffectRuntime against a real
loopback server. Every view is read back from SQLite through
``store.inspect.effect_audits``; a bound secret's value is in none of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.process import DEFAULT_ENV_ALLOWLIST, probe_bubblewrap
from hostkit.builtins.web import UrlPolicy, web_tools
from hostkit.effects import EffectPolicy, EffectRuntime, Toolset
from hostkit.errors import ScopeError
from hostkit.freeze import thaw
from hostkit.host import Host
from hostkit.inspect import effect_audit_rows
from hostkit.store import RuntimeStore
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import (
    AuditRecord,
    EffectRequest,
    PrincipalScope,
    TurnExecutionContext,
)
from tests.contract._delivery_adapters import finish_turn
from tests.contract._store_adapters import open_store
from tests.contract.test_builtin_terminal import Approver, terminal_config
from tests.contract.test_clause_effects_url_policy import Pinned
from tests.contract.test_cli import hostkit
from tests.contract.test_web_extract import ARTICLE, web_context
from tests.hosts import request
from tests.parts import missing
from tests.security.test_ssrf import FakeResolver
from tests.wire import serve_wire, text_reply

pytestmark = pytest.mark.anyio

TOKEN = "tok-audit-7c1d9e4b"
SECRET_NAME = "HK_AUDIT_TOKEN"


def _expected_env(*bound: str) -> list[str]:
    return sorted({name for name in DEFAULT_ENV_ALLOWLIST if name in os.environ} | set(bound))


async def _audits(host: Host, kind: str) -> list[AuditRecord]:
    operator = await host.operator("ops", reason="read the effect audit views")
    sessions = await host.store.list_sessions(operator)
    found: list[AuditRecord] = []
    for session in sessions.items:
        found += await host.store.inspect.effect_audits(operator, session.session_id)
    return [record for record in found if record.kind == kind]


async def test_a_sandboxed_foreground_run_persists_cwd_env_names_and_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = await anyio.to_thread.run_sync(probe_bubblewrap, "bwrap")
    if not probe.ok:
        missing("sandbox", probe.reason)
    monkeypatch.setenv(SECRET_NAME, TOKEN)
    # The working directory's own name carries the held secret: the view masks it.
    workdir = f"sub/d-{TOKEN}"
    config = terminal_config(tmp_path, secrets=[SECRET_NAME])
    (tmp_path / "ws" / workdir).mkdir(parents=True)
    call = CallTools(
        (
            "terminal_run",
            {"argv": ["printenv", SECRET_NAME], "cwd": workdir, "secrets": [SECRET_NAME]},
        )
    )
    model = ScriptedModel([call, Reply("done")])
    async with Host.open(
        config, capabilities=capabilities(model, config=config), approver=Approver("approve_once")
    ) as host:
        result = await host.turns.run(request("print it"))
        (audit,) = await _audits(host, "effect.terminal.run")
        rows = await host.store.read(lambda c: c.execute("SELECT * FROM audit").fetchall())
    assert [e.status for e in result.effects] == ["succeeded"]
    view = thaw(audit.detail)
    assert view["turn_id"] == result.turn_id
    assert view["call_id"] == audit.subject == result.effects[0].call_id
    assert view["outcome"] == "succeeded"
    assert view["cwd"] == f"sub/d-[redacted:{SECRET_NAME}]"
    assert view["cwd_resolved"] == str(
        (tmp_path / "ws" / "sub").resolve() / f"d-[redacted:{SECRET_NAME}]"
    )
    assert view["env_keys"] == _expected_env(SECRET_NAME)
    assert view["bound_env_keys"] == [SECRET_NAME]  # the name, never the value
    printenv = shutil.which("printenv")
    assert printenv is not None
    real = await anyio.Path(printenv).resolve()
    assert await anyio.Path(view["executable"]).resolve() == real
    assert view["executable_real"] == str(real)
    assert view["launcher"] == probe.bwrap
    assert (view["sandbox"], view["background"]) == ("bubblewrap", False)
    assert audit.session_id == result.session_id
    # Not in any audit row, even though the model itself wrote it into the call's cwd.
    assert not any(TOKEN in str(row) for row in rows)


async def test_an_unsandboxed_background_run_persists_its_view_with_the_run_id(
    tmp_path: Path,
) -> None:
    call = CallTools(("terminal_run", {"argv": [sys.executable, "-c", "pass"], "background": True}))
    model = ScriptedModel([call, Reply("started")])
    config = terminal_config(tmp_path, sandbox="none")
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        result = await host.turns.run(request("start it"))
        (audit,) = await _audits(host, "effect.terminal.run")
    assert [e.status for e in result.effects] == ["succeeded"]
    view = thaw(audit.detail)
    assert view["background"] is True
    assert view["run_id"].startswith("run")
    assert view["cwd"] == "."
    assert view["cwd_resolved"] == str((tmp_path / "ws").resolve())
    assert view["env_keys"] == _expected_env()
    assert view["bound_env_keys"] == []
    assert view["executable"] == sys.executable
    assert view["executable_real"] == str(await anyio.Path(sys.executable).resolve())
    assert view["launcher"] == shutil.which("prlimit", path="/usr/bin:/bin")
    assert view["sandbox"] == "none"


async def test_a_held_secret_in_a_background_runs_cwd_never_reaches_its_durable_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's record (terminal_runs) is kept beyond the result the runtime redacts:
    the tool masks what it stores with the call's redactor."""
    monkeypatch.setenv(SECRET_NAME, TOKEN)
    workdir = f"sub/d-{TOKEN}"
    config = terminal_config(tmp_path, sandbox="none", secrets=[SECRET_NAME])
    (tmp_path / "ws" / workdir).mkdir(parents=True)
    argv = [sys.executable, "-c", "pass"]
    call = CallTools(("terminal_run", {"argv": argv, "cwd": workdir, "background": True}))
    model = ScriptedModel([call, Reply("started")])
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        result = await host.turns.run(request("start it"))
        runs = await host.store.read(lambda c: c.execute("SELECT * FROM terminal_runs").fetchall())
    assert [e.status for e in result.effects] == ["succeeded"]
    assert len(runs) == 1
    assert not any(TOKEN in str(cell) for row in runs for cell in row)
    assert any(f"[redacted:{SECRET_NAME}]" in str(cell) for cell in runs[0])


async def test_a_refused_run_leaves_no_audit_view(tmp_path: Path) -> None:
    # Nothing started (the program does not exist): there is nothing the Host did to audit.
    call = CallTools(("terminal_run", {"argv": ["no-such-program-hk"]}))
    model = ScriptedModel([call, Reply("done")])
    config = terminal_config(tmp_path, sandbox="none")
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        result = await host.turns.run(request("run it"))
        audits = await _audits(host, "effect.terminal.run")
    assert [e.status for e in result.effects] == ["denied"]
    assert audits == []


async def _extract(
    store: RuntimeStore, context: TurnExecutionContext, policy: UrlPolicy, url: str
) -> Any:
    (extract,) = web_tools(policy, network_backend=Pinned())

    class Tools:
        async def toolset(self, context: TurnExecutionContext) -> Toolset:
            return Toolset(((extract, "builtin:web"),), EffectPolicy(), Path("/tmp"))

    runtime = EffectRuntime(toolsets=Tools(), store=store)
    catalog = await runtime.prepare_catalog(context)
    ref = catalog.resolve("web_extract")
    assert ref is not None
    try:
        return await runtime.execute(EffectRequest("c-web", ref, {"url": url}), context)
    finally:
        await runtime.close_catalog(catalog)


async def test_web_extract_persists_origin_and_validated_addresses_of_every_hop(
    store: RuntimeStore, authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    context = await web_context(authority)
    async with serve_wire() as server:
        first = f"http://owls.example.com:{server.port}"
        second = f"http://birds.example.com:{server.port}"
        server.script(
            text_reply("", status=302, headers={"Location": f"{second}/final?sig=abc"}),
            text_reply(ARTICLE, content_type="text/html; charset=utf-8"),
        )
        resolver = FakeResolver(
            {"owls.example.com": [["127.0.0.1"]], "birds.example.com": [["127.0.0.1"]]}
        )
        policy = UrlPolicy(resolver=resolver, allow_private=frozenset({"127.0.0.1"}))
        result = await _extract(store, context, policy, f"{first}/nest?key=s3cret")
    assert result.status == "succeeded", result.error
    (audit,) = await store.inspect.effect_audits(operator, context.session_id)
    assert audit.kind == "effect.web.extract"
    assert (audit.subject, audit.detail["call_id"]) == ("c-web", "c-web")
    assert audit.detail["turn_id"] == context.turn_id
    # The target the approver would have seen, checked before the call (no DNS yet) ...
    detail = thaw(audit.detail)
    assert detail["target"] == {"origin": first}
    # ... and every hop the fetch really took, each with the addresses it was pinned to.
    assert detail["hops"] == [
        {"origin": first, "addresses": ["127.0.0.1"]},
        {"origin": second, "addresses": ["127.0.0.1"]},
    ]
    assert audit.detail["status"] == 200
    text = json.dumps(detail)
    assert "s3cret" not in text
    assert "sig=abc" not in text
    assert "/nest" not in text


async def test_a_fetch_that_fails_still_persists_its_target_and_the_hops_it_took(
    store: RuntimeStore, authority: AuthorityResolver, operator: PrincipalScope
) -> None:
    context = await web_context(authority)
    async with serve_wire() as server:
        origin = f"http://owls.example.com:{server.port}"
        # The redirect points at a metadata address: refused at fetch time, after the call began.
        server.script(
            text_reply("", status=302, headers={"Location": "http://169.254.169.254/latest"})
        )
        resolver = FakeResolver({"owls.example.com": [["127.0.0.1"]]})
        policy = UrlPolicy(resolver=resolver, allow_private=frozenset({"127.0.0.1"}))
        result = await _extract(store, context, policy, f"{origin}/owls")
    assert (result.status, result.started) == ("denied", True), result.error
    (audit,) = await store.inspect.effect_audits(operator, context.session_id)
    assert audit.detail["outcome"] == "denied"
    assert thaw(audit.detail)["target"] == {"origin": origin}
    # The hop it did validate and request before the refused redirect is still recorded.
    assert thaw(audit.detail)["hops"] == [{"origin": origin, "addresses": ["127.0.0.1"]}]


async def _finished_turn(store: RuntimeStore, session: str) -> str:
    turn_id, _intents = await finish_turn(store, session)
    return turn_id


@pytest.mark.parametrize("adapter", ["sqlite", "postgres"])
async def test_one_turns_audits_are_read_whatever_another_turns_detail_holds(
    adapter: str, tmp_path: Path
) -> None:
    """A NUL in one call's audit view (a tool's own audit text) made PostgreSQL refuse the
    JSON parse the turn filter did in SQL, for every turn of that session."""
    async with open_store(adapter, tmp_path) as store, AuthorityResolver.bind(store) as resolver:
        operator = await resolver.operator_issuer().issue("ops", reason="read effect audits")
        session = await store.create_session(owner_kind="system", principal_id="suite")
        dirty_turn = await _finished_turn(store, session)
        # A decoy whose turn id differs only where the real one has "_" (a LIKE wildcard).
        decoy = dirty_turn.replace("_", "X", 1)
        views = [(dirty_turn, {"note": "bad \x00 byte"}), (decoy, {})]
        for n, (turn, view) in enumerate(views):
            detail = {**view, "turn_id": turn, "call_id": f"c{n}", "outcome": "succeeded"}
            await store.audit("effect.probe", session_id=session, subject=f"c{n}", detail=detail)
        clean_turn = await _finished_turn(store, session)
        await store.audit(
            "effect.probe",
            session_id=session,
            subject="c2",
            detail={"turn_id": clean_turn, "call_id": "c2", "outcome": "succeeded"},
        )
        audits = store.inspect.effect_audits
        (clean,) = await audits(operator, session, turn_id=clean_turn)
        assert clean.subject == "c2"
        (dirty,) = await audits(operator, session, turn_id=dirty_turn)
        assert (dirty.subject, dirty.detail["note"]) == ("c0", "bad \x00 byte")
        assert [r.subject for r in await audits(operator, session)] == ["c0", "c1", "c2"]
        # Rows the text matches but the parse refuses (a nested "turn_id" in a tool's view)
        # never take the place of the turn's own within the limit.
        for n in range(3, 6):
            nested = {"view": {"turn_id": clean_turn}, "turn_id": decoy, "call_id": f"c{n}"}
            await store.audit("effect.probe", session_id=session, subject=f"c{n}", detail=nested)
        await store.audit(
            "effect.probe",
            session_id=session,
            subject="c6",
            detail={"turn_id": clean_turn, "call_id": "c6", "outcome": "succeeded"},
        )
        both = await audits(operator, session, turn_id=clean_turn, limit=2)
        assert [r.subject for r in both] == ["c2", "c6"]


@pytest.mark.parametrize("adapter", ["sqlite", "postgres"])
async def test_a_cut_audit_list_keeps_the_newest_calls_in_order(
    adapter: str, tmp_path: Path
) -> None:
    """More calls than the limit: it kept the oldest, so the calls an operator looks for,
    the latest, were the ones left out (and ``hostkit effects audit`` said nothing)."""
    async with open_store(adapter, tmp_path) as store, AuthorityResolver.bind(store) as resolver:
        operator = await resolver.operator_issuer().issue("ops", reason="read effect audits")
        session = await store.create_session(owner_kind="system", principal_id="suite")
        turns = [await _finished_turn(store, session) for _ in range(2)]
        for n in range(6):
            detail = {"turn_id": turns[n % 2], "call_id": f"c{n}", "outcome": "succeeded"}
            await store.audit("effect.probe", session_id=session, subject=f"c{n}", detail=detail)
        audits = store.inspect.effect_audits
        assert [r.subject for r in await audits(operator, session, limit=2)] == ["c4", "c5"]
        by_turn = await audits(operator, session, turn_id=turns[0], limit=2)
        assert [r.subject for r in by_turn] == ["c2", "c4"]
        rows = await effect_audit_rows(store, operator, session, limit=3)
        assert ([r.subject for r in rows.audits], rows.truncated) == (["c3", "c4", "c5"], True)
        whole = await effect_audit_rows(store, operator, session, turn_id=turns[1], limit=3)
        assert ([r.subject for r in whole.audits], whole.truncated) == (["c1", "c3", "c5"], False)


async def test_a_sessions_audit_views_are_read_through_its_index_not_a_scan(
    tmp_path: Path,
) -> None:
    """``hostkit effects audit SESSION`` scanned every audit row (a kind prefix cannot use
    audit_kind): an old session's view took a second among a million rows. Both reads,
    the session's and one turn's, now walk that session's rows by id, and find the same."""
    async with open_store("sqlite", tmp_path) as store, AuthorityResolver.bind(store) as resolver:
        operator = await resolver.operator_issuer().issue("ops", reason="read effect audits")
        session, other = [
            await store.create_session(owner_kind="system", principal_id="suite") for _ in "ab"
        ]
        turn = await _finished_turn(store, session)
        for n, (at, kind) in enumerate(
            [(session, "effect.probe"), (other, "effect.probe"), (session, "turn.note")]
        ):
            detail = {"turn_id": turn, "call_id": f"c{n}", "outcome": "succeeded"}
            await store.audit(kind, session_id=at, subject=f"c{n}", detail=detail)
        statements: list[str] = []
        await store.read(lambda c: c.set_trace_callback(statements.append))
        try:
            whole = await store.inspect.effect_audits(operator, session)
            one_turn = await store.inspect.effect_audits(operator, session, turn_id=turn)
        finally:
            await store.read(lambda c: c.set_trace_callback(None))
        assert [r.subject for r in whole] == [r.subject for r in one_turn] == ["c0"]
        reads = [sql for sql in statements if "FROM audit" in sql]
        assert len(reads) == 2
        for sql in reads:
            plan = await store.read(
                lambda c, sql=sql: c.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
            )
            steps = " ".join(str(row[3]) for row in plan)
            assert "USING INDEX audit_session (session_id=?" in steps, steps


async def test_effect_audit_views_are_for_operators_only(
    store: RuntimeStore, authority: AuthorityResolver
) -> None:
    context = await web_context(authority)
    with pytest.raises(ScopeError):
        await store.inspect.effect_audits(context.principal, context.session_id)


CLI_CONFIG = """
[host]
database = "state/hostkit.db"
workspace = "ws"

[providers.scripted]
kind = "scripted"
script = [
  { tool = "terminal.run", arguments = { argv = ["echo", "from-the-cli"], background = true } },
  { reply = "started" },
]

[agents.assistant]
provider = "scripted"
memory = false
sandbox = "none"
builtins = ["terminal.run", "terminal.status", "terminal.stop"]
"""


async def test_the_cli_shows_a_sessions_audit_views_and_its_background_runs(
    tmp_path: Path,
) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CLI_CONFIG)
    code, _, started = await hostkit("run", "start it", cwd=tmp_path)
    assert code == 0, started
    found = re.search(r"session: (ses_\w+)", started)
    assert found is not None, started
    code, out, err = await hostkit(
        "effects", "audit", found.group(1), "--reason", "what ran", cwd=tmp_path
    )
    assert code == 0, err
    assert "terminal.run" in out
    assert "executable" in out
    assert "succeeded" in out
    turn = re.search(r"turn: (turn_\w+)", started)
    assert turn is not None, started
    code, by_turn, err = await hostkit(
        "effects", "audit", found.group(1), "--turn", turn.group(1), cwd=tmp_path
    )
    assert (code, by_turn) == (0, out), err
    # A mistyped session or turn is "not found", as for context and budget, not an empty list.
    for args, says in [
        ((found.group(1)[:-1] + "x",), "error: session not found"),
        ((found.group(1), "--turn", "turn_nope"), "error: turn not found"),
    ]:
        code, listed, err = await hostkit("effects", "audit", *args, cwd=tmp_path)
        assert (code, listed) == (2, ""), err
        assert err.strip().splitlines() == [says]
    code, out, err = await hostkit("effects", "runs", "--reason", "what ran", cwd=tmp_path)
    assert code == 0, err
    assert "echo (1 argument)" in out
    assert "run_" in out
    assert "--limit shows more" not in err
    # The local user's own database: no reason needed (the audit says a local operator acted).
    code, unreasoned, err = await hostkit("effects", "runs", cwd=tmp_path)
    assert code == 0, err
    assert "echo (1 argument)" in unreasoned


async def test_the_cli_shows_the_newest_calls_and_runs_and_says_when_it_cut_them(
    tmp_path: Path,
) -> None:
    """`effects audit --limit N` showed the session's oldest N calls, and it and `effects
    runs` exited 0 without a word about the rest, as `sessions` says it."""
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CLI_CONFIG)
    for _ in range(2):
        code, _, started = await hostkit("run", "start it", cwd=tmp_path)
        assert code == 0, started
    code, out, err = await hostkit("effects", "audit", "--json", cwd=tmp_path)
    assert code == 0, err
    every = json.loads(out)
    assert (len(every["audits"]), every["truncated"]) == (2, False)
    older, newest = (audit["subject"] for audit in every["audits"])
    code, out, err = await hostkit("effects", "audit", "--limit", "1", cwd=tmp_path)
    assert code == 0, err
    assert newest in out
    assert older not in out
    assert "(the 1 newest; --limit shows more)" in err
    code, out, err = await hostkit("effects", "audit", "--limit", "1", "--json", cwd=tmp_path)
    assert code == 0, err
    cut = json.loads(out)
    assert ([a["subject"] for a in cut["audits"]], cut["truncated"]) == ([newest], True)
    code, out, err = await hostkit("effects", "runs", "--limit", "1", cwd=tmp_path)
    assert code == 0, err
    assert out.count("echo (1 argument)") == 1
    assert "(the 1 newest; --limit shows more)" in err
    code, out, err = await hostkit("effects", "runs", "--limit", "1", "--json", cwd=tmp_path)
    assert code == 0, err
    assert (len(json.loads(out)["runs"]), json.loads(out)["truncated"]) == (1, True)
