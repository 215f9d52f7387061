"""The ModelProvider contract, one suite over every adapter.

Rigs (``tests.wire.rigs``): ``scripted`` (``ScriptedModel``), ``openai`` and
``anthropic`` (the SDK adapters against a loopback server speaking each API),
``local`` (the OpenAI adapter against llama.cpp with SmolLM2; slow). A test
runs on every rig its promise can be checked on:

- ``EVERY``: what any answer shows (stream order and assembly, usage, limits,
  closing a stream early);
- ``SCRIPTABLE``: what needs a scripted answer (tool calls, refusal after close);
- ``HTTP``: what needs a real connection (cancellation, output budget, overflow);
- ``WIRE``: what needs a scripted server (exact normalization, retries, statuses,
  malformed bodies and streams).

Vendor-only behaviour (wire mapping of messages and tools, credentials,
default limits, vendor-specific error prose) stays in ``test_provider_openai``,
``test_provider_anthropic`` and ``test_local_model``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import logging
import math
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from functools import cache, partial
from typing import Any, get_args

import anyio
import pytest

from hostkit.adapters._wire import _DECODED, MAX_EVENT_BYTES, MAX_WIRE_BYTES
from hostkit.adapters.local_llama import LocalModel
from hostkit.errors import MAX_RETRY_AFTER_S, MESSAGE_LIMIT, ContextOverflow, ProviderError
from hostkit.freeze import FrozenMap
from hostkit.providers import ModelProvider
from hostkit.types import (
    MAX_TOKEN_COUNT,
    FinishReason,
    MalformedArguments,
    ModelLimits,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolCall,
    Usage,
)
from tests.parts import local_model_missing, needs
from tests.wire import Reply, WireServer, serve_wire, sse_reply, text_reply
from tests.wire.rigs import API_KEY, ATTEMPTS, Rig, ScriptableRig, WireRig, build_rig
from tests.wire.scenario import Answer, Call

pytestmark = pytest.mark.anyio

LOCAL = pytest.param(
    "local",
    marks=[
        pytest.mark.slow,
        needs("local-model", local_model_missing()),
    ],
)
EVERY = ["scripted", "openai", "anthropic", LOCAL]
SCRIPTABLE = ["scripted", "openai", "anthropic"]
HTTP = ["openai", "anthropic", LOCAL]
WIRE = ["openai", "anthropic"]
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])

# temperature 0: the local model gives the same answer to the same prompt, so failures reproduce.
ASK = ModelRequest(
    messages=(ModelMessage(role="user", content="Name three colours of the rainbow."),),
    max_output_tokens=24,
    temperature=0.0,
)
LONG = ModelRequest(
    messages=(ModelMessage(role="user", content="Write a long story about a lighthouse keeper."),),
    max_output_tokens=96,
    temperature=0.0,
)
# Well past the local model's 2048-token window whatever the tokenizer; the wire servers refuse
# whatever they are sent.
TOO_LONG = ModelRequest(messages=(ModelMessage(role="user", content="word " * 5000),))
# The stall tests' timeout_s, and the pace of their keep-alives and slow streams (inside it).
STALL_S = 1.0
PACE_S = 0.3
# An SSE comment, which every SDK drops: a keep-alive before any item.
COMMENT = b": keep-alive\n\n"
# One word a delta: ScriptedModel streams its text split at spaces.
TEXT = Answer(deltas=("Red, ", "orange ", "and ", "yellow."), usage=Usage(19, 10))
TOOLS = Answer(
    deltas=("Checking ", "both."),
    calls=(
        Call.of("call_a", "get_weather", {"city": "Paris"}),
        Call.of("call_b", "get_weather", {"city": "Oslo"}),
    ),
    finish="tool_calls",
    usage=Usage(
        input_tokens=2006, output_tokens=300, cache_read_tokens=1920, cache_write_tokens=64
    ),
    request_id="req_stream",
)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # The module-scoped local server below needs the backend fixture at the same scope.
    return "asyncio"


@pytest.fixture(scope="module")
async def local_model() -> AsyncIterator[LocalModel]:
    async with LocalModel.start() as running:
        yield running


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The rig's kind and its backend, fetched only for the rigs that need one.

    A plain fixture, so that it can ask for the module's local server (started
    at most once, and only when a ``local`` test runs) or a fresh wire server.
    """
    kind = request.param
    return {
        "kind": kind,
        "wire": request.getfixturevalue("wire") if kind in ("openai", "anthropic") else None,
        "local": request.getfixturevalue("local_model") if kind == "local" else None,
    }


@pytest.fixture
async def rig(backend: dict[str, Any]) -> AsyncIterator[Rig]:
    built = build_rig(backend["kind"], wire=backend["wire"], local=backend["local"])
    try:
        yield built
    finally:
        await built.aclose()


def rigs(kinds: list[Any]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("backend", kinds, indirect=True)


async def collect(provider: ModelProvider, request: ModelRequest) -> list[StreamEvent]:
    async with aclosing(provider.stream(request)) as events:
        return [event async for event in events]


async def collect_into(
    seen: list[StreamEvent], provider: ModelProvider, request: ModelRequest
) -> None:
    """Like ``collect`` but keeps what arrived before a failure."""
    async with aclosing(provider.stream(request)) as events:
        async for event in events:
            seen.append(event)


def done(events: list[StreamEvent]) -> ModelResponse:
    assert [event.kind for event in events].count("done") == 1
    assert events[-1].kind == "done"
    assert events[-1].response is not None
    return events[-1].response


async def answer(rig: Rig, request: ModelRequest, *, stream: bool) -> ModelResponse:
    if stream:
        return done(await collect(rig.provider, request))
    return await rig.provider.complete(request)


def running_tasks() -> set[asyncio.Task[Any]]:
    return set(asyncio.all_tasks())


async def no_tasks_left_beyond(before: set[asyncio.Task[Any]]) -> None:
    """Wait (bounded) until every task started since ``before`` has finished."""
    left: set[asyncio.Task[Any]] = set()
    for _ in range(250):
        left = {task for task in running_tasks() - before if not task.done()}
        left.discard(asyncio.current_task())  # type: ignore[arg-type]
        if not left:
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"tasks left behind: {left}")


