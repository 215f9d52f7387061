"""The request/stream skeleton of the SDK-backed providers, and the draft it assembles.

``complete`` and ``stream`` are the same for every SDK adapter: build the
parameters from the ``ModelRequest``, send under ``call_with_retries``, draw
the line where a response has arrived (headers for ``complete``, the first
streamed item for ``stream``; nothing after it is sent again), fold what
arrives into a ``Draft``, and freeze the draft into the ``ModelResponse``.
A stream is closed (shielded from cancellation) however it ends, so a
cancelled or abandoned stream leaves no connection behind.

A vendor adapter supplies only what differs: its endpoint and parameters,
and how a whole body (``_read``) and one streamed item (``_apply``) fill the
draft. The draft is filled only through its methods (``add_text``,
``open_call``, ``identify``, ``add_fragment``, ``report_usage``), which hold
the response to the bounds of ``hostkit.adapters._bounds`` as it arrives: a
response past one fails at the item that passed it, with a ``ProviderError``
naming the bound, and nothing of it reaches the turn. Usage counts are taken
only as counts (``hostkit.adapters._usage``). A stream that stops before the
item marking the response finished (``Draft.ended``) was cut: it fails with a
``ProviderError`` too, so a partial answer's tool calls never run. So does one
that sends nothing new for ``timeout_s``: the HTTP client's read timeout is
reset by any byte, and a server or gateway that keeps an idle stream open
(SSE comments, Anthropic's ``ping`` events) would otherwise hold the turn for
ever. Only an item that moves the response on (``Draft.progress``, or output
the adapter does not keep, such as reasoning) restarts that deadline.
"""

from __future__ import annotations

import json
import logging
from abc import abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import anyio

from hostkit.adapters._bounds import OverBound, ResponseMeter, over_bound, refused
from hostkit.adapters._sdk import ClientT, SdkProvider
from hostkit.adapters._usage import token_count, unusable
from hostkit.errors import ProviderError
from hostkit.providers import call_with_retries, parse_tool_arguments, to_finish_reason
from hostkit.types import (
    MAX_CALL_ID_CHARS,
    MAX_TOKEN_COUNT,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolCall,
    Usage,
    malformed_arguments,
    not_an_object,
)

__all__ = ["Draft", "PartialCall", "SdkModelProvider"]

ItemT = TypeVar("ItemT")
_log = logging.getLogger(__name__)


class _ItemStream(Protocol):
    """An SDK's server-sent-event stream (``openai.AsyncStream``, ``anthropic.AsyncStream``)."""

    response: Any

    def __anext__(self) -> Awaitable[Any]: ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class PartialCall:
    """A tool call as far as it has arrived: id, name, argument JSON fragments.

    ``start_input`` is an input the provider sent whole (Anthropic's
    ``tool_use.input``); fragments, when any arrived, take precedence.
    """

    call_id: str = ""
    name: str = ""
    fragments: list[str] = field(default_factory=list)
    start_input: object = None

    def finish(self, call_id: str) -> ToolCall:
        """The call as ``call_id`` (unique within its response; see ``Draft.response``)."""
        raw = "".join(self.fragments)
        if raw or self.start_input is None:
            arguments = parse_tool_arguments(raw)
        elif isinstance(self.start_input, Mapping):
            # Held to the rules argument text is (too deep, ``1e999``, ``NaN``: malformed):
            # one refused call, not a ToolCall that fails to build and with it the turn.
            arguments = parse_tool_arguments(self.start_input)
        else:
            arguments = malformed_arguments(self.start_input, not_an_object(self.start_input))
        return ToolCall(call_id, self.name, arguments)


def _unique_ids(calls: list[PartialCall]) -> list[str]:
    """Each call's id, made unique within the response, in order.

    Each tool result answers one call by its id, so two calls under one id
    (a server's bug) would leave the model unable to tell the answers apart.
    A missing id (some local servers send none) becomes ``call_<position>``; a
    repeat gets ``_<position>`` appended (cut to fit ``MAX_CALL_ID_CHARS``),
    then a counter until it is unused: the same response always gets the same ids.
    """
    taken: set[str] = set()
    ids: list[str] = []
    for position, call in enumerate(calls):
        call_id = base = call.call_id or f"call_{position}"
        suffix, attempt = f"_{position}", 0
        while call_id in taken:
            call_id = f"{base[: MAX_CALL_ID_CHARS - len(suffix)]}{suffix}"
            attempt += 1
            suffix = f"_{position}_{attempt}"
        taken.add(call_id)
        ids.append(call_id)
    return ids


