"""hostkit.Agent and @hostkit.tool: a Python agent goes through the same catalog, policy and
approvals as a configured one; structured output is validated with bounded retries."""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pydantic
import pytest

import hostkit
from hostkit.effects import ApprovalDecision, ApprovalRequest, provider_name
from hostkit.freeze import FrozenMap, thaw
from hostkit.host import parse_config
from hostkit.host._defaults import DefaultProviderSource
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import InboundEnvelope
from tests.cli import run_cli_async
from tests.hosts import config, event_kinds, request, turn_rows

pytestmark = pytest.mark.anyio


class Recorder:
    """An approver that records every request and answers with one decision."""

    def __init__(self, decision: ApprovalDecision) -> None:
        self.decision = decision
        self.seen: list[ApprovalRequest] = []

    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(req)
        return self.decision


def note_tool(ran: list[str]) -> hostkit.AuthoredTool:
    @hostkit.tool("notes.write")
    async def write_note(ctx: hostkit.ToolContext, name: str, text: str) -> str:
        """Write a note.

        Args:
            name: the note's file name
            text: what the note says
        """
        ran.append(name)
        return f"wrote {name}"

    return write_note


def write_call() -> CallTools:
    return CallTools((provider_name("notes.write"), {"name": "a.md", "text": "hi"}))


async def test_a_python_agent_asks_exactly_like_a_configured_agent(tmp_path: Path) -> None:
    ask = {"allow": ["*"], "ask": ["notes.write"]}
    outcomes: dict[str, tuple[Any, ...]] = {}
    for kind in ("toml", "python"):
        ran: list[str] = []
        approver = Recorder("deny")
        model = ScriptedModel([write_call(), Reply("done")])
        where = tmp_path / kind
        where.mkdir()
        if kind == "toml":
            opening = hostkit.Host.open(
                config(where, policy=ask),
                capabilities=capabilities(model, tools=[note_tool(ran)]),
                approver=approver,
            )
            agent = "assistant"
        else:
            python = hostkit.Agent("writer", model=model, tools=[note_tool(ran)], policy=ask)
            opening = hostkit.Host.open(config(where), agents=[python], approver=approver)
            agent = "writer"
        async with opening as host:
            result = await host.turns.run(request("write a note", core_id=agent))
        # Denied: asked once, and the tool never ran.
        assert ran == []
        assert [r.effect for r in approver.seen] == ["notes.write"]
        outcomes[kind] = (
            result.outcome,
            tuple((e.effect, e.status) for e in result.effects),
            thaw(approver.seen[0].view),
            approver.seen[0].key.rule_key,
        )
    assert outcomes["python"] == outcomes["toml"]
    assert outcomes["python"][1] == (("notes.write", "denied"),)


@pytest.mark.parametrize("name", ["notes.write", "notes_write"])
async def test_a_scripted_call_may_name_the_effect_or_the_name_the_provider_is_offered(
    tmp_path: Path, name: str
) -> None:
    """`CallTools(("notes.write", ...))` is the call a model makes as `notes_write`: it is
    asked and answered like it, never a silent `not_found`."""
    ran: list[str] = []
    approver = Recorder("approve_once")
    model = ScriptedModel([CallTools((name, {"name": "a.md", "text": "hi"})), Reply("done")])
    policy = {"allow": ["*"], "ask": ["notes.write"]}
    python = hostkit.Agent("writer", model=model, tools=[note_tool(ran)], policy=policy)
    async with hostkit.Host.open(config(tmp_path), agents=[python], approver=approver) as host:
        result = await host.turns.run(request("write a note", core_id="writer"))
    assert [r.effect for r in approver.seen] == ["notes.write"]
    assert tuple((e.effect, e.status) for e in result.effects) == (("notes.write", "succeeded"),)
    assert ran == ["a.md"]
    (sent,) = [c.name for r in model.requests[1:2] for m in r.messages for c in m.tool_calls]
    assert sent == "notes_write"  # what the transcript keeps is what a provider would send


