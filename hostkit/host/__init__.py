"""Host composition: configuration, capability sources, generations and the Host itself.

``HostDaemon`` and ``ServeStatus`` load on first use: the serving stack (uvicorn,
Starlette, the channels) is not needed by a command line or script that only runs turns.
"""

import typing

from hostkit import _lazy
from hostkit.host._agent import Agent, PydanticOutput, load_agent
from hostkit.host._artifacts import HostArtifacts
from hostkit.host._attachments import HostAttachments
from hostkit.host._bus import EventBus
from hostkit.host._capabilities import (
    AgentMemory,
    Channel,
    ChannelSource,
    McpSource,
    MemoryRequest,
    MemorySource,
    ProcessResources,
    ProviderRequest,
    ProviderSource,
    RecalledItem,
    RuntimeCapabilities,
    ToolRequest,
    ToolSource,
)
from hostkit.host._catalog import CatalogServer, CatalogTool, ToolCatalog
from hostkit.host._config import (
    DEFAULT_CORE_REF,
    AgentConfig,
    CoreConfig,
    HostConfig,
    McpServerConfig,
    PolicyConfig,
    ProviderConfig,
    StoreSection,
    default_config,
    load_config,
    parse_config,
)
from hostkit.host._cores import compile_core, compose_cores, core_locations
from hostkit.host._defaults import (
    ConfiguredChannels,
    DefaultCapabilities,
    DefaultMcpSource,
    DefaultToolSource,
    NoChannels,
    check_provider_extras,
    load_channel_adapters,
)
from hostkit.host._generation import unknown_agent
from hostkit.host._host import Host, TurnNotCompleted, resolve_config
from hostkit.host._memory import StoreMemorySource, memory_tools
from hostkit.host._memory_admin import HostMemory
from hostkit.host._reload import ConfigWatcher, ReloadOutcome
from hostkit.host._store import open_configured_store, store_exists

if typing.TYPE_CHECKING:
    from hostkit.host._serve import HostDaemon, ServeStatus

__all__ = [
    "DEFAULT_CORE_REF",
    "Agent",
    "AgentConfig",
    "AgentMemory",
    "CatalogServer",
    "CatalogTool",
    "Channel",
    "ChannelSource",
    "ConfigWatcher",
    "ConfiguredChannels",
    "CoreConfig",
    "DefaultCapabilities",
    "DefaultMcpSource",
    "DefaultToolSource",
    "EventBus",
    "Host",
    "HostArtifacts",
    "HostAttachments",
    "HostConfig",
    "HostDaemon",
    "HostMemory",
    "McpServerConfig",
    "McpSource",
    "MemoryRequest",
    "MemorySource",
    "NoChannels",
    "PolicyConfig",
    "ProcessResources",
    "ProviderConfig",
    "ProviderRequest",
    "ProviderSource",
    "PydanticOutput",
    "RecalledItem",
    "ReloadOutcome",
    "RuntimeCapabilities",
    "ServeStatus",
    "StoreMemorySource",
    "StoreSection",
    "ToolCatalog",
    "ToolRequest",
    "ToolSource",
    "TurnNotCompleted",
    "check_provider_extras",
    "compile_core",
    "compose_cores",
    "core_locations",
    "default_config",
    "load_agent",
    "load_channel_adapters",
    "load_config",
    "memory_tools",
    "open_configured_store",
    "parse_config",
    "resolve_config",
    "store_exists",
    "unknown_agent",
]


__getattr__, __dir__ = _lazy.attributes(
    __name__, {"HostDaemon": "hostkit.host._serve", "ServeStatus": "hostkit.host._serve"}
)
