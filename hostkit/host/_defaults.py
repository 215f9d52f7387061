"""DefaultCapabilities: the sources a Host builds from its configuration.

This is the one place that names concrete adapters and the builtin tool
families (runtime-composition step 7): the seams below only know the protocols.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import anyio
from anyio.abc import AsyncResource

from hostkit._extras import missing_dependency, require_extra
from hostkit._lazy import load_off_loop
from hostkit.adapters import NO_API_KEY, unset_default_key
from hostkit.adapters.scripted import CallTools, Reply, ScriptedModel, ScriptStep
from hostkit.builtins.files import WorkspaceScope, workspace_tools
from hostkit.builtins.mcp import McpClientConnector
from hostkit.builtins.process import ResourceLimits, SandboxPolicy
from hostkit.builtins.web import UrlPolicy
from hostkit.channels import short_secret
from hostkit.context import DEFAULT_BOOTSTRAP_FILES, Estimator
from hostkit.delivery import OutboundChannel
from hostkit.effects import AuthoredTool, EffectPolicy, McpServer, SourcedTool, provider_name
from hostkit.errors import ConfigError
from hostkit.host._capabilities import (
    ProviderRequest,
    RuntimeCapabilities,
    ToolRequest,
)
from hostkit.host._config import (
    HostConfig,
    ProviderConfig,
    ScriptStepConfig,
    writable_workspaces,
)
from hostkit.host._config_channels import ChannelConfig
from hostkit.host._grants import agent_grants
from hostkit.host._memory import StoreMemorySource, memory_tools
from hostkit.host._tool_modules import DISCOVERY_TIMEOUT_S, ToolModules
from hostkit.providers import ModelProvider, http_url_problem
from hostkit.store import RuntimeStore
from hostkit.turns import Observer
from hostkit.types import AttachmentSupport, ModelRequest

if TYPE_CHECKING:
    from hostkit.adapters.anthropic_messages import AnthropicProvider
    from hostkit.adapters.openai_chat import OpenAIChatProvider
    from hostkit.delivery import SharedClient

__all__ = [
    "ConfiguredChannels",
    "DefaultCapabilities",
    "DefaultMcpSource",
    "DefaultProviderSource",
    "DefaultToolSource",
    "NoChannels",
    "channel_secret",
    "check_changed_provider_keys",
    "check_provider_extras",
    "load_channel_adapters",
    "used_providers",
]


_DEFAULT_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5"}
# The extra each provider kind's adapter needs (hostkit._extras); scripted needs none.
_PROVIDER_EXTRAS = {"openai": "openai", "anthropic": "anthropic", "local": "local"}
_SDK_ADAPTERS = {
    "openai": ("hostkit.adapters.openai_chat", "OpenAIChatProvider"),
    "anthropic": ("hostkit.adapters.anthropic_messages", "AnthropicProvider"),
}


async def _sdk_adapter(kind: str) -> type[OpenAIChatProvider | AnthropicProvider]:
    """The adapter class of one SDK provider kind, imported off the event loop.

    Only the kind that is configured is imported: a vendor SDK takes about a
    second to import, which would otherwise stall every turn on the loop.
    """
    module, name = _SDK_ADAPTERS[kind]
    await load_off_loop(module)
    adapter: type[OpenAIChatProvider | AnthropicProvider] = getattr(sys.modules[module], name)
    return adapter


def _provider_feature(name: str, config: ProviderConfig) -> str:
    return f"provider {name!r} (kind {config.kind})"


def used_providers(config: HostConfig) -> tuple[str, ...]:
    """The providers some agent runs on (its ``provider`` or ``summarizer``), sorted.

    Turns build only these (lazily, at the first turn that needs one): a
    provider declared for later, or for agents that are not configured, is
    never built, so its package is never needed.
    """
    names = {
        name
        for agent in config.agents.values()
        for name in (agent.provider, agent.summarizer)
        if name is not None and name in config.providers
    }
    return tuple(sorted(names))


def _load_channel_adapters() -> None:
    """Import the outbound adapters, and httpx with them (hostkit.delivery loads lazily)."""
    from hostkit.delivery import SharedClient, SlackChannel, TelegramChannel, WebhookChannel

    del SharedClient, SlackChannel, TelegramChannel, WebhookChannel


async def load_channel_adapters(config: HostConfig) -> None:
    """Load the outbound adapters off the event loop when a channel of ``config`` delivers.

    ``ConfiguredChannels`` builds them on the loop, and their first import reads
    files (httpx's and its dependencies'): at a notebook's ``Host.open`` or a
    reload that adds the first delivering channel, that would stall the loop.
    """
    if any(settings.delivers for settings in config.channels.values()):
        await anyio.to_thread.run_sync(_load_channel_adapters)


def check_provider_extras(config: HostConfig) -> None:
    """Every used provider's extra is installed, else ``MissingDependency``.

    The Host runs it (in a worker thread: ``find_spec`` reads the file
    system) before it builds the default sources of a configuration, at open
    and at every apply: a provider whose package is missing refuses the
    configuration with one line, instead of each of its agent's turns. Only
    the providers agents use (``used_providers``): a declared provider no
    agent names is not refused.
    """
    for name in used_providers(config):
        _require_provider_extra(name, config.providers[name])


def _require_provider_extra(name: str, config: ProviderConfig) -> None:
    """``MissingDependency`` unless the package of provider ``name``'s kind is installed."""
    extra = _PROVIDER_EXTRAS.get(config.kind)
    if extra is not None:
        require_extra(extra, feature=_provider_feature(name, config), key=f"providers.{name}.kind")


