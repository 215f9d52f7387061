"""AnthropicProvider against a loopback server speaking the messages API wire format."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hostkit.adapters.anthropic_messages import AnthropicProvider
from hostkit.errors import ConfigError, ContextOverflow, ProviderError
from hostkit.providers import ModelProvider
from hostkit.types import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    ToolCall,
    ToolDefinition,
    Usage,
)
from tests.wire import (
    RecordingRetryPolicy,
    Reply,
    WireServer,
    json_reply,
    serve_wire,
    sse_reply,
    text_reply,
)
from tests.wire import anthropic_messages as wire_anthropic
from tests.wire.anthropic_messages import event

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


async def collect(provider: AnthropicProvider, request: ModelRequest) -> list[StreamEvent]:
    return [item async for item in provider.stream(request)]


async def collect_into(seen: list[str], provider: AnthropicProvider, request: ModelRequest) -> None:
    """Like ``collect`` but keeps what arrived before a failure."""
    async for item in provider.stream(request):
        seen.append(item.text)


def done(events: list[StreamEvent]) -> ModelResponse:
    assert events[-1].kind == "done"
    assert events[-1].response is not None
    return events[-1].response


def text_stream(*deltas: str, stop_reason: str = "end_turn") -> tuple[bytes, ...]:
    """A complete streamed text answer, with a ping where the API puts one."""
    started = wire_anthropic.message([], usage_block=wire_anthropic.usage(25, 1))
    started["stop_reason"] = None
    return wire_anthropic.sse(
        [
            event("message_start", message=started),
            event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            event("ping"),
            *[
                event("content_block_delta", index=0, delta={"type": "text_delta", "text": delta})
                for delta in deltas
            ],
            event("content_block_stop", index=0),
            event(
                "message_delta",
                delta={"stop_reason": stop_reason, "stop_sequence": None},
                usage={"output_tokens": 15},
            ),
            event("message_stop"),
        ]
    )


async def test_plain_answer_is_normalized_with_header_request_id(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    wire.script(
        json_reply(
            wire_anthropic.message([wire_anthropic.text_block("Hello!")]),
            headers={"request-id": "req_018EeWyXxfu5pfWkrYcMdjWG"},
        )
    )
    response = await provider.complete(HELLO)
    assert response == ModelResponse(
        text="Hello!",
        tool_calls=(),
        usage=Usage(input_tokens=12, output_tokens=6),
        finish_reason="stop",
        provider="anthropic",
        model=wire_anthropic.MODEL,
        provider_request_id="req_018EeWyXxfu5pfWkrYcMdjWG",
    )
    assert wire.requests[0].path == "/v1/messages"
    assert wire.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_request_id_falls_back_to_message_id(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    wire.script(
        json_reply(wire_anthropic.message([wire_anthropic.text_block("hi")], message_id="msg_x"))
    )
    assert (await provider.complete(HELLO)).provider_request_id == "msg_x"


async def test_tool_use_blocks_become_tool_calls(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    wire.script(
        json_reply(
            wire_anthropic.message(
                [
                    wire_anthropic.text_block("Let me check."),
                    wire_anthropic.tool_use_block("toolu_01", "get_weather", {"city": "Paris"}),
                    wire_anthropic.tool_use_block("toolu_02", "get_weather", {"city": "Oslo"}),
                ],
                stop_reason="tool_use",
            )
        )
    )
    response = await provider.complete(HELLO)
    assert response.text == "Let me check."
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == (
        ToolCall("toolu_01", "get_weather", {"city": "Paris"}),
        ToolCall("toolu_02", "get_weather", {"city": "Oslo"}),
    )


async def test_usage_counts_cache_reads_and_writes_as_input(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    block = wire_anthropic.usage(50, 200, cache_read=1800, cache_write=300)
    wire.script(
        json_reply(wire_anthropic.message([wire_anthropic.text_block("ok")], usage_block=block))
    )
    response = await provider.complete(HELLO)
    assert response.usage == Usage(
        input_tokens=2150, output_tokens=200, cache_read_tokens=1800, cache_write_tokens=300
    )


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


async def test_stream_yields_text_then_done_with_tool_calls_and_usage(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    started = wire_anthropic.message(
        [], usage_block=wire_anthropic.usage(25, 1, cache_read=100, cache_write=10)
    )
    started["stop_reason"] = None

    def json_delta(index: int, partial: str) -> tuple[str, dict[str, object]]:
        return event(
            "content_block_delta",
            index=index,
            delta={"type": "input_json_delta", "partial_json": partial},
        )

    def tool_start(index: int, call_id: str) -> tuple[str, dict[str, object]]:
        block = {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {}}
        return event("content_block_start", index=index, content_block=block)

    wire.script(
        sse_reply(
            wire_anthropic.sse(
                [
                    event("message_start", message=started),
                    event(
                        "content_block_start", index=0, content_block={"type": "text", "text": ""}
                    ),
                    event("ping"),
                    event(
                        "content_block_delta",
                        index=0,
                        delta={"type": "text_delta", "text": "Let me "},
                    ),
                    event(
                        "content_block_delta",
                        index=0,
                        delta={"type": "text_delta", "text": "check."},
                    ),
                    event("content_block_stop", index=0),
                    tool_start(1, "toolu_01"),
                    json_delta(1, ""),
                    json_delta(1, '{"city": "Pa'),
                    json_delta(1, 'ris"}'),
                    event("content_block_stop", index=1),
                    tool_start(2, "toolu_02"),
                    json_delta(2, '{"city": "Oslo"}'),
                    event("content_block_stop", index=2),
                    event(
                        "message_delta",
                        delta={"stop_reason": "tool_use", "stop_sequence": None},
                        usage={"output_tokens": 89},
                    ),
                    event("message_stop"),
                ]
            ),
            headers={"request-id": "req_stream"},
        )
    )
    events = await collect(provider, HELLO)
    assert [item.text for item in events if item.kind == "text"] == ["Let me ", "check."]
    assert [item.kind for item in events].count("done") == 1
    assert done(events) == ModelResponse(
        text="Let me check.",
        tool_calls=(
            ToolCall("toolu_01", "get_weather", {"city": "Paris"}),
            ToolCall("toolu_02", "get_weather", {"city": "Oslo"}),
        ),
        usage=Usage(
            input_tokens=135, output_tokens=89, cache_read_tokens=100, cache_write_tokens=10
        ),
        finish_reason="tool_calls",
        provider="anthropic",
        model=wire_anthropic.MODEL,
        provider_request_id="req_stream",
    )
    assert wire.requests[0].body["stream"] is True


@pytest.mark.parametrize(
    ("status", "kind", "headers", "waits"),
    [
        (429, "rate_limit_error", {"retry-after": "2"}, [2.0]),
        (529, "overloaded_error", {}, None),
        (500, "api_error", {}, None),
    ],
)
async def test_transient_errors_are_retried_then_succeed(
    provider: AnthropicProvider,
    wire: WireServer,
    policy: RecordingRetryPolicy,
    status: int,
    kind: str,
    headers: dict[str, str],
    waits: list[float] | None,
) -> None:
    wire.script(
        json_reply(wire_anthropic.error(kind, "try later"), status=status, headers=headers),
        json_reply(wire_anthropic.message([wire_anthropic.text_block("after the wait")])),
    )
    assert (await provider.complete(HELLO)).text == "after the wait"
    assert len(wire.requests) == 2
    assert len(policy.waits) == 1
    if waits is not None:
        assert policy.waits == waits


async def test_repeated_overload_stops_after_max_attempts(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    failure = json_reply(wire_anthropic.error("overloaded_error", "Overloaded"), status=529)
    wire.script(*[failure] * (ATTEMPTS + 1))
    with pytest.raises(ProviderError) as raised:
        await provider.complete(HELLO)
    assert raised.value.status == 529
    assert raised.value.retryable
    assert len(wire.requests) == ATTEMPTS


@pytest.mark.parametrize(
    "text",
    [
        "prompt is too long: 215000 tokens > 200000 maximum",
        "input length and `max_tokens` exceed context limit: 198000 + 8192 > 200000, "
        "decrease input length or `max_tokens` and try again",
    ],
)
async def test_prompt_too_long_is_context_overflow_and_not_retried(
    provider: AnthropicProvider, wire: WireServer, text: str
) -> None:
    wire.script(json_reply(wire_anthropic.error("invalid_request_error", text), status=400))
    with pytest.raises(ContextOverflow) as raised:
        await provider.complete(HELLO)
    assert raised.value.status == 400
    assert not raised.value.retryable
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    ("status", "kind", "text"),
    [
        (400, "invalid_request_error", "messages: roles must alternate"),
        (401, "authentication_error", f"invalid x-api-key {API_KEY}"),
        (404, "not_found_error", "model: claude-nope"),
    ],
)
async def test_other_client_errors_are_not_retried_and_never_show_the_key(
    provider: AnthropicProvider, wire: WireServer, status: int, kind: str, text: str
) -> None:
    wire.script(json_reply(wire_anthropic.error(kind, text), status=status))
    with pytest.raises(ProviderError) as raised:
        await provider.complete(HELLO)
    assert type(raised.value) is ProviderError
    assert raised.value.status == status
    assert not raised.value.retryable
    assert API_KEY not in str(raised.value)
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    ("text", "content_type"),
    [
        ('{"id": "msg_1", "content": [', "application/json"),
        ("<html><body>502 Bad Gateway</body></html>", "text/html"),
        ('{"id": "msg_1", "type": "message", "content": "not blocks"}', "application/json"),
    ],
    ids=["truncated-json", "html", "wrong-shape"],
)
async def test_malformed_body_after_200_is_an_error_and_not_retried(
    provider: AnthropicProvider, wire: WireServer, text: str, content_type: str
) -> None:
    wire.script(text_reply(text, content_type=content_type))
    with pytest.raises(ProviderError) as raised:
        await provider.complete(HELLO)
    assert not raised.value.retryable
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    "broken",
    [
        sse_reply(text_stream("Partial ")[:4], complete=False),
        sse_reply(
            (
                *text_stream("Partial ")[:4],
                *wire_anthropic.sse(
                    [event("error", error={"type": "overloaded_error", "message": "Overloaded"})]
                ),
            )
        ),
    ],
    ids=["connection-dropped", "error-event"],
)
async def test_stream_that_fails_mid_way_is_not_retried(
    provider: AnthropicProvider, wire: WireServer, broken: Reply
) -> None:
    wire.script(broken, sse_reply(text_stream("never sent")))
    seen: list[str] = []
    with pytest.raises(ProviderError) as raised:
        await collect_into(seen, provider, HELLO)
    assert seen == ["Partial "]
    assert not raised.value.retryable
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    "failure",
    [
        json_reply(wire_anthropic.error("overloaded_error", "Overloaded"), status=529),
        sse_reply((), complete=False),
    ],
    ids=["status-529", "dropped-before-first-event"],
)
async def test_stream_is_retried_while_no_event_has_arrived(
    provider: AnthropicProvider, wire: WireServer, failure: Reply
) -> None:
    wire.script(failure, sse_reply(text_stream("fine")))
    events = await collect(provider, HELLO)
    assert done(events).text == "fine"
    assert done(events).usage == Usage(input_tokens=25, output_tokens=15)
    assert len(wire.requests) == 2


async def test_unreachable_server_is_retried_then_reported_retryable() -> None:
    policy = RecordingRetryPolicy(max_attempts=ATTEMPTS)
    async with serve_wire() as gone:
        base_url = gone.base_url
    async with AnthropicProvider(
        model=MODEL, base_url=base_url, api_key=API_KEY, retry=policy, timeout_s=5
    ) as provider:
        with pytest.raises(ProviderError) as raised:
            await provider.complete(HELLO)
    assert raised.value.retryable
    assert raised.value.status is None
    assert len(policy.waits) == ATTEMPTS - 1


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
    assert raised.value.key == "api_key"


async def test_defaults_satisfy_the_provider_protocol() -> None:
    provider = AnthropicProvider(model=MODEL, api_key=API_KEY)
    assert isinstance(provider, ModelProvider)
    assert (provider.name, provider.model) == ("anthropic", MODEL)
    assert (provider.limits.context_window, provider.limits.max_output_tokens) == (200_000, 8192)
    await provider.aclose()


async def test_aclose_is_idempotent_and_a_closed_provider_refuses_requests(
    provider: AnthropicProvider, wire: WireServer
) -> None:
    wire.script(json_reply(wire_anthropic.message([wire_anthropic.text_block("once")])))
    await provider.complete(HELLO)
    await provider.aclose()
    await provider.aclose()
    with pytest.raises(ProviderError, match="closed"):
        await provider.complete(HELLO)
    assert len(wire.requests) == 1