async def test_an_approved_call_runs_once_with_python_provenance(tmp_path: Path) -> None:
    ran: list[str] = []
    approver = Recorder("approve_once")
    model = ScriptedModel([write_call(), Reply("done")])
    agent = hostkit.Agent(
        "writer",
        model=model,
        tools=[note_tool(ran)],
        policy={"allow": ["*"], "ask": ["notes.write"]},
    )
    async with hostkit.Host.open(config(tmp_path), agents=[agent], approver=approver) as host:
        result = await host.turns.run(request(core_id="writer"))
        entries = await host._generation.agent_tools("writer")
    assert result.outcome == "completed"
    assert ran == ["a.md"]
    assert [r.effect for r in approver.seen] == ["notes.write"]
    assert [(t.name, source) for t, source in entries.tools] == [
        ("notes.write", f"python:{__name__}")
    ]


class BrokenApprover:
    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        raise RuntimeError("the approver broke")


async def test_an_approver_that_raises_fails_the_turn_naming_its_error(tmp_path: Path) -> None:
    """The approver's own exception type is what the turn reports, not the task group's
    ExceptionGroup around it; the call never ran."""
    ran: list[str] = []
    model = ScriptedModel([write_call(), Reply("done")])
    agent = hostkit.Agent(
        "writer", model=model, tools=[note_tool(ran)], policy={"allow": ["*"], "ask": ["*"]}
    )
    opening = hostkit.Host.open(config(tmp_path), agents=[agent], approver=BrokenApprover())
    async with opening as host:
        result = await host.turns.run(request(core_id="writer"))
    assert result.outcome == "failed"
    assert "RuntimeError" in (result.error or "")
    assert "ExceptionGroup" not in (result.error or "")
    assert ran == []


async def test_a_denied_effect_is_never_offered_to_the_model(tmp_path: Path) -> None:
    ran: list[str] = []
    model = ScriptedModel([write_call(), Reply("done")])
    agent = hostkit.Agent(
        "writer", model=model, tools=[note_tool(ran)], policy={"deny": ["notes.*"]}
    )
    async with hostkit.Host.open(config(tmp_path), agents=[agent]) as host:
        result = await host.turns.run(request(core_id="writer"))
    assert ran == []
    assert model.requests[0].tools == ()
    assert [e.status for e in result.effects] != ["succeeded"]


async def test_the_schema_comes_from_type_hints_and_the_docstring() -> None:
    @hostkit.tool
    async def add(a: int, b: int = 2) -> int:
        """Add two numbers.

        Args:
            a: the first number,
                on two lines
            b (int): the second number
        """
        return a + b

    @hostkit.tool("notes.find")
    async def find(ctx: hostkit.ToolContext, query: str, limit: int | None = None) -> str:
        """Find notes.

        :param query: words to look for
        """
        return query

    assert add.name == "add"
    assert add.description == "Add two numbers."
    assert thaw(add.parameters) == {
        "type": "object",
        "additionalProperties": False,
        "required": ["a"],
        "properties": {
            "a": {"type": "integer", "title": "A", "description": "the first number, on two lines"},
            "b": {
                "type": "integer",
                "title": "B",
                "default": 2,
                "description": "the second number",
            },
        },
    }
    assert find.description == "Find notes."
    assert thaw(find.parameters)["properties"]["query"]["description"] == "words to look for"
    assert "description" not in thaw(find.parameters)["properties"]["limit"]
    assert (add.takes_context, find.takes_context) == (False, True)


async def test_the_tool_context_is_optional(tmp_path: Path) -> None:
    seen: list[object] = []

    @hostkit.tool
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @hostkit.tool
    async def whoami(ctx: hostkit.ToolContext) -> str:
        """Which turn is this."""
        seen.append(ctx.turn_id)
        return ctx.core_id

    model = ScriptedModel(
        [CallTools(("add", {"a": 2, "b": 3}), ("whoami", {})), Reply("5, said calc")]
    )
    agent = hostkit.Agent("calc", model=model, tools=[add, whoami])
    async with hostkit.Host.open(config(tmp_path), agents=[agent]) as host:
        result = await host.turns.run(request(core_id="calc"))
    assert result.outcome == "completed"
    assert [(e.effect, e.status, e.summary) for e in result.effects] == [
        ("add", "succeeded", "5"),
        ("whoami", "succeeded", "calc"),
    ]
    assert seen == [result.turn_id]


