"""A secret the agent holds is masked in every result of its turn, bound to the call or not.

Each call used to know only its own bound secrets: a secret-bound
``terminal.run`` could write ``$HK_SECRET`` to a file and a later, unbound
``files.read`` of that file showed it raw. Now every effect result of a turn
is redacted with the values of all secrets the agent holds a
``secret.bind:<NAME>`` grant for. These run real Host turns (a real
subprocess in the sandbox, real files, real SQLite) and scan what they left.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.effects import (
    ApprovalDecision,
    ApprovalRequest,
    AuthoredTool,
    EffectPolicy,
    EffectRuntime,
    ToolContext,
    Toolset,
    secret_grant,
    tool,
)
from hostkit.freeze import FrozenMap
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import EffectRequest, ModelLimits, ModelRequest, TurnExecutionContext
from tests.contract.test_context_basic import context_for
from tests.hosts import request
from tests.support import facts, table_rows

pytestmark = pytest.mark.anyio

NAME = "HK_CROSS_SECRET"
SECRET = "cross-call-secret-4242-Zq"
WRITE = f"import os\nopen('out.txt', 'w').write('key=' + os.environ[{NAME!r}])\n"


class Approve:
    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        return "approve_once"


def host_config(tmp_path: Path, builtins: list[str]) -> HostConfig:
    state, workspace = tmp_path / "state", tmp_path / "workspace"
    state.mkdir(exist_ok=True)
    workspace.mkdir(exist_ok=True)
    agent = {
        "provider": "test",
        "memory": False,
        "policy": {"allow": ["*"]},
        "secrets": [NAME],
        "builtins": builtins,
    }
    return parse_config(
        {
            "host": {
                "database": str(state / "hostkit.db"),
                "artifacts": str(state / "artifacts"),
                "workspace": str(workspace),
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": agent},
            # The sandbox shows the system interpreter: the one program NAME may go to.
            "secrets": {NAME: {"programs": ["/usr/bin/python3"]}},
        },
        base_dir=state,
    )


def tool_messages(model: ScriptedModel) -> list[str]:
    last: ModelRequest = model.requests[-1]
    return [m.content for m in last.messages if m.role == "tool"]


def state_text(config: HostConfig) -> list[str]:
    """Every database cell and every state file (not the workspace file the run wrote)."""
    state = config.database_path.parent
    files = [p.read_bytes().decode("utf-8", "replace") for p in state.rglob("*") if p.is_file()]
    return [*table_rows(config.database_path), *files]


async def test_a_file_a_bound_run_wrote_is_redacted_when_an_unbound_call_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NAME, SECRET)
    config = host_config(tmp_path, ["terminal.run", "files.read"])
    await anyio.Path(tmp_path / "workspace" / "write.py").write_text(WRITE)
    model = ScriptedModel(
        [
            CallTools(("terminal_run", {"argv": ["python3", "write.py"], "secrets": [NAME]})),
            CallTools(("files_read", {"path": "out.txt"})),
            Reply("done"),
        ]
    )
    caps = capabilities(model, config=config)
    async with Host.open(config, capabilities=caps, approver=Approve()) as host:
        result = await host.turns.run(request("write, then read"))
    assert [(e.effect, e.status) for e in result.effects] == [
        ("terminal.run", "succeeded"),
        ("files.read", "succeeded"),
    ], result.effects
    # The run really wrote the value; the unbound read shows it masked, with its name.
    written = await anyio.Path(tmp_path / "workspace" / "out.txt").read_text()
    assert written == f"key={SECRET}"
    read = tool_messages(model)[-1]
    assert f"key=[redacted:{NAME}]" in read
    texts = [*(m.content for r in model.requests for m in r.messages), repr(result)]
    texts += await anyio.to_thread.run_sync(state_text, config)
    assert sum(text.count(SECRET) + text.count(SECRET[:12]) for text in texts) == 0


async def test_every_tool_of_the_turn_masks_every_held_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value one call kept (or one read from the environment) leaves no other call raw."""
    monkeypatch.setenv(NAME, SECRET)
    kept: dict[str, str] = {}

    async def bind(ctx: ToolContext, secrets: list[str]) -> str:
        kept["value"] = ctx.secrets[NAME]
        return "bound"

    @tool("probe.show")
    async def show(ctx: ToolContext) -> Any:
        """Shows what an earlier call kept, and the Host environment's value."""
        return {"kept": kept["value"], "environ": os.environ[NAME][:14] + "…"}

    binder = AuthoredTool("probe.bind", bind, description="Binds.", secrets_argument="secrets")
    model = ScriptedModel(
        [
            CallTools(("probe_bind", {"secrets": [NAME]})),
            CallTools(("probe_show", {})),
            Reply("done"),
        ]
    )
    config = host_config(tmp_path, [])
    caps = capabilities(model, tools=[binder, show])
    async with Host.open(config, capabilities=caps, approver=Approve()) as host:
        result = await host.turns.run(request("bind, then show"))
    assert [e.status for e in result.effects] == ["succeeded", "succeeded"]
    shown = tool_messages(model)[-1]
    assert shown == f'{{"kept": "[redacted:{NAME}]", "environ": "[redacted:{NAME}]…"}}'


