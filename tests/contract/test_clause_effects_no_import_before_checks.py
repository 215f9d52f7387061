"""Clause: no authored tool module is imported before the capability and approval checks.

HRC (EffectRuntime, ordering): "no authored tool import/invocation ... may
occur before the applicable capability and approval checks". Every module
here is a real file on ``sys.path`` whose top level appends the importing
process's pid to a marker file: a line with this process's pid means the
Host imported it. Discovery runs in a child process (another pid, or no line
at all when the sandbox keeps the import path read-only).
"""

from __future__ import annotations

import os
import socket
import sys
import textwrap
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.process import probe_bubblewrap
from hostkit.effects import (
    AuthoredTool,
    EffectPolicy,
    EffectRuntime,
    ToolContext,
    Toolset,
    tool,
)
from hostkit.errors import ConfigError
from hostkit.host import (
    DefaultToolSource,
    Host,
    HostConfig,
    NoChannels,
    RuntimeCapabilities,
    ToolRequest,
    parse_config,
)
from hostkit.host._generation import Generation
from hostkit.host._tool_modules import DiscoveryUnavailable
from hostkit.store import RuntimeStore
from hostkit.testing import (
    CallTools,
    InMemoryMemorySource,
    Reply,
    ScriptedModel,
    StaticProviderSource,
)
from hostkit.types import EffectRequest, ModelRequest, TurnExecutionContext, TurnResult
from tests.contract.test_context_basic import context_for
from tests.contract.test_effects_approval_flow import Approver
from tests.hosts import request
from tests.support import facts

pytestmark = pytest.mark.anyio

AGENT = "assistant"
KEY = f"agents.{AGENT}.tool_modules"

VAULT = '''
"""An authored tool module with a visible top level."""
import os

import anyio

from hostkit.effects import ToolContext, tool

try:
    with open({marker!r}, "a") as out:
        out.write(f"{{os.getpid()}}\\n")
except OSError:
    pass  # a read-only import path (the discovery sandbox)


@tool("vault.open")
async def open_vault(
    ctx: ToolContext, box: int, label: str = "front", tags: dict[str, int] | None = None
) -> str:
    """Open one box of the vault."""
    async with await anyio.open_file({ran!r}, "a") as out:
        await out.write(f"{{box}}:{{sum((tags or {{}}).values())}}\\n")
    return f"opened box {{box}} ({{label}})"
'''


@tool("vault.open")
async def same_signature(
    ctx: ToolContext, box: int, label: str = "front", tags: dict[str, int] | None = None
) -> str:
    """Open one box of the vault."""
    return "never called"


class Vault:
    """One authored module on disk: its marker and the file its tool writes when it runs."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
        self.name = name
        self.marker = tmp_path / f"{name}.imported"
        self.ran = tmp_path / f"{name}.ran"
        self.path = tmp_path / f"{name}.py"
        self.path.write_text(VAULT.format(marker=str(self.marker), ran=str(self.ran)))
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, name, raising=False)
        self._monkeypatch = monkeypatch

    def importers(self) -> list[int]:
        """The pid of every process that ran the module's top level."""
        if not self.marker.exists():
            return []
        return [int(line) for line in self.marker.read_text().split()]

    def host_imports(self) -> int:
        return self.importers().count(os.getpid())

    def runs(self) -> list[str]:
        return self.ran.read_text().split() if self.ran.exists() else []

    def forget(self) -> None:
        """Drop the module from sys.modules when the test ends (it imported it)."""
        self._monkeypatch.delitem(sys.modules, self.name, raising=False)


def host_config(
    tmp_path: Path, modules: Sequence[str], policy: dict[str, Any], **agent: Any
) -> HostConfig:
    return parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(tmp_path),
                "approval_timeout_s": agent.pop("approval_timeout_s", 5.0),
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                AGENT: {
                    "provider": "test",
                    "memory": False,
                    "tool_modules": list(modules),
                    "policy": policy,
                    **agent,
                }
            },
        },
        base_dir=tmp_path,
    )


