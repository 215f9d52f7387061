"""ScriptedModel: a deterministic ModelProvider that plays a script.

For tests, demos and notebooks: each provider call consumes the next step of
the script (a reply, tool calls, a failure, or a callable that decides). Usage
is estimated deterministically from the request and reply sizes so budgets and
inspectors show real numbers. It is never a silent default: a Host uses it only
where the configuration names ``kind = "scripted"`` or a test supplies it. Its
responses are held to the same bounds as every adapter's
(``hostkit.adapters._bounds``): a step past one fails as the SDK adapters do.
"""

from __future__ import annotations

import inspect
import json
import operator
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from hostkit.adapters._base import ProviderBase
from hostkit.adapters._bounds import OverBound, ResponseMeter, refused
from hostkit.effects import provider_name
from hostkit.errors import InvalidValue, ProviderError
from hostkit.freeze import thaw
from hostkit.types import (
    NO_ATTACHMENTS,
    AttachmentSupport,
    FinishReason,
    ModelLimits,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolCall,
    Usage,
    is_count,
    new_id,
)

__all__ = ["CallTools", "Fail", "Reply", "ScriptStep", "ScriptedModel"]

_CONTENT = operator.attrgetter("content")


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer with text and stop; ``finish_reason="length"`` plays an answer cut at the limit."""

    text: str
    finish_reason: FinishReason = "stop"

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InvalidValue("Reply text must be a str")
        if self.finish_reason not in get_args(FinishReason):
            raise InvalidValue(f"Reply finish_reason must be one of {get_args(FinishReason)}")


@dataclass(frozen=True, slots=True)
class CallTools:
    """Ask for tool calls: each item is ``(tool_name, arguments)``; the name is the effect's
    (``files.write``) or the one a provider is offered for it (``files_write``)."""

    calls: tuple[tuple[str, Mapping[str, Any]], ...]
    text: str = ""

    def __init__(self, *calls: tuple[str, Mapping[str, Any]], text: str = "") -> None:
        # Checked here, not at the first model call: CallTools("t", {...}) is a common slip.
        for call in calls:
            if not (
                isinstance(call, tuple)
                and len(call) == 2
                and isinstance(call[0], str)
                and isinstance(call[1], Mapping)
            ):
                raise InvalidValue("each CallTools item is a (tool_name, arguments) tuple")
        if not isinstance(text, str):
            raise InvalidValue("CallTools text must be a str")
        object.__setattr__(self, "calls", tuple(calls))
        object.__setattr__(self, "text", text)


@dataclass(frozen=True, slots=True)
class Fail:
    """Raise ``error`` from the provider call (a ``ProviderError`` unless given)."""

    error: BaseException = field(
        default_factory=lambda: ProviderError("scripted failure", provider="scripted")
    )

    def __post_init__(self) -> None:
        if not isinstance(self.error, BaseException):
            raise InvalidValue("Fail takes an exception to raise, not a message")


Decider = Callable[[ModelRequest], "ScriptStep | Awaitable[ScriptStep]"]
ScriptStep = Reply | CallTools | Fail | str | Decider


def _estimate(chars: int) -> int:
    """Tokens of ``chars`` characters, as a rough provider would count them."""
    return max(1, chars // 4)


def _json(arguments: Mapping[str, Any]) -> str:
    """Arguments as the JSON a provider would have sent them in (what the byte bound counts)."""
    return json.dumps(thaw(arguments), default=str, ensure_ascii=False, skipkeys=True)


def _offered(name: str, offered: set[str]) -> str:
    """``name``, or the provider-visible name of the effect it names when only that is offered."""
    if name in offered or not isinstance(name, str):
        return name
    visible = provider_name(name)
    return visible if visible in offered else name


class ScriptedModel(ProviderBase):
    """A ModelProvider whose answers come from a script, one step per call.

    ``requests`` records the last ``keep_requests`` ModelRequests received, so
    tests can assert what the ContextManager prepared without a long-running
    scripted Host growing without bound. ``repeat_last`` keeps answering with the last
    step instead of failing when the script runs out. Like every provider, it
    refuses requests once closed. It accepts no attachments unless
    ``attachments`` says which (a test of what reaches the provider). A step
    past a response bound (more than 64 calls, a name past 64 characters,
    more than 4 MiB of text and argument JSON) raises ``ProviderError``.
    """

    def __init__(
        self,
        script: Sequence[ScriptStep],
        *,
        name: str = "scripted",
        model: str = "scripted-1",
        limits: ModelLimits | None = None,
        repeat_last: bool = False,
        keep_requests: int = 1_000,
        attachments: AttachmentSupport = NO_ATTACHMENTS,
    ) -> None:
        super().__init__(
            name=name,
            model=model,
            limits=limits or ModelLimits(context_window=8192, max_output_tokens=1024),
            attachments=attachments,
        )
        if not isinstance(repeat_last, bool):
            raise InvalidValue("repeat_last must be True or False")
        # A bare string would be a script of one-character replies.
        if isinstance(script, str | bytes) or not isinstance(script, Sequence):
            raise InvalidValue("the script is a list of steps (Reply, CallTools, Fail, str, ...)")
        for step in script:
            if not (isinstance(step, Reply | CallTools | Fail | str) or callable(step)):
                raise InvalidValue(f"a script step cannot be a {type(step).__name__}")
        if not is_count(keep_requests, low=0, high=1_000_000):
            raise InvalidValue("keep_requests must be an integer from 0 to 1000000")
        self._script = list(script)
        self._repeat_last = repeat_last
        self._position = 0
        self._keep = keep_requests
        self.requests: list[ModelRequest] = []
        self.closed = False

    async def _next_step(self, request: ModelRequest) -> Reply | CallTools | Fail:
        if self.closed:
            raise ProviderError("provider is closed", provider=self._name)
        self.requests.append(request)
        while len(self.requests) > self._keep:
            del self.requests[0]
        if self._position >= len(self._script):
            if not (self._repeat_last and self._script):
                raise ProviderError("the script has no more steps", provider=self._name)
            step = self._script[-1]
        else:
            step = self._script[self._position]
            self._position += 1
        while callable(step) and not isinstance(step, Reply | CallTools | Fail | str):
            decided = step(request)
            step = await decided if inspect.isawaitable(decided) else decided
        return Reply(step) if isinstance(step, str) else step

    def _respond(self, request: ModelRequest, step: Reply | CallTools) -> ModelResponse:
        # Counted, not joined: a long window costs one pass and no copy of its text, and
        # that pass runs in C (a window of hundreds of messages, at every step).
        prompt_chars = sum(map(len, map(_CONTENT, request.messages))) + sum(
            len(t.name) + len(t.description) for t in request.tools
        )
        calls = self._bounded(step, {t.name for t in request.tools})
        finish: FinishReason = step.finish_reason if isinstance(step, Reply) else "tool_calls"
        text = step.text
        output = text + "".join(call.name for call in calls)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=Usage(input_tokens=_estimate(prompt_chars), output_tokens=_estimate(len(output))),
            finish_reason=finish,
            provider=self._name,
            model=self._model,
            provider_request_id=new_id("scripted"),
        )

    def _bounded(self, step: Reply | CallTools, offered: set[str]) -> tuple[ToolCall, ...]:
        """The step's calls, its text and calls held to the response bounds like any adapter's.

        A call may name the effect (``files.write``) where a provider sends the name it
        was offered (``files_write``): the offered name is sent, as a real model would.
        """
        meter = ResponseMeter()
        scripted = (
            tuple((_offered(name, offered), args) for name, args in step.calls)
            if isinstance(step, CallTools)
            else ()
        )
        try:
            meter.add(step.text)
            # Count and names first: a flood fails before a single call is built.
            for name, _ in scripted:
                meter.open_call()
                meter.name(name)
            calls = tuple(ToolCall(new_id("call"), name, args) for name, args in scripted)
            for call in calls:
                # Built, so nested no deeper than any encoder can follow.
                meter.add(_json(call.arguments))
        except OverBound as exc:
            raise refused(exc, provider=self._name) from exc
        return calls

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The next step's response, or its failure raised."""
        step = await self._next_step(request)
        if isinstance(step, Fail):
            raise step.error
        return self._respond(request, step)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """The next step's text word by word, then ``done``; a failure raises before any text."""
        step = await self._next_step(request)
        if isinstance(step, Fail):
            raise step.error
        response = self._respond(request, step)
        words = response.text.split(" ")
        for index, word in enumerate(words):
            chunk = word if index == len(words) - 1 else word + " "
            if chunk:
                yield StreamEvent(kind="text", text=chunk)
        yield StreamEvent(kind="done", response=response)

    async def aclose(self) -> None:
        """Refuse further requests; idempotent."""
        self.closed = True
