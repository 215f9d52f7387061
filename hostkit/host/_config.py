"""hostkit.toml: the Host configuration, validated with pydantic into typed errors.

Every validation problem becomes a ``ConfigError`` naming the offending key
(``agents.assistant.provider``), never a pydantic traceback. A file that
cannot be a configuration (not a regular file, too large, not UTF-8, nested
past what the parser can take) is refused with a ``ConfigError`` naming it,
before the parser ever waits on it.
"""

from __future__ import annotations

import difflib
import os
import shlex
import stat
import tomllib
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from hostkit._frozen_fields import FrozenList, FrozenTable
from hostkit._unknown_keys import EXTRA_FORBIDDEN, reported_error, unknown_key
from hostkit.adapters.local_llama import MAX_CONTEXT_WINDOW, MIN_CONTEXT_WINDOW
from hostkit.builtins.web import UrlPolicy
from hostkit.effects import ENV_NAME_PATTERN, MAX_MCP_SERVERS, McpServerConfig, McpServerName
from hostkit.errors import ConfigError, InvalidValue, bounded
from hostkit.freeze import FrozenMap
from hostkit.host._config_channels import MAX_CHANNELS, ChannelConfig, ServeSection
from hostkit.host._grants import Builtin, policy_problem
from hostkit.host._tool_modules import MODULE_NAME
from hostkit.inbox import RESERVED_INBOUND_CHANNELS
from hostkit.providers import MAX_URL_CHARS, http_url_problem
from hostkit.store import carries_password, redact_url
from hostkit.types import (
    MAX_MODEL_ID_CHARS,
    ModelLimits,
    argument_problem,
    is_channel_id,
    is_core_id,
    is_text,
)

__all__ = [
    "DEFAULT_CORE_REF",
    "MAX_AGENT_NAME_CHARS",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_PATH_CHARS",
    "AgentConfig",
    "ChannelConfig",
    "CoreConfig",
    "HostConfig",
    "HostSection",
    "McpServerConfig",
    "PolicyConfig",
    "ProcessLimits",
    "ProviderConfig",
    "Sandbox",
    "ScriptStepConfig",
    "SecretConfig",
    "ServeSection",
    "StoreSection",
    "TelemetryConfig",
    "check_channel_agents",
    "default_config",
    "load_config",
    "parse_config",
    "state_overlaps",
    "unlisted_secrets",
    "writable_workspaces",
]

# hostkit.toml is written by hand: a megabyte is far past any real one.
MAX_CONFIG_BYTES = 1024 * 1024
# Terminal output files are deleted this long after their last write ([host]
# artifact_retention_s), never sooner than the minimum: a run ends well within it.
ARTIFACT_RETENTION_S = 7 * 86_400.0
MIN_ARTIFACT_RETENTION_S = 3_600.0
# Deeper documents pass the TOML parser yet fail later (pydantic serialises 256 levels).
MAX_CONFIG_DEPTH = 64
_SHOWN_PATH_CHARS = 300
# A path the OS could take (Linux's PATH_MAX); longer is a mistake, not a file.
MAX_PATH_CHARS = 4096
# An agent's name is carried by a turn's core_id (at most 200), a delegated agent's scope
# (at most 128) and its default conversations ("default/<agent>", "terminal/<agent>": a
# conversation key is at most 200): it must fit all of them.
MAX_AGENT_NAME_CHARS = 128
# Characters no name shown in a log line or prompt may hold: controls (a newline forges a
# line), format characters (U+202E reverses what follows), surrogates, line separators.
_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _path_text(value: str) -> str:
    # No OS takes a NUL in a path: without this check the first open or mkdir raises a bare
    # ValueError, at open or in the middle of a reload.
    if "\0" in value:
        raise ValueError("holds a NUL character, which no path can")
    return value


# Every path in the configuration: 1 to MAX_PATH_CHARS characters, no NUL.
ConfigPath = Annotated[
    str, Field(min_length=1, max_length=MAX_PATH_CHARS), AfterValidator(_path_text)
]


class _Strict(BaseModel):
    # No NaN or infinity: "timeout_s = inf" would be no timeout, and NaN passes every bound.
    # Frozen all the way down: every container field is a FrozenList or FrozenTable, so
    # whoever holds a configuration (a capability source, an embedder) cannot edit it.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # freeze() keeps a configuration as it is (hostkit.freeze.DEEPLY_FROZEN).
    __hostkit_deeply_frozen__: ClassVar[bool] = True


