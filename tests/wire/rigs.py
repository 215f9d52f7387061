"""Every ModelProvider adapter behind one small interface, for the provider contract suite.

A rig holds one adapter and what answers it: ``ScriptedModel`` and its
script, an SDK adapter and the loopback ``WireServer`` speaking its API, or
the OpenAI adapter and the local llama.cpp server. Tests script a neutral
``Answer`` with ``expect``; each rig turns it into its backend's terms. A
live model answers for itself, so tests that run on the local rig assert only
what holds for any answer.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import anyio
import httpx
import psutil

from hostkit.adapters.anthropic_messages import AnthropicProvider
from hostkit.adapters.local_llama import LocalModel
from hostkit.adapters.openai_chat import OpenAIChatProvider
from hostkit.adapters.scripted import CallTools, Reply, ScriptedModel
from hostkit.providers import ModelProvider
from hostkit.types import ModelLimits, ModelRequest
from tests.wire import anthropic_messages, openai_chat
from tests.wire.policy import RecordingRetryPolicy
from tests.wire.scenario import Answer
from tests.wire.server import WireServer, serve_wire, sse_reply

__all__ = [
    "API_KEY",
    "LocalRig",
    "Rig",
    "ScriptableRig",
    "ScriptedRig",
    "WireRig",
    "build_rig",
    "openai_rig",
]

# No known credential shape: only the adapters' own scrubbing keeps it out of messages.
API_KEY = "gw-test-0123456789abcdefXYZ"
# Not a real model id: the anthropic SDK warns (an error here) for ids it knows to be deprecated.
ANTHROPIC_MODEL = "claude-test"
ATTEMPTS = 3
# The adapters' timeout_s: how long a wire rig's stream may go without anything new.
TIMEOUT_S = 5.0
RELEASE_DEADLINE_S = 5.0
RELEASE_POLL_S = 0.02


class Rig(ABC):
    """One adapter under the provider contract."""

    def __init__(self, kind: str, provider: ModelProvider, *, answering_model: str) -> None:
        self.kind = kind
        self.provider = provider
        # The model id responses report (a dated snapshot, a GGUF name), not always the one asked.
        self.answering_model = answering_model
        self.policy = RecordingRetryPolicy(max_attempts=ATTEMPTS)

    @abstractmethod
    def expect(self, answer: Answer, *, stream: bool) -> None:
        """Have the backend give ``answer`` to the next request (``complete`` or ``stream``)."""

    @abstractmethod
    def expect_long_stream(self, answer: Answer) -> None:
        """Have the next stream start with ``answer``'s first delta and not end on its own."""

    @abstractmethod
    async def released(self) -> None:
        """Return once no connection to the backend is left open; fail after a deadline."""

    async def aclose(self) -> None:
        await self.provider.aclose()


class ScriptableRig(Rig):
    """A rig whose backend answers exactly what was scripted and counts what it served."""

    @property
    @abstractmethod
    def served(self) -> int:
        """How many requests reached the backend."""


WIRE_LIMITS = ModelLimits(context_window=128_000, max_output_tokens=1_024)


class ScriptedRig(ScriptableRig):
    """``ScriptedModel``: no network. Its stream splits text at spaces, so deltas end in one."""

    def __init__(self) -> None:
        self._steps: deque[Reply | CallTools] = deque()
        # The window of the models the wire rigs stand for (gpt-4o, Claude), not
        # ScriptedModel's 8,192: a turn of the most calls at once must fit, as it does there.
        self.model = ScriptedModel([self._decide], repeat_last=True, limits=WIRE_LIMITS)
        super().__init__("scripted", self.model, answering_model=self.model.model)

    def _decide(self, _request: ModelRequest) -> Reply | CallTools:
        return self._steps.popleft()

    def expect(self, answer: Answer, *, stream: bool) -> None:
        calls = [(call.name, json.loads(call.arguments_json)) for call in answer.calls]
        step = CallTools(*calls, text=answer.text) if calls else Reply(answer.text, answer.finish)
        self._steps.append(step)

    def expect_long_stream(self, answer: Answer) -> None:
        self.expect(answer, stream=True)

    async def released(self) -> None:
        # Nothing to release: the script runs in this task.
        return

    @property
    def served(self) -> int:
        return len(self.model.requests)