def assert_text_answer(response: ModelResponse, rig: Rig, request: ModelRequest) -> None:
    """What any plain-text answer to ``request`` satisfies, scripted or live."""
    assert response.text.strip()
    assert response.tool_calls == ()
    assert response.usage.input_tokens > 0
    assert 0 < response.usage.output_tokens <= request.max_output_tokens
    assert response.usage.cache_read_tokens + response.usage.cache_write_tokens <= (
        response.usage.input_tokens
    )
    assert response.finish_reason in ("stop", "length")
    assert response.provider == rig.provider.name
    assert response.model == rig.answering_model
    assert response.provider_request_id


# -- every adapter ---------------------------------------------------------------------------


@rigs(EVERY)
async def test_adapter_satisfies_the_protocol_with_normalized_limits(rig: Rig) -> None:
    assert isinstance(rig.provider, ModelProvider)
    assert rig.provider.name
    assert rig.provider.model
    limits = rig.provider.limits
    assert isinstance(limits, ModelLimits)
    assert 0 < limits.max_output_tokens < limits.context_window


@rigs(EVERY)
async def test_stream_yields_text_in_order_then_one_done_that_assembles_it(rig: Rig) -> None:
    rig.expect(TEXT, stream=True)
    events = await collect(rig.provider, ASK)
    response = done(events)
    texts = [event.text for event in events[:-1]]
    assert all(event.kind == "text" for event in events[:-1])
    assert len(texts) >= 2, "a streamed answer arrives in several increments"
    assert all(texts)
    assert response.text == "".join(texts)
    assert_text_answer(response, rig, ASK)


@rigs(EVERY)
async def test_complete_returns_what_the_stream_assembles(rig: Rig) -> None:
    rig.expect(TEXT, stream=False)
    rig.expect(TEXT, stream=True)
    whole = await rig.provider.complete(ASK)
    streamed = done(await collect(rig.provider, ASK))
    assert_text_answer(whole, rig, ASK)
    # Request ids are per request, and so is how much of the prompt a server read from
    # its cache (the local server caches the first request's prompt for the second);
    # everything else is the same answer.
    assert _per_answer(whole) == _per_answer(streamed)


def _per_answer(response: ModelResponse) -> ModelResponse:
    usage = dataclasses.replace(response.usage, cache_read_tokens=0, cache_write_tokens=0)
    return dataclasses.replace(response, provider_request_id=None, usage=usage)


@rigs(EVERY)
async def test_closing_a_stream_early_releases_it(rig: Rig) -> None:
    rig.expect_long_stream(TEXT)
    before = running_tasks()
    async with aclosing(rig.provider.stream(LONG)) as events:
        first = await anext(events)
    assert first.kind == "text"
    assert first.text
    await rig.released()
    await no_tasks_left_beyond(before)


# -- adapters with a connection --------------------------------------------------------------


@rigs(HTTP)
async def test_cancelling_a_stream_mid_answer_releases_it(rig: Rig) -> None:
    rig.expect_long_stream(TEXT)
    seen: list[StreamEvent] = []
    first = anyio.Event()
    before = running_tasks()

    async def consume() -> None:
        # No aclosing: cancellation alone must close the stream.
        async for event in rig.provider.stream(LONG):
            seen.append(event)
            first.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(consume)
        await first.wait()
        tasks.cancel_scope.cancel()

    assert seen
    assert all(event.kind == "text" for event in seen)
    await rig.released()
    await no_tasks_left_beyond(before)


@rigs(HTTP)
async def test_output_budget_ends_the_answer_with_length(rig: Rig) -> None:
    budget = dataclasses.replace(LONG, max_output_tokens=4)
    rig.expect(Answer(deltas=("Once ", "upon "), finish="length", usage=Usage(20, 4)), stream=False)
    response = await rig.provider.complete(budget)
    assert response.finish_reason == "length"
    assert response.usage.output_tokens == 4


@rigs(HTTP)
@STREAMED
async def test_context_overflow_is_typed_and_never_retried(rig: Rig, stream: bool) -> None:
    if isinstance(rig, WireRig):
        rig.wire.script(rig.fmt.overflow_reply())
    with pytest.raises(ContextOverflow) as raised:
        await answer(rig, TOO_LONG, stream=stream)
    assert raised.value.provider == rig.provider.name
    assert raised.value.status == 400
    assert raised.value.retryable is False
    assert rig.policy.waits == []


# -- adapters whose answers can be scripted --------------------------------------------------


@rigs(SCRIPTABLE)
@STREAMED
async def test_tool_calls_arrive_with_their_arguments(rig: ScriptableRig, stream: bool) -> None:
    rig.expect(TOOLS, stream=stream)
    response = await answer(rig, ASK, stream=stream)
    assert response.text == "Checking both."
    assert response.finish_reason == "tool_calls"
    assert [(call.name, dict(call.arguments)) for call in response.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Oslo"}),
    ]
    ids = [call.call_id for call in response.tool_calls]
    assert all(ids)
    assert len(set(ids)) == len(ids)


