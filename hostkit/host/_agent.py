"""``hostkit.Agent``: an agent written in Python, composed into the same generation as TOML ones.

An Agent is a frozen value. ``Host.open(config, agents=[...])`` turns each
into an agent entry of the configuration (its policy a ``PolicyConfig``, its
model a provider entry) and wraps the capability sources so its tools come
from the Agent, labelled ``python:<module>``. Nothing else changes: the
generation builds its catalog, resolves its policy and runs every call
through the one EffectRuntime with its approvals, exactly as for a
configured agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import inspect
import json
import re
import shlex
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from hostkit._unknown_keys import EXTRA_FORBIDDEN, reported_error, unknown_key
from hostkit.effects import AuthoredTool, SourcedTool, tool
from hostkit.errors import ConfigError, InvalidValue, bounded
from hostkit.freeze import FrozenMap
from hostkit.host._capabilities import (
    ProviderRequest,
    RuntimeCapabilities,
    ToolRequest,
    ToolSource,
)
from hostkit.host._code_places import import_path_places, judge_places, module_places
from hostkit.host._config import (
    AgentConfig,
    HostConfig,
    PolicyConfig,
    ProviderConfig,
    check_channel_agents,
    writable_workspaces,
)
from hostkit.host._defaults import DefaultToolSource
from hostkit.host._grants import policy_problem
from hostkit.host._source_calls import WrappingSource
from hostkit.providers import ModelProvider

__all__ = [
    "Agent",
    "PydanticOutput",
    "check_agent_code",
    "compose_agents",
    "load_agent",
    "with_agents",
]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_SHORTHANDS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
MAX_OUTPUT_RETRIES = 5
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass(frozen=True, slots=True)
class PydanticOutput:
    """The check a turn runs on its final answer: JSON matching ``model``.

    ``retries`` bounds how often a failed check is fed back to the model
    before the turn ends ``failed``.
    """

    model: type[pydantic.BaseModel]
    retries: int = 2

    def check(self, text: str) -> Any:
        """The validated answer as JSON-able data, or ``InvalidValue`` saying what was wrong."""
        stripped = text.strip()
        fenced = _FENCE.match(stripped)
        try:
            value = self.model.model_validate_json(fenced.group(1) if fenced else stripped)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}"
                for e in exc.errors()[:5]
            )
            raise InvalidValue(bounded(problems, 500)) from None
        return value.model_dump(mode="json")

    def schema(self) -> dict[str, Any]:
        return self.model.model_json_schema()


ModelChoice = str | ModelProvider | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent defined in Python: ``hostkit.Agent("helper", model="local", tools=[add])``.

    ``model`` is a provider name under ``[providers]``, a shorthand
    (``"local"``, ``"openai:gpt-4o-mini"``, ``"anthropic:claude-sonnet-4-5"``;
    the key comes from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``), a provider
    table as a dict (``{"kind": "openai", "base_url": ..., "model": ...}``)
    or a ``ModelProvider`` instance. ``tools`` are ``@hostkit.tool``
    functions (a plain async function is wrapped). ``policy`` is the TOML
    policy as a dict (``{"allow": [...], "ask": [...], "deny": [...]}``).
    ``output_type`` is a pydantic model the final answer must match; a
    mismatch is fed back to the model at most ``output_retries`` times.
    """

    name: str
    model: ModelChoice = "local"
    instructions: str = "You are a helpful assistant. Answer briefly."
    tools: tuple[AuthoredTool, ...] = ()
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    output_type: type[pydantic.BaseModel] | None = None
    output_retries: int = 2
    max_steps: int = 8
    memory: bool = False
    # The modules whose code defines the agent (the one that built it, the one
    # ``load_agent`` imported): judged with its tools' files when a Host opens.
    _modules: tuple[str, ...] = field(default=(), init=False, compare=False, repr=False)

    def __init__(
        self,
        name: str,
        *,
        model: ModelChoice = "local",
        instructions: str = "You are a helpful assistant. Answer briefly.",
        tools: Sequence[AuthoredTool | Callable[..., Awaitable[Any]]] = (),
        policy: Mapping[str, Sequence[str]] | PolicyConfig | None = None,
        output_type: type[pydantic.BaseModel] | None = None,
        output_retries: int = 2,
        max_steps: int = 8,
        memory: bool = False,
    ) -> None:
        if not isinstance(name, str):
            raise InvalidValue(
                f"an agent name must be 1-64 letters, digits, - or _, not {type(name).__name__}"
            )
        name = str.__str__(name)  # a plain copy: a subclass's own methods never run later
        if not _NAME.fullmatch(name):
            raise InvalidValue(
                f"agent name {bounded(repr(name), 80)} must be 1-64 letters, digits, - or _"
            )
        if not isinstance(model, str | Mapping | ModelProvider):
            raise InvalidValue(
                f"agent {name}: model must be a provider name, a shorthand such as "
                f"'openai:gpt-4o-mini', a provider dict or a ModelProvider, "
                f"not {type(model).__name__}"
            )
        if not isinstance(instructions, str) or not instructions.strip():
            raise InvalidValue(f"agent {name}: instructions must be non-empty text")
        if output_type is not None and not (
            inspect.isclass(output_type) and issubclass(output_type, pydantic.BaseModel)
        ):
            raise InvalidValue(f"agent {name}: output_type must be a pydantic model class")
        given: object = tools  # typed as a sequence, but a caller may pass anything
        if isinstance(given, str | bytes) or not isinstance(given, Sequence):
            raise InvalidValue(
                f"agent {name}: tools must be a list of tools, not {type(given).__name__}"
            )
        if not isinstance(memory, bool):
            raise InvalidValue(f"agent {name}: memory must be True or False")
        if isinstance(max_steps, bool):
            raise InvalidValue(f"agent {name}: max_steps must be a number of steps")
        if not isinstance(output_retries, int) or not 0 <= output_retries <= MAX_OUTPUT_RETRIES:
            raise InvalidValue(
                f"agent {name}: output_retries must be an integer from 0 to {MAX_OUTPUT_RETRIES}"
            )
        setter = object.__setattr__
        setter(self, "name", name)
        setter(self, "model", model)
        setter(self, "instructions", instructions)
        setter(self, "tools", tuple(_as_tool(name, item) for item in tools))
        setter(self, "policy", _policy(name, policy))
        if isinstance(model, Mapping):
            _provider_entry(name, model)  # refused now, not when a Host opens
        setter(self, "output_type", output_type)
        setter(self, "output_retries", output_retries)
        setter(self, "max_steps", max_steps)
        setter(self, "memory", memory)
        # As enum and namedtuple record their __module__: the caller's module built it.
        caller = sys._getframe(1).f_globals.get("__name__")
        setter(self, "_modules", (caller,) if isinstance(caller, str) else ())
        # Validated now, not at Host open: a bad step count or a rule that can never
        # match (``FILES.*``) is the author's mistake here.
        problem = policy_problem(self._settings("unused"))
        if problem is not None:
            raise ConfigError(problem[1], key=f"agents.{name}.{problem[0]}")

    def _settings(self, provider: str) -> AgentConfig:
        instructions = self.instructions
        if self.output_type is not None:
            schema = json.dumps(self.output_type.model_json_schema(), sort_keys=True)
            instructions += (
                "\n\nYour final answer must be only a JSON object matching this JSON schema, "
                f"with no other text:\n{schema}"
            )
        try:
            return AgentConfig(
                provider=provider,
                instructions=instructions,
                policy=self.policy,
                max_steps=self.max_steps,
                memory=self.memory,
            )
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(part) for part in first["loc"])
            raise ConfigError(first["msg"], key=f"agents.{self.name}.{key}") from None

    @property
    def output(self) -> PydanticOutput | None:
        """The answer check the Host gives this agent's turns (None: free text)."""
        if self.output_type is None:
            return None
        return PydanticOutput(self.output_type, self.output_retries)