def provider_key(name: str, config: ProviderConfig) -> str | None:
    """Provider ``name``'s API key from its ``api_key_env`` (None: none is named or set);
    a ``ConfigError`` naming the variable when it is unset and the provider needs it."""
    if not config.api_key_env:
        # The SDK's own variable then (OPENAI_API_KEY), by the rule its adapter applies.
        missing = unset_default_key(config.kind, base_url=config.base_url)
        if missing is not None:
            where = "api_key_env" if ":" in name else f"providers.{name}.api_key_env"
            raise ConfigError(NO_API_KEY.format(variable=missing), key=where)
        return None
    key = os.environ.get(config.api_key_env)
    if not key and _needs_key(config):
        if ":" in name:
            # A Python agent's model string ("openai:gpt-4o"): no [providers] table.
            raise ConfigError(NO_API_KEY.format(variable=config.api_key_env), key="api_key_env")
        raise ConfigError(
            f"{config.api_key_env} is not set: provider {name!r} reads its API key from it",
            key=f"providers.{name}.api_key_env",
        )
    return key


def check_changed_provider_keys(config: HostConfig, previous: HostConfig) -> None:
    """Every provider an agent of ``config`` uses that is new to the agents, or whose
    settings differ from ``previous``'s, has its API key: else the ``ConfigError`` its
    build would raise at every turn. A reload is refused for a provider it brings in,
    never for one whose key was already missing (opening is lenient: a listing needs
    none), which would block every unrelated edit."""
    before = set(used_providers(previous))
    for name in used_providers(config):
        settings = config.providers[name]
        if name not in before or previous.providers[name] != settings:
            provider_key(name, settings)


def _scripted_step(config: ScriptStepConfig) -> ScriptStep:
    """A configured script step; one with ``delay_s`` answers only after that long."""
    step: Reply | CallTools = (
        Reply(config.reply, config.finish_reason)
        if config.reply is not None
        else CallTools((provider_name(config.tool or ""), config.arguments))
    )
    if not config.delay_s:
        return step

    async def slow(_request: ModelRequest) -> ScriptStep:
        await anyio.sleep(config.delay_s)
        return step

    return slow


def _needs_key(config: ProviderConfig) -> bool:
    """Whether an unset ``api_key_env`` is a configuration error.

    A hosted ``base_url`` written next to ``api_key_env`` takes that key:
    missing, the turn would only fail on the server's 401. A server on this
    machine or the local network (loopback, a private address, ``localhost``),
    one named by ``OPENAI_BASE_URL``, or an Anthropic bearer
    ``ANTHROPIC_AUTH_TOKEN`` may go without: a key that is set is still sent.
    """
    if config.kind not in ("openai", "anthropic"):
        return False
    if config.base_url:
        return not _is_local(config.base_url)
    if config.kind == "openai":
        return not os.environ.get("OPENAI_BASE_URL")
    return not os.environ.get("ANTHROPIC_AUTH_TOKEN")