class ScriptStepConfig(_Strict):
    """One step of a scripted provider: a reply, or a tool call with arguments.

    ``finish_reason = "length"`` plays a reply cut at the output limit;
    ``delay_s`` makes the step take that long (a slow model, for tests of
    what happens to a turn in flight: a crash, a shutdown).
    """

    reply: str | None = None
    tool: str | None = None
    arguments: FrozenTable[str, Any] = Field(default_factory=FrozenMap)
    finish_reason: Literal["stop", "length"] = "stop"
    delay_s: float = Field(default=0.0, ge=0, le=3_600)

    # The arguments become a tool call a turn freezes, stores and shows as JSON: a TOML
    # date or time there failed each turn that reached the step as an internal error.
    # Checked as written, before they are frozen (a date is no value freeze takes); what
    # is not a table at all is told so by the table's own check.
    @pydantic.field_validator("arguments", mode="before")
    @classmethod
    def _json_arguments(cls, arguments: object) -> object:
        problem = argument_problem(arguments) if isinstance(arguments, Mapping) else None
        if problem is not None:
            raise ValueError(f"tool-call arguments {problem}")
        return arguments

    @pydantic.model_validator(mode="after")
    def _one_kind(self) -> ScriptStepConfig:
        if (self.reply is None) == (self.tool is None):
            raise ValueError("a script step has exactly one of 'reply' or 'tool'")
        return self


MediaType = Literal[
    "image/png", "image/jpeg", "image/gif", "image/webp", "text/plain", "application/pdf"
]


class ProviderConfig(_Strict):
    """A model provider. ``kind`` picks the adapter; limits override its defaults.

    ``attachments`` lists the media types the model accepts; unset, the
    adapter's default (OpenAI and Anthropic: images, PDF and text; an
    OpenAI-compatible ``base_url``, the local model and a script: none).
    """

    kind: Literal["openai", "anthropic", "local", "scripted"]
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    timeout_s: float = Field(default=60.0, gt=0, le=86_400)
    script: FrozenList[ScriptStepConfig] = ()
    attachments: FrozenList[MediaType] | None = None
    # kind = "local" only: a GGUF file to serve instead of the embedded SmolLM2 (relative to
    # the configuration's folder); unset, the cached or fetched default (docs/providers.md).
    model_path: ConfigPath | None = None

    # Everything the provider's construction checks is checked here, when the file is read:
    # a live edit the adapter would refuse must reject the reload, not be applied and then
    # refuse every turn of the agents on this provider.
    @pydantic.field_validator("model")
    @classmethod
    def _model_id(cls, model: str | None) -> str | None:
        # "" falls back to the kind's default model, as unset does.
        if model and not is_text(model, limit=MAX_MODEL_ID_CHARS):
            raise ValueError(f"must be 1 to {MAX_MODEL_ID_CHARS} characters of text")
        return model

    @pydantic.field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        return _http_url(value)

    @pydantic.field_validator("context_window")
    @classmethod
    def _local_window(cls, value: int | None, info: pydantic.ValidationInfo) -> int | None:
        # The embedded server's own bounds (its check_options), not only ModelLimits'.
        low, high = MIN_CONTEXT_WINDOW, MAX_CONTEXT_WINDOW
        if info.data.get("kind") == "local" and value is not None and not low <= value <= high:
            raise ValueError(f"the local model's window is {low} to {high} tokens")
        return value

    @pydantic.model_validator(mode="after")
    def _local_reads_text(self) -> ProviderConfig:
        if self.kind == "local" and self.attachments:
            raise ValueError("the local model reads text only: it takes no attachments")
        if self.kind != "local" and self.model_path is not None:
            raise ValueError('model_path is for kind = "local" only')
        return self

    @pydantic.model_validator(mode="after")
    def _limits_fit(self) -> ProviderConfig:
        if self.kind == "local":  # its output cap is clamped below its window, never refused
            return self
        try:
            self.limits()
        except InvalidValue:
            output = self.max_output_tokens or f"{_FALLBACK_LIMITS.max_output_tokens}, the default"
            window = self.context_window or f"{_FALLBACK_LIMITS.context_window}, the default"
            raise ValueError(
                f"max_output_tokens ({output}) must be smaller than context_window ({window})"
            ) from None
        return self

    def limits(self) -> ModelLimits | None:
        """The limits the provider is built with; None keeps its adapter's own defaults.

        Setting one of ``context_window`` and ``max_output_tokens`` takes the
        other from ``_FALLBACK_LIMITS``. Raises ``InvalidValue`` when the two do
        not fit (the output cap must be below the window): the model
        validator refuses such a table, so a parsed configuration never does.
        """
        if self.context_window is None and self.max_output_tokens is None:
            return None
        return ModelLimits(
            context_window=self.context_window or _FALLBACK_LIMITS.context_window,
            max_output_tokens=self.max_output_tokens or _FALLBACK_LIMITS.max_output_tokens,
            estimator_id=_FALLBACK_LIMITS.estimator_id,
            safety_margin_tokens=_FALLBACK_LIMITS.safety_margin_tokens,
        )