@asynccontextmanager
async def module_host(
    config: HostConfig, model: ScriptedModel, approver: Approver | None = None
) -> AsyncIterator[Host]:
    capabilities = RuntimeCapabilities(
        providers=StaticProviderSource(model),
        memory=InMemoryMemorySource(),
        tools=DefaultToolSource(config),
        channels=NoChannels(),
    )
    async with Host.open(config, capabilities=capabilities, approver=approver) as host:
        yield host


def vault_call(box: int = 7, **more: Any) -> CallTools:
    return CallTools(("vault_open", {"box": box, **more}))


def tool_messages(req: ModelRequest) -> list[str]:
    return [m.content for m in req.messages if m.role == "tool"]


def statuses(result: TurnResult) -> list[tuple[str, str]]:
    return [(effect.effect, effect.status) for effect in result.effects]


async def test_building_the_catalog_imports_nothing_and_the_model_sees_the_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = Vault(tmp_path, monkeypatch, "hk_noimport_catalog")
    model = ScriptedModel([Reply("nothing to open")])
    config = host_config(tmp_path, [vault.name], {"allow": ["*"]})
    async with module_host(config, model) as host:
        result = await host.turns.run(request())
    assert result.outcome == "completed"
    (definition,) = [d for d in model.requests[0].tools if d.name == "vault_open"]
    assert definition.description == "Open one box of the vault."
    assert dict(definition.parameters) == dict(same_signature.parameters)
    assert vault.host_imports() == 0
    assert vault.name not in sys.modules


async def test_an_effect_the_policy_denies_never_imports_its_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = Vault(tmp_path, monkeypatch, "hk_noimport_denied")
    model = ScriptedModel([vault_call(), Reply("could not")])
    config = host_config(tmp_path, [vault.name], {"allow": ["*"], "deny": ["vault.*"]})
    async with module_host(config, model) as host:
        result = await host.turns.run(request())
    assert "vault_open" not in [d.name for d in model.requests[0].tools]
    assert [status for _, status in statuses(result)] == ["not_found"]
    assert vault.host_imports() == 0
    assert vault.runs() == []
    assert vault.name not in sys.modules


@pytest.mark.parametrize("decision", ["deny", None], ids=["approver-denies", "nobody-answers"])
async def test_an_ask_that_is_not_approved_never_imports_its_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decision: Any
) -> None:
    vault = Vault(tmp_path, monkeypatch, f"hk_noimport_ask_{decision or 'unanswered'}")
    model = ScriptedModel([vault_call(), Reply("not opened")])
    approver = Approver(decision)
    config = host_config(
        tmp_path,
        [vault.name],
        {"allow": ["*"], "ask": ["vault.*"]},
        approval_timeout_s=0.5,
    )
    async with module_host(config, model, approver) as host:
        result = await host.turns.run(request())
    assert [req.effect for req in approver.seen] == ["vault.open"]
    # The approver judged the discovered definition's arguments, nothing imported yet.
    assert approver.seen[0].view["arguments"] == {"box": 7}
    if decision == "deny":
        assert statuses(result) == [("vault.open", "denied")]
    else:
        assert result.outcome == "needs_user"
        assert result.pending_approval is not None
    assert vault.host_imports() == 0
    assert vault.runs() == []
    assert vault.name not in sys.modules


async def test_an_approved_call_imports_the_module_once_in_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = Vault(tmp_path, monkeypatch, "hk_noimport_approved")
    model = ScriptedModel(
        [
            vault_call(1),
            vault_call(2, tags={"gold": 3}),
            Reply("opened both"),
            vault_call(3),
            Reply("and one more"),
        ]
    )
    approver = Approver("approve_once")
    config = host_config(tmp_path, [vault.name], {"allow": ["*"], "ask": ["vault.*"]})
    async with module_host(config, model, approver) as host:
        first = await host.turns.run(request())
        assert vault.host_imports() == 1
        second = await host.turns.run(request())
    vault.forget()
    assert statuses(first) == [("vault.open", "succeeded")] * 2
    assert statuses(second) == [("vault.open", "succeeded")]
    assert tool_messages(model.requests[2])[-1] == "opened box 2 (front)"
    assert vault.runs() == ["1:0", "2:3", "3:0"]
    assert vault.host_imports() == 1  # imported once, after the first approval