def _as_tool(agent: str, item: object) -> AuthoredTool:
    if isinstance(item, AuthoredTool):
        return item
    if callable(item) and inspect.iscoroutinefunction(item):
        return tool(item)
    raise InvalidValue(
        f"agent {agent}: each tool must be a @hostkit.tool or an async function, "
        f"not {type(item).__name__}"
    )


def _policy(agent: str, policy: Mapping[str, Sequence[str]] | PolicyConfig | None) -> PolicyConfig:
    if policy is None:
        return PolicyConfig()
    if isinstance(policy, PolicyConfig):
        return policy
    if not isinstance(policy, Mapping):
        raise InvalidValue(f"agent {agent}: policy must be a dict of allow, ask and deny lists")
    try:
        return PolicyConfig.model_validate(
            {key: [value] if isinstance(value, str) else value for key, value in policy.items()}
        )
    except pydantic.ValidationError as exc:
        first = reported_error(exc)
        key = ".".join(str(part) for part in first["loc"])
        if first["type"] == EXTRA_FORBIDDEN:
            # As TOML says it: the key, and the closest policy key.
            named = unknown_key(PolicyConfig, first["loc"], style="toml")
            where = f"agents.{agent}.policy"
            raise ConfigError(named.replace(" at the top level", ""), key=where) from None
        raise ConfigError(first["msg"], key=f"agents.{agent}.policy.{key}") from None