@rigs(SCRIPTABLE)
async def test_closing_is_idempotent_and_a_closed_provider_refuses_requests(
    rig: ScriptableRig,
) -> None:
    rig.expect(TEXT, stream=False)
    await rig.provider.complete(ASK)
    await rig.provider.aclose()
    await rig.provider.aclose()
    with pytest.raises(ProviderError, match="closed"):
        await rig.provider.complete(ASK)
    with pytest.raises(ProviderError, match="closed"):
        await collect(rig.provider, ASK)
    assert rig.served == 1


# -- SDK adapters against a scripted server --------------------------------------------------


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize("scripted", [TEXT, TOOLS], ids=["text", "tools"])
async def test_answer_is_normalized_exactly(rig: WireRig, stream: bool, scripted: Answer) -> None:
    """Text, tool calls with the server's ids, usage with the cache counted in, header id."""
    rig.expect(scripted, stream=stream)
    events = await collect(rig.provider, ASK) if stream else []
    response = done(events) if stream else await rig.provider.complete(ASK)
    assert response == scripted.response(provider=rig.provider.name, model=rig.answering_model)
    assert [event.text for event in events[:-1]] == list(scripted.deltas if stream else ())


@rigs(WIRE)
@STREAMED
async def test_request_id_falls_back_to_the_response_id(rig: WireRig, stream: bool) -> None:
    rig.expect(dataclasses.replace(TEXT, request_id=None, response_id="resp_xyz"), stream=stream)
    assert (await answer(rig, ASK, stream=stream)).provider_request_id == "resp_xyz"


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize("finish", get_args(FinishReason))
async def test_finish_reasons_are_normalized(rig: WireRig, stream: bool, finish: str) -> None:
    rig.expect(dataclasses.replace(TEXT, finish=finish), stream=stream)
    assert (await answer(rig, ASK, stream=stream)).finish_reason == finish


@rigs(WIRE)
async def test_streamed_tool_arguments_that_are_not_json_are_kept_malformed(rig: WireRig) -> None:
    broken = Call("call_1", "get_weather", ('{"city": ', '"Par'))
    rig.expect(Answer(calls=(broken,), finish="tool_calls"), stream=True)
    response = done(await collect(rig.provider, ASK))
    [arguments] = [call.arguments for call in response.tool_calls]
    assert isinstance(arguments, MalformedArguments)
    assert arguments.text == '{"city": "Par'
    assert arguments.reason.startswith("are cut off before their JSON ends")