@dataclass(slots=True)
class Draft:
    """What a response has delivered so far, in provider-neutral terms.

    ``tokens`` holds the reported counts (filled by ``report_usage``).
    ``count`` is the number of streamed items folded in; ``gains`` how many
    times one of the methods below added something (text, a call, an id or a
    name, a fragment, a changed count). ``ended`` says the
    provider marked the response finished (a finish reason on a choice, a
    ``message_stop``): a stream that stops before then was cut, and is no
    answer. ``meter`` counts the calls and bytes against the response bounds;
    the methods that add to the draft raise ``OverBound`` past one.
    """

    request_id: str | None = None
    response_id: str | None = None
    model: str | None = None
    text: list[str] = field(default_factory=list)
    calls: dict[int, PartialCall] = field(default_factory=dict)
    finish: str | None = None
    tokens: dict[str, int] = field(default_factory=dict)
    count: int = 0
    gains: int = 0
    ended: bool = False
    meter: ResponseMeter = field(default_factory=ResponseMeter)
    # The call opened last, which a tool-call fragment naming no call continues.
    last_call: int | None = None
    # Usage fields that arrived as no count: what each was (never its value).
    unusable_usage: dict[str, str] = field(default_factory=dict)

    def progress(self) -> tuple[int, str | None, bool]:
        """A mark that changes whenever the response moves on; a keep-alive leaves it as it was."""
        return (self.gains, self.finish, self.ended)

    def add_text(self, text: str) -> str:
        """Append a text delta (or a whole body's text); return it."""
        self.text.append(self.meter.add(text))
        self.gains += bool(text)
        return text

    def open_call(
        self,
        index: int,
        *,
        call_id: str | None = None,
        name: str | None = None,
        fragments: tuple[str, ...] = (),
        start_input: object = None,
    ) -> PartialCall:
        """Start the call at ``index`` afresh (a whole call, or a streamed block's start).

        A missing id or name (some local servers send none) is kept as "".
        """
        if index not in self.calls:
            self.meter.open_call()
        call = PartialCall(self.meter.call_id(call_id or ""), self.meter.name(name or ""))
        for fragment in fragments:
            call.fragments.append(self.meter.add(fragment))
        if start_input:
            # Sent whole, and parsed by the SDK already: counted as the JSON it came as. The
            # empty input a streamed block starts with is not: its fragments replace it.
            self.meter.add(json.dumps(start_input, default=str, ensure_ascii=False))
        call.start_input = start_input
        self.calls[index] = call
        self.last_call = index
        self.gains += 1
        return call

    def call(self, index: int) -> PartialCall:
        """The call at ``index``, started empty when it is new."""
        found = self.calls.get(index)
        return found if found is not None else self.open_call(index)

    def identify(self, call: PartialCall, *, call_id: str | None, name: str | None) -> None:
        """Give ``call`` the id and name it does not have yet (the first ones sent stand)."""
        known = (call.call_id, call.name)
        call.call_id = call.call_id or self.meter.call_id(call_id or "")
        call.name = call.name or self.meter.name(name or "")
        self.gains += (call.call_id, call.name) != known

    def add_fragment(self, call: PartialCall, fragment: str) -> None:
        """Append one fragment of ``call``'s argument JSON."""
        call.fragments.append(self.meter.add(fragment))
        self.gains += bool(fragment)

    def report_usage(self, counts: Mapping[str, object]) -> None:
        """Take reported counts under ``input``, ``output``, ``cache_read``, ``cache_write``.

        A later report of a field replaces an earlier one; None (not reported)
        is skipped. A value that is no token count (``hostkit.adapters._usage``)
        counts as 0 and is named in one warning when the response is frozen.
        """
        for key, value in counts.items():
            if value is None:
                continue
            count = token_count(value)
            if count is None:
                self.unusable_usage[key] = unusable(value)
            self.gains += self.tokens.get(key) != (count or 0)
            self.tokens[key] = count or 0

    def response(self, *, provider: str, model: str, cache_in_input: bool) -> ModelResponse:
        """Freeze the draft; ``cache_in_input`` says the reported input already counts the cache."""
        if self.unusable_usage:
            shown = ", ".join(
                f"{key} was {what}" for key, what in sorted(self.unusable_usage.items())
            )
            _log.warning(
                "%s reported usage that is no token count (%s): counted as 0", provider, shown
            )
        calls = [call for _, call in sorted(self.calls.items())]
        return ModelResponse(
            text="".join(self.text),
            tool_calls=tuple(
                call.finish(call_id)
                for call, call_id in zip(calls, _unique_ids(calls), strict=True)
            ),
            usage=self._usage(cache_in_input=cache_in_input),
            finish_reason=to_finish_reason(self.finish),
            provider=provider,
            # The SDKs build their objects unvalidated: a server's non-text model is not kept.
            model=self.model if isinstance(self.model, str) and self.model else model,
            provider_request_id=self.request_id or self.response_id or None,
        )

    def _usage(self, *, cache_in_input: bool) -> Usage:
        # hostkit's input_tokens is every prompt token the model read, cache hits and writes
        # included: what context calibration compares its estimate against.
        read = self.tokens.get("cache_read", 0)
        write = self.tokens.get("cache_write", 0)
        prompt = self.tokens.get("input", 0)
        return Usage(
            # Each part is within the bound a count is held to; so is their sum.
            input_tokens=prompt if cache_in_input else min(prompt + read + write, MAX_TOKEN_COUNT),
            output_tokens=self.tokens.get("output", 0),
            cache_read_tokens=read,
            cache_write_tokens=write,
        )