def _is_local(url: str) -> bool:
    """Whether ``url``'s host is this machine or a private network (a keyless server's place).

    A URL no client could use is neither (a ``ProviderConfig`` refuses one at parse time).
    """
    if http_url_problem(url) is not None:
        return False
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


class DefaultProviderSource(AsyncResource):
    """Builds and caches one provider per configured provider name for its generation.

    ``estimators`` lists the exact token estimators of the providers built so
    far (the embedded model's GGUF tokenizer); the Host registers them for
    the ContextManager.
    """

    def __init__(self, config: HostConfig) -> None:
        self._config = config
        self.estimators: list[Estimator] = []
        self._cache: dict[str, ModelProvider] = {}
        self._resources = contextlib.AsyncExitStack()
        # One lock per provider name: a slow build (a local model starting) never
        # holds up agents that use another provider.
        self._locks: dict[str, anyio.Lock] = {}

    async def model_provider(self, request: ProviderRequest) -> ModelProvider:
        name = request.provider or request.config.agents[request.agent].provider
        async with self._locks.setdefault(name, anyio.Lock()):
            provider = self._cache.get(name)
            if provider is None:
                provider = self._cache[name] = await self._build(name)
            return provider

    async def _build(self, name: str) -> ModelProvider:
        config = self._config.providers.get(name)
        if config is None:
            raise ConfigError(f"no provider named {name!r}", key=f"providers.{name}")
        # Checked before any request (and before the turn is admitted): one line
        # naming the variable, not a failed turn with the SDK's error.
        key = provider_key(name, config)
        # A Host opened without the check (an operator's listing, an embedder's
        # from_config) refuses here, at the first turn that needs the provider, with the
        # same one line rather than the adapter's ImportError.
        await anyio.to_thread.run_sync(_require_provider_extra, name, config)
        if config.kind == "scripted":
            # Scripts name effects as configured (``notes.read``); the model sees provider names.
            steps = [_scripted_step(step) for step in config.script]
            return ScriptedModel(
                steps,
                name=name,
                model=config.model or "scripted-1",
                limits=config.limits(),
                attachments=AttachmentSupport(config.attachments or ()),
            )
        if config.kind in ("openai", "anthropic"):
            try:
                sdk_provider = await _sdk_adapter(config.kind)
            except ImportError as exc:
                # Sources built without the Host's check (an embedder's from_config), or
                # a package that is there but does not import: still one line, the fix.
                raise missing_dependency(
                    config.kind,
                    exc,
                    feature=_provider_feature(name, config),
                    key=f"providers.{name}.kind",
                ) from exc
            # Both SDK adapters are async context managers: the exit stack closes them.
            return await self._resources.enter_async_context(
                sdk_provider(
                    model=config.model or _DEFAULT_MODELS[config.kind],
                    base_url=config.base_url,
                    api_key=key,
                    limits=config.limits(),
                    timeout_s=config.timeout_s,
                    name=name,
                    attachments=None
                    if config.attachments is None
                    else AttachmentSupport(config.attachments),
                )
            )
        from hostkit.adapters.local_llama import LocalModel

        local = await self._resources.enter_async_context(
            LocalModel.start(
                context_window=config.context_window or 2048,
                model_path=None
                if config.model_path is None
                else self._config.resolve(config.model_path),
            )
        )
        # The embedded model's exact tokenizer, for the ContextManager's budgets.
        self.estimators.append(await local.estimator())
        return await self._resources.enter_async_context(
            local.provider(
                timeout_s=config.timeout_s, max_output_tokens=config.max_output_tokens, name=name
            )
        )

    async def aclose(self) -> None:
        self._cache.clear()
        await self._resources.aclose()


_TERMINAL = frozenset({"terminal.run", "terminal.status", "terminal.stop"})