def sent_back_arguments(rig: WireRig) -> list[object]:
    """The arguments of every assistant tool call the last request sent, as the API holds them:
    OpenAI's argument text parsed, Anthropic's ``tool_use.input`` as it is."""
    body = rig.wire.requests[-1].body
    if rig.kind == "openai":
        return [
            json.loads(call["function"]["arguments"])
            for message in body["messages"]
            for call in message.get("tool_calls") or ()
        ]
    return [
        block["input"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_use"
    ]


@rigs(WIRE)
@STREAMED
async def test_a_malformed_call_is_sent_back_as_the_text_the_model_sent(
    rig: WireRig, stream: bool
) -> None:
    """In the ``{"_raw": text}`` form every API carries (an OpenAI-compatible server may
    parse a call's argument text, Anthropic's ``input`` is an object), never as a
    well-formed object of the model's making."""
    malformed = MalformedArguments('{"city": "Par', "are cut off before their JSON ends")
    history = ModelRequest(
        messages=(
            ASK.messages[0],
            ModelMessage("assistant", tool_calls=(ToolCall("c1", "get_weather", malformed),)),
            ModelMessage(role="tool", content="[invalid] ...", tool_call_id="c1"),
        ),
        max_output_tokens=24,
    )
    rig.expect(TEXT, stream=stream)
    assert (await answer(rig, history, stream=stream)).text == TEXT.text
    assert sent_back_arguments(rig) == [{"_raw": '{"city": "Par'}]


# Valid JSON number syntax (or what Python's json reads besides) that no strict encoder
# writes back: kept, it would fail the encoding of every later request of the conversation.
UNENCODABLE = ['{"x": 1e999}', '{"x": NaN, "s": "a"}', '{"x": [-Infinity]}', '{"x": -1e400}']


def sent_as_strict_json(body: object) -> str:
    """The request body as a strict encoder writes it (raises if it holds inf or NaN)."""
    return json.dumps(body, allow_nan=False)


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize("arguments", UNENCODABLE)
async def test_tool_arguments_holding_numbers_json_cannot_carry_are_kept_raw(
    rig: WireRig, stream: bool, arguments: str
) -> None:
    """Whether the text arrives in fragments or the SDK parsed a whole ``input``: one
    ``MalformedArguments`` call the effect runtime refuses as invalid, never an infinity."""
    call = Call("call_1", "get_weather", (arguments[:5], arguments[5:]))
    rig.expect(Answer(calls=(call,), finish="tool_calls"), stream=stream)
    response = await answer(rig, ASK, stream=stream)
    [kept] = [call.arguments for call in response.tool_calls]
    assert isinstance(kept, MalformedArguments)
    assert "which JSON cannot carry" in kept.reason
    sent_as_strict_json(dict(kept))


@rigs(WIRE)
@STREAMED
async def test_a_stored_call_holding_an_infinity_is_sent_back_as_raw(
    rig: WireRig, stream: bool
) -> None:
    """A transcript row an older version wrote (``"x": Infinity``) does not brick the
    conversation: read back, the call is sent as its ``_raw`` form."""
    stored = {
        "text": "",
        "tool_calls": [{"call_id": "c1", "name": "get_weather", "arguments": {"x": math.inf}}],
    }
    history = ModelRequest(
        messages=(
            ASK.messages[0],
            ModelMessage.from_json("assistant", stored),
            ModelMessage(role="tool", content="refused", tool_call_id="c1"),
        ),
        max_output_tokens=24,
    )
    rig.expect(TEXT, stream=stream)
    assert (await answer(rig, history, stream=stream)).text == TEXT.text
    assert "_raw" in sent_as_strict_json(rig.wire.requests[-1].body)


@rigs(WIRE)
@STREAMED
async def test_a_lone_surrogate_in_an_answer_is_replaced_and_the_answer_can_be_sent_back(
    rig: WireRig, stream: bool
) -> None:
    """A JSON ``"\\ud800"`` escape is valid JSON that decodes to a lone surrogate, which
    UTF-8 has no bytes for: kept, it failed the encoding of every later request of the
    conversation. The answer holds a replacement instead, in its text, each streamed
    delta, and its calls' ids and names (U+FFFD: a server's JSON never carries smuggled
    bytes, so none is read as one); arguments holding one are one
    ``{"_raw": ...}`` call, as any arguments no strict encoder writes back."""
    calls = (
        Call("call_\ud800", "get_\udcffweather", ('{"city": "Par\\ud800"}',)),
        Call.of("call_ok", "get_weather", {"city": "Oslo"}),
    )
    rig.expect(
        Answer(deltas=("Caf\ud83d ", "au lait \udfff"), calls=calls, finish="tool_calls"),
        stream=stream,
    )
    events = await collect(rig.provider, ASK) if stream else []
    response = done(events) if stream else await rig.provider.complete(ASK)
    for event in events:
        event.text.encode("utf-8")
    assert response.text == "Caf\ufffd au lait \ufffd"
    assert [(call.call_id, call.name) for call in response.tool_calls] == [
        ("call_\ufffd", "get_\ufffdweather"),
        ("call_ok", "get_weather"),
    ]
    assert list(response.tool_calls[0].arguments) == ["_raw"]
    history = ModelRequest(
        messages=(
            ASK.messages[0],
            ModelMessage("assistant", response.text, response.tool_calls),
            *(
                ModelMessage("tool", "sunny", tool_call_id=call.call_id)
                for call in response.tool_calls
            ),
        ),
        max_output_tokens=24,
    )
    rig.expect(TEXT, stream=stream)
    assert (await answer(rig, history, stream=stream)).text == TEXT.text


@rigs(WIRE)
@STREAMED
async def test_a_request_that_cannot_be_encoded_is_a_typed_error_and_never_sent(
    rig: WireRig, stream: bool
) -> None:
    """The backstop behind ``ToolCall``'s own check: whatever value gets past it, the
    encoder's ValueError or TypeError is a ProviderError, never retried (it would fail
    the same way), never an untyped crash of the turn."""
    call = ToolCall("c1", "get_weather", {"x": 1.0})
    object.__setattr__(call, "arguments", FrozenMap({"x": math.inf}))  # past the check
    history = ModelRequest(
        messages=(
            ASK.messages[0],
            ModelMessage(role="assistant", tool_calls=(call,)),
            ModelMessage(role="tool", content="refused", tool_call_id="c1"),
        ),
        max_output_tokens=24,
    )
    with pytest.raises(ProviderError, match="could not be encoded") as raised:
        await answer(rig, history, stream=stream)
    assert not raised.value.retryable
    assert len(str(raised.value)) <= MESSAGE_LIMIT
    assert (rig.served, rig.policy.waits) == (0, [])


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize(
    ("headers", "wait"),
    [({"retry-after": "2"}, 2.0), ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5)],
    ids=["retry-after", "retry-after-ms"],
)
async def test_rate_limit_waits_retry_after_then_succeeds(
    rig: WireRig, stream: bool, headers: dict[str, str], wait: float
) -> None:
    rig.wire.script(rig.fmt.error_reply(429, "Rate limit reached", headers=headers))
    rig.expect(TEXT, stream=stream)
    assert (await answer(rig, ASK, stream=stream)).text == TEXT.text
    assert rig.policy.waits == [wait]
    assert rig.served == 2