class WireRig(ScriptableRig):
    """An SDK adapter against the loopback server speaking its API (``fmt``)."""

    def __init__(
        self,
        kind: str,
        wire: WireServer,
        fmt: ModuleType,
        connect: Callable[[str, RecordingRetryPolicy, float], ModelProvider],
    ) -> None:
        self.wire = wire
        self.fmt = fmt
        self._connect = connect
        self._held = False
        policy = RecordingRetryPolicy(max_attempts=ATTEMPTS)
        super().__init__(kind, connect(wire.base_url, policy, TIMEOUT_S), answering_model=fmt.MODEL)
        self.policy = policy

    def connect(self, base_url: str, *, timeout_s: float = TIMEOUT_S) -> ModelProvider:
        """Another provider like this rig's, pointed at ``base_url`` (the caller closes it)."""
        return self._connect(base_url, self.policy, timeout_s)

    def expect(self, answer: Answer, *, stream: bool) -> None:
        self.wire.script(self.fmt.answer_reply(answer, stream=stream))

    def expect_long_stream(self, answer: Answer) -> None:
        self.wire.script(sse_reply(self.fmt.opening_events(answer), hold=True))
        self._held = True

    async def released(self) -> None:
        with anyio.fail_after(RELEASE_DEADLINE_S):
            if self._held:
                await self.wire.released.wait()
        await _no_connections_to(self.wire.port)

    @property
    def served(self) -> int:
        return len(self.wire.requests)


class LocalRig(Rig):
    """The OpenAI adapter against the local llama.cpp server: a real model, unscripted."""

    def __init__(self, local: LocalModel) -> None:
        self.local = local
        policy = RecordingRetryPolicy(max_attempts=ATTEMPTS)
        super().__init__("local", local.provider(retry=policy), answering_model=local.model)
        self.policy = policy

    def expect(self, answer: Answer, *, stream: bool) -> None:
        # The model answers for itself.
        return

    def expect_long_stream(self, answer: Answer) -> None:
        # Long enough by the request's output budget.
        return

    async def released(self) -> None:
        port = httpx.URL(self.local.base_url).port
        assert port is not None
        await _no_connections_to(port)


def build_rig(kind: str, *, wire: WireServer | None, local: LocalModel | None) -> Rig:
    """The rig named ``kind``; ``wire`` or ``local`` is its backend where it needs one."""
    if kind == "scripted":
        return ScriptedRig()
    if kind == "local":
        assert local is not None
        return LocalRig(local)
    assert wire is not None
    if kind == "openai":
        return WireRig(kind, wire, openai_chat, _openai)
    return WireRig(kind, wire, anthropic_messages, _anthropic)


@asynccontextmanager
async def openai_rig() -> AsyncIterator[WireRig]:
    """The OpenAI-compatible adapter against a loopback server of its own, closed after."""
    async with serve_wire() as wire:
        built = build_rig("openai", wire=wire, local=None)
        assert isinstance(built, WireRig)
        try:
            yield built
        finally:
            await built.aclose()


def _openai(base_url: str, policy: RecordingRetryPolicy, timeout_s: float) -> ModelProvider:
    return OpenAIChatProvider(
        model="gpt-4o",
        base_url=f"{base_url}/v1",
        api_key=API_KEY,
        retry=policy,
        timeout_s=timeout_s,
    )


def _anthropic(base_url: str, policy: RecordingRetryPolicy, timeout_s: float) -> ModelProvider:
    return AnthropicProvider(
        model=ANTHROPIC_MODEL,
        base_url=base_url,
        api_key=API_KEY,
        retry=policy,
        timeout_s=timeout_s,
    )


async def _no_connections_to(port: int) -> None:
    """Poll this process's TCP connections until none goes to ``port`` (closing is async)."""

    def count() -> int:
        connections: Any = psutil.Process().net_connections(kind="tcp")
        return sum(1 for c in connections if c.raddr and c.raddr.port == port)

    for _ in range(int(RELEASE_DEADLINE_S / RELEASE_POLL_S)):
        if not await anyio.to_thread.run_sync(count):
            return
        await anyio.sleep(RELEASE_POLL_S)
    raise AssertionError(f"a connection to port {port} is still open")