async def test_held_secrets_that_are_unset_or_too_short_are_skipped(
    authority: AuthorityResolver, tmp_path: Path
) -> None:
    """Only grants count, and only values long enough to redact: ordinary text stays."""

    @tool("probe.echo")
    async def echo(ctx: ToolContext, text: str) -> str:
        """Echoes."""
        return text

    scope = await authority.for_conversation(facts("held"))
    grants = tuple(secret_grant(n) for n in ("HK_SHORT", "HK_UNSET", "HK_GOOD", "bad name"))
    context = TurnExecutionContext(
        **{
            name: getattr(context_for(scope), name)
            for name in context_for(scope).__dataclass_fields__
            if name != "capability_snapshot"
        },
        capability_snapshot={"effects": ("probe.echo",), "secrets": grants},
    )

    class Tools:
        async def toolset(self, context: TurnExecutionContext) -> Toolset:
            return Toolset(((echo, "test"),), EffectPolicy(), tmp_path)

    environ = {"HK_SHORT": "abc", "HK_GOOD": "good-held-value", "HK_OTHER": "other-value-x"}
    runtime = EffectRuntime(toolsets=Tools(), environ=environ)
    catalog = await runtime.prepare_catalog(context)
    ref = catalog.resolve("probe_echo")
    assert ref is not None
    text = "abc good-held-value other-value-x"
    done = await runtime.execute(EffectRequest("c1", ref, {"text": text}), context)
    assert (done.status, done.views.model) == (
        "succeeded",
        "abc [redacted:HK_GOOD] other-value-x",
    )