@rigs(WIRE)
@pytest.mark.parametrize(
    ("headers", "kept"),
    [
        ({"retry-after": "1e400"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after-ms": "1e400"}, None),
        ({"retry-after-ms": "nan", "retry-after": "3"}, 3.0),
        ({"retry-after": "1e9"}, MAX_RETRY_AFTER_S),
        ({"retry-after-ms": "1e300"}, MAX_RETRY_AFTER_S),
    ],
)
async def test_retry_after_is_a_delay_one_can_sleep_on(
    rig: WireRig, headers: dict[str, str], kept: float | None
) -> None:
    """``error.retry_after`` is documented as an attribute to branch on (and sleep on):
    an infinite or NaN request is none, a longer one is the longest a policy honours."""
    rig.wire.script(*[rig.fmt.error_reply(429, "Rate limit reached", headers=headers)] * ATTEMPTS)
    with pytest.raises(ProviderError) as raised:
        await rig.provider.complete(ASK)
    assert raised.value.retry_after == kept
    assert len(rig.policy.waits) == ATTEMPTS - 1
    assert all(0 <= wait <= rig.policy.max_retry_after_s for wait in rig.policy.waits)


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize("status", [408, 500, 502, 503, 529])
async def test_transient_statuses_are_retried_then_succeed(
    rig: WireRig, stream: bool, status: int
) -> None:
    rig.wire.script(rig.fmt.error_reply(status, "try later"))
    rig.expect(TEXT, stream=stream)
    assert (await answer(rig, ASK, stream=stream)).text == TEXT.text
    assert len(rig.policy.waits) == 1
    assert rig.served == 2


@rigs(WIRE)
@pytest.mark.parametrize("status", [502, 529])
async def test_repeated_failures_stop_after_max_attempts(rig: WireRig, status: int) -> None:
    rig.wire.script(*[rig.fmt.error_reply(status, "Overloaded")] * (ATTEMPTS + 1))
    with pytest.raises(ProviderError) as raised:
        await rig.provider.complete(ASK)
    assert raised.value.status == status
    assert raised.value.retryable
    assert rig.served == ATTEMPTS
    assert len(rig.policy.waits) == ATTEMPTS - 1


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize(
    ("status", "text"),
    [
        (400, "Invalid value for 'max_tokens'"),
        (401, f"Incorrect API key provided: {API_KEY}"),
        (404, "The model `gpt-9` does not exist"),
    ],
)
async def test_client_errors_are_not_retried_and_never_show_the_key(
    rig: WireRig, stream: bool, status: int, text: str
) -> None:
    rig.wire.script(rig.fmt.error_reply(status, text))
    with pytest.raises(ProviderError) as raised:
        await answer(rig, ASK, stream=stream)
    assert type(raised.value) is ProviderError
    assert raised.value.status == status
    assert not raised.value.retryable
    assert API_KEY not in str(raised.value)
    assert rig.served == 1


@rigs(WIRE)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_key_echoed_in_the_request_id_header_never_reaches_the_error(
    rig: WireRig, stream: bool
) -> None:
    """A gateway that echoes the request into its request-id header (OpenAI's
    ``x-request-id``, Anthropic's ``request-id``): the id is header text, scrubbed and
    bounded like the body's, scrubbed before it is cut (a key across the cut must not
    leave its beginning behind)."""
    for echoed in (f"req-{API_KEY}-" + "r" * 400, "req-" + "r" * 110 + API_KEY + "r" * 400):
        headers = {"x-request-id": echoed, "request-id": echoed}
        rig.wire.script(rig.fmt.error_reply(401, "bad key", headers=headers))
        with pytest.raises(ProviderError) as raised:
            await answer(rig, ASK, stream=stream)
        shown = str(raised.value)
        assert not any(API_KEY[i : i + 8] in shown for i in range(len(API_KEY) - 7))
        assert "[redacted]" in shown
        assert len(shown) <= MESSAGE_LIMIT


@rigs(WIRE)
async def test_error_messages_are_bounded(rig: WireRig) -> None:
    rig.wire.script(rig.fmt.error_reply(422, "x" * 20_000))
    with pytest.raises(ProviderError) as raised:
        await rig.provider.complete(ASK)
    assert len(str(raised.value)) <= MESSAGE_LIMIT


@rigs(WIRE)
@pytest.mark.parametrize("kind", ["truncated-json", "html", "wrong-shape"])
async def test_malformed_body_after_200_is_an_error_and_not_retried(
    rig: WireRig, kind: str
) -> None:
    body = {
        "truncated-json": ('{"id": "resp_1", "choices": [', "application/json"),
        "html": ("<html><body>502 Bad Gateway</body></html>", "text/html"),
        "wrong-shape": (rig.fmt.WRONG_SHAPE, "application/json"),
    }[kind]
    rig.wire.script(text_reply(body[0], content_type=body[1]))
    with pytest.raises(ProviderError) as raised:
        await rig.provider.complete(ASK)
    assert raised.value.status == 200
    assert not raised.value.retryable
    assert rig.served == 1


@rigs(WIRE)
@pytest.mark.parametrize(
    ("kind", "said"),
    [("dropped", "broke off"), ("error-event", "Overloaded"), ("malformed", "stream failed")],
)
async def test_stream_that_fails_mid_way_is_not_retried(rig: WireRig, kind: str, said: str) -> None:
    opening = rig.fmt.opening_events(TEXT)
    broken = {
        "dropped": sse_reply(opening, complete=False),
        "error-event": sse_reply((*opening, rig.fmt.stream_error("Overloaded"))),
        "malformed": sse_reply((*opening, rig.fmt.malformed_event())),
    }[kind]
    rig.wire.script(broken, rig.fmt.answer_reply(TEXT, stream=True))
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError) as raised:
        await collect_into(seen, rig.provider, ASK)
    assert [event.text for event in seen] == [TEXT.deltas[0]]
    assert said in str(raised.value)
    assert raised.value.status == 200
    assert not raised.value.retryable
    assert rig.served == 1


@rigs(WIRE)
async def test_stream_that_ends_before_anything_arrived_is_an_error(rig: WireRig) -> None:
    rig.wire.script(sse_reply(()))
    with pytest.raises(ProviderError, match="stream ended before any") as raised:
        await collect(rig.provider, ASK)
    assert not raised.value.retryable
    assert rig.served == 1


@rigs(WIRE)
@pytest.mark.parametrize("scripted", [TEXT, TOOLS], ids=["text", "tools"])
async def test_stream_that_ends_before_the_response_finished_is_an_error(
    rig: WireRig, scripted: Answer
) -> None:
    """A body that ends cleanly is not an answer that did: a proxy cutting a stream (or a
    server dying) between events leaves no finish reason, no ``message_stop``. What
    arrived may lack its last tool calls or carry half of one, so none of it is kept."""
    rig.wire.script(
        sse_reply(rig.fmt.unfinished_events(scripted)),
        rig.fmt.answer_reply(scripted, stream=True),
    )
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError, match="before the response was finished") as raised:
        await collect_into(seen, rig.provider, ASK)
    assert [event.text for event in seen] == list(scripted.deltas)
    assert raised.value.status == 200
    # The request reached the provider and was answered (in part): never asked again.
    assert not raised.value.retryable
    assert rig.served == 1


