"""Calls into the embedder's capability sources: bounded in time, checked in shape.

A source is the embedder's code, run when a turn pins its agent or a catalog
is read. One that hangs would hold every turn of the agent (and the catalog
read) for ever, with nothing recorded; one that returns the wrong thing (a
forgotten ``return``) would fail much later, far from its cause, with a raw
``AttributeError``. So every such call ends within ``SOURCE_DEADLINE_S``,
and what it returns is checked here; each failure is a typed error naming
the source: a ``RuntimeFailure`` for a source that timed out (retryable) or
raised, a ``ConfigError`` for one that returned something else than its
protocol says. A ``HostkitError`` the source raised on purpose passes as it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio

from hostkit.effects import AuthoredTool, McpServer, SourcedTool
from hostkit.errors import ConfigError, HostkitError, RuntimeFailure, type_name
from hostkit.host._capabilities import AgentMemory
from hostkit.providers import ModelProvider

__all__ = [
    "SOURCE_DEADLINE_S",
    "WrappingSource",
    "ask_source",
    "checked_memory",
    "checked_provider",
    "checked_servers",
    "checked_tools",
    "source_name",
]

# How long one call into a capability source may take. Generous: the default tool
# source discovers each tool module in a child process (DISCOVERY_TIMEOUT_S each), the
# default provider source starts an embedded model (its own 60 s startup bound), and
# an apply gives a whole tools build BUILD_TOOLS_DEADLINE_S, as long as this.
SOURCE_DEADLINE_S = 120.0

T = TypeVar("T")


class WrappingSource:
    """A source the Host puts around the embedder's (serving ``hostkit.Agent`` values'
    own tools and providers): what fails in it is the embedder's source it wraps."""

    inner: object


def source_name(source: object) -> str:
    """The name of the embedder's source, seen through the Host's own wrappers: an error
    naming ``_AgentProviders`` would point at nothing the embedder wrote."""
    while isinstance(source, WrappingSource):
        source = source.inner
    return type_name(source)


def _named(kind: str, source: object) -> str:
    return f"the {kind} source {source_name(source)}"


async def ask_source(kind: str, source: object, call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` (a call into ``source``, the ``kind`` source) within ``SOURCE_DEADLINE_S``.

    Cancellation of the caller propagates; a ``BaseException`` that is not an
    ``Exception`` (KeyboardInterrupt) passes as it is.
    """
    deadline_s = SOURCE_DEADLINE_S
    with anyio.move_on_after(deadline_s):
        try:
            return await call()
        except HostkitError:
            raise
        except Exception as exc:
            # Only the type: the source's own message may carry what it was building with.
            raise RuntimeFailure(f"{_named(kind, source)} raised {type_name(exc)}") from exc
    raise RuntimeFailure(
        f"{_named(kind, source)} did not answer within {deadline_s:g} s", retryable=True
    )


def _problem(kind: str, source: object, returned: object, wanted: str) -> ConfigError:
    return ConfigError(f"{_named(kind, source)} returned {type_name(returned)}, not {wanted}")


def _holding(kind: str, source: object, value: object, item: object, wanted: str) -> ConfigError:
    return ConfigError(
        f"{_named(kind, source)} returned a {type_name(value)} holding a {type_name(item)}, "
        f"not only {wanted}"
    )


def checked_provider(source: object, value: object) -> ModelProvider:
    """``value`` if it is a model provider (``name`` and ``model`` strings, ``complete`` and
    ``stream`` callables); a ``ConfigError`` naming the source otherwise."""
    wanted = "a ModelProvider"
    for attribute, fits, what in _PROVIDER_PARTS:
        try:
            part = getattr(value, attribute)
        except AttributeError:
            raise _problem("provider", source, value, wanted) from None
        except Exception:
            what = "unreadable"
        else:
            if fits(part):
                continue
        raise _problem("provider", source, value, f"{wanted} (its {attribute} is {what})")
    return value  # type: ignore[return-value]


_PROVIDER_PARTS: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("name", lambda part: isinstance(part, str), "not a string"),
    ("model", lambda part: isinstance(part, str), "not a string"),
    ("complete", callable, "not callable"),
    ("stream", callable, "not callable"),
)


def checked_tools(source: object, value: object) -> Sequence[AuthoredTool | SourcedTool]:
    """``value`` if it is a sequence of tools (``AuthoredTool`` or ``SourcedTool``)."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise _problem("tool", source, value, "a sequence of tools")
    for item in value:
        if not isinstance(item, AuthoredTool | SourcedTool):
            raise _holding("tool", source, value, item, "tools")
    return value


def checked_servers(source: object, value: object) -> Sequence[McpServer]:
    """``value`` if it is a sequence of ``McpServer``."""
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise _problem("MCP", source, value, "a sequence of McpServer")
    for item in value:
        if not isinstance(item, McpServer):
            raise _holding("MCP", source, value, item, "McpServer")
    return value


def checked_memory(source: object, value: object) -> AgentMemory:
    """``value`` if it has the ``AgentMemory`` methods."""
    if not isinstance(value, AgentMemory):
        raise _problem("memory", source, value, "an AgentMemory")
    return value