async def test_discovery_runs_in_a_child_process_in_the_agent_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: RuntimeStore
) -> None:
    database = tmp_path / "hostkit.db"  # the Host's state, in a directory on sys.path
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    (tmp_path / "hk_noimport_probe.py").write_text(
        "import os, socket\n"
        "from hostkit.effects import ToolContext, tool\n"
        "try:\n"
        f"    with open({str(database)!r}, 'rb') as db:\n"
        "        seen = str(len(db.read()))\n"
        "except OSError:\n"
        "    seen = 'hidden'\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
        "    net = 'yes'\n"
        "except OSError:\n"
        "    net = 'no'\n"
        "try:\n"
        f"    open({str(tmp_path / 'probe.out')!r}, 'w').close()\n"
        "    wrote = 'yes'\n"
        "except OSError:\n"
        "    wrote = 'no'\n"
        "@tool('probe.report', description=f'pid={os.getpid()} db={seen} net={net} "
        "wrote={wrote}')\n"
        "async def report(ctx: ToolContext) -> str:\n"
        "    return 'report'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hk_noimport_probe", raising=False)
    try:
        sandboxed = await agent_tools(tmp_path, store, ["hk_noimport_probe"])
        (tmp_path / "hk_noimport_probe.py").write_text(
            (tmp_path / "hk_noimport_probe.py").read_text() + "\n"
        )  # a new version of the file: discovered again, unsandboxed this time
        unsandboxed = await agent_tools(tmp_path, store, ["hk_noimport_probe"], sandbox="none")
    finally:
        listener.close()
    assert "hk_noimport_probe" not in sys.modules
    fields = [
        dict(part.split("=") for part in t.description.split()) for t in (*sandboxed, *unsandboxed)
    ]
    assert all(int(found["pid"]) != os.getpid() for found in fields)
    assert int(fields[1]["db"]) == database.stat().st_size > 0
    assert (fields[1]["net"], fields[1]["wrote"]) == ("yes", "yes")
    if (await anyio.to_thread.run_sync(probe_bubblewrap)).ok:
        # The database is masked, there is no network, the import path is read-only.
        assert (fields[0]["db"], fields[0]["net"], fields[0]["wrote"]) == ("hidden", "no", "no")
    else:
        assert fields[0] == fields[1] | {"pid": fields[0]["pid"]}


async def agent_tools(
    tmp_path: Path,
    store: RuntimeStore,
    modules: Sequence[str],
    *,
    timeout_s: float = 20.0,
    **agent: Any,
) -> list[AuthoredTool]:
    """The tools a real generation pins for the agent, through the Host's own tool source."""
    config = host_config(tmp_path, modules, {"allow": ["*"]}, **agent)
    capabilities = RuntimeCapabilities(
        providers=StaticProviderSource(ScriptedModel([Reply("ok")])),
        memory=InMemoryMemorySource(),
        tools=DefaultToolSource(config, discovery_timeout_s=timeout_s),
        channels=NoChannels(),
    )
    generation = Generation(1, config, capabilities, store=store)
    pinned = await generation.agent_tools(AGENT)
    return [found for found, _ in pinned.tools]


PATTERN_MODULE = (
    "from hostkit.effects import ToolContext, tool\n"
    "@tool('word.echo')\n"
    "async def echo(ctx: ToolContext, word: str) -> str:\n"
    '    """Echo a word."""\n'
    "    return word\n"
    "echo.parameters = {{'type': 'object', 'required': ['word'], 'additionalProperties': False,\n"
    "    'properties': {{'word': {{'type': 'string', 'pattern': {pattern!r}}}}}}}\n"
)