# The half of a provider's limits its table leaves unset when it sets the other half.
_FALLBACK_LIMITS = ModelLimits(context_window=128_000, max_output_tokens=4_096)


def _http_url(value: str | None) -> str | None:
    """``value`` when an HTTP client can reach it (``http_url_problem``); else ValueError."""
    if value is not None and (problem := http_url_problem(value)) is not None:
        raise ValueError(problem)
    return value


_Rule = Annotated[str, Field(min_length=1, max_length=256)]


class PolicyConfig(_Strict):
    """Glob rules over dotted effect names: deny wins, then ask, then allow; unmatched: denied.

    ``ask`` effects run only after an approval (console, widget, CLI).
    """

    # The bounds EffectPolicy holds a rule list to: refused here, when the file is read,
    # not when each turn of the agent starts.
    allow: FrozenList[_Rule] = Field(default=("*",), max_length=1000)
    deny: FrozenList[_Rule] = Field(default=(), max_length=1000)
    ask: FrozenList[_Rule] = Field(default=(), max_length=1000)


# How the Host isolates the processes it starts for an agent (docs/effects.md, "Sandbox").
Sandbox = Literal["bubblewrap", "none"]
_ENV_NAME = f"^{ENV_NAME_PATTERN}$"


class AgentConfig(_Strict):
    """One agent (Agent Core): its provider, instructions, tools and effect policy.

    ``builtins`` opts into the Host's own effects; the workspace file effects
    work inside the agent's workspace only (see docs/effects.md).
    """

    provider: str
    instructions: str = "You are a helpful assistant. Answer briefly."
    tool_modules: FrozenList[str] = ()
    # Directories looked in first for tool_modules' top-level packages (relative to
    # hostkit.toml's folder); an Agent Core's is its materialized revision.
    tool_path: FrozenList[ConfigPath] = Field(default=(), max_length=16)
    builtins: FrozenList[Builtin] = ()
    # Non-public hosts or CIDRs web.extract may reach (default: none; public only).
    url_allow_private: FrozenList[str] = ()
    memory: bool = True
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    max_steps: int = Field(default=8, ge=1, le=64)
    workspace: ConfigPath | None = None
    # Host environment variables terminal.run may bind (secret.bind:<NAME>), each
    # after a one-shot approval, for at most secret_ttl_s seconds.
    secrets: FrozenList[Annotated[str, Field(pattern=_ENV_NAME)]] = ()
    secret_ttl_s: float = Field(default=300.0, gt=0, le=86_400)
    # The provider (a name under [providers]) that summarizes old history when the
    # context window fills up; default: the agent's own provider.
    summarizer: str | None = None
    # "bubblewrap" (default): every process the Host starts for this agent runs in its own
    # namespaces; where bubblewrap is missing, terminal.run fails closed. "none" runs them
    # unsandboxed, and the approval prompt and operator views say so.
    sandbox: Sandbox = "bubblewrap"
    # MCP servers whose tools this agent may use ([agents.<agent>.mcp.<server>]): each
    # connects only when a session passes the mcp.connect:<server> gate (docs/effects.md).
    mcp: FrozenTable[McpServerName, McpServerConfig] = Field(
        default_factory=FrozenMap, max_length=MAX_MCP_SERVERS
    )

    # Checked when the file is read, not when a turn first builds the agent's tools: a
    # typo in a live edit must reject the reload, not replace a working generation with
    # one that refuses every turn of this agent.
    @pydantic.field_validator("tool_modules")
    @classmethod
    def _module_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            # The one syntax of a module name: the check discovery makes, made earlier.
            if not MODULE_NAME.fullmatch(name):
                raise ValueError(
                    f"{bounded(repr(name), 120)} is not a Python module name "
                    "(dotted identifiers: 'tools' or 'package.tools')"
                )
        return names

    @pydantic.field_validator("url_allow_private")
    @classmethod
    def _hosts_or_networks(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        try:
            UrlPolicy.check_allow_private(entries)
        except ConfigError as exc:  # the URL policy's own sentence, under this key
            raise ValueError(exc.message.removeprefix(f"{exc.key}: ")) from None
        return entries


DEFAULT_CORE_REF = "refs/hostkit/live"


class CoreConfig(_Strict):
    """``[cores.<id>]``: an Agent Core, a Git repository with ``agent.yaml`` + ``agent/``.

    The table key is the core id (it must equal ``agent.yaml``'s ``id``) and
    the name turns use, like an agent's. ``ref`` is the Host-owned ref that
    says which commit is live; ``hostkit core promote`` moves it after the
    gates, ``hostkit core rollback`` moves it back. Two Hosts (staging and
    production) can serve one repository with different refs.
    """

    path: Annotated[ConfigPath, Field(max_length=1_000)]
    ref: str = Field(default=DEFAULT_CORE_REF, pattern=r"^refs/hostkit/[A-Za-z0-9._/-]{1,100}$")


class ProcessLimits(_Strict):
    """Resource limits of every process the Host starts for an agent (setrlimit, per process)."""

    cpu_time_s: int = Field(default=600, ge=1, le=86_400)
    address_space_mb: int = Field(default=4096, ge=64, le=1_048_576)
    file_size_mb: int = Field(default=1024, ge=1, le=1_048_576)
    processes: int = Field(default=256, ge=1, le=65_536)
    tmp_mb: int = Field(default=512, ge=1, le=1_048_576)


class TelemetryConfig(_Strict):
    """``[host.telemetry]``: OpenTelemetry traces of turns, off by default (docs/observability.md).

    ``traces`` picks the exporter: ``console`` writes spans to stderr,
    ``otlp`` sends them over OTLP/HTTP to ``endpoint`` (default: the standard
    ``OTEL_EXPORTER_OTLP_*`` variables, else ``http://localhost:4318``).
    Anything but ``none`` needs ``pip install 'hostkit[otel]'``.
    """

    traces: Literal["none", "console", "otlp"] = "none"
    endpoint: str | None = Field(default=None, max_length=MAX_URL_CHARS)
    service_name: str = Field(default="hostkit", min_length=1, max_length=200)

    @pydantic.field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return _http_url(value)

    @pydantic.model_validator(mode="after")
    def _endpoint_for_otlp(self) -> TelemetryConfig:
        if self.endpoint is not None and self.traces != "otlp":
            raise ValueError("endpoint is used only with traces = 'otlp'")
        return self


class HostSection(_Strict):
    """Where the Host keeps its state and how durable commits are.

    The default workspace is a subdirectory, so the database, its WAL and the
    artifact root (all beside the configuration) are outside it.
    """

    database: ConfigPath = "hostkit.db"
    workspace: ConfigPath = "workspace"
    synchronous: Literal["FULL", "NORMAL", "EXTRA"] = "FULL"
    # Private terminal output files, under one opaque directory per session.
    artifacts: ConfigPath = ".hostkit-artifacts"
    # Free space terminal output never takes from the artifacts' disk (0: none kept): a run
    # is refused below it, and one whose output would pass it ends failed. The database
    # and its backups usually share that disk. The files tools keep it free too, on a
    # workspace disk that holds Host state, and the inbox on the SQLite database's disk:
    # below it a new inbound is refused (InboxFull) before turn results could not be stored.
    artifact_reserve_mb: int = Field(default=256, ge=0, le=1_048_576)
    # How long terminal output files are kept after their last write (0: forever). Longer
    # than any run can write one, so a running run's file is never old enough.
    artifact_retention_s: float = Field(default=ARTIFACT_RETENTION_S, ge=0, le=315_360_000)
    # Each core revision a turn runs, extracted read-only from its commit (Host state).
    cores_dir: ConfigPath = ".hostkit-cores"
    # How long an ``ask`` waits for the approver before the turn pauses needs_user.
    approval_timeout_s: float = Field(default=300.0, gt=0, le=86_400)
    # A running turn holds its session's durable lease; it renews it every third of this.
    # A Host that dies on another machine frees its sessions after at most this long (on
    # this machine, a dead Host frees them at once).
    session_lease_ttl_s: float = Field(default=60.0, ge=0.1, le=86_400)
    # How long a turn waits for its session when another turn (in any process) runs in it.
    admission_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    limits: ProcessLimits = Field(default_factory=ProcessLimits)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)

    @pydantic.field_validator("artifact_retention_s")
    @classmethod
    def _retention_or_forever(cls, value: float) -> float:
        if 0 < value < MIN_ARTIFACT_RETENTION_S:
            raise ValueError(
                f"must be 0 (keep forever) or at least {MIN_ARTIFACT_RETENTION_S:g} s, "
                "longer than any run writes its output"
            )
        return value