class Answer(pydantic.BaseModel):
    city: str
    population: int


async def run_structured(tmp_path: Path, replies: list[str], retries: int = 2) -> Any:
    model = ScriptedModel([Reply(text) for text in replies])
    agent = hostkit.Agent("geo", model=model, output_type=Answer, output_retries=retries)
    async with hostkit.Host.open(config(tmp_path), agents=[agent]) as host:
        result = await host.turns.run(request("largest city?", core_id="geo"))
        kinds = await event_kinds(host, result.turn_id)
    return result, kinds, model


async def test_a_valid_structured_answer_is_typed_on_the_result(tmp_path: Path) -> None:
    result, kinds, model = await run_structured(
        tmp_path, ['```json\n{"city": "Tokyo", "population": 37000000}\n```']
    )
    assert result.outcome == "completed"
    assert result.output_as(Answer) == Answer(city="Tokyo", population=37_000_000)

    class Other(pydantic.BaseModel):
        country: str

    # Read as a model it does not fit: a typed, one-line error, not pydantic's report.
    with pytest.raises(hostkit.InvalidValue, match="structured output does not fit Other"):
        result.output_as(Other)
    assert thaw(result.output) == {"city": "Tokyo", "population": 37_000_000}
    assert result.to_json()["output"] == {"city": "Tokyo", "population": 37_000_000}
    assert "output.invalid" not in kinds
    # The schema reached the model with the instructions.
    assert '"population"' in model.requests[0].messages[0].content


async def test_an_invalid_answer_is_fed_back_and_the_fix_is_kept(tmp_path: Path) -> None:
    result, kinds, model = await run_structured(
        tmp_path, ["Tokyo, about 37 million", '{"city": "Tokyo", "population": 37000000}']
    )
    assert result.outcome == "completed"
    assert result.output_as(Answer).population == 37_000_000
    assert kinds.count("output.invalid") == 1
    feedback = model.requests[1].messages[-1]
    assert feedback.role == "user"
    assert "did not match the required JSON schema" in feedback.content


async def test_an_answer_invalid_past_the_bound_fails_the_turn(tmp_path: Path) -> None:
    result, kinds, model = await run_structured(
        tmp_path, ["no", '{"city": "Tokyo"}', "still no"], retries=1
    )
    assert result.outcome == "failed"
    assert result.output is None
    assert result.error is not None
    assert "did not match the output type after 2 attempts" in result.error
    assert kinds.count("output.invalid") == 1
    assert len(model.requests) == 2


