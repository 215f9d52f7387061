"""OpenAIChatProvider: what is OpenAI's own, against a loopback chat completions server.

The contract every adapter keeps (streaming, normalization, retries, errors,
cancellation, closing) is ``test_providers``; this file holds the wire mapping,
credentials, defaults and the context-overflow dialects of compatible servers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hostkit.adapters.openai_chat import OpenAIChatProvider
from hostkit.errors import ConfigError, ContextOverflow, ProviderError, bounded
from hostkit.types import (
    MalformedArguments,
    ModelMessage,
    ModelRequest,
    ToolCall,
    ToolDefinition,
)
from tests.wire import RecordingRetryPolicy, WireServer, json_reply, serve_wire, sse_reply
from tests.wire import openai_chat as wire_openai
from tests.wire.scenario import Answer

pytestmark = pytest.mark.anyio

API_KEY = "sk-test-0123456789abcdef"
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
    return RecordingRetryPolicy(max_attempts=3)


@pytest.fixture
async def provider(
    wire: WireServer, policy: RecordingRetryPolicy
) -> AsyncIterator[OpenAIChatProvider]:
    async with OpenAIChatProvider(
        model="gpt-4o", base_url=f"{wire.base_url}/v1", api_key=API_KEY, retry=policy
    ) as opened:
        yield opened


async def test_requests_go_to_chat_completions_with_the_bearer_key(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    wire.script(json_reply(wire_openai.completion(text="Hello!")))
    await provider.complete(HELLO)
    assert wire.requests[0].path == "/v1/chat/completions"
    assert wire.requests[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_tool_calls_in_a_whole_completion_keep_malformed_arguments_as_such(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    # Only this API sends arguments as JSON text in a whole response; the streamed case is shared.
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
    cut = "are cut off before their JSON ends (Unterminated string starting at character 9)"
    assert response.tool_calls == (
        ToolCall(call_id="call_1", name="get_weather", arguments={"city": "Paris"}),
        ToolCall("call_2", "get_weather", MalformedArguments('{"city": "Par', cut)),
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


async def test_stream_asks_for_usage_in_its_last_chunk(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    wire.script(sse_reply(wire_openai.answer_events(Answer(deltas=("Hi.",)))))
    assert [event.kind async for event in provider.stream(HELLO)] == ["text", "done"]
    body = wire.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def _unindexed(
    call_id: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, object]:
    """A tool-call fragment without ``index``, as some compatible servers stream them."""
    fragment: dict[str, object] = {"function": {"arguments": arguments}}
    if call_id is not None:
        fragment.update(id=call_id, type="function")
    if name is not None:
        fragment["function"] = {"name": name, "arguments": arguments}
    return fragment


@pytest.mark.parametrize(
    "fragments",
    [
        # Id and name on each call's first fragment only.
        [
            _unindexed("call_a", "get_weather", '{"city": '),
            _unindexed(arguments='"Paris"}'),
            _unindexed("call_b", "get_weather", '{"city": '),
            _unindexed(arguments='"Oslo"}'),
        ],
        # The id repeated on every fragment of its call.
        [
            _unindexed("call_a", "get_weather", '{"city": '),
            _unindexed("call_a", arguments='"Paris"}'),
            _unindexed("call_b", "get_weather", '{"city": "Oslo"}'),
        ],
    ],
    ids=["first-fragment-names-the-call", "id-on-every-fragment"],
)
async def test_streamed_tool_calls_without_an_index_are_assembled_by_their_ids(
    provider: OpenAIChatProvider, wire: WireServer, fragments: list[dict[str, object]]
) -> None:
    """A fragment with an id or a name opens a call; one with neither continues the last.
    Counting each fragment as a call split one call into several junk ones."""
    chunks = [wire_openai.chunk(tool_calls=[fragment]) for fragment in fragments]
    chunks.append(wire_openai.chunk(finish_reason="tool_calls"))
    wire.script(sse_reply(wire_openai.sse(chunks)))
    events = [event async for event in provider.stream(HELLO)]
    assert events[-1].response is not None
    assert events[-1].response.tool_calls == (
        ToolCall("call_a", "get_weather", {"city": "Paris"}),
        ToolCall("call_b", "get_weather", {"city": "Oslo"}),
    )


async def test_a_stream_with_a_finish_reason_is_whole_without_done(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    # The SDK swallows [DONE]; the finish reason is what says the answer is whole (a
    # stream without one is a cut answer: see test_providers).
    chunks = [wire_openai.chunk(content="Hi."), wire_openai.chunk(finish_reason="stop")]
    wire.script(sse_reply(wire_openai.sse(chunks, done=False)))
    events = [event async for event in provider.stream(HELLO)]
    assert events[-1].response is not None
    assert (events[-1].response.text, events[-1].response.finish_reason) == ("Hi.", "stop")


async def test_a_stream_that_no_response_can_be_built_from_fails_typed(
    provider: OpenAIChatProvider, wire: WireServer
) -> None:
    # The SDK builds chunks unvalidated; whatever then fails building the response (here a
    # finish reason that is a list) reaches the turn as a ProviderError, not a TypeError.
    chunks = [wire_openai.chunk(content="Hi."), wire_openai.chunk(finish_reason=["stop"])]  # type: ignore[arg-type]
    wire.script(sse_reply(wire_openai.sse(chunks)))
    with pytest.raises(ProviderError, match="unusable streamed response") as raised:
        [event async for event in provider.stream(HELLO)]
    assert raised.value.status == 200
    assert not raised.value.retryable


@pytest.mark.parametrize(
    "body",
    [
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
    ids=["vllm", "llama.cpp"],
)
async def test_compatible_servers_context_length_errors_are_context_overflow(
    provider: OpenAIChatProvider, wire: WireServer, body: dict[str, object]
) -> None:
    # OpenAI's own context_length_exceeded is in the shared suite.
    wire.script(json_reply(body, status=400))
    with pytest.raises(ContextOverflow) as raised:
        await provider.complete(HELLO)
    assert raised.value.status == 400
    assert not raised.value.retryable
    assert len(wire.requests) == 1


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
    assert raised.value.key == "api_key_env"
    # Read whole, even quoted in another error: no "api_key: no" for the redactor to mask.
    for shown in (raised.value.message, bounded(f"agent 'a' is not available: {raised.value}")):
        assert "[redacted]" not in shown
        assert "no API key: set the environment variable OPENAI_API_KEY, or name another" in shown


async def test_defaults_name_openai_and_its_limits() -> None:
    async with OpenAIChatProvider(model="gpt-4o", api_key=API_KEY) as provider:
        assert (provider.name, provider.model) == ("openai", "gpt-4o")
        limits = provider.limits
        assert (limits.context_window, limits.max_output_tokens) == (128_000, 4096)


async def test_a_server_named_by_openai_base_url_goes_without_a_key(
    wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `hostkit run` with the default configuration: a model string (`openai:…`) and
    OPENAI_BASE_URL naming a local server need no OPENAI_API_KEY."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{wire.base_url}/v1")
    wire.script(json_reply(wire_openai.completion(text="local")))
    async with OpenAIChatProvider(model="qwen2.5") as provider:
        assert (await provider.complete(HELLO)).text == "local"
    assert wire.requests[0].headers["authorization"] == "Bearer not-needed"


async def test_a_key_that_is_set_is_sent_to_the_openai_base_url_server(
    wire: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-the-compatible-server")
    monkeypatch.setenv("OPENAI_BASE_URL", f"{wire.base_url}/v1")
    wire.script(json_reply(wire_openai.completion(text="hosted")))
    async with OpenAIChatProvider(model="qwen2.5") as provider:
        assert (await provider.complete(HELLO)).text == "hosted"
    assert wire.requests[0].headers["authorization"] == "Bearer sk-for-the-compatible-server"