class StoreSection(_Strict):
    """``[store]``: where the Host's state lives when it is not the embedded SQLite file.

    ``url = "postgresql://user@host:5432/dbname"`` puts it in PostgreSQL, shared
    by every Host that names the same database (docs/postgres.md; needs
    ``pip install 'hostkit[postgres]'``). The password never goes in this file:
    libpq reads it from ``PGPASSWORD``, ``PGPASSFILE`` or ``~/.pgpass``, and
    every other ``PG*`` variable (``PGSSLMODE``, ...) applies as usual. Without
    a url the store is ``[host] database``, a SQLite file.
    """

    url: str | None = Field(default=None, max_length=2048)
    pool_size: int = Field(default=8, ge=1, le=100)
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300)
    statement_timeout_s: float = Field(default=30.0, gt=0, le=3_600)
    # How far this machine's clock may be off the server's: leases written by Hosts on
    # several machines compare their clocks (a Host further off does not start).
    max_clock_skew_s: float = Field(default=2.0, gt=0, le=60)
    # Where a verified pg_dump goes before an upgrade that drops data (beside the config).
    backup_dir: ConfigPath = ".hostkit-backups"

    @pydantic.field_validator("url")
    @classmethod
    def _postgres_url_without_secrets(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if urlsplit(value).scheme not in ("postgresql", "postgres"):
            raise ValueError("url must be a postgresql:// URL (SQLite is [host] database)")
        if carries_password(value):
            raise ValueError(
                "url must not carry a password; the Host reads it from PGPASSWORD, "
                "PGPASSFILE or ~/.pgpass in the environment of every Host"
            )
        return value


class SecretConfig(_Strict):
    """``[secrets.<NAME>]``: where the Host lets the environment variable ``NAME`` go.

    ``programs`` lists the only programs ``terminal.run`` binds it for, by
    absolute path; a run's program is compared by its real path (after
    links) with each entry's. Without the table ``terminal.run`` binds it for
    no program (an authored tool that asks for it still receives it).
    """

    programs: FrozenList[str] = Field(min_length=1, max_length=32)

    @pydantic.field_validator("programs")
    @classmethod
    def _absolute(cls, programs: tuple[str, ...]) -> tuple[str, ...]:
        for program in programs:
            if "\0" in program or len(program) > 4096 or not os.path.isabs(program):
                raise ValueError(
                    f"{program[:80]!r} is not an absolute path: list each program a secret "
                    "may go to by its full path (for example '/usr/bin/curl')"
                )
        return programs


class HostConfig(_Strict):
    """The whole configuration; ``base_dir`` anchors relative paths (the file's folder).

    Built in Python (``HostConfig(agents=...)``), a bad value is a ``ConfigError``
    naming its key, as in a file.
    """

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except pydantic.ValidationError as exc:
            raise config_error(exc) from None

    host: HostSection = Field(default_factory=HostSection)
    store: StoreSection = Field(default_factory=StoreSection)
    providers: FrozenTable[str, ProviderConfig] = Field(default_factory=FrozenMap)
    agents: FrozenTable[str, AgentConfig] = Field(default_factory=FrozenMap)
    # Agent Cores (docs/cores.md): each becomes an agent of this name at its live revision.
    cores: FrozenTable[str, CoreConfig] = Field(default_factory=FrozenMap, max_length=64)
    # Channel instances (docs/channels.md) and the daemon that serves them (docs/service.md).
    channels: FrozenTable[str, ChannelConfig] = Field(
        default_factory=FrozenMap, max_length=MAX_CHANNELS
    )
    serve: ServeSection = Field(default_factory=ServeSection)
    # The programs each secret may be bound for, whichever agent binds it.
    secrets: FrozenTable[Annotated[str, Field(pattern=_ENV_NAME)], SecretConfig] = Field(
        default_factory=FrozenMap, max_length=256
    )
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)
    # The file this configuration was loaded from (None: built in code).
    source: Path | None = Field(default=None, exclude=True)

    # Before each table is read, so a bad value's key never carries a bad name. A
    # provider's name is recorded with every usage observation and shown in logs and status
    # lines as an agent's is: both are held to the same rule.
    @pydantic.field_validator("agents", "providers", mode="before")
    @classmethod
    def _table_names(cls, table: object, info: pydantic.ValidationInfo) -> object:
        what = "agent" if info.field_name == "agents" else "provider"
        for name in table if isinstance(table, Mapping) else ():
            if not _is_agent_name(name):
                raise ValueError(
                    f"{bounded(repr(name), 80)} is not a usable {what} name (1-"
                    f"{MAX_AGENT_NAME_CHARS} characters, no control or format characters)"
                )
        return table

    @pydantic.model_validator(mode="after")
    def _agents_name_providers(self) -> HostConfig:
        for name, agent in self.agents.items():
            for key in ("provider", "summarizer"):
                value = getattr(agent, key)
                if value is not None and value not in self.providers:
                    raise ValueError(
                        _unknown_name(f"agents.{name}.{key}", value, self.providers, "[providers]")
                    )
        return self

    @pydantic.model_validator(mode="after")
    def _rules_take_effect(self) -> HostConfig:
        # A rule that would be read and then ignored (an ask nobody can be asked, a server
        # not declared, a tool's provider spelling) refuses the file, or the reload. Raised
        # as the ConfigError itself: its key names the rule's list, which pydantic cannot.
        for name, agent in self.agents.items():
            try:
                problem = policy_problem(agent)
            except InvalidValue as exc:  # a rule EffectPolicy refuses outright
                raise ConfigError(exc.message, key=f"agents.{name}.policy") from None
            if problem is not None:
                rules, message = problem
                raise ConfigError(message, key=f"agents.{name}.{rules}")
        return self

    @pydantic.model_validator(mode="after")
    def _cores_are_agents(self) -> HostConfig:
        for name in self.cores:
            if not is_core_id(name):
                raise ValueError(
                    f"cores.{name[:64]} is not a core id (lower-case a-z, 0-9, '_', '-'; "
                    "starting with a letter; at most 64)"
                )
            if name in self.agents:
                raise ValueError(f"cores.{name} and agents.{name}: one name, two agents")
        return self

    @pydantic.model_validator(mode="after")
    def _channel_ids(self) -> HostConfig:
        for name in self.channels:
            if not is_channel_id(name) or name in RESERVED_INBOUND_CHANNELS:
                raise ValueError(
                    f"channels.{name[:64]} is not a usable channel id (lower-case a-z, 0-9, "
                    "'_', '-', '.'; not one of the Host's own front ends)"
                )
        return self

    def resolve(self, relative: str) -> Path:
        path = Path(relative).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    @property
    def database_path(self) -> Path:
        """The SQLite file (used when ``[store] url`` is not set)."""
        return self.resolve(self.host.database)

    @property
    def store_location(self) -> str:
        """Where the state lives, for messages: the redacted PostgreSQL URL or the file."""
        if self.store.url is not None:
            return redact_url(self.store.url)
        return str(self.database_path)

    @property
    def artifact_root(self) -> Path:
        return self.resolve(self.host.artifacts)

    @property
    def cores_root(self) -> Path:
        return self.resolve(self.host.cores_dir)

    def workspace_of(self, agent: str) -> Path:
        """The workspace directory of ``agent``: its own, else the Host's."""
        return self.resolve(self.agents[agent].workspace or self.host.workspace)

    def state_paths(self) -> tuple[Path, ...]:
        """The Host's own state, which no agent may see: the database with its WAL, SHM
        and journal, the artifact root, and the configuration file (the one loaded, and
        ``hostkit.toml`` beside it). No I/O.

        Every sibling whose name begins with the database's name is state too (migration
        backups ``<db>.v<N>.backup`` appear later): ``files.*`` refuse them by that
        prefix, and a sandbox should hide them the same way.
        """
        database = self.database_path
        siblings = tuple(
            database.with_name(database.name + suffix) for suffix in ("-wal", "-shm", "-journal")
        )
        configs = dict.fromkeys(
            path for path in (self.source, self.base_dir / "hostkit.toml") if path is not None
        )
        return (database, *siblings, self.artifact_root, self.cores_root, *configs)


