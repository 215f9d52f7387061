"""OpenAIChatProvider against a loopback server speaking the chat completions wire format."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hostkit.adapters.openai_chat import OpenAIChatProvider
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
from tests.wire import openai_chat as wire_openai

pytestmark = pytest.mark.anyio

API_KEY = "sk-test-0123456789abcdef"
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
) -> AsyncIterator[OpenAIChatProvider]:
    async with OpenAIChatProvider(
        model="gpt-4o", base_url=f"{wire.base_url}/v1", api_key=API_KEY, retry=policy
    ) as opened:
        yield opened


async def collect(provider: OpenAIChatProvider, request: ModelRequest) -> list[StreamEvent]:
    return [event async for event in provider.stream(request)]


async def collect_into(
    seen: list[str], provider: OpenAIChatProvider, request: ModelRequest
) -> None:
    """Like ``collect`` but keeps what arrived before a failure."""
    async for event in provider.stream(request):
        seen.append(event.text)


def done(events: list[StreamEvent]) -> ModelResponse:
    assert events[-1].kind == "done"
    assert events[-1].response is not None
    return events[-1].response


async def test_plain_answer_is_normalized_with_header_request_id(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    wire.script(
        json_reply(
            wire_openai.completion(text="Hello!", usage_block=wire_openai.usage(19, 10)),
            headers={"x-request-id": "req_abc123"},
        )
    )
    response = await provider.complete(HELLO)
    assert response == ModelResponse(
        text="Hello!",
        tool_calls=(),
        usage=Usage(input_tokens=19, output_tokens=10),
        finish_reason="stop",
        provider="openai",
        model=wire_openai.MODEL,
        provider_request_id="req_abc123",
    )
    assert wire.requests[0].path == "/v1/chat/completions"
    assert wire.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_request_id_falls_back_to_completion_id(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    wire.script(json_reply(wire_openai.completion(text="hi", completion_id="chatcmpl-xyz")))
    response = await provider.complete(HELLO)
    assert response.provider_request_id == "chatcmpl-xyz"


async def test_tool_calls_are_parsed_and_malformed_arguments_kept_raw(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    wire.script(
        json_reply(
            wire_openai.completion(
                tool_calls=[
                    wire_openai.tool_call("call_1", "get_weather", {"city": "Paris"}),
                    wire_openai.tool_call("call_2", "get_weather", '{"city": "Par'),
                ],
                finish_reason="tool_calls",
            )
        )
    )
    response = await provider.complete(HELLO)
    assert response.finish_reason == "tool_calls"
    assert response.text == ""
    assert response.tool_calls == (
        ToolCall(call_id="call_1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall(call_id="call_2", name="get_weather", arguments={"_raw": '{"city": "Par'}),
    )


async def test_usage_reports_cached_prompt_tokens_as_part_of_input(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    block = wire_openai.usage(2006, 300, cached=1920, cache_write=64)
    wire.script(json_reply(wire_openai.completion(text="ok", usage_block=block)))
    response = await provider.complete(HELLO)
    assert response.usage == Usage(
        input_tokens=2006, output_tokens=300, cache_read_tokens=1920, cache_write_tokens=64
    )


async def test_tool_round_trip_sends_openai_messages_and_tools(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    wire.script(json_reply(wire_openai.completion(text="It is sunny in Paris.")))
    request = ModelRequest(
        messages=(
            ModelMessage(role="system", content="You are terse."),
            ModelMessage(role="user", content="Weather in Paris?", name="alice"),
            ModelMessage(
                role="assistant",
                tool_calls=(ToolCall("call_1", "get_weather", {"city": "Paris"}),),
            ),
            ModelMessage(role="tool", content='{"sky": "clear"}', tool_call_id="call_1"),
        ),
        tools=(WEATHER,),
        max_output_tokens=256,
        temperature=0.2,
    )
    await provider.complete(request)
    body = wire.requests[0].body
    assert body["model"] == "gpt-4o"
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.2
    assert "stream" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?", "name": "alice"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "clear"}'},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]


async def test_stream_yields_text_then_done_with_tool_calls_and_usage(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    wire.script(
        sse_reply(
            wire_openai.sse(
                [
                    wire_openai.chunk(role="assistant"),
                    wire_openai.chunk(content="Checking "),
                    wire_openai.chunk(content="both."),
                    wire_openai.chunk(
                        tool_calls=[
                            wire_openai.tool_call_delta(0, call_id="call_a", name="get_weather")
                        ]
                    ),
                    wire_openai.chunk(
                        tool_calls=[wire_openai.tool_call_delta(0, arguments='{"city": ')]
                    ),
                    wire_openai.chunk(
                        tool_calls=[
                            wire_openai.tool_call_delta(1, call_id="call_b", name="get_weather"),
                        ]
                    ),
                    wire_openai.chunk(
                        tool_calls=[
                            wire_openai.tool_call_delta(0, arguments='"Paris"}'),
                            wire_openai.tool_call_delta(1, arguments='{"city": "Oslo"}'),
                        ]
                    ),
                    wire_openai.chunk(finish_reason="tool_calls"),
                    wire_openai.chunk(usage_block=wire_openai.usage(80, 40, cached=64)),
                ]
            ),
            headers={"x-request-id": "req_stream"},
        )
    )
    events = await collect(provider, HELLO)
    assert [event.text for event in events if event.kind == "text"] == ["Checking ", "both."]
    assert [event.kind for event in events].count("done") == 1
    assert done(events) == ModelResponse(
        text="Checking both.",
        tool_calls=(
            ToolCall("call_a", "get_weather", {"city": "Paris"}),
            ToolCall("call_b", "get_weather", {"city": "Oslo"}),
        ),
        usage=Usage(input_tokens=80, output_tokens=40, cache_read_tokens=64),
        finish_reason="tool_calls",
        provider="openai",
        model=wire_openai.MODEL,
        provider_request_id="req_stream",
    )
    body = wire.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("headers", "wait"),
    [({"retry-after": "2"}, 2.0), ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5)],
)
async def test_rate_limit_waits_retry_after_then_succeeds(
    provider: OpenAIChatProvider,
    wire: WireServer,
    policy: RecordingRetryPolicy,
    headers: dict[str, str],
    wait: float,
) -> None:
    wire.script(
        json_reply(
            wire_openai.error("Rate limit reached for gpt-4o", kind="requests"),
            status=429,
            headers=headers,
        ),
        json_reply(wire_openai.completion(text="after the wait")),
    )
    response = await provider.complete(HELLO)
    assert response.text == "after the wait"
    assert policy.waits == [wait]
    assert len(wire.requests) == 2


async def test_server_error_is_retried_then_succeeds(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    wire.script(
        json_reply(wire_openai.error("The server had an error", kind="server_error"), status=500),
        json_reply(wire_openai.completion(text="recovered")),
    )
    assert (await provider.complete(HELLO)).text == "recovered"
    assert len(wire.requests) == 2


async def test_repeated_server_errors_stop_after_max_attempts(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    failure = json_reply(wire_openai.error("Bad gateway", kind="server_error"), status=502)
    wire.script(*[failure] * (ATTEMPTS + 1))
    with pytest.raises(ProviderError) as raised:
        await provider.complete(HELLO)
    assert raised.value.status == 502
    assert raised.value.retryable
    assert len(wire.requests) == ATTEMPTS


@pytest.mark.parametrize(
    "body",
    [
        wire_openai.error(
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130512 tokens. Please reduce the length of the messages.",
            code="context_length_exceeded",
            param="messages",
        ),
        # vLLM: no code, the reason is only in the prose, and the envelope is flat.
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4500 in the messages, 500 in the completion).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        # llama.cpp server.
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9000,
                "n_ctx": 8192,
            }
        },
    ],
    ids=["openai", "vllm", "llama.cpp"],
)
async def test_context_length_error_is_context_overflow_and_not_retried(
    provider: OpenAIChatProvider, wire: WireServer, body: dict[str, object]
) -> None:
    wire.script(json_reply(body, status=400))
    with pytest.raises(ContextOverflow) as raised:
        await provider.complete(HELLO)
    assert raised.value.status == 400
    assert not raised.value.retryable
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, wire_openai.error("Invalid value for 'temperature'", param="temperature")),
        (401, wire_openai.error(f"Incorrect API key provided: {API_KEY}", code="invalid_api_key")),
        (404, wire_openai.error("The model `gpt-9` does not exist", code="model_not_found")),
    ],
)
async def test_other_client_errors_are_not_retried_and_never_show_the_key(
    provider: OpenAIChatProvider, wire: WireServer, status: int, body: dict[str, object]
) -> None:
    wire.script(json_reply(body, status=status))
    with pytest.raises(ProviderError) as raised:
        await provider.complete(HELLO)
    assert type(raised.value) is ProviderError
    assert raised.value.status == status
    assert not raised.value.retryable
    assert API_KEY not in str(raised.value)
    assert len(wire.requests) == 1


async def test_error_messages_are_bounded(provider: OpenAIChatProvider, wire: WireServer) -> None:
    wire.script(json_reply(wire_openai.error("x" * 20_000), status=422))
    with pytest.raises(ProviderError) as raised:
        await provider.complete(HELLO)
    assert len(str(raised.value)) <= 500


@pytest.mark.parametrize(
    ("text", "content_type"),
    [
        ('{"id": "chatcmpl-1", "choices": [', "application/json"),
        ("<html><body>502 Bad Gateway</body></html>", "text/html"),
        ('{"id": "chatcmpl-1", "object": "chat.completion", "choices": []}', "application/json"),
    ],
    ids=["truncated-json", "html", "no-choices"],
)
async def test_malformed_body_after_200_is_an_error_and_not_retried(
    provider: OpenAIChatProvider, wire: WireServer, text: str, content_type: str
) -> None:
    wire.script(text_reply(text, content_type=content_type))
    with pytest.raises(ProviderError) as raised:
        await provider.complete(HELLO)
    assert not raised.value.retryable
    assert len(wire.requests) == 1


async def test_stream_that_breaks_mid_way_is_not_retried(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    events = wire_openai.sse(
        [wire_openai.chunk(role="assistant"), wire_openai.chunk(content="Partial ")], done=False
    )
    wire.script(sse_reply(events, complete=False), sse_reply(events))
    seen: list[str] = []
    with pytest.raises(ProviderError) as raised:
        await collect_into(seen, provider, HELLO)
    assert seen == ["Partial "]
    assert "broke off" in str(raised.value)
    assert not raised.value.retryable
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    "failure",
    [
        json_reply(wire_openai.error("Service unavailable", kind="server_error"), status=503),
        sse_reply((), complete=False),
    ],
    ids=["status-503", "dropped-before-first-chunk"],
)
async def test_stream_is_retried_while_no_chunk_has_arrived(
    provider: OpenAIChatProvider, wire: WireServer, failure: Reply
) -> None:
    wire.script(
        failure,
        sse_reply(
            wire_openai.sse(
                [
                    wire_openai.chunk(content="fine"),
                    wire_openai.chunk(finish_reason="stop"),
                    wire_openai.chunk(usage_block=wire_openai.usage(5, 1)),
                ]
            )
        ),
    )
    events = await collect(provider, HELLO)
    assert done(events).text == "fine"
    assert done(events).usage == Usage(input_tokens=5, output_tokens=1)
    assert len(wire.requests) == 2


async def test_unreachable_server_is_retried_then_reported_retryable() -> None:
    policy = RecordingRetryPolicy(max_attempts=ATTEMPTS)
    async with serve_wire() as gone:
        base_url = f"{gone.base_url}/v1"
    async with OpenAIChatProvider(
        model="gpt-4o", base_url=base_url, api_key=API_KEY, retry=policy, timeout_s=5
    ) as provider:
        with pytest.raises(ProviderError) as raised:
            await provider.complete(HELLO)
    assert raised.value.retryable
    assert raised.value.status is None
    assert len(policy.waits) == ATTEMPTS - 1


async def test_local_server_gets_placeholder_key_not_the_environment_key(
    wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-openai-key-do-not-leak")
    wire.script(json_reply(wire_openai.completion(text="local")))
    async with OpenAIChatProvider(model="qwen2.5", base_url=f"{wire.base_url}/v1") as provider:
        assert (await provider.complete(HELLO)).text == "local"
    assert wire.requests[0].headers["authorization"] == "Bearer not-needed"


def test_missing_api_key_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError) as raised:
        OpenAIChatProvider(model="gpt-4o")
    assert raised.value.key == "api_key"


async def test_defaults_satisfy_the_provider_protocol() -> None:
    provider = OpenAIChatProvider(model="gpt-4o", api_key=API_KEY)
    assert isinstance(provider, ModelProvider)
    assert (provider.name, provider.model) == ("openai", "gpt-4o")
    assert (provider.limits.context_window, provider.limits.max_output_tokens) == (128_000, 4096)
    await provider.aclose()


async def test_aclose_is_idempotent_and_a_closed_provider_refuses_requests(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    wire.script(json_reply(wire_openai.completion(text="once")))
    await provider.complete(HELLO)
    await provider.aclose()
    await provider.aclose()
    with pytest.raises(ProviderError, match="closed"):
        await provider.complete(HELLO)
    assert len(wire.requests) == 1