BAD_MODULES = {
    "syntax-error": ("def broken(:\n", "SyntaxError"),
    "raises-on-import": ("raise RuntimeError('no vault today\\nsecond line')\n", "no vault today"),
    "no-tools": ("VALUE = 1\n", "defines no tools"),
    "timeout": ("import time\ntime.sleep(60)\n", "did not finish within 3s"),
    "oversized": (
        "from typing import Literal\n"
        "from hostkit.effects import ToolContext, tool\n"
        "Kind = Literal[tuple(f'kind-{i:06d}-' + 'x' * 50 for i in range(20_000))]\n"
        "@tool('bulk.pick')\n"
        "async def pick(ctx: ToolContext, kind: Kind) -> str:\n"
        "    return kind\n",
        "larger than 1000000 bytes",
    ),
    "prepare-hook": (
        "from hostkit.effects import AuthoredTool, Prepared\n"
        "async def check(arguments) -> Prepared:\n"
        "    return Prepared()\n"
        "async def run(ctx) -> str:\n"
        "    return ''\n"
        "checked = AuthoredTool('checked.run', run, prepare=check)\n",
        "has a prepare hook",
    ),
    # An in-process tool's bounds hold for a discovered one, whatever its top level did.
    "long-description": (
        PATTERN_MODULE.format(pattern="a") + "echo.description = 'x' * 200_000\n",
        "description is longer than 1024",
    ),
    "bad-name": (
        PATTERN_MODULE.format(pattern="a") + "echo.name = 'Bad Name; x'\n",
        "not dotted lower_snake_case",
    ),
    "negative-timeout": (
        PATTERN_MODULE.format(pattern="a") + "echo.timeout_s = -1.0\n",
        "timeout_s is not a number of seconds",
    ),
    # Patterns run on a linear-time engine, which has no look-around.
    "lookaround-pattern": (PATTERN_MODULE.format(pattern="(?=a)b"), "is not supported"),
}


@pytest.mark.parametrize("case", [*BAD_MODULES, "missing"])
async def test_a_bad_module_is_a_one_line_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: RuntimeStore, case: str
) -> None:
    name = f"hk_noimport_bad_{case.replace('-', '_')}"
    expected = f"No module named {name!r}"
    if case != "missing":
        source, expected = BAD_MODULES[case]
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    timeout_s = 3.0 if case == "timeout" else 20.0
    # Overdue is the environment's failure (a reload is not refused for it), retryable.
    expected_error = DiscoveryUnavailable if case == "timeout" else ConfigError
    with anyio.fail_after(60):
        with pytest.raises(expected_error) as raised:
            await agent_tools(tmp_path, store, [name], timeout_s=timeout_s, sandbox="none")
    error = raised.value
    assert error.retryable is (case == "timeout")
    assert error.message.startswith(f"{KEY}: ")
    assert expected in error.message
    assert name in error.message
    assert "\n" not in error.message
    assert len(error.message) <= 500
    assert name not in sys.modules