def _is_agent_name(name: object) -> bool:
    """1 to ``MAX_AGENT_NAME_CHARS`` characters of storable text, none of them unprintable.

    '/' is allowed: a name is only ever text (a core id, a key under ``agents.``, the end
    of a default conversation key such as ``default/<agent>``), never a path.
    """
    if not is_text(name, limit=MAX_AGENT_NAME_CHARS):
        return False
    return not any(unicodedata.category(char) in _UNPRINTABLE_CATEGORIES for char in name)


def check_channel_agents(config: HostConfig, *, required: bool = True) -> tuple[str, ...]:
    """Each channel's ``agent`` is one of the composed configuration's agents or cores.

    Checked once Python agents (``Host.open(agents=...)``, ``--agent``) joined
    the configuration, not when the file is read: a channel may name one.
    ``required=False`` (a Host that serves no channel: an operator's listing)
    says each one it cannot serve as a warning instead of refusing to open:
    the agent may be a Python agent that only ``hostkit serve --agent`` has.
    """
    warnings: list[str] = []
    for name, channel in config.channels.items():
        if channel.agent not in config.agents and channel.agent not in config.cores:
            sentence = _unknown_name(
                f"channels.{name}.agent",
                channel.agent,
                [*config.agents, *config.cores],
                "[agents] or [cores], nor a Python agent of this Host",
            )
            if not required:
                warnings.append(f"{sentence} (fine here: this command serves no channel)")
                continue
            error = ConfigError(sentence)  # the sentence names its key itself
            error.key = f"channels.{name}.agent"
            raise error
    return tuple(warnings)