@pytest.mark.parametrize(
    ("build", "error", "words"),
    [
        (lambda: hostkit.Agent("bad name!"), hostkit.InvalidValue, "agent name"),
        (lambda: hostkit.Agent("a", model=42), hostkit.InvalidValue, "model must be"),
        (lambda: hostkit.Agent("a", output_type=dict), hostkit.InvalidValue, "pydantic model"),
        (lambda: hostkit.Agent("a", output_retries=9), hostkit.InvalidValue, "output_retries"),
        (lambda: hostkit.Agent("a", tools=[len]), hostkit.InvalidValue, "each tool"),
        (lambda: hostkit.Agent("a", policy={"permit": ["*"]}), hostkit.ConfigError, "policy"),
        (
            lambda: hostkit.Agent("a", policy={"alow": ["*"]}),
            hostkit.ConfigError,
            "agents.a.policy: unknown key 'alow'; did you mean 'allow'",
        ),
        (lambda: hostkit.Agent("a", max_steps=0), hostkit.ConfigError, "max_steps"),
        # A model dict is a provider table: its unknown key is named as TOML names it (the
        # redactor no longer masks the sentence after a secret-named key), when it is built.
        (
            lambda: hostkit.Agent("a", model={"kind": "openai", "api_key": "sk-test"}),
            hostkit.ConfigError,
            r"^agents.a.model: unknown key 'api_key'; did you mean 'api_key_env'\?$",
        ),
        (
            lambda: hostkit.Agent("a", model={"kind": "openai", "base_ur": "http://x"}),
            hostkit.ConfigError,
            "unknown key 'base_ur'; did you mean 'base_url'",
        ),
        (lambda: hostkit.Agent("a", model={"kind": "nope"}), hostkit.ConfigError, "model.kind"),
        (lambda: hostkit.Agent("a", instructions=" "), hostkit.InvalidValue, "instructions"),
        (lambda: hostkit.Agent("a", tools=None), hostkit.InvalidValue, "tools must be a list"),
        (lambda: hostkit.Agent("a", memory="false"), hostkit.InvalidValue, "memory must be"),
        (lambda: hostkit.Agent("a", max_steps=True), hostkit.InvalidValue, "max_steps must be"),
        # What Host.open is handed is checked at once, not at the first turn or at close.
        (lambda: hostkit.Host.open(agents=None), hostkit.InvalidValue, "agents must be a list"),
        (lambda: hostkit.Host.open(agents=7), hostkit.InvalidValue, "agents must be a list"),
        (lambda: hostkit.Host.open(capabilities=""), hostkit.InvalidValue, "RuntimeCapabilities"),
        (lambda: hostkit.Host.open(approver=7), hostkit.InvalidValue, "ApprovalProvider"),
        # The scripted model checks what every adapter holds, as it is built.
        (lambda: ScriptedModel(["hi"], model=7), hostkit.InvalidValue, "model must be text"),
        (lambda: ScriptedModel(["hi"], name=object()), hostkit.InvalidValue, "name must be"),
        (lambda: ScriptedModel(["hi"], limits=7), hostkit.InvalidValue, "ModelLimits"),
        (lambda: ScriptedModel(["hi"], repeat_last="no"), hostkit.InvalidValue, "repeat_last"),
        # A configuration built in Python names its bad key, as a file's does.
        (lambda: hostkit.HostConfig(agents=5), hostkit.ConfigError, "agents: must be a table"),
        (
            lambda: hostkit.HostConfig(host={"nope": 1}),
            hostkit.ConfigError,
            r"unknown key 'nope' in \[host\]",
        ),
    ],
)
def test_bad_agent_input_is_a_typed_error(build: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        build()


async def test_a_name_clash_or_unknown_model_is_refused_at_open(tmp_path: Path) -> None:
    clash = hostkit.Agent("assistant", model=ScriptedModel([Reply("hi")]))
    with pytest.raises(hostkit.ConfigError, match="clashes with an agent") as caught:
        await hostkit.Host.open(config(tmp_path), agents=[clash])
    assert "\n" not in caught.value.message
    unknown = hostkit.Agent("other", model="gpt-4o")
    with pytest.raises(hostkit.ConfigError, match=r"agents\.other\.model"):
        await hostkit.Host.open(config(tmp_path), agents=[unknown])
    # A typo gets the closest model string that works; nothing close, no guess.
    for typed, meant in (("locl", "local"), ("opnai:gpt-4o", "openai:gpt-4o"), ("openai:", None)):
        with pytest.raises(hostkit.ConfigError) as caught:
            await hostkit.Host.open(config(tmp_path), agents=[hostkit.Agent("o", model=typed)])
        if meant is None:
            assert "did you mean" not in caught.value.message
        else:
            assert caught.value.message.endswith(f"; did you mean {meant!r}?")


@pytest.mark.parametrize("model", ["openai:" + "m" * 300, "anthropic:x\ud800"])
async def test_a_shorthand_model_id_no_provider_takes_is_a_config_error_at_open(
    tmp_path: Path, model: str
) -> None:
    agent = hostkit.Agent("o", model=model)
    with pytest.raises(hostkit.ConfigError, match="must be 1 to 200 characters") as caught:
        await hostkit.Host.open(config(tmp_path), agents=[agent])
    assert caught.value.key == "agents.o.model.model"


async def test_a_value_that_is_no_agent_is_refused_before_a_database_is_made(
    tmp_path: Path,
) -> None:
    database = tmp_path / "fresh.db"
    fresh = config(tmp_path).model_copy(
        update={"host": config(tmp_path).host.model_copy(update={"database": database})}
    )
    with pytest.raises(hostkit.InvalidValue, match=r"must be hostkit\.Agent values, not int"):
        await hostkit.Host.open(fresh, agents=[5])  # type: ignore[list-item]
    assert not database.exists()


async def hostkit_cli(*args: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    result = await run_cli_async(*args, cwd=cwd, env={**os.environ, "COLUMNS": "200", **env})
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def count_turns(database: Path) -> int:
    if not database.exists():
        return 0
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT count(*) FROM turns").fetchone()[0])


@pytest.mark.parametrize(
    ("kind", "base_url"),
    [
        ("openai", None),
        ("openai", "https://llm.example.com/v1"),
        ("anthropic", "https://llm.example.com/v1"),
    ],
    ids=["openai", "openai-hosted-base-url", "anthropic-hosted-base-url"],
)
async def test_a_missing_api_key_is_one_line_exit_2_and_no_turn(
    tmp_path: Path, kind: str, base_url: str | None
) -> None:
    """A hosted base_url written beside api_key_env takes that key too: unset, the run stops
    before any request, not on the server's 401 after a stored turn."""
    where = "" if base_url is None else f'base_url = "{base_url}"\n'
    await anyio.Path(tmp_path / "hostkit.toml").write_text(
        f'[providers.cloud]\nkind = "{kind}"\n{where}api_key_env = "HOSTKIT_TEST_NO_SUCH_KEY"\n\n'
        '[agents.assistant]\nprovider = "cloud"\n'
    )
    env = {"HOSTKIT_TEST_NO_SUCH_KEY": "", "OPENAI_BASE_URL": "", "ANTHROPIC_AUTH_TOKEN": "token"}
    code, _, err = await hostkit_cli("run", "hello", cwd=tmp_path, env=env)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "HOSTKIT_TEST_NO_SUCH_KEY is not set" in lines[0]
    assert await anyio.to_thread.run_sync(count_turns, tmp_path / "hostkit.db") == 0


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:8000/v1",
        "http://localhost:8000/v1",
        "http://[::1]:8000/v1",
        "http://192.168.1.20:8000/v1",
        "http://10.0.0.5/v1",
    ],
)
async def test_a_local_or_private_base_url_runs_keyless_with_its_key_variable_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_url: str
) -> None:
    """`hostkit init`'s commented OpenAI-compatible block (vLLM, llama.cpp, Ollama on this
    machine or the LAN) names OPENAI_API_KEY: unset, the provider is built and sends none."""
    monkeypatch.delenv("HOSTKIT_TEST_NO_SUCH_KEY", raising=False)
    provider_config = {
        "kind": "openai",
        "base_url": base_url,
        "api_key_env": "HOSTKIT_TEST_NO_SUCH_KEY",
    }
    config = parse_config(
        {"providers": {"lan": provider_config}, "agents": {"assistant": {"provider": "lan"}}},
        base_dir=tmp_path,
    )
    async with DefaultProviderSource(config) as source:
        provider = await source._build("lan")
        assert provider is not None


