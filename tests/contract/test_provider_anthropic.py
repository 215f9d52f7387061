"""AnthropicProvider: what is Anthropic's own, against a loopback messages API server.

The contract every adapter keeps (streaming, normalization, retries, errors,
cancellation, closing) is ``test_providers``; this file holds the wire mapping
(system parameter, merged tool results), credentials, defaults and the second
context-overflow wording.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hostkit.adapters.anthropic_messages import EARLIER_PART, AnthropicProvider
from hostkit.errors import ConfigError, ContextOverflow, ProviderError, bounded
from hostkit.types import (
    MAX_ARGUMENT_DEPTH,
    MalformedArguments,
    ModelMessage,
    ModelRequest,
    ToolCall,
    ToolDefinition,
)
from tests.wire import RecordingRetryPolicy, WireServer, json_reply, serve_wire, sse_reply
from tests.wire import anthropic_messages as wire_anthropic
from tests.wire.scenario import Answer

pytestmark = pytest.mark.anyio

API_KEY = "sk-ant-test-0123456789abcdef"
# Not a real model id: the SDK warns (an error here) for ids it knows to be deprecated.
MODEL = "claude-test"
ATTEMPTS = 3
WEATHER = ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
HELLO = ModelRequest(messages=(ModelMessage(role="user", content="Say hello."),))


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


@pytest.fixture
def policy() -> RecordingRetryPolicy:
    return RecordingRetryPolicy(max_attempts=ATTEMPTS)


@pytest.fixture
async def provider(
    wire: WireServer, policy: RecordingRetryPolicy
) -> AsyncIterator[AnthropicProvider]:
    async with AnthropicProvider(
        model=MODEL, base_url=wire.base_url, api_key=API_KEY, retry=policy
    ) as opened:
        yield opened


async def test_requests_go_to_messages_with_the_key(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    wire.script(json_reply(wire_anthropic.message([wire_anthropic.text_block("Hello!")])))
    await provider.complete(HELLO)
    assert wire.requests[0].path == "/v1/messages"
    assert wire.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_tool_round_trip_sends_system_param_and_merged_tool_results(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    wire.script(json_reply(wire_anthropic.message([wire_anthropic.text_block("Sunny, snowy.")])))
    request = ModelRequest(
        messages=(
            ModelMessage(role="system", content="You are terse."),
            ModelMessage(role="user", content="Weather in Paris and Oslo?"),
            ModelMessage(
                role="assistant",
                content="Checking.",
                tool_calls=(
                    ToolCall("toolu_01", "get_weather", {"city": "Paris"}),
                    ToolCall("toolu_02", "get_weather", {"city": "Oslo"}),
                ),
            ),
            ModelMessage(role="tool", content="sunny", tool_call_id="toolu_01"),
            ModelMessage(role="tool", content="snow", tool_call_id="toolu_02"),
            ModelMessage(role="system", content="Answer in one line."),
        ),
        tools=(WEATHER,),
        max_output_tokens=300,
        temperature=0.0,
    )
    await provider.complete(request)
    body = wire.requests[0].body
    assert body["model"] == MODEL
    assert body["max_tokens"] == 300
    assert "temperature" not in body
    assert body["system"] == "You are terse.\n\nAnswer in one line."
    assert "stream" not in body
    assert body["messages"] == [
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_01",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_02",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_02", "content": "snow"},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]


async def test_empty_assistant_turns_are_not_sent(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    wire.script(json_reply(wire_anthropic.message([wire_anthropic.text_block("ok")])))
    await provider.complete(
        ModelRequest(
            messages=(
                ModelMessage(role="user", content="first"),
                ModelMessage(role="assistant", content=""),
                ModelMessage(role="user", content="second"),
            )
        )
    )
    assert wire.requests[0].body["messages"] == [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ]


async def test_a_history_that_begins_with_an_answer_gets_a_user_turn_first(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    """The API refuses "first message must use the user role"; a history fitted to the
    window (or following a summary) can begin with the assistant's answer."""
    wire.script(json_reply(wire_anthropic.message([wire_anthropic.text_block("ok")])))
    await provider.complete(
        ModelRequest(
            messages=(
                ModelMessage(role="system", content="be brief"),
                ModelMessage(role="assistant", content="the earlier answer"),
                ModelMessage(role="user", content="and now?"),
            )
        )
    )
    sent = wire.requests[0].body["messages"]
    assert sent[0] == {"role": "user", "content": EARLIER_PART}
    assert sent[1:] == [
        {"role": "assistant", "content": [{"type": "text", "text": "the earlier answer"}]},
        {"role": "user", "content": "and now?"},
    ]