def _provider_entry(agent: str, model: Mapping[str, Any]) -> ProviderConfig:
    """A model dict as the provider entry it stands for; a bad one says what TOML says of
    the same table (an unknown key with the closest known one, never a value)."""
    try:
        return ProviderConfig.model_validate(dict(model))
    except pydantic.ValidationError as exc:
        first = reported_error(exc)
        key = f"agents.{agent}.model"
        if first["type"] == EXTRA_FORBIDDEN:
            named = unknown_key(ProviderConfig, first["loc"], style="toml")
            raise ConfigError(named.replace(" at the top level", ""), key=key) from None
        where = ".".join(str(part) for part in first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(message, key=f"{key}.{where}" if where else key) from None


def _provider(agent: Agent, config: HostConfig) -> tuple[str, ProviderConfig | None]:
    """The provider name the agent entry names, and a provider entry to add (None: exists)."""
    model = agent.model
    key = f"agents.{agent.name}.model"
    if isinstance(model, ModelProvider):
        # Served by the wrapped provider source; the entry only records what it is.
        return f"python:{agent.name}", _provider_entry(
            agent.name, {"kind": "scripted", "model": model.model}
        )
    if isinstance(model, Mapping):
        return f"python:{agent.name}", _provider_entry(agent.name, model)
    if model in config.providers:
        return model, None
    if model == "local":
        return "python:local", _provider_entry(agent.name, {"kind": "local"})
    kind, _, name = model.partition(":")
    if kind in _SHORTHANDS and name:
        entry = {"kind": kind, "model": name, "api_key_env": _SHORTHANDS[kind]}
        return model, _provider_entry(agent.name, entry)
    choices = [*config.providers, "local", *(f"{kind}:" for kind in _SHORTHANDS)]
    close = difflib.get_close_matches(f"{kind}:" if name else model, choices, n=1)
    meant = close[0] + name if close and close[0].endswith(":") else close[0] if close else None
    hint = f"; did you mean {bounded(meant, 80)!r}?" if meant not in (None, model) else ""
    raise ConfigError(
        f"{bounded(model, 80)!r} is neither a provider under [providers] nor 'local', "
        f"'openai:<model>' or 'anthropic:<model>'{hint}",
        key=key,
    )


def check_agents(agents: Sequence[object]) -> None:
    """Refuse anything but ``hostkit.Agent`` values: before anything is opened or created."""
    for agent in agents:
        if not isinstance(agent, Agent):
            raise InvalidValue(f"agents must be hostkit.Agent values, not {type(agent).__name__}")


# What to do when a Python agent's code (or the directory hostkit runs in) is writable.
_CODE_ADVICE = (
    "keep a Python agent's modules and the directory hostkit runs in outside every "
    "writable workspace: give the agents a workspace of their own, as the default "
    'workspace = "workspace" does'
)


def check_agent_code(config: HostConfig, agents: Sequence[Agent]) -> None:
    """Blocking (stats files): ``ConfigError`` at ``agents.<name>`` when code a Python
    agent runs in the Host's process lies where an agent of ``config`` can write.

    Judged as tool modules are (``_code_places``): the modules that define the
    agent and the files of its tools' functions and hooks, its output type and
    its provider instance, their packages' directories, and the Host's import
    path (``hostkit run --agent`` puts the working directory there). Otherwise
    a model could rewrite the module the next ``--agent module:attribute``
    imports as the operator: the Host does not open with it.
    """
    if not agents:
        return
    writable = writable_workspaces(config)
    if not writable:
        return
    protected = config.state_paths()
    shared = import_path_places()
    for agent in agents:
        judge_places(
            [*_code_places(agent), *shared],
            writable,
            protected,
            key=f"agents.{agent.name}",
            advice=_CODE_ADVICE,
        )


def _code_places(agent: Agent) -> list[tuple[Path, str]]:
    """The files and package directories of the code ``agent`` brings into the Host."""
    names = list(agent._modules)
    code: list[object] = [agent.output_type]
    if isinstance(agent.model, ModelProvider):
        code.append(type(agent.model))
    for item in agent.tools:
        code += [type(item), item.fn, item.prepare, item.preflight, item.preview_diff]
    places: list[tuple[Path, str]] = []
    for value in code:
        if value is None:
            continue
        with contextlib.suppress(ValueError):  # a __wrapped__ cycle: judge what was given
            value = inspect.unwrap(value)  # type: ignore[arg-type]
        module = getattr(value, "__module__", None)
        if isinstance(module, str):
            names.append(module)
        try:
            source = inspect.getsourcefile(value)  # type: ignore[arg-type]
        except (TypeError, OSError):  # built in, or defined where no file is (a cell)
            source = None
        if source:
            places.append((Path(source), "Python agent code file"))
    for name in dict.fromkeys(names):
        parts = name.split(".")
        for depth in range(len(parts), 0, -1):
            what = "Python agent module" if depth == len(parts) else "Python agent package"
            loaded = sys.modules.get(".".join(parts[:depth]))
            places += [(where, what) for where in module_places(loaded)]
    return places


def compose_agents(
    config: HostConfig, agents: Sequence[Agent], *, serves_channels: bool = True
) -> tuple[HostConfig, dict[str, ModelProvider], tuple[str, ...]]:
    """``config`` with each Agent as an agent entry, the provider instances by name, and
    the warnings of a Host that serves no channel (``check_channel_agents``).

    A name already configured, or given twice, is a ``ConfigError``.
    """
    providers = dict(config.providers)
    entries = dict(config.agents)
    instances: dict[str, ModelProvider] = {}
    check_agents(agents)
    for agent in agents:
        if agent.name in entries:
            raise ConfigError(
                f"the Python agent {agent.name!r} clashes with an agent of that name "
                "(rename one of them)",
                key=f"agents.{agent.name}",
            )
        name, entry = _provider(agent, config)
        if entry is not None:
            providers[name] = entry
        if isinstance(agent.model, ModelProvider):
            instances[name] = agent.model
        entries[agent.name] = agent._settings(name)
    merged = config.model_copy(
        update={"providers": FrozenMap(providers), "agents": FrozenMap(entries)}
    )
    return merged, instances, check_channel_agents(merged, required=serves_channels)


def with_agents(
    capabilities: RuntimeCapabilities,
    config: HostConfig,
    agents: Sequence[Agent],
    instances: Mapping[str, ModelProvider],
) -> RuntimeCapabilities:
    """The sources, with each Agent's tools and provider instance served by name."""
    if not agents:
        return capabilities
    return dataclasses.replace(
        capabilities,
        providers=_AgentProviders(capabilities.providers, instances),
        tools=_AgentTools(capabilities.tools, DefaultToolSource(config), agents),
    )


class _AgentProviders(WrappingSource):
    """Serves an Agent's own ModelProvider instance; every other name from the inner source."""

    inner: Any

    def __init__(self, inner: Any, instances: Mapping[str, ModelProvider]) -> None:
        self.inner = inner
        self._instances = dict(instances)

    @property
    def estimators(self) -> Sequence[Any]:
        return tuple(getattr(self.inner, "estimators", ()))

    async def model_provider(self, request: ProviderRequest) -> ModelProvider:
        name = request.provider or request.config.agents[request.agent].provider
        instance = self._instances.get(name)
        if instance is not None:
            return instance
        # Named explicitly: an inner source built for the file's configuration would
        # not know the Python agent.
        return await self.inner.model_provider(  # type: ignore[no-any-return]
            dataclasses.replace(request, provider=name)
        )

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


class _AgentTools(WrappingSource):
    """An Agent's tools (``python:<module>``) and memory; other agents: the inner source."""

    inner: ToolSource

    def __init__(self, inner: ToolSource, defaults: ToolSource, agents: Sequence[Agent]) -> None:
        self.inner = inner
        self._defaults = defaults
        self._agents = {agent.name: agent for agent in agents}

    async def tools(self, request: ToolRequest) -> Sequence[AuthoredTool | SourcedTool]:
        agent = self._agents.get(request.agent)
        if agent is None:
            return await self.inner.tools(request)
        own = [
            SourcedTool(t, f"python:{getattr(t.fn, '__module__', None) or '?'}")
            for t in agent.tools
        ]
        return [*await self._defaults.tools(request), *own]

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


def _raised(exc: Exception) -> str:
    """An exception from operator code as one bounded line: its type, then its message."""
    return bounded(f"{type(exc).__name__}: {' '.join(str(exc).split())}", 300)


def _file_reference(module_name: str, attribute: str) -> str | None:
    """Why a file path where a module name belongs (``janitor.py``, ``../a/janitor``) is
    refused, with the reference that works and where to run it; None for a module name."""
    if not (module_name.endswith(".py") or "/" in module_name or module_name.startswith(".")):
        return None
    path = Path(module_name)
    module = (path.stem if path.suffix == ".py" else path.name).lstrip(".") or "MODULE"
    folder = str(path.parent)
    where = "" if folder == "." else f", run in {folder} (cd {shlex.quote(folder)} first)"
    return f"--agent takes module:attribute, not a file: --agent {module}:{attribute}{where}"


def load_agent(spec: str) -> Agent:
    """The ``Agent`` a ``module:attribute`` reference names (``hostkit run --agent``).

    Imports the module (operator-trusted code, like ``tool_modules``; blocking);
    the attribute may be an Agent or a function of no arguments returning one.
    Anything else is a ``ConfigError`` naming the reference.
    """
    module_name, _, attribute = spec.partition(":")
    shown = bounded(spec, 120)
    if not module_name or not attribute:
        raise ConfigError(f"{shown!r} is not a module:attribute reference to a hostkit.Agent")
    file_reference = _file_reference(module_name, attribute)
    if file_reference is not None:
        raise ConfigError(bounded(file_reference, 400))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # operator code: whatever its import raises is its error
        raise ConfigError(
            f"cannot import {bounded(module_name, 120)!r} for {shown!r}: {_raised(exc)}"
        ) from None
    value: Any = module
    for part in attribute.split("."):
        value = getattr(value, part, None)
        if value is None:
            raise ConfigError(
                bounded(
                    f"{bounded(module_name, 120)!r} has no attribute {bounded(attribute, 120)!r}"
                    f"{_agents_hint(module, attribute)}",
                    400,
                )
            )
    what = f"{shown!r} is not a hostkit.Agent"
    if callable(value) and not isinstance(value, Agent):
        try:
            value = value()
        except Exception as exc:  # the factory is operator code too
            raise ConfigError(
                f"{shown!r} raised while building the agent: {_raised(exc)}"
            ) from None
        what = f"calling {shown!r} returned no hostkit.Agent"
    if not isinstance(value, Agent):
        raise ConfigError(
            bounded(
                f"{what} (its type is {type(value).__name__}){_agents_hint(module, attribute)}",
                400,
            )
        )
    if module.__name__ not in value._modules:
        # The module the next ``--agent`` imports again is judged too (a factory's
        # Agent may be built elsewhere).
        object.__setattr__(value, "_modules", (*value._modules, module.__name__))
    return value


def _agents_hint(module: Any, attribute: str) -> str:
    """The Agents ``module`` defines at its top level, the one closest to ``attribute`` first."""
    names = sorted(name for name, item in vars(module).items() if isinstance(item, Agent))
    if not names:
        return "; it defines no hostkit.Agent at its top level"
    close = difflib.get_close_matches(attribute, names, n=1)
    meant = f"; did you mean {close[0]!r}?" if close else ""
    return f"{meant} (Agents in it: {', '.join(names[:12])})"
