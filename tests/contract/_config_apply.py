"""Shared by the config-apply clause tests: a hostkit.toml on disk and an observed provider source.

``write_config`` writes a real file a Host is opened from (a scripted
provider whose one step may take ``delay_s``); ``ObservedProviders`` wraps the
generation's real provider source and records when it was closed and what
the turns' statuses were at that moment.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from hostkit.host import ProviderRequest, ProviderSource
from hostkit.providers import ModelProvider


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

    @property
    def estimators(self) -> Any:
        return getattr(self.inner, "estimators", ())

    async def model_provider(self, request: ProviderRequest) -> ModelProvider:
        return await self.inner.model_provider(request)

    async def aclose(self) -> None:
        self.seen_at_close = await self.at_close()
        self.closed.set()
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()