async def test_a_python_agent_with_a_shorthand_model_checks_its_key_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = hostkit.Agent("cloud", model="anthropic:claude-sonnet-4-5")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    async with hostkit.Host.open(config(tmp_path), agents=[agent]) as host:
        with pytest.raises(
            hostkit.TurnRejected, match="no API key: set the environment variable ANTHROPIC_API_KEY"
        ):
            await host.turns.run(request(core_id="cloud"))
        assert await turn_rows(host) == []


AGENT_MODULE = '''
import hostkit
from hostkit.testing import CallTools, Reply, ScriptedModel


@hostkit.tool
async def shout(text: str) -> str:
    """Say it loudly."""
    return text.upper()


agent = hostkit.Agent(
    "shouter",
    model=ScriptedModel([CallTools(("shout", {"text": "hi"})), Reply("I said HI")]),
    tools=[shout],
)
'''


async def test_hostkit_run_reaches_a_python_agent_by_module_attribute(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "my_agents.py").write_text(AGENT_MODULE)
    code, out, err = await hostkit_cli(
        "run", "--agent", "my_agents:agent", "shout hi", cwd=tmp_path, env={}
    )
    assert code == 0, err
    assert "I said HI" in out
    code, _, err = await hostkit_cli(
        "run", "--agent", "my_agents:nothing", "hi", cwd=tmp_path, env={}
    )
    assert code == 2
    assert "has no attribute 'nothing'" in err


