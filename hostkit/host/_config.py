"""hostkit.toml: the Host configuration, validated with pydantic into typed errors.

Every validation problem becomes a ``ConfigError`` naming the offending key
(``agents.assistant.provider``), never a pydantic traceback.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from hostkit.effects import ENV_NAME_PATTERN
from hostkit.errors import ConfigError

__all__ = [
    "AgentConfig",
    "HostConfig",
    "HostSection",
    "PolicyConfig",
    "ProcessLimits",
    "ProviderConfig",
    "Sandbox",
    "ScriptStepConfig",
    "default_config",
    "load_config",
    "parse_config",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptStepConfig(_Strict):
    """One step of a scripted provider: a reply, or a tool call with arguments."""

    reply: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)

    @pydantic.model_validator(mode="after")
    def _one_kind(self) -> ScriptStepConfig:
        if (self.reply is None) == (self.tool is None):
            raise ValueError("a script step has exactly one of 'reply' or 'tool'")
        return self


class ProviderConfig(_Strict):
    """A model provider. ``kind`` picks the adapter; limits override its defaults."""

    kind: Literal["openai", "anthropic", "local", "scripted"]
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    timeout_s: float = Field(default=60.0, gt=0)
    script: list[ScriptStepConfig] = Field(default_factory=list)


class PolicyConfig(_Strict):
    """Glob rules over dotted effect names: deny wins, then ask, then allow; unmatched: denied.

    ``ask`` effects run only after an approval (console, widget, CLI).
    """

    allow: list[str] = Field(default_factory=lambda: ["*"])
    deny: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)


Builtin = Literal[
    "files.read",
    "files.list",
    "files.write",
    "files.edit",
    "web.extract",
    "terminal.run",
    "terminal.status",
    "terminal.stop",
    # Not a tool: the grant that lets this agent's terminal runs reach the network.
    "terminal.network",
]
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
    tool_modules: list[str] = Field(default_factory=list)
    builtins: list[Builtin] = Field(default_factory=list)
    # Non-public hosts or CIDRs web.extract may reach (default: none; public only).
    url_allow_private: list[str] = Field(default_factory=list)
    memory: bool = True
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    max_steps: int = Field(default=8, ge=1, le=64)
    workspace: str | None = None
    # Host environment variables terminal.run may bind (secret.bind:<NAME>), each
    # after a one-shot approval, for at most secret_ttl_s seconds.
    secrets: list[Annotated[str, Field(pattern=_ENV_NAME)]] = Field(default_factory=list)
    secret_ttl_s: float = Field(default=300.0, gt=0, le=86_400)
    # The provider (a name under [providers]) that summarizes old history when the
    # context window fills up; default: the agent's own provider.
    summarizer: str | None = None
    # "bubblewrap" (default): every process the Host starts for this agent runs in its own
    # namespaces; where bubblewrap is missing, terminal.run fails closed. "none" runs them
    # unsandboxed, and the approval prompt and operator views say so.
    sandbox: Sandbox = "bubblewrap"


class ProcessLimits(_Strict):
    """Resource limits of every process the Host starts for an agent (setrlimit, per process)."""

    cpu_time_s: int = Field(default=600, ge=1, le=86_400)
    address_space_mb: int = Field(default=4096, ge=64, le=1_048_576)
    file_size_mb: int = Field(default=1024, ge=1, le=1_048_576)
    processes: int = Field(default=256, ge=1, le=65_536)


class HostSection(_Strict):
    """Where the Host keeps its state and how durable commits are."""

    database: str = "hostkit.db"
    workspace: str = "."
    synchronous: Literal["FULL", "NORMAL", "EXTRA"] = "FULL"
    # Private terminal output files, under one opaque directory per session.
    artifacts: str = ".hostkit-artifacts"
    # How long an ``ask`` waits for the approver before the turn pauses needs_user.
    approval_timeout_s: float = Field(default=300.0, gt=0, le=86_400)
    # A running turn holds its session's durable lease; it renews it every third of this.
    # A Host that dies on another machine frees its sessions after at most this long (on
    # this machine, a dead Host frees them at once).
    session_lease_ttl_s: float = Field(default=60.0, ge=0.1, le=86_400)
    # How long a turn waits for its session when another turn (in any process) runs in it.
    admission_timeout_s: float = Field(default=600.0, gt=0, le=86_400)
    limits: ProcessLimits = Field(default_factory=ProcessLimits)


class HostConfig(_Strict):
    """The whole configuration; ``base_dir`` anchors relative paths (the file's folder)."""

    host: HostSection = Field(default_factory=HostSection)
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    base_dir: Path = Field(default_factory=Path.cwd, exclude=True)

    @pydantic.model_validator(mode="after")
    def _agents_name_providers(self) -> HostConfig:
        for name, agent in self.agents.items():
            for key in ("provider", "summarizer"):
                value = getattr(agent, key)
                if value is not None and value not in self.providers:
                    raise ValueError(
                        f"agents.{name}.{key} names {value!r}, which is not under [providers]"
                    )
        return self

    def resolve(self, relative: str) -> Path:
        path = Path(relative).expanduser()
        return path if path.is_absolute() else self.base_dir / path

    @property
    def database_path(self) -> Path:
        return self.resolve(self.host.database)

    @property
    def artifact_root(self) -> Path:
        return self.resolve(self.host.artifacts)

    def state_paths(self) -> tuple[Path, ...]:
        """The Host's own state, which no agent may see: the database with its WAL, SHM,
        journal and migration backups (as a glob-free prefix match on the database
        name), the artifact root and the configuration directory's ``hostkit.toml``."""
        database = self.database_path
        siblings = tuple(
            database.with_name(database.name + suffix) for suffix in ("-wal", "-shm", "-journal")
        )
        return (database, *siblings, self.artifact_root, self.base_dir / "hostkit.toml")


def parse_config(data: dict[str, Any], *, base_dir: Path) -> HostConfig:
    """Validate a parsed TOML document; raise ``ConfigError`` naming the first bad key."""
    try:
        return HostConfig.model_validate({**data, "base_dir": base_dir})
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "(root)"
        raise ConfigError(first["msg"], key=key) from None


def load_config(path: str | Path) -> HostConfig:
    """Read and validate ``hostkit.toml`` (a blocking read: call it off the event loop)."""
    file = Path(path).expanduser()
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no configuration file at {file}; run `hostkit init`") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}") from None
    return parse_config(data, base_dir=file.resolve().parent)


def default_config(*, base_dir: Path, environ: dict[str, str] | None = None) -> HostConfig:
    """The configuration used when none is given.

    With ``OPENAI_BASE_URL`` set, the assistant uses that OpenAI-compatible
    server (``OPENAI_MODEL``, default ``gpt-4o-mini``); otherwise the embedded
    local model. The scripted model is never chosen silently.
    """
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
    return parse_config(
        {"providers": {name: provider}, "agents": {"assistant": {"provider": name}}},
        base_dir=base_dir,
    )