class SdkModelProvider(SdkProvider[ClientT], Generic[ClientT, ItemT]):
    """``complete`` and ``stream`` over an SDK whose streams yield items of type ``ItemT``.

    ``_apply`` sets ``Draft.ended`` at the item that marks the response finished.
    """

    # What one streamed item is called in messages ("chunk", "event").
    _unit: ClassVar[str]
    # Whether the API's input count already includes cached prompt tokens.
    _cache_in_input: ClassVar[bool]
    # Parameters a streamed request adds besides ``stream=True``.
    _stream_params: ClassVar[Mapping[str, Any]] = {}
    # The name the output budget is sent under (an adapter may choose per server).
    _max_tokens_key: str = "max_tokens"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one request; see ``ModelProvider`` for errors and retries."""
        client = await self._sdk()
        params = self._params(request, stream=False)

        async def attempt() -> ModelResponse:
            try:
                async with self._endpoint(client).with_streaming_response.create(**params) as raw:
                    # The status line and headers are in: from here on, nothing is re-sent.
                    try:
                        draft = Draft(request_id=self._request_id(raw.request_id))
                        self._read(await raw.parse(), draft)
                        return self._response(draft)
                    except OverBound as exc:
                        raise refused(exc, provider=self._name) from exc
                    except Exception as exc:
                        raise self._arrived_error("unreadable response", exc) from exc
            except OverBound as exc:
                # An error status whose body the SDK read past the wire bound.
                raise refused(exc, provider=self._name) from exc
            except self._errors.base as exc:
                raise self._error(exc) from exc
            except (ValueError, TypeError) as exc:
                raise self._unsendable(exc) from exc

        return await call_with_retries(attempt, policy=self._retry)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Yield text deltas, then one ``done`` event with the full normalized response.

        Failures before the first item are retried like ``complete``; once an
        item has arrived a failure (a dropped connection, an ``error`` event,
        ``timeout_s`` without progress) raises ``ProviderError`` and nothing is
        re-sent. Close the iterator (``contextlib.aclosing``) if you stop early.
        """
        client = await self._sdk()
        params = self._params(request, stream=True)

        async def open_stream() -> tuple[_ItemStream, Draft, str]:
            try:
                items: _ItemStream = await self._endpoint(client).create(**params)
            except OverBound as exc:
                raise refused(exc, provider=self._name) from exc
            except self._errors.base as exc:
                raise self._error(exc) from exc
            except (ValueError, TypeError) as exc:
                raise self._unsendable(exc) from exc
            draft = Draft(
                request_id=self._request_id(items.response.headers.get(self._request_id_header))
            )
            try:
                first = await self._pull(items, draft)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await items.close()
                raise
            return items, draft, first or ""

        items, draft, text = await call_with_retries(open_stream, policy=self._retry)
        try:
            while True:
                if text:
                    yield StreamEvent(kind="text", text=text)
                pulled = await self._pull(items, draft)
                if pulled is None:
                    break
                text = pulled
        finally:
            with anyio.CancelScope(shield=True):
                await items.close()
        try:
            response = self._response(draft)
        except Exception as exc:
            # Whatever the stream held that no response can (the draft's bounds and
            # fallbacks should leave nothing): the turn gets a ProviderError, not a crash.
            raise self._arrived_error("unusable streamed response", exc) from exc
        yield StreamEvent(kind="done", response=response)

    def _params(self, request: ModelRequest, *, stream: bool) -> dict[str, Any]:
        try:
            wire = self._wire_request(request)
        except (ValueError, TypeError) as exc:
            raise self._unsendable(exc) from exc
        params: dict[str, Any] = {
            "model": self._model,
            self._max_tokens_key: request.max_output_tokens,
            **wire,
        }
        if stream:
            params.update(stream=True, **self._stream_params)
        return params

    def _unsendable(self, exc: Exception) -> ProviderError:
        """A request that could not be built or encoded (a value JSON cannot carry).

        Nothing was sent, and the same request would fail the same way: never retried.
        """
        message = f"request could not be encoded ({type(exc).__name__}): {self._redact(exc)}"
        return ProviderError(message, provider=self._name)

    def _response(self, draft: Draft) -> ModelResponse:
        # The body's id is header-like text the server chose: scrubbed and bounded as one.
        draft.response_id = self._request_id(draft.response_id)
        return draft.response(
            provider=self._name, model=self._model, cache_in_input=self._cache_in_input
        )

    async def _pull(self, items: _ItemStream, draft: Draft) -> str | None:
        """Read items into ``draft`` until one moves the response on; its text delta, or None
        at the end of the stream.

        Fails once ``timeout_s`` passes without such an item: keep-alives (SSE
        comments, which the SDK drops, and ``ping`` events, which add nothing)
        reset the HTTP client's read timeout but not this deadline.
        """
        with anyio.move_on_after(self._timeout_s):
            while True:
                before = draft.progress()
                item = await self._next(items, draft)
                if item is None:
                    return None
                text = self._fold(item, draft)
                if text or draft.progress() != before or self._unkept_output(item):
                    return text
        stalled = TimeoutError(f"timed out: nothing new for {self._timeout_s:g}s")
        raise self._broke_off(stalled, draft) from None

    async def _next(self, items: _ItemStream, draft: Draft) -> ItemT | None:
        """The next item, or None at the end of a stream whose response finished."""
        try:
            item: ItemT = await items.__anext__()
        except StopAsyncIteration:
            if draft.count == 0:
                message = f"stream ended before any {self._unit}"
                raise ProviderError(message, provider=self._name) from None
            if not draft.ended:
                # Cut (a proxy's timeout, a server that died mid-answer): what arrived is
                # not the answer, and its tool calls may lack the rest of the response.
                # Never retried: the request reached the provider and did its work.
                message = "stream ended before the response was finished"
                raise ProviderError(message, provider=self._name, status=200) from None
            return None
        except (self._errors.connection, *self._errors.transport) as exc:
            raise self._broke_off(exc, draft) from exc
        except Exception as exc:
            # Past the wire bound (``hostkit.adapters._wire``) too: a refusal, never retried.
            raise self._arrived_error("stream failed", exc) from exc
        draft.count += 1
        return item

    def _broke_off(self, exc: BaseException, draft: Draft) -> ProviderError:
        """The stream stopped delivering (dropped, timed out): retried only before any item."""
        if draft.count == 0 and over_bound(exc) is None:
            # Headers arrived but no item did: nothing was generated for us, so retry.
            message = f"connection lost: {self._redact(exc)}"
            return ProviderError(message, provider=self._name, retryable=True)
        return self._arrived_error("stream broke off", exc)

    def _fold(self, item: ItemT, draft: Draft) -> str:
        """``_apply`` with its failures mapped; the item's text delta."""
        try:
            return self._apply(item, draft)
        except OverBound as exc:
            # Never retried, even on the first item: the same request would flood again.
            raise refused(exc, provider=self._name) from exc
        except Exception as exc:
            raise self._arrived_error(f"malformed stream {self._unit}", exc) from exc

    def _unkept_output(self, item: ItemT) -> bool:
        """Whether ``item`` carries model output the draft does not keep (reasoning, say).

        Such an item is progress all the same: a model that thinks for longer
        than ``timeout_s`` before it answers is not stalled.
        """
        return False

    @abstractmethod
    def _endpoint(self, client: ClientT) -> Any:
        """The SDK resource with ``create`` and ``with_streaming_response.create``."""

    @abstractmethod
    def _wire_request(self, request: ModelRequest) -> dict[str, Any]:
        """The request's messages, tools and options in the API's shape (no model, no budget)."""

    @abstractmethod
    def _read(self, body: object, draft: Draft) -> None:
        """Fill ``draft`` from a whole response body; raise ``TypeError`` for a wrong shape.

        Fill it through its methods (``add_text``, ``open_call``), which bound it.
        """

    @abstractmethod
    def _apply(self, item: ItemT, draft: Draft) -> str:
        """Fold one streamed item into ``draft``; return its text delta ("" for none).

        Fold it through the draft's methods, which raise ``OverBound`` past a
        bound, and set ``draft.ended`` at the item that finishes the response.
        """