BROKEN_AGENT_MODULES = {
    "raises_at_import": (
        "raise RuntimeError('no database configured' + 'x' * 5000)\n",
        "RuntimeError",
    ),
    "bad_syntax": ("def agent(:\n    pass\n", "SyntaxError"),
    "factory_raises": ("def agent():\n    raise KeyError('model')\n", "KeyError"),
}


@pytest.mark.parametrize("module", sorted(BROKEN_AGENT_MODULES))
@pytest.mark.parametrize("command", ["run", "approve"])
async def test_a_broken_agent_module_is_one_bounded_line_exit_2(
    tmp_path: Path, module: str, command: str
) -> None:
    """Operator code that raises while the agent is found (on import, in a factory) is the
    operator's error: one line naming its type, exit status 2, no traceback, no turn."""
    source, raised = BROKEN_AGENT_MODULES[module]
    await anyio.Path(tmp_path / f"{module}.py").write_text(source)
    args = (
        ("run", "--agent", f"{module}:agent", "hi")
        if command == "run"
        else ("approvals", "approve", "apr_x", "--agent", f"{module}:agent")
    )
    code, _, err = await hostkit_cli(*args, cwd=tmp_path, env={})
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert f"{module}:agent" in lines[0]
    assert raised in lines[0]
    assert len(lines[0]) < 700
    assert await anyio.to_thread.run_sync(count_turns, tmp_path / "hostkit.db") == 0


ASKING_MODULE = '''
import anyio

import hostkit
from hostkit.testing import CallTools, Reply, ScriptedModel


@hostkit.tool("notes.write")
async def write_note(ctx: hostkit.ToolContext, name: str, text: str) -> str:
    """Write a note."""
    await anyio.Path(ctx.workspace / name).write_text(text)
    return f"wrote {name}"


def rule(request):
    if request.messages[-1].role == "tool":
        return Reply("Done: " + request.messages[-1].content)
    return CallTools(("notes_write", {"name": "a.md", "text": "apples"}))


agent = hostkit.Agent(
    "notes",
    model=ScriptedModel([rule], repeat_last=True),
    tools=[write_note],
    policy={"allow": ["*"], "ask": ["notes.write"]},
)
'''


async def test_a_python_agent_paused_headless_is_approved_with_its_agent(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "asking.py").write_text(ASKING_MODULE)
    code, out, err = await hostkit_cli(
        "run", "--agent", "asking:agent", "write it", cwd=tmp_path, env={}
    )
    assert code == 3, err
    approval = next(word for word in (out + err).split() if word.startswith("apr_"))
    # The printed way to answer it names the agent: the continuation needs it.
    hint = next(line for line in (out + err).splitlines() if f"approve {approval}" in line)
    assert hint.endswith("--agent asking:agent")
    assert not (tmp_path / "workspace" / "a.md").exists()
    code, out, err = await hostkit_cli(
        "approvals", "approve", approval, "--agent", "asking:agent", cwd=tmp_path, env={}
    )
    assert code == 0, err
    assert "Done: wrote a.md" in out
    assert await anyio.Path(tmp_path / "workspace" / "a.md").read_text() == "apples"