@rigs(WIRE)
@pytest.mark.parametrize("arrived", ["first-item", "first-delta"])
async def test_a_stream_kept_alive_with_nothing_new_fails_after_timeout_s(
    rig: WireRig, arrived: str
) -> None:
    """Keep-alives (OpenRouter's SSE comments, which the SDK drops; Anthropic's ``ping``
    events, which add nothing) reset the HTTP client's read timeout with every byte: such a
    stream held its turn for ever. ``timeout_s`` bounds the wait for anything new, and what
    arrived (a chunk, an event) is not asked for again."""
    if arrived == "first-item":
        opening = rig.fmt.answer_events(TEXT)[:1]  # the role chunk; message_start
    else:
        opening = rig.fmt.opening_events(TEXT)
    rig.wire.script(
        sse_reply(opening, hold=True, pause_s=PACE_S, keep_alive=rig.fmt.KEEP_ALIVE),
        rig.fmt.answer_reply(TEXT, stream=True),
    )
    provider = rig.connect(rig.wire.base_url, timeout_s=STALL_S)
    seen: list[StreamEvent] = []
    started = anyio.current_time()
    try:
        with anyio.fail_after(STALL_S * 5), pytest.raises(ProviderError) as raised:
            await collect_into(seen, provider, ASK)
    finally:
        await provider.aclose()
    assert anyio.current_time() - started < STALL_S * 3
    said = f"{rig.provider.name}: stream broke off: timed out: nothing new for 1s"
    assert str(raised.value) == said
    assert [event.text for event in seen] == ([] if arrived == "first-item" else [TEXT.deltas[0]])
    assert raised.value.status == 200
    assert not raised.value.retryable
    assert rig.served == 1
    await rig.released()


@rigs(WIRE)
async def test_a_stream_kept_alive_before_its_first_item_is_retried(rig: WireRig) -> None:
    """Headers, then only SSE comments: nothing arrived, so after ``timeout_s`` the request is
    sent again, like a stream whose connection dropped before its first item."""
    rig.wire.script(
        sse_reply((COMMENT,), hold=True, pause_s=PACE_S, keep_alive=COMMENT),
        rig.fmt.answer_reply(TEXT, stream=True),
    )
    provider = rig.connect(rig.wire.base_url, timeout_s=STALL_S)
    started = anyio.current_time()
    try:
        with anyio.fail_after(STALL_S * 5):
            response = done(await collect(provider, ASK))
    finally:
        await provider.aclose()
    assert anyio.current_time() - started < STALL_S * 3
    assert response == TEXT.response(provider=rig.provider.name, model=rig.answering_model)
    assert rig.served == 2
    assert len(rig.policy.waits) == 1