async def test_a_module_beside_the_configuration_needs_tool_path_and_the_refusal_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: RuntimeStore
) -> None:
    """The discovery child runs ``python -I``: the working directory is not on its path.
    A first tool module saved beside hostkit.toml is refused with the setting that finds
    it, and that setting does."""
    name = "hk_noimport_beside"
    (tmp_path / f"{name}.py").write_text(PATTERN_MODULE.format(pattern="a+"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, name, raising=False)
    with anyio.fail_after(60), pytest.raises(ConfigError) as raised:
        await agent_tools(tmp_path, store, [name], sandbox="none")
    assert f'needs tool_path = ["."] in [agents.{AGENT}]' in raised.value.message
    with anyio.fail_after(60):
        found = await agent_tools(tmp_path, store, [name], sandbox="none", tool_path=["."])
    assert [tool.name for tool in found] == ["word.echo"]
    assert name not in sys.modules


async def test_a_module_changed_on_disk_after_discovery_fails_the_call_and_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = Vault(tmp_path, monkeypatch, "hk_noimport_changed")
    model = ScriptedModel([Reply("ready"), vault_call(), Reply("it failed")])
    config = host_config(tmp_path, [vault.name], {"allow": ["*"]})
    async with module_host(config, model) as host:
        await host.turns.run(request())  # the catalog: discovered, offered, not imported
        source = await anyio.Path(vault.path).read_text()
        await anyio.Path(vault.path).write_text(source.replace("box: int", "box: str") + "\n")
        result = await host.turns.run(request())
    assert statuses(result) == [("vault.open", "failed")]
    (message,) = tool_messages(model.requests[-1])
    assert "ToolChanged" in message
    assert "changed on disk" in message
    assert vault.host_imports() == 0  # the new version never ran in the Host
    assert vault.runs() == []
    assert vault.name not in sys.modules


async def test_an_edit_that_keeps_size_and_mtime_never_runs_in_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A size and modification time kept by the editor prove nothing: the bytes are
    hashed again, and exactly the verified bytes are compiled (no bytecode cache)."""
    vault = Vault(tmp_path, monkeypatch, "hk_noimport_sneaky")
    model = ScriptedModel([Reply("ready"), vault_call(), Reply("it failed")])
    config = host_config(tmp_path, [vault.name], {"allow": ["*"]})
    async with module_host(config, model) as host:
        await host.turns.run(request())  # discovered, not imported
        path = anyio.Path(vault.path)
        before = await path.stat()
        source = await path.read_text()
        edited = source.replace("box: int", "box: str")  # same length: same size
        assert edited != source
        await path.write_text(edited)
        await anyio.to_thread.run_sync(
            lambda: os.utime(vault.path, ns=(before.st_atime_ns, before.st_mtime_ns))
        )
        assert (await path.stat()).st_size == before.st_size
        result = await host.turns.run(request())
    assert statuses(result) == [("vault.open", "failed")]
    assert "changed on disk" in tool_messages(model.requests[-1])[0]
    assert vault.host_imports() == 0
    assert vault.name not in sys.modules


async def test_a_tool_that_no_longer_matches_its_definition_is_refused_after_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, authority: AuthorityResolver
) -> None:
    """The module's file is the same, a module it imports changed: the tool the Host
    imports has another schema than the one the model was shown. Nothing of the tool runs."""
    (tmp_path / "hk_noimport_kinds.py").write_text(
        "from typing import Literal\nKind = Literal['a']\n"
    )
    (tmp_path / "hk_noimport_typed.py").write_text(
        "import anyio\n"
        "from hostkit.effects import ToolContext, tool\n"
        "from hk_noimport_kinds import Kind\n"
        f"RAN = {str(tmp_path / 'typed.ran')!r}\n"
        "@tool('typed.pick')\n"
        "async def pick(ctx: ToolContext, kind: Kind) -> str:\n"
        "    await anyio.Path(RAN).touch()\n"
        "    return kind\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("hk_noimport_kinds", "hk_noimport_typed"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    config = host_config(tmp_path, ["hk_noimport_typed"], {"allow": ["*"]})
    source = DefaultToolSource(config)
    offered = await source.tools(
        ToolRequest(config, AGENT, EffectPolicy(allow=("*",)), tmp_path, None)
    )
    (tmp_path / "hk_noimport_kinds.py").write_text(
        "from typing import Literal\nKind = Literal['a', 'b']\n"
    )
    runtime, context = await runtime_for(authority, [(o.tool, o.source) for o in offered])
    catalog = await runtime.prepare_catalog(context)
    ref = catalog.resolve("typed_pick")
    assert ref is not None
    result = await runtime.execute(EffectRequest("call_1", ref, {"kind": "a"}), context)
    for name in ("hk_noimport_kinds", "hk_noimport_typed"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert (result.status, result.started) == ("failed", False)
    assert result.error is not None
    assert "ToolChanged" in result.error
    assert "no longer matches" in result.error
    assert not (tmp_path / "typed.ran").exists()


async def runtime_for(
    authority: AuthorityResolver, tools: list[tuple[AuthoredTool, str]]
) -> tuple[EffectRuntime, TurnExecutionContext]:
    class Tools:
        async def toolset(self, context: TurnExecutionContext) -> Toolset:
            return Toolset(tuple(tools), EffectPolicy(allow=("*",)), Path("/tmp"))

    base = context_for(await authority.for_conversation(facts("no-import")))
    context = TurnExecutionContext(
        **{
            name: getattr(base, name)
            for name in base.__dataclass_fields__
            if name != "capability_snapshot"
        },
        capability_snapshot={"effects": tuple(t.name for t, _ in tools)},
    )
    return EffectRuntime(toolsets=Tools()), context


async def test_a_catastrophic_pattern_cannot_stall_the_host_before_approval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``^(a+)+$`` against ``a`` * 40 + ``!`` would take Python's ``re`` hours; the
    discovered schema's patterns run on a linear-time engine."""
    (tmp_path / "hk_noimport_redos.py").write_text(PATTERN_MODULE.format(pattern="^(a+)+$"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hk_noimport_redos", raising=False)
    model = ScriptedModel([CallTools(("word_echo", {"word": "a" * 40 + "!"})), Reply("no")])
    approver = Approver("approve_once")
    config = host_config(tmp_path, ["hk_noimport_redos"], {"allow": ["*"], "ask": ["word.*"]})
    async with module_host(config, model, approver) as host:
        with anyio.fail_after(60):
            result = await host.turns.run(request())
    assert statuses(result) == [("word.echo", "invalid")]
    assert "pattern" in tool_messages(model.requests[-1])[0]
    assert approver.seen == []
    assert "hk_noimport_redos" not in sys.modules


async def test_arguments_are_checked_against_the_discovered_schema_before_approval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = Vault(tmp_path, monkeypatch, "hk_noimport_invalid")
    model = ScriptedModel([CallTools(("vault_open", {"box": "seven"})), Reply("bad box")])
    approver = Approver("approve_once")
    config = host_config(tmp_path, [vault.name], {"allow": ["*"], "ask": ["vault.*"]})
    async with module_host(config, model, approver) as host:
        result = await host.turns.run(request())
    assert statuses(result) == [("vault.open", "invalid")]
    (message,) = tool_messages(model.requests[-1])
    assert "box: must satisfy type" in message
    assert "seven" not in message
    assert approver.seen == []
    assert vault.host_imports() == 0


NO_BUBBLEWRAP = textwrap.dedent(
    """
    import sys
    import anyio
    from pathlib import Path
    from hostkit.errors import HostkitError
    from hostkit.host import Host, parse_config
    from hostkit.types import ConversationFacts, TurnRequest

    root, module = Path(sys.argv[1]), sys.argv[2]
    sys.path.insert(0, str(root))

    async def main():
        config = parse_config(
            {
                "host": {"database": str(root / "hostkit.db"), "workspace": str(root)},
                "providers": {"test": {"kind": "scripted", "script": [{"reply": "hi"}]}},
                "agents": {"assistant": {"provider": "test", "memory": False,
                                         "tool_modules": [module]}},
            },
            base_dir=root,
        )
        facts = ConversationFacts(channel="test", conversation_key="c1", principal_key="alice")
        try:
            async with Host.open(config) as host:
                result = await host.turns.run(TurnRequest("hi", facts, request_id="r1"))
                print("outcome", result.outcome)
        except HostkitError as exc:
            print("error", exc.message)

    anyio.run(main)
    """
)


async def test_without_bubblewrap_a_sandboxed_agent_refuses_to_discover_an_authored_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed, as terminal.run does: the module's top level never runs unconfined.
    hostkit's own example tools (the Host's code) are still discovered, in a child."""
    vault = Vault(tmp_path, monkeypatch, "hk_noimport_nobwrap")
    empty = tmp_path / "no-tools-on-path"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "PYTHONPATH": os.getcwd()}
    refused = await anyio.run_process(
        [sys.executable, "-c", NO_BUBBLEWRAP, str(tmp_path), vault.name], env=env, check=False
    )
    out = refused.stdout.decode()
    assert out.startswith("error "), refused.stderr.decode()[-2000:]
    assert "cannot be discovered in the agent's sandbox" in out
    assert "bubblewrap" in out
    assert vault.importers() == []  # neither the Host nor a child ran its top level
    shipped = await anyio.run_process(
        [sys.executable, "-c", NO_BUBBLEWRAP, str(tmp_path), "hostkit.examples.tools"],
        env=env,
        check=False,
    )
    assert shipped.stdout.decode().strip() == "outcome completed", shipped.stderr.decode()[-2000:]
