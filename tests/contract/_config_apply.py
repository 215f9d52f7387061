"""Shared by the config-apply clause tests: a hostkit.toml on disk and an observed provider source.

``write_config`` writes a real file a Host is opened from (a scripted
provider whose one step may take ``delay_s``); ``ObservedProviders`` wraps the
generation's real provider source and records when it was closed and what
the turns' statuses were at that moment; given ``hold``, its providers' model
calls wait for that event, so a turn stays running until the test lets it end.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from hostkit.host import ProviderRequest, ProviderSource
from hostkit.providers import ModelProvider
from hostkit.types import ModelRequest, ModelResponse, StreamEvent


def write_config(
    root: Path,
    *,
    reply: str,
    delay_s: float = 0.0,
    times: int = 1,
    instructions: str = "You are the first revision.",
    serve: str = "",
    extra: str = "",
) -> Path:
    """``root/hostkit.toml``: agent ``assistant`` on a scripted provider answering ``reply``
    (``times`` turns, each step taking ``delay_s``)."""
    path = root / "hostkit.toml"
    step = f"{{ reply = {json.dumps(reply)}, delay_s = {delay_s} }}"
    path.write_text(
        f"""
[host]
database = "hostkit.db"
workspace = "ws"

[providers.test]
kind = "scripted"
script = [{", ".join([step] * times)}]

[agents.assistant]
provider = "test"
memory = false
instructions = {json.dumps(instructions)}

[serve]
port = 0
{serve}
{extra}
"""
    )
    return path


@dataclass
class ObservedProviders:
    """A real provider source whose ``aclose`` is observed (a test adapter at the seam)."""

    inner: ProviderSource
    at_close: Callable[[], Awaitable[Any]]
    closed: anyio.Event = field(default_factory=anyio.Event)
    seen_at_close: Any = None
    hold: anyio.Event | None = None

    @property
    def estimators(self) -> Any:
        return getattr(self.inner, "estimators", ())

    async def model_provider(self, request: ProviderRequest) -> ModelProvider:
        provider = await self.inner.model_provider(request)
        return provider if self.hold is None else HeldProvider(provider, self.hold)

    async def aclose(self) -> None:
        self.seen_at_close = await self.at_close()
        self.closed.set()
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


class HeldProvider:
    """A real provider whose model calls first wait for ``hold``: the turn is inside its
    model call for exactly as long as the test needs, however loaded the machine."""

    def __init__(self, inner: ModelProvider, hold: anyio.Event) -> None:
        self._inner = inner
        self._hold = hold

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # name, model, limits, aclose, ...

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await self._hold.wait()
        return await self._inner.complete(request)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        await self._hold.wait()
        async with contextlib.aclosing(self._inner.stream(request)) as events:
            async for event in events:
                yield event