@rigs(WIRE)
@pytest.mark.parametrize("kind", ["answer", "reasoning"])
async def test_a_slow_stream_that_keeps_moving_is_not_cut(rig: WireRig, kind: str) -> None:
    """``timeout_s`` bounds the wait for the next thing, not the stream: an answer paced
    inside it arrives whole however long it takes, and so does one that reasons (output the
    adapter does not keep) for longer than ``timeout_s`` before it answers."""
    reply = rig.fmt.answer_reply(TEXT, stream=True)
    first, *rest = reply.chunks
    thinking = rig.fmt.reasoning_events(5) if kind == "reasoning" else ()
    rig.wire.script(dataclasses.replace(reply, chunks=(first, *thinking, *rest), pause_s=PACE_S))
    provider = rig.connect(rig.wire.base_url, timeout_s=STALL_S)
    started = anyio.current_time()
    try:
        response = done(await collect(provider, ASK))
    finally:
        await provider.aclose()
    assert anyio.current_time() - started > STALL_S * 2
    assert response == TEXT.response(provider=rig.provider.name, model=rig.answering_model)
    assert rig.served == 1


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize(
    "count",
    ["12k", 3.7, -5000, MAX_TOKEN_COUNT + 1, 10**30, [1], {"tokens": 1}],
    ids=["str", "float", "negative", "past-the-largest", "huge", "list", "object"],
)
async def test_usage_that_is_no_token_count_counts_as_zero_with_one_warning(
    rig: WireRig, stream: bool, count: object, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDKs build usage blocks unvalidated: a string crashed the turn's sum, a huge
    int the store, and negatives and floats were kept. The answer itself is still good."""
    rig.wire.script(rig.fmt.usage_reply(count, stream=stream))
    with caplog.at_level(logging.WARNING, logger="hostkit.adapters"):
        response = await answer(rig, ASK, stream=stream)
    assert response.text == "ok"
    assert response.usage == Usage()
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("hostkit.adapters")]
    assert len(warnings) == 1
    assert "counted as 0" in warnings[0]
    assert len(warnings[0]) <= MESSAGE_LIMIT
    assert "12k" not in warnings[0]


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize("count", [0, MAX_TOKEN_COUNT], ids=["zero", "largest"])
async def test_usage_counts_from_zero_to_the_largest_are_kept(
    rig: WireRig, stream: bool, count: int, caplog: pytest.LogCaptureFixture
) -> None:
    rig.wire.script(rig.fmt.usage_reply(count, stream=stream))
    with caplog.at_level(logging.WARNING, logger="hostkit.adapters"):
        usage = (await answer(rig, ASK, stream=stream)).usage
    assert (usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (count,) * 3
    assert usage.input_tokens >= count
    assert not caplog.records


@rigs(WIRE)
@STREAMED
async def test_repeated_call_ids_are_made_unique_within_a_response(
    rig: WireRig, stream: bool
) -> None:
    """Each tool result answers one call by its id: two calls under one id (a server's bug)
    would give the model two answers it cannot tell apart. Repeats are renamed in order."""
    calls = tuple(
        Call.of(call_id, "get_weather", {"city": city})
        for call_id, city in (("call_x", "Paris"), ("call_x", "Oslo"), ("call_x_1", "Rome"))
    )
    rig.expect(Answer(calls=calls, finish="tool_calls"), stream=stream)
    response = await answer(rig, ASK, stream=stream)
    assert [(call.call_id, call.arguments["city"]) for call in response.tool_calls] == [
        ("call_x", "Paris"),
        ("call_x_1", "Oslo"),
        ("call_x_1_2", "Rome"),
    ]


@rigs(WIRE)
@pytest.mark.parametrize("flood", ["one-event", "one-body", "many-events"])
async def test_a_body_past_the_wire_bounds_fails_while_it_arrives(rig: WireRig, flood: str) -> None:
    """What the SDK would buffer whole before a byte of it is counted (one event, a whole
    body), and a stream that never ends: the read fails at the bound, and the server sees
    the connection go."""
    block = b"A" * (1 << 20)
    if flood == "one-event":
        opening = b'data: {"choices": [{"delta": {"content": "'
        reply = sse_reply((opening, *[block] * (MAX_EVENT_BYTES // len(block))), hold=True)
        said = f"an event of more than {MAX_EVENT_BYTES} bytes"
    elif flood == "one-body":
        opening = b'{"id": "resp_1", "content": "'
        reply = Reply(chunks=(opening, *[block] * (MAX_EVENT_BYTES // len(block))), hold=True)
        said = f"more than {MAX_EVENT_BYTES} bytes in one body"
    else:
        # Comments, which no SDK hands over: only the wire count sees them.
        comment = b":" + block[: len(block) - 3] + b"\n\n"
        reply = sse_reply((comment,) * (MAX_WIRE_BYTES // len(comment) + 1), hold=True)
        said = f"more than {MAX_WIRE_BYTES} bytes on the wire"
    rig.wire.script(reply)
    # Bytes with no item: past ``timeout_s`` that is a stall too. The bound must fail first,
    # however slowly a loaded machine parses the flood.
    provider = rig.connect(rig.wire.base_url, timeout_s=120)

    async def ask() -> ModelResponse:
        if flood == "one-body":
            return await provider.complete(ASK)
        return done(await collect(provider, ASK))

    try:
        with anyio.fail_after(60), pytest.raises(ProviderError) as raised:
            await ask()
    finally:
        await provider.aclose()
    assert said in str(raised.value)
    assert raised.value.status == 200
    assert not raised.value.retryable
    assert rig.served == 1
    with anyio.fail_after(5):
        await rig.wire.released.wait()


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


# What a proxy that ignores ``accept-encoding: identity`` may send, and how it encodes.
CODINGS = {
    "gzip": ("gzip", gzip.compress),
    "deflate-zlib": ("deflate", zlib.compress),
    "deflate-raw": ("Deflate", _raw_deflate),
    "gzip-gzip": ("gzip, gzip", lambda body: gzip.compress(gzip.compress(body))),
}


@cache
def _gzip_bomb(opening: bytes, inflated: int) -> bytes:
    """``opening`` then ``inflated`` spaces, gzipped (a few hundred KiB for 256 MiB).

    Built when a test first needs it, once per worker: at collection every worker
    would spend seconds compressing it for tests most of them never run."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (1 << 20)
    parts = [packer.compress(opening), *(packer.compress(block) for _ in range(inflated >> 20))]
    return b"".join([*parts, packer.flush()])


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize("coding", sorted(CODINGS))
async def test_a_compressed_body_is_decoded_within_the_bounds(
    rig: WireRig, stream: bool, coding: str
) -> None:
    """A body compressed although none was asked for is decoded from its raw bytes (gzip,
    deflate in both framings, stacked) and read as the answer it is."""
    encoding, encode = CODINGS[coding]
    reply = rig.fmt.answer_reply(TEXT, stream=stream)
    headers = {**reply.headers, "content-encoding": encoding}
    body = encode(b"".join(reply.chunks))
    rig.wire.script(dataclasses.replace(reply, chunks=(body,), headers=headers))
    response = await answer(rig, ASK, stream=stream)
    assert response.text == "".join(TEXT.deltas)
    assert rig.wire.requests[0].headers["accept-encoding"] == "identity"
    assert rig.served == 1


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize(
    ("encoding", "body", "said"),
    [
        ("gzip", partial(_gzip_bomb, b"{", 256 << 20), f"more than {MAX_EVENT_BYTES} bytes"),
        ("gzip", gzip.compress(b"{" * 4096)[:-12], "ended before its end"),
        ("gzip", b"\x00 not gzip", "corrupt"),
        ("br", b"\x00 brotli", "unsupported content-encoding 'br'"),
        ("gzip, gzip, gzip", b"\x00", "3 stacked content-encodings"),
    ],
    ids=["bomb", "cut", "corrupt", "br", "three-stacked"],
)
async def test_a_compressed_body_past_a_bound_or_unreadable_is_refused(
    rig: WireRig, stream: bool, encoding: str, body: bytes | Callable[[], bytes], said: str
) -> None:
    """A gzip bomb is decoded only to the body's bound (then refused, the work stopping
    there); a cut or corrupt body, a coding not decoded (br) and a stack too deep are
    refused as a ProviderError naming why, never a crash."""
    body = body() if callable(body) else body
    reply = rig.fmt.answer_reply(TEXT, stream=stream)
    headers = {**reply.headers, "content-encoding": encoding}
    rig.wire.script(dataclasses.replace(reply, chunks=(body,), headers=headers))
    with anyio.fail_after(20), pytest.raises(ProviderError) as raised:
        await answer(rig, ASK, stream=stream)
    assert said in str(raised.value)
    assert not raised.value.retryable
    assert rig.served == 1


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize("coding", sorted(CODINGS))
async def test_a_compressed_error_body_is_read_within_its_bound(
    rig: WireRig, stream: bool, coding: str
) -> None:
    """An error status's body compressed although none was asked for is decoded (to its
    64 KiB bound), so its message reaches the error, with the status and Retry-After."""
    encoding, encode = CODINGS[coding]
    reply = rig.fmt.error_reply(429, "DECODED-ERROR-TEXT", headers={"retry-after": "2"})
    headers = {**reply.headers, "content-encoding": encoding}
    body = encode(b"".join(reply.chunks))
    rig.wire.script(*[dataclasses.replace(reply, chunks=(body,), headers=headers)] * ATTEMPTS)
    with pytest.raises(ProviderError) as raised:
        await answer(rig, ASK, stream=stream)
    assert "DECODED-ERROR-TEXT" in str(raised.value)
    assert raised.value.status == 429
    assert raised.value.retryable
    assert raised.value.retry_after == 2.0
    assert rig.policy.waits == [2.0] * (ATTEMPTS - 1)
    assert rig.served == ATTEMPTS


@rigs(WIRE)
@STREAMED
@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("br", b"\x00 brotli"),
        ("gzip", b"\x00 not gzip"),
        ("gzip", partial(_gzip_bomb, b"", 256 << 20)),
    ],
    ids=["br", "corrupt", "bomb"],
)
async def test_a_compressed_error_body_that_cannot_be_read_keeps_its_status(
    rig: WireRig, stream: bool, encoding: str, body: bytes | Callable[[], bytes]
) -> None:
    """An error body in a coding not decoded (br) or corrupt is a fixed note; a bomb is
    decoded only to the 64 KiB bound. The status and Retry-After still decide."""
    body = body() if callable(body) else body
    reply = rig.fmt.error_reply(429, "unused", headers={"retry-after": "2"})
    headers = {**reply.headers, "content-encoding": encoding}
    rig.wire.script(*[dataclasses.replace(reply, chunks=(body,), headers=headers)] * ATTEMPTS)
    with anyio.fail_after(20), pytest.raises(ProviderError) as raised:
        await answer(rig, ASK, stream=stream)
    if encoding == "br":
        assert "compressed (br), asked not to, and it cannot be read" in str(raised.value)
    assert raised.value.status == 429
    assert raised.value.retry_after == 2.0
    assert rig.served == ATTEMPTS