def parse_config(data: dict[str, Any], *, base_dir: Path, source: Path | None = None) -> HostConfig:
    """Validate a parsed TOML document; raise ``ConfigError`` naming the first bad key."""
    if _depth(data) > MAX_CONFIG_DEPTH:
        raise ConfigError(f"the configuration is nested more than {MAX_CONFIG_DEPTH} levels deep")
    try:
        return HostConfig.model_validate({**data, "base_dir": base_dir, "source": source})
    except pydantic.ValidationError as exc:
        raise config_error(exc) from None
    except RecursionError:
        raise ConfigError("the configuration is nested too deeply") from None


def config_error(exc: pydantic.ValidationError) -> ConfigError:
    """The ``ConfigError`` naming the first bad key of a failed ``HostConfig`` validation."""
    first = reported_error(exc)
    # A bad table key (an MCP server name) is reported at the key itself.
    loc = tuple(part for part in first["loc"] if part != "[key]")
    parts = [str(part) for part in loc]
    if first["type"] == EXTRA_FORBIDDEN:
        # The sentence names the key and its table itself. Not "key: message": a key
        # named api_key or token would read as a secret assignment bounded() masks.
        error = ConfigError(unknown_key(HostConfig, loc, style="toml"))
        error.key = ".".join(parts)
        return error
    # A validator's own sentence, without pydantic's "Value error, " in front;
    # a check across tables names its keys itself.
    message = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] in ("model_type", "dict_type"):
        # Not pydantic's class name: the file's word for it.
        message = f"must be a table, not {type(first['input']).__name__}"
    return ConfigError(message, key=".".join(parts) or None)