class DefaultToolSource:
    """Memory tools, the agent's opted-in builtins, and the authored tools of its ``tool_modules``.

    Tool modules are operator-trusted Python named in the configuration. They
    are not imported here: a child process discovers their tools (in the
    agent's sandbox when it can, within ``discovery_timeout_s``), and the Host
    imports a module only when the runtime invokes one of its tools, after the
    capability and approval checks (``_tool_modules``). Each tool carries its
    real source: ``builtin:memory``, ``builtin:files``, ``builtin:web``,
    ``builtin:terminal`` or ``module:<module name>``. Terminal builtins use the
    Host's process resources (supervisor and run registries outlive a
    generation).
    """

    def __init__(
        self, config: HostConfig, *, discovery_timeout_s: float = DISCOVERY_TIMEOUT_S
    ) -> None:
        self._config = config
        self._modules = ToolModules(timeout_s=discovery_timeout_s)

    async def tools(self, request: ToolRequest) -> Sequence[SourcedTool]:
        # The generation's configuration: it holds the agents composed from Agent Cores.
        config = request.config
        agent = config.agents[request.agent]
        tools: list[SourcedTool] = []

        def add(source: str, offered: Sequence[AuthoredTool]) -> None:
            tools.extend(SourcedTool(tool, source) for tool in offered)

        if agent.memory and request.memory is not None:
            add("builtin:memory", memory_tools(request.memory))
        if agent.builtins:
            scope = WorkspaceScope(
                request.workspace,
                protected=request.config.state_paths(),
                instructions=DEFAULT_BOOTSTRAP_FILES,
                min_free_bytes=config.host.artifact_reserve_mb << 20,
            )
            add("builtin:files", [t for t in workspace_tools(scope) if t.name in agent.builtins])
        if "web.extract" in agent.builtins:
            # Fetching (httpx, httpcore) loads only for an agent that fetches, off the loop.
            await load_off_loop("hostkit.builtins.web._web")
            from hostkit.builtins.web import web_tools

            add(
                "builtin:web",
                web_tools(UrlPolicy(allow_private=frozenset(agent.url_allow_private))),
            )
        wanted = _TERMINAL.intersection(agent.builtins)
        if wanted:
            if request.processes is None:
                raise ConfigError(
                    "terminal builtins need the Host's process supervisor",
                    key=f"agents.{request.agent}.builtins",
                )
            runs = await request.processes.terminal_runs(request.workspace)
            policy = sandbox_policy(config, request.agent, request.policy)
            add("builtin:terminal", [t for t in runs.tools(sandbox=policy) if t.name in wanted])
        for module_name in agent.tool_modules:
            found = await self._modules.tools(
                module_name,
                agent=request.agent,
                sandbox=sandbox_policy(config, request.agent, request.policy),
                search=[config.resolve(entry) for entry in agent.tool_path],
                writable=writable_workspaces(config),
                protected=config.state_paths(),
            )
            add(f"module:{module_name}", found)
        return tools


class DefaultMcpSource:
    """An agent's ``[agents.<agent>.mcp.<server>]`` declarations, each with the SDK connector.

    The connector is bound to the agent's sandbox (mode, limits, Host state to
    hide; network only where a declaration grants it), its workspace and its
    URL policy (``url_allow_private``), so a stdio child sees what the
    agent's ``terminal.run`` would and an HTTP server is reached as
    ``web.extract`` would reach it.
    """

    def __init__(self, config: HostConfig) -> None:
        self._config = config

    async def mcp_servers(self, request: ToolRequest) -> Sequence[McpServer]:
        # The generation's configuration: it holds the agents composed from Agent Cores.
        agent = request.config.agents[request.agent]
        if not agent.mcp:
            return ()
        connector = McpClientConnector(
            workspace=request.workspace,
            sandbox=sandbox_policy(request.config, request.agent, request.policy),
            url_policy=UrlPolicy(allow_private=frozenset(agent.url_allow_private)),
            hidden=request.config.state_paths(),
        )
        return tuple(
            McpServer(settings.declaration(name), connector)
            for name, settings in sorted(agent.mcp.items())
        )


def sandbox_policy(
    config: HostConfig, agent: str, policy: EffectPolicy | None = None
) -> SandboxPolicy:
    """How ``agent``'s processes are isolated: its ``sandbox`` mode, the ``terminal.network``
    grant, ``[host.limits]``, and the Host's own state to hide from them.

    ``policy``: the one the request carries (the generation resolved it once, before any
    source ran), so the grant is the runtime's decision, not a source's reading of it.
    """
    settings = config.agents[agent]
    limits = config.host.limits
    return SandboxPolicy(
        mode=settings.sandbox,
        network=agent_grants(settings, policy=policy).network,
        limits=ResourceLimits(**limits.model_dump()),
        hidden=config.state_paths(),
        secret_programs={name: tuple(secret.programs) for name, secret in config.secrets.items()},
    )