def test_every_coding_httpx_decodes_is_one_the_wire_layer_never_counts_compressed() -> None:
    # A coding httpx learns to decode (brotli, zstd once installed) must not slip past.
    from httpx2._decoders import SUPPORTED_DECODERS

    assert set(SUPPORTED_DECODERS) - {"identity"} <= _DECODED


@rigs(WIRE)
@pytest.mark.parametrize("kind", ["status-503", "status-529", "dropped-before-first"])
async def test_stream_is_retried_while_nothing_has_arrived(rig: WireRig, kind: str) -> None:
    failure = {
        "status-503": rig.fmt.error_reply(503, "Service unavailable"),
        "status-529": rig.fmt.error_reply(529, "Overloaded"),
        "dropped-before-first": sse_reply((), complete=False),
    }[kind]
    rig.wire.script(failure)
    rig.expect(TEXT, stream=True)
    response = done(await collect(rig.provider, ASK))
    assert response == TEXT.response(provider=rig.provider.name, model=rig.answering_model)
    assert rig.served == 2


@rigs(WIRE)
async def test_unreachable_server_is_retried_then_reported_retryable(rig: WireRig) -> None:
    async with serve_wire() as gone:
        base_url = gone.base_url
    provider = rig.connect(base_url)
    try:
        with pytest.raises(ProviderError) as raised:
            await provider.complete(ASK)
    finally:
        await provider.aclose()
    assert raised.value.retryable
    assert raised.value.status is None
    assert len(rig.policy.waits) == ATTEMPTS - 1


@rigs(WIRE)
@STREAMED
async def test_cancelling_before_the_answer_releases_the_connection(
    rig: WireRig, stream: bool
) -> None:
    # Headers sent, then nothing: the adapter waits for the body or the first event.
    rig.wire.script(sse_reply((), hold=True) if stream else Reply(hold=True))
    before = running_tasks()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(partial(answer, rig, ASK, stream=stream))
        await rig.wire.holding.wait()
        tasks.cancel_scope.cancel()
    with anyio.fail_after(5):
        await rig.wire.released.wait()
    await rig.released()
    await no_tasks_left_beyond(before)
    assert rig.policy.waits == []