async def test_a_python_agent_survives_a_configuration_apply(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("first"), Reply("second")])
    agent = hostkit.Agent("helper", model=model)
    async with hostkit.Host.open(config(tmp_path), agents=[agent]) as host:
        assert (await host.turns.run(request(core_id="helper"))).text == "first"
        generation = await host.apply_config(config(tmp_path, agents=("assistant", "other")))
        result = await host.turns.run(request(core_id="helper"))
        assert (result.text, result.generation) == ("second", generation)
        assert sorted(host.config.agents) == ["assistant", "helper", "other"]
        with pytest.raises(hostkit.ConfigError, match="clashes"):
            await host.apply_config(config(tmp_path, agents=("helper",)))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a kernel's loop is asyncio
async def test_a_notebook_talks_to_its_python_agent_and_clicks_its_approval(
    tmp_path: Path, anyio_backend: str
) -> None:
    import hostkit.notebook as hn

    ran: list[str] = []
    model = ScriptedModel([write_call(), Reply("done")])
    agent = hostkit.Agent(
        "writer", model=model, tools=[note_tool(ran)], policy={"ask": ["notes.write"]}
    )
    nb = await hn.start(config(tmp_path), agents=[agent])
    try:
        assert nb.default_agent == "writer"
        view = nb.chat("write a note")
        row = await view.approval()
        assert row is not None
        assert row.effect == "notes.write"
        assert ran == []
        row.approve_once.click()
        result = await view
        assert (result.core_id, result.outcome, ran) == ("writer", "completed", ["a.md"])
    finally:
        await nb.aclose()


def channel_config(tmp_path: Path, agent: str) -> Any:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
            "channels": {"hooks": {"kind": "webhook", "secret_env": "HOOK_S", "agent": agent}},
        },
        base_dir=tmp_path,
    )


async def test_a_channel_may_name_a_python_agent_and_its_inbounds_run_it(tmp_path: Path) -> None:
    """The file names ``calc``, which only the Python code defines: read alone it names
    nothing, and the check waits until the Python agents joined the configuration."""
    model = ScriptedModel([Reply("42, said calc")])
    agent = hostkit.Agent("calc", model=model)
    async with hostkit.Host.open(channel_config(tmp_path, "calc"), agents=[agent]) as host:
        receipt = await host.inbox.accept(
            InboundEnvelope(
                channel_instance_id="hooks",
                platform_event_key="ev-1",
                conversation_key="conv-1",
                principal_key="alice",
                authenticated_by="hmac",
                received_at=1.0e9,
                payload="what is six times seven?",
            )
        )
        assert await host.inbox_worker(idle_poll_s=0.05).drain() == 1
        record = await host.inbox.record(receipt.inbound_id)
        assert record is not None
        assert (record.state, record.result_kind) == ("completed", "turn")
        assert record.turn_id is not None
        state = await host.store.turns.state(await host.operator("ops", reason="t"), record.turn_id)
    assert state.result is not None
    assert (state.result.core_id, state.result.text) == ("calc", "42, said calc")


async def test_a_host_of_python_agents_only_makes_an_inbox_worker(tmp_path: Path) -> None:
    """No ``assistant`` here, and each channel names its agent: the worker's default
    agent is not checked unless given (it refused such a Host once)."""
    config = channel_config(tmp_path, "calc").model_copy(update={"agents": FrozenMap()})
    agent = hostkit.Agent("calc", model=ScriptedModel([Reply("42")]))
    async with hostkit.Host.open(config, agents=[agent]) as host:
        assert "assistant" not in host.config.agents
        assert await host.inbox_worker(idle_poll_s=0.05).drain() == 0
        with pytest.raises(hostkit.InvalidValue, match="no agent named 'assistant'"):
            host.inbox_worker(agent="assistant")


async def test_a_channel_naming_no_agent_is_refused_at_open_with_the_closest_name(
    tmp_path: Path,
) -> None:
    agent = hostkit.Agent("calc", model=ScriptedModel([Reply("x")]))
    with pytest.raises(hostkit.ConfigError) as caught:
        async with hostkit.Host.open(channel_config(tmp_path, "clac"), agents=[agent]):
            pass
    assert caught.value.key == "channels.hooks.agent"
    assert str(caught.value) == (
        "channels.hooks.agent names 'clac', which is not under [agents] or [cores], nor a "
        "Python agent of this Host; did you mean 'calc'?"
    )