class NoChannels:
    """No outbound channels: every delivery fails closed (``no_channel``)."""

    def channel(self, alias: str) -> OutboundChannel | None:
        return None


class ConfiguredChannels(AsyncResource):
    """One outbound adapter per ``[channels.<id>]`` that has an outbound side.

    Slack and Telegram channels always (their ``token_env``); a webhook
    channel when it has a ``deliver_url`` (signed with its ``secret_env``).
    Secrets are read from ``env`` here, at configuration time: a missing
    variable is a ``ConfigError`` naming it, before anything is served. With
    ``require=False`` (a Host for commands that run no turn and send nothing:
    a listing, an approval list) such a channel is left out instead, so one
    unset secret does not lock the operator out of the database. The adapters
    share one HTTP client (made on first send), closed by ``aclose()`` with
    the generation.
    """

    def __init__(self, config: HostConfig, env: Mapping[str, str], *, require: bool = True):
        self._client: SharedClient | None = None
        self._channels: dict[str, OutboundChannel] = {}
        for channel_id, settings in config.channels.items():
            try:
                built = self._build(channel_id, settings, env)
            except ConfigError:
                if require:
                    raise
                continue
            if built is not None:
                self._channels[channel_id] = built

    def _build(
        self, channel_id: str, settings: ChannelConfig, env: Mapping[str, str]
    ) -> OutboundChannel | None:
        if not settings.delivers:
            return None
        # Loaded off the event loop by load_channel_adapters first (the Host calls it).
        from hostkit.delivery import SharedClient, SlackChannel, TelegramChannel, WebhookChannel

        if self._client is None:
            self._client = SharedClient()
        origin = settings.api_origin
        if settings.kind == "webhook":
            assert settings.deliver_url is not None
            secret = channel_secret(env, settings.secret_env, f"channels.{channel_id}.secret_env")
            return WebhookChannel(settings.deliver_url, secret, self._client)
        token = channel_secret(env, settings.token_env, f"channels.{channel_id}.token_env")
        assert origin is not None
        if settings.kind == "slack":
            return SlackChannel(origin, token, self._client)
        return TelegramChannel(origin, token, self._client)

    @property
    def aliases(self) -> tuple[str, ...]:
        """The channel ids with an outbound adapter."""
        return tuple(self._channels)

    def channel(self, alias: str) -> OutboundChannel | None:
        return self._channels.get(alias)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def channel_secret(env: Mapping[str, str], name: str | None, key: str) -> str:
    """The value of the environment variable ``name``; a ConfigError naming it if unset.

    A signing secret (``secret_env``: the webhook HMAC key, Telegram's
    ``secret_token``) too short to resist guessing is refused too;
    platform-issued tokens (``token_env``) are as long as their platform
    makes them.
    """
    if name is None:
        raise ConfigError("is required to send through this channel", key=key)
    value = env.get(name)
    if not value:
        raise ConfigError(f"{name} is not set: the channel reads its secret from it", key=key)
    if key.endswith(".secret_env") and (problem := short_secret(value)) is not None:
        raise ConfigError(f"{name} {problem}", key=key)
    return value


class DefaultCapabilities:
    """``DefaultCapabilities.from_config(config, store=...)``: the sources a config implies."""

    @staticmethod
    def from_config(
        config: HostConfig,
        *,
        store: RuntimeStore,
        observer: Observer | None = None,
        env: Mapping[str, str] | None = None,
        require_channels: bool = True,
    ) -> RuntimeCapabilities:
        """``env`` (default: the process environment) holds the channels' secrets;
        ``require_channels=False`` leaves out a channel whose secret is unset.

        The Host calls ``check_provider_extras(config)`` first (off the event
        loop); without it, a provider whose package is missing is refused when
        its first turn builds it, with the same ``MissingDependency`` line.
        """
        environ = os.environ if env is None else env
        channels = ConfiguredChannels(config, environ, require=require_channels)
        return RuntimeCapabilities(
            providers=DefaultProviderSource(config),
            memory=StoreMemorySource(store),
            tools=DefaultToolSource(config),
            channels=channels,
            observer=observer,
            mcp=DefaultMcpSource(config),
        )