def load_config(path: str | Path, *, max_bytes: int = MAX_CONFIG_BYTES) -> HostConfig:
    """Read and validate ``hostkit.toml`` (a blocking read: call it off the event loop).

    Raises ``ConfigError`` naming the file when it is missing, unreadable, not
    a regular file (a directory, FIFO or device is never read, so never waited
    on), larger than ``max_bytes``, not UTF-8, not TOML, or nested too deeply.
    """
    file = Path(path).expanduser()
    shown = _shown(file)
    raw = _read_regular(file, shown, max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown} is not UTF-8 text (bad byte at offset {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{shown} is not valid TOML: {exc}") from None
    except ValueError as exc:  # e.g. an integer longer than Python converts (4,300 digits)
        raise ConfigError(f"{shown} has a value that cannot be read: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{shown} is nested too deeply to read") from None
    if _depth(data) > MAX_CONFIG_DEPTH:
        raise ConfigError(f"{shown} is nested more than {MAX_CONFIG_DEPTH} levels deep")
    resolved = file.resolve()
    return parse_config(data, base_dir=resolved.parent, source=resolved)


def _read_regular(file: Path, shown: str, max_bytes: int) -> bytes:
    """The whole file, at most ``max_bytes``; anything but a regular file is refused unread."""
    # O_NONBLOCK: opening a FIFO does not wait for a writer; it is then refused by fstat.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    if "\0" in str(file):
        raise ConfigError(f"{shown} is not a file name (it holds a NUL character)")
    try:
        fd = os.open(file, flags)
    except FileNotFoundError:
        init = shlex.join(["hostkit", "init", shown]) if shown == str(file) else "hostkit init"
        raise ConfigError(f"no configuration file at {shown}; run `{init}`") from None
    except OSError as exc:
        raise ConfigError(f"{shown} cannot be opened: {_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            init = shlex.join(["hostkit", "init", shown]) if shown == str(file) else "hostkit init"
            raise ConfigError(
                f"{shown} is a directory with no hostkit.toml in it; name the configuration "
                f"file, or run `{init}` to make it a project"
            )
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{shown} is not a regular file (a FIFO, socket or device)")
        if info.st_size > max_bytes:
            raise ConfigError(f"{shown} is {info.st_size} bytes; the limit is {max_bytes}")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, min(64 * 1024, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ConfigError(f"{shown} cannot be read: {_reason(exc)}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise ConfigError(f"{shown} grew past the {max_bytes}-byte limit while being read")
    return b"".join(chunks)


def _depth(data: object) -> int:
    """How deeply tables and arrays nest, counted without recursion."""
    deepest = 0
    pending: list[tuple[object, int]] = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict):
            value = list(value.values())
        if isinstance(value, list):
            deepest = max(deepest, depth)
            if depth <= MAX_CONFIG_DEPTH:
                pending.extend((child, depth + 1) for child in value)
    return deepest


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else type(exc).__name__


def _unknown_name(key: str, value: str, known: Iterable[str], tables: str) -> str:
    """``key names 'asistant', which is not under [agents]; did you mean 'assistant'?``"""
    close = difflib.get_close_matches(value, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{key} names {value[:64]!r}, which is not under {tables}{hint}"


def _shown(file: Path) -> str:
    text = str(file)
    return text if len(text) <= _SHOWN_PATH_CHARS else "…" + text[-(_SHOWN_PATH_CHARS - 1) :]


# The builtins that reach into an agent's workspace (files and processes).
_WORKSPACE_BUILTINS = frozenset(
    {"files.read", "files.list", "files.write", "files.edit", "terminal.run"}
)
# Those of them that change files there.
_WRITES_WORKSPACE = frozenset({"files.write", "files.edit", "terminal.run"})


def _reaches_workspace(agent: AgentConfig, builtins: frozenset[str]) -> bool:
    """Whether ``agent`` acts in its workspace: one of ``builtins``, or a stdio MCP server
    (the workspace is its working directory and a writable bind)."""
    stdio = any(server.command is not None for server in agent.mcp.values())
    return stdio or not builtins.isdisjoint(agent.builtins)


def writable_workspaces(config: HostConfig) -> dict[Path, str]:
    """Each workspace some agent can change files in, with the first such agent's name."""
    writable: dict[Path, str] = {}
    for name, agent in config.agents.items():
        if _reaches_workspace(agent, _WRITES_WORKSPACE):
            writable.setdefault(config.workspace_of(name), name)
    return writable


def state_overlaps(config: HostConfig) -> tuple[str, ...]:
    """One line per workspace that overlaps the Host's own state (blocking: resolves links).

    Only agents with workspace builtins or a stdio MCP server (the workspace is
    its working directory and writable bind) count. ``files.*`` refuse the
    state and sandboxes mask it anyway; the line tells the operator to move it out.
    """
    state = [(path, Path(os.path.realpath(path))) for path in config.state_paths()]
    lines: list[str] = []
    seen: set[Path] = set()
    for name, agent in config.agents.items():
        if not _reaches_workspace(agent, _WORKSPACE_BUILTINS):
            continue
        workspace = Path(os.path.realpath(config.workspace_of(name)))
        if workspace in seen:
            continue
        seen.add(workspace)
        inside = [
            path.name
            for path, real in state
            if real == workspace or workspace in real.parents or real in workspace.parents
        ]
        if inside:
            lines.append(
                f"the workspace {_shown(workspace)} (agent {name!r}) overlaps the Host's own "
                f"state ({', '.join(inside[:3])}{', …' if len(inside) > 3 else ''}); files.* "
                "refuse it, but keep Host state outside every workspace (docs/store.md)"
            )
    return tuple(lines)


def unlisted_secrets(config: HostConfig) -> tuple[str, ...]:
    """One line per secret an agent with ``terminal.run`` holds that no
    ``[secrets.<NAME>]`` table lists programs for: ``terminal.run`` binds it for none."""
    lines: list[str] = []
    for name, agent in config.agents.items():
        if "terminal.run" not in agent.builtins:
            continue
        for secret in agent.secrets:
            if secret not in config.secrets:
                lines.append(
                    f"agent {name!r} holds the secret {secret}, but no [secrets.{secret}] "
                    "programs list names a program for it: terminal.run binds it for none "
                    "(docs/effects.md, Secrets)"
                )
    return tuple(lines)


def default_config(
    *, base_dir: Path, environ: dict[str, str] | None = None, assistant: bool = True
) -> HostConfig:
    """The configuration used when none is given.

    With ``OPENAI_BASE_URL`` set, the assistant uses that OpenAI-compatible
    server (``OPENAI_MODEL``, default ``gpt-4o-mini``); otherwise the embedded
    local model. The scripted model is never chosen silently.

    ``assistant=False``: no agent and no provider, only the defaults of
    ``[host]``. For a Host whose agents are all given in Python: an implicit
    assistant they never run must not need the ``local`` extra.
    """
    if not assistant:
        return parse_config({}, base_dir=base_dir)
    env = os.environ if environ is None else environ
    if env.get("OPENAI_BASE_URL"):
        provider: dict[str, Any] = {
            "kind": "openai",
            "base_url": env["OPENAI_BASE_URL"],
            "model": env.get("OPENAI_MODEL", "gpt-4o-mini"),
            "api_key_env": "OPENAI_API_KEY",
        }
        name = "openai"
    else:
        provider, name = {"kind": "local"}, "local"
    try:
        return parse_config(
            {"providers": {name: provider}, "agents": {"assistant": {"provider": name}}},
            base_dir=base_dir,
        )
    except ConfigError as exc:
        # The operator wrote the variable, not a [providers.openai] table: name it.
        variable = _DEFAULT_VARIABLES.get(exc.key or "")
        if variable is None:
            raise
        raise ConfigError(exc.message.removeprefix(f"{exc.key}: "), key=variable) from None


# The environment variables default_config() takes provider settings from, by their key.
_DEFAULT_VARIABLES = {
    "providers.openai.base_url": "OPENAI_BASE_URL",
    "providers.openai.model": "OPENAI_MODEL",
}