async def test_stream_request_asks_for_a_stream(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    wire.script(sse_reply(wire_anthropic.answer_events(Answer(deltas=("Hi.",)))))
    assert [event.kind async for event in provider.stream(HELLO)] == ["text", "done"]
    assert wire.requests[0].body["stream"] is True


async def test_a_stream_whose_stop_reason_came_without_message_stop_is_an_error(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    # message_delta carries the stop reason, but only message_stop ends the message.
    wire.script(sse_reply(wire_anthropic.answer_events(Answer(deltas=("Hi.",)))[:-1]))
    with pytest.raises(ProviderError, match="before the response was finished") as raised:
        [event async for event in provider.stream(HELLO)]
    assert not raised.value.retryable
    assert len(wire.requests) == 1


def _nested(levels: int) -> dict[str, object]:
    """``{"a": {"a": ... {}}}``: ``levels`` objects, one inside the other."""
    value: dict[str, object] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_a_tool_input_sent_whole_and_too_deep_is_kept_malformed(
    provider: AnthropicProvider, wire: WireServer, stream: bool
) -> None:
    """An input that arrives whole (not as argument text) is held to the same depth: kept
    as ``MalformedArguments`` for the effect runtime to refuse, not a ToolCall that fails
    the turn."""
    deep = wire_anthropic.tool_use_block("toolu_1", "get_weather", _nested(MAX_ARGUMENT_DEPTH + 1))
    if stream:
        stop = {"stop_reason": "tool_use", "stop_sequence": None}
        started = wire_anthropic.message([])
        events = [
            wire_anthropic.event("message_start", message={**started, "stop_reason": None}),
            wire_anthropic.event("content_block_start", index=0, content_block=deep),
            wire_anthropic.event("content_block_stop", index=0),
            wire_anthropic.event("message_delta", delta=stop, usage={"output_tokens": 5}),
            wire_anthropic.event("message_stop"),
        ]
        wire.script(sse_reply(wire_anthropic.sse(events)))
        done = [event async for event in provider.stream(HELLO)][-1].response
        assert done is not None
        calls = done.tool_calls
    else:
        wire.script(json_reply(wire_anthropic.message([deep], stop_reason="tool_use")))
        calls = (await provider.complete(HELLO)).tool_calls
    assert [(call.call_id, call.name, list(call.arguments)) for call in calls] == [
        ("toolu_1", "get_weather", ["_raw"])
    ]
    assert str(calls[0].arguments["_raw"]).startswith('{"a": {"a": ')
    assert isinstance(calls[0].arguments, MalformedArguments)
    assert calls[0].arguments.reason.startswith("nest deeper than 64 levels")


@pytest.mark.parametrize(
    ("sent", "text", "said"),
    [
        ([True], "[true]", "are a JSON array, not an object"),
        ("dry", "dry", "are a JSON string, not an object"),
    ],
)
async def test_a_tool_input_sent_whole_that_is_no_object_is_kept_malformed(
    provider: AnthropicProvider, wire: WireServer, sent: object, text: str, said: str
) -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": sent}
    wire.script(json_reply(wire_anthropic.message([block], stop_reason="tool_use")))
    [call] = (await provider.complete(HELLO)).tool_calls
    assert call.arguments == MalformedArguments(text, said)


async def test_a_tool_input_sent_whole_at_the_depth_bound_is_kept(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    block = wire_anthropic.tool_use_block("toolu_1", "get_weather", _nested(MAX_ARGUMENT_DEPTH))
    wire.script(json_reply(wire_anthropic.message([block], stop_reason="tool_use")))
    (call,) = (await provider.complete(HELLO)).tool_calls
    assert call.arguments == _nested(MAX_ARGUMENT_DEPTH)


async def test_context_limit_counting_max_tokens_is_context_overflow(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    # "prompt is too long" is in the shared suite; this is the variant that counts max_tokens in.
    text = (
        "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, "
        "decrease input length or `max_tokens` and try again"
    )
    wire.script(json_reply(wire_anthropic.error("invalid_request_error", text), status=400))
    with pytest.raises(ContextOverflow) as raised:
        await provider.complete(HELLO)
    assert raised.value.status == 400
    assert not raised.value.retryable
    assert len(wire.requests) == 1


async def test_gateway_gets_placeholder_key_not_the_environment_key(
    wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-real-key-do-not-leak")
    wire.script(json_reply(wire_anthropic.message([wire_anthropic.text_block("gateway")])))
    async with AnthropicProvider(model=MODEL, base_url=wire.base_url) as provider:
        assert (await provider.complete(HELLO)).text == "gateway"
    sent = " ".join(wire.requests[0].headers.values())
    assert "not-needed" in sent
    assert "sk-ant-real-key-do-not-leak" not in sent


def test_missing_api_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(ConfigError) as raised:
        AnthropicProvider(model=MODEL)
    assert raised.value.key == "api_key_env"
    # Read whole, even quoted in another error: no "api_key: no" for the redactor to mask.
    for shown in (raised.value.message, bounded(f"agent 'a' is not available: {raised.value}")):
        assert "[redacted]" not in shown
        assert "set the environment variable ANTHROPIC_API_KEY, or name another" in shown


async def test_defaults_name_anthropic_and_its_limits() -> None:
    async with AnthropicProvider(model=MODEL, api_key=API_KEY) as provider:
        assert (provider.name, provider.model) == ("anthropic", MODEL)
        limits = provider.limits
        assert (limits.context_window, limits.max_output_tokens) == (200_000, 8192)