async def test_a_held_secret_read_back_in_windows_the_model_chose_is_masked_in_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model picks ``offset`` and ``limit``: windows of 7 bytes used to cut the value
    into pieces shorter than a recognisable fragment, and six reads gave it all back. Each
    window is now redacted with its surroundings: any part of the value in it is masked."""
    monkeypatch.setenv(NAME, SECRET)
    config = host_config(tmp_path, ["files.read"])
    log = f"deploy ok\ntoken={SECRET}\nbye\n"
    await anyio.Path(tmp_path / "workspace" / "deploy.log").write_text(log)
    sizes = (1, 3, 7)
    windows = [(offset, size) for size in sizes for offset in range(0, len(log), size)]
    model = ScriptedModel(
        [
            *[
                CallTools(
                    *[
                        ("files_read", {"path": "deploy.log", "offset": offset, "limit": size})
                        for offset in range(0, len(log), size)
                    ]
                )
                for size in sizes
            ],
            Reply("done"),
        ],
        # Forty-six reads at once, each with its call id twice: more than 8,192 estimated.
        limits=ModelLimits(context_window=32_768, max_output_tokens=1_024),
    )
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        result = await host.turns.run(request("read it piece by piece"))
    assert {e.status for e in result.effects} == {"succeeded"}, (result.outcome, result.error)
    reads = tool_messages(model)
    assert len(reads) == len(windows)
    shown = [read.split("\n[deploy.log: ")[0] for read in reads]
    # Text outside the value reads as it is; any window touching the value is masked.
    by_window = dict(zip(windows, shown, strict=True))
    assert by_window[(0, 7)] == "deploy "
    assert by_window[(14, 7)] == f"n=[redacted:{NAME}]"  # "n=" then 5 of the value
    value_start = log.index(SECRET)
    for (offset, size), text in by_window.items():
        if offset < value_start + len(SECRET) and offset + size > value_start:
            assert f"[redacted:{NAME}]" in text, (offset, size, text)
    # No piece of the value, however short, reached the model: the windows' characters
    # that lie inside the value were all masked.
    reassembled = "".join(text for (_, size), text in by_window.items() if size == 1)
    assert SECRET[1:-1] not in reassembled
    for size in (3, 7):
        pieces = [t for (o, s), t in by_window.items() if s == size and "redacted" not in t]
        assert not any(piece and piece in SECRET for piece in pieces if len(piece) > 1)


async def test_a_secret_another_agent_holds_is_masked_for_an_agent_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agents share the Host's workspace: what the deploy agent's run left in a file is not
    the helper agent's to read, though the helper holds no grant for that secret."""
    monkeypatch.setenv(NAME, SECRET)
    config = host_config(tmp_path, ["files.read"])
    helper = config.agents["assistant"].model_copy(update={"secrets": ()})
    config = config.model_copy(update={"agents": FrozenMap({**config.agents, "helper": helper})})
    await anyio.Path(tmp_path / "workspace" / "deploy.log").write_text(f"token={SECRET}\n")
    model = ScriptedModel(
        [CallTools(("files_read", {"path": "deploy.log"})), Reply("done")], repeat_last=True
    )
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        result = await host.turns.run(request("read the log", core_id="helper"))
    assert [(e.effect, e.status) for e in result.effects] == [("files.read", "succeeded")]
    assert tool_messages(model)[-1] == f"token=[redacted:{NAME}]\n"


@pytest.mark.parametrize(
    ("variable", "extra"),
    [
        ("HK_PROVIDER_KEY", {"providers": {"hosted": {"kind": "openai", "api_key_env": "X"}}}),
        ("OPENAI_API_KEY", {"providers": {"hosted": {"kind": "openai"}}}),
        # The SDK's own default variable, whatever api_key_env names.
        (
            "ANTHROPIC_AUTH_TOKEN",
            {"providers": {"c": {"kind": "anthropic", "api_key_env": "HK_ANTHROPIC"}}},
        ),
        (
            "HK_BOT_TOKEN",
            {
                "channels": {
                    "tg": {
                        "kind": "telegram",
                        "inbound": "polling",
                        "token_env": "X",
                        "agent": "assistant",
                        "allow": ["*"],
                    }
                }
            },
        ),
    ],
)
async def test_the_hosts_own_keys_are_masked_in_every_agents_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, extra: dict[str, Any]
) -> None:
    """A provider's API key and a channel's bot token are the Host's secrets, though no
    agent holds them: a copy some tool left in the shared workspace is masked too."""
    value = "host-own-key-7f3a9c2e51-Zq"
    monkeypatch.setenv(variable, value)
    (tmp_path / "workspace").mkdir()
    tables = json.loads(json.dumps(extra).replace('"X"', json.dumps(variable)))
    config = parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(tmp_path / "workspace"),
            },
            "providers": {"test": {"kind": "scripted"}, **tables.pop("providers", {})},
            "agents": {
                "assistant": {"provider": "test", "memory": False, "builtins": ["files.read"]}
            },
            **tables,
        },
        base_dir=tmp_path,
    )
    await anyio.Path(tmp_path / "workspace" / "notes.txt").write_text(f"key={value}\n")
    model = ScriptedModel(
        [CallTools(("files_read", {"path": "notes.txt"})), Reply("done")], repeat_last=True
    )
    async with Host.open(config, capabilities=capabilities(model, config=config)) as host:
        await host.turns.run(request("read the notes"))
    assert tool_messages(model)[-1] == f"key=[redacted:{variable}]\n"
