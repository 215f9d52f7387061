"""OpenTelemetry traces of turns: the span tree, GenAI attributes, statuses, secrecy, config,
and a real OTLP/HTTP export to a collector on loopback."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from hostkit.context import DEFAULT_SUMMARY_INSTRUCTIONS
from hostkit.effects import ApprovalRequest, AuthoredTool, ToolContext, tool
from hostkit.errors import ConfigError, InvalidValue
from hostkit.host import Host, HostConfig, parse_config
from hostkit.telemetry import TracingObserver
from hostkit.testing import CallTools, Fail, Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import UNKNOWN_EFFECT, ModelLimits, ModelRequest, TurnResult
from tests.hosts import request, turn_rows
from tests.support import facts

pytestmark = pytest.mark.anyio

SECRET = "hk-otel-secret-4f9a1c"
ARGUMENT = "argument-value-7b2e"


@tool("demo.lookup")
async def lookup(ctx: ToolContext, city: str) -> str:
    """Look the weather up."""
    return f"sunny in {city}"


@tool("demo.explode")
async def explode(ctx: ToolContext) -> str:
    """Always fails."""
    raise RuntimeError(f"boom {SECRET}")


def echo_secret() -> AuthoredTool:
    """Binds a Host secret and returns its value (what a careless tool might do)."""

    async def echo(ctx: ToolContext, secrets: list[str], note: str = "") -> str:
        return f"{note} {' '.join(ctx.secrets.values())}"

    return AuthoredTool("probe.echo", echo, description="Echoes.", secrets_argument="secrets")


class Approve:
    async def decide(self, req: ApprovalRequest) -> str:
        return "approve_once"


@dataclass
class Traces:
    provider: TracerProvider = field(default_factory=TracerProvider)
    exporter: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)

    def __post_init__(self) -> None:
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def root(self, turn_id: str) -> ReadableSpan:
        (root,) = [
            s
            for s in self.named("invoke_agent")
            if (s.attributes or {}).get("hostkit.turn_id") == turn_id
        ]
        return root


@pytest.fixture
def traces() -> Iterator[Traces]:
    t = Traces()
    yield t
    t.provider.shutdown()


def host_config(tmp_path: Path, **host: Any) -> HostConfig:
    policy = host.pop("policy", {"allow": ["*"]})
    agent = host.pop("agent", {})
    return parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "workspace": str(tmp_path),
                **host,
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {
                "assistant": {"provider": "test", "memory": False, "policy": policy, **agent}
            },
        },
        base_dir=tmp_path,
    )


def traced(
    tmp_path: Path,
    traces: Traces,
    model: ScriptedModel,
    tools: Sequence[AuthoredTool] = (),
    **host: Any,
) -> Any:
    observer = TracingObserver(traces.provider)
    approver = host.pop("approver", None)
    return Host.open(
        host_config(tmp_path, **host),
        capabilities=capabilities(model, tools=tools, observer=observer),
        approver=approver,
    )


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def observed_usage(host: Host, turn_id: str) -> list[tuple[int, int, str, str]]:
    """Per step, what the store recorded of each model call: usage, response id, finish."""
    rows = await host.store.read(
        lambda c: c.execute(
            "SELECT input_tokens, output_tokens, provider_request_id, finish_reason "
            "FROM usage_observations WHERE turn_id = ? ORDER BY step_id",
            [turn_id],
        ).fetchall()
    )
    return [tuple(row) for row in rows]


def everything_exported(spans: Sequence[ReadableSpan]) -> str:
    """Every name, attribute, event, link and status text of ``spans``, as one string."""
    parts: list[str] = []
    for span in spans:
        parts.append(span.name)
        parts.append(repr(dict(span.attributes or {})))
        parts.append(repr(span.status.description))
        parts.extend(repr((e.name, dict(e.attributes or {}))) for e in span.events)
        parts.extend(repr(dict(link.attributes or {})) for link in span.links)
    return "\n".join(parts)


# -- the span tree ---------------------------------------------------------------------


async def test_a_turn_with_a_tool_is_an_agent_span_over_two_chats_and_a_tool(
    tmp_path: Path, traces: Traces
) -> None:
    model = ScriptedModel([CallTools(("demo_lookup", {"city": ARGUMENT})), Reply("It is sunny.")])
    req = request("weather?")
    async with traced(tmp_path, traces, model, [lookup]) as host:
        result = await host.turns.run(req)
        usage = await observed_usage(host, result.turn_id)
    assert result.outcome == "completed"
    spans = traces.spans()
    assert sorted(s.name for s in spans) == [
        "chat scripted-1",
        "chat scripted-1",
        "execute_tool demo_lookup",
        "invoke_agent assistant",
    ]
    root = traces.root(result.turn_id)
    chat0, chat1 = traces.named("chat")
    (tool_span,) = traces.named("execute_tool")
    assert root.parent is None
    for child in (chat0, chat1, tool_span):
        assert child.parent is not None
        assert child.parent.span_id == root.context.span_id
        assert child.context.trace_id == root.context.trace_id
    assert (root.kind, chat0.kind, tool_span.kind) == (
        SpanKind.INTERNAL,
        SpanKind.CLIENT,
        SpanKind.INTERNAL,
    )
    # Real times, in the order things happened.
    assert root.start_time <= chat0.start_time <= chat0.end_time <= tool_span.start_time
    assert tool_span.end_time <= chat1.start_time <= chat1.end_time <= root.end_time

    ids = {
        "hostkit.turn_id": result.turn_id,
        "hostkit.session_id": result.session_id,
        "hostkit.request_id": req.request_id,
        "gen_ai.conversation.id": result.session_id,
    }
    for span in spans:
        assert ids.items() <= attrs(span).items(), span.name
    assert {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "assistant",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted-1",
        "hostkit.turn.outcome": "completed",
        "gen_ai.usage.input_tokens": result.usage.input_tokens,
        "gen_ai.usage.output_tokens": result.usage.output_tokens,
    }.items() <= attrs(root).items()
    assert root.status.status_code == StatusCode.UNSET

    # Each model call: provider, models, and the usage, response id and finish reason the
    # store recorded for it.
    assert [reason for *_, reason in usage] == ["tool_calls", "stop"]
    for step, chat in enumerate([chat0, chat1]):
        a = attrs(chat)
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "scripted"
        assert (a["gen_ai.request.model"], a["gen_ai.response.model"]) == ("scripted-1",) * 2
        assert a["gen_ai.request.max_tokens"] == model.requests[step].max_output_tokens
        assert (
            a["gen_ai.usage.input_tokens"],
            a["gen_ai.usage.output_tokens"],
            a["gen_ai.response.id"],
            *a["gen_ai.response.finish_reasons"],
        ) == usage[step]
        assert a["hostkit.step"] == step
        assert chat.status.status_code == StatusCode.UNSET
    assert sum(u[0] for u in usage) == result.usage.input_tokens > 0

    (effect,) = result.effects
    assert {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "demo_lookup",
        "gen_ai.tool.call.id": effect.call_id,
        "gen_ai.tool.type": "function",
        "hostkit.effect": "demo.lookup",
        "hostkit.effect.status": "succeeded",
        "hostkit.step": 0,
    }.items() <= attrs(tool_span).items()
    assert tool_span.status.status_code == StatusCode.UNSET
    # Neither the arguments nor the result are recorded, under any attribute.
    assert not any(key.startswith("gen_ai.tool.call.a") for key in attrs(tool_span))
    exported = everything_exported(spans)
    assert ARGUMENT not in exported
    assert "sunny" not in exported


def talker(req: ModelRequest) -> Reply:
    """Long answers, so the session compacts by its fifth turn; summarizer requests get one."""
    if req.messages[0].content == DEFAULT_SUMMARY_INSTRUCTIONS:
        return Reply("they talked about sheds")
    return Reply("about sheds: " + "the shed is green " * 90)


async def test_a_compactions_summarizer_call_is_a_chat_span_counted_in_the_agent_span(
    tmp_path: Path, traces: Traces
) -> None:
    """The summary a compaction asks for while preparing a step is a model call like the
    step's own: a ``chat`` span under the turn's (marked ``hostkit.context.summary``, ended
    before the step's call began) whose usage the ``invoke_agent`` totals include."""
    limits = ModelLimits(context_window=2_000, max_output_tokens=300, safety_margin_tokens=50)
    model = ScriptedModel([talker], repeat_last=True, limits=limits)
    async with traced(tmp_path, traces, model) as host:
        results = [await host.turns.run(request(f"tell me about shed {i}")) for i in range(5)]
    assert [r.outcome for r in results] == ["completed"] * 5
    assert [r.messages[0].content for r in model.requests].count(DEFAULT_SUMMARY_INSTRUCTIONS) == 1
    last = results[-1]
    root = traces.root(last.turn_id)
    chats = [s for s in traces.named("chat") if attrs(s)["hostkit.turn_id"] == last.turn_id]
    summary, step = chats
    assert attrs(summary)["hostkit.context.summary"] is True
    assert "hostkit.context.summary" not in attrs(step)
    assert summary.parent is not None
    assert summary.parent.span_id == root.context.span_id
    assert summary.end_time <= step.start_time
    assert (attrs(summary)["hostkit.step"], attrs(step)["hostkit.step"]) == (0, 0)
    assert attrs(summary)["gen_ai.usage.input_tokens"] > 0
    assert (
        (
            attrs(root)["gen_ai.usage.input_tokens"],
            attrs(root)["gen_ai.usage.output_tokens"],
        )
        == (
            sum(attrs(c)["gen_ai.usage.input_tokens"] for c in chats),
            sum(attrs(c)["gen_ai.usage.output_tokens"] for c in chats),
        )
        == (last.usage.input_tokens, last.usage.output_tokens)
    )


async def test_turns_of_one_conversation_share_its_id_and_nest_under_the_callers_span(
    tmp_path: Path, traces: Traces
) -> None:
    model = ScriptedModel([Reply("one"), Reply("two")])
    app = traces.provider.get_tracer("the-application")
    async with traced(tmp_path, traces, model) as host:
        with app.start_as_current_span("handle request") as outer:
            first = await host.turns.run(request("a"))
        second = await host.turns.run(request("b"))
    one, two = traces.root(first.turn_id), traces.root(second.turn_id)
    assert first.session_id == second.session_id
    assert attrs(one)["gen_ai.conversation.id"] == attrs(two)["gen_ai.conversation.id"]
    assert attrs(one)["hostkit.turn_id"] != attrs(two)["hostkit.turn_id"]
    # A turn run inside the application's span is part of the application's trace.
    assert one.parent is not None
    assert one.parent.span_id == outer.get_span_context().span_id
    assert one.context.trace_id == outer.get_span_context().trace_id
    assert two.parent is None
    assert two.context.trace_id != one.context.trace_id


# -- statuses --------------------------------------------------------------------------


async def test_a_failed_model_call_fails_its_chat_span_and_the_turn_span(
    tmp_path: Path, traces: Traces
) -> None:
    async with traced(tmp_path, traces, ScriptedModel([Fail()])) as host:
        result = await host.turns.run(request())
    assert result.outcome == "failed"
    (chat,) = traces.named("chat")
    root = traces.root(result.turn_id)
    assert chat.status.status_code == StatusCode.ERROR
    assert attrs(chat)["error.type"] == "ProviderError"
    assert "gen_ai.usage.input_tokens" not in attrs(chat)
    assert root.status.status_code == StatusCode.ERROR
    assert (attrs(root)["error.type"], attrs(root)["hostkit.turn.outcome"]) == ("failed", "failed")
    assert root.status.description == result.error


async def test_a_failing_tool_fails_its_own_span_only(tmp_path: Path, traces: Traces) -> None:
    model = ScriptedModel([CallTools(("demo_explode", {})), Reply("sorry")])
    async with traced(tmp_path, traces, model, [explode]) as host:
        result = await host.turns.run(request())
    assert result.outcome == "completed"
    (tool_span,) = traces.named("execute_tool")
    assert tool_span.status.status_code == StatusCode.ERROR
    assert attrs(tool_span)["error.type"] == "failed"
    assert attrs(tool_span)["hostkit.effect.status"] == "failed"
    # The tool's error text (which names a secret here) is not the span's business.
    assert SECRET not in everything_exported(traces.spans())
    assert traces.root(result.turn_id).status.status_code == StatusCode.UNSET


class Blocked:
    def __init__(self) -> None:
        self.entered = anyio.Event()

    async def __call__(self, request: ModelRequest) -> Reply:
        self.entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_cancelled_turn_ends_its_open_model_call_cancelled(
    tmp_path: Path, traces: Traces
) -> None:
    blocked = Blocked()
    results: list[TurnResult] = []
    async with traced(tmp_path, traces, ScriptedModel([blocked])) as host:

        async def run() -> None:
            results.append(await host.turns.run(request(conversation="c")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await blocked.entered.wait()
            # The model call is in flight: nothing is exported yet, the spans are open.
            assert traces.spans() == []
            turn_id = (await turn_rows(host))[-1][0]
            owner = await host.authority.for_conversation(facts("c", "alice", "test"))
            await host.turns.cancel(turn_id, owner)
    assert results[0].outcome == "cancelled"
    (chat,) = traces.named("chat")
    root = traces.root(turn_id)
    for span in (chat, root):
        assert span.status.status_code == StatusCode.ERROR
        assert attrs(span)["error.type"] == "cancelled"
    assert chat.end_time is not None
    assert root.end_time is not None
    assert chat.end_time <= root.end_time


async def test_a_turn_paused_for_approval_is_not_an_error_and_its_continuation_is_traced(
    tmp_path: Path, traces: Traces
) -> None:
    model = ScriptedModel([CallTools(("demo_lookup", {"city": ARGUMENT})), Reply("done")])
    policy = {"allow": ["*"], "ask": ["demo.lookup"]}
    async with traced(tmp_path, traces, model, [lookup], policy=policy) as host:
        paused = await host.turns.run(request())
        assert paused.outcome == "needs_user"
        assert paused.pending_approval
        operator = await host.operator("ops", reason="answer approvals")
        continued = await host.approvals.answer(
            paused.pending_approval, "approve_once", by=operator
        )
    assert continued.outcome == "completed"
    first, second = traces.root(paused.turn_id), traces.root(continued.turn_id)
    assert first.status.status_code == StatusCode.UNSET
    assert attrs(first)["hostkit.turn.outcome"] == "needs_user"
    asked, ran = traces.named("execute_tool")
    assert asked.parent is not None
    assert asked.parent.span_id == first.context.span_id
    assert asked.status.status_code == StatusCode.UNSET
    assert attrs(asked)["hostkit.effect.status"] == "pending_approval"
    assert attrs(asked)["hostkit.approval_id"] == paused.pending_approval
    # The continuation runs the approved call under its own turn, in the same conversation.
    assert ran.parent is not None
    assert ran.parent.span_id == second.context.span_id
    assert ran.name == "execute_tool demo_lookup"
    assert attrs(ran)["gen_ai.tool.name"] == "demo_lookup"
    assert attrs(ran)["hostkit.approval_id"] == paused.pending_approval
    assert attrs(ran)["hostkit.effect.status"] == "succeeded"
    assert attrs(ran)["gen_ai.tool.call.id"] == attrs(asked)["gen_ai.tool.call.id"]
    assert attrs(second)["gen_ai.conversation.id"] == attrs(first)["gen_ai.conversation.id"]
    assert ARGUMENT not in everything_exported(traces.spans())


async def test_no_secret_value_or_argument_reaches_any_span(
    tmp_path: Path, traces: Traces, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HK_TOKEN", SECRET)
    call = ("probe_echo", {"secrets": ["HK_TOKEN"], "note": ARGUMENT})
    # A tool no catalog has, named with the secret (what a prompt injection may ask for).
    typed = (f"nosuch_{SECRET}", {})
    model = ScriptedModel([CallTools(call, typed), Reply(f"the token is {SECRET}")])
    async with traced(
        tmp_path,
        traces,
        model,
        [echo_secret()],
        agent={"secrets": ["HK_TOKEN"]},
        approver=Approve(),
    ) as host:
        result = await host.turns.run(request(f"use {SECRET}"))
    assert result.outcome == "completed"
    assert SECRET in result.text  # the model said it; the trace must not
    tool_span, unknown = traces.named("execute_tool")
    assert attrs(tool_span)["hostkit.effect.status"] == "succeeded"
    assert unknown.name == f"execute_tool {UNKNOWN_EFFECT}"
    assert attrs(unknown)["gen_ai.tool.name"] == UNKNOWN_EFFECT
    assert attrs(unknown)["hostkit.effect"] == UNKNOWN_EFFECT
    assert attrs(unknown)["hostkit.effect.status"] == "not_found"
    exported = everything_exported(traces.spans())
    assert SECRET not in exported
    assert ARGUMENT not in exported
    assert "HK_TOKEN" not in exported


async def test_an_observer_given_to_open_traces_the_configured_sources_in_every_generation(
    tmp_path: Path, traces: Traces
) -> None:
    """An application with its own tracer provider keeps the sources its configuration
    implies: ``Host.open(config, observer=...)``; a reload keeps tracing to it."""
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted", "script": [{"reply": "one"}]}},
            "agents": {"assistant": {"provider": "test", "memory": False}},
        },
        base_dir=tmp_path,
    )
    async with Host.open(config, observer=TracingObserver(traces.provider)) as host:
        first = await host.turns.run(request("a"))
        await host.apply_config(host.declared_config)
        second = await host.turns.run(request("b", conversation="c2"))
    assert (first.outcome, second.outcome) == ("completed", "completed")
    assert traces.root(first.turn_id).name == "invoke_agent assistant"
    assert traces.root(second.turn_id).name == "invoke_agent assistant"
    assert len(traces.named("chat scripted-1")) == 2


async def test_an_observer_that_is_not_one_is_refused_before_anything_opens(
    tmp_path: Path,
) -> None:
    with pytest.raises(InvalidValue, match="observer must be an Observer"):
        await Host.open(host_config(tmp_path), observer=object())  # type: ignore[arg-type]
    assert not (tmp_path / "hostkit.db").exists()


async def test_tracing_that_fails_never_fails_the_turn_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Failing(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            raise RuntimeError("no spans today")

    provider = TracerProvider()
    provider.add_span_processor(Failing())
    model = ScriptedModel([CallTools(("demo_lookup", {"city": "x"})), Reply("fine")])
    caplog.set_level(logging.DEBUG, logger="hostkit.telemetry")
    async with Host.open(
        host_config(tmp_path),
        capabilities=capabilities(model, tools=[lookup], observer=TracingObserver(provider)),
    ) as host:
        result = await host.turns.run(request())
    provider.shutdown()
    assert (result.outcome, result.text) == ("completed", "fine")
    records = [r for r in caplog.records if r.name == "hostkit.telemetry"]
    assert [r.levelno for r in records if r.levelno >= logging.WARNING] == [logging.WARNING]
    assert "no spans today" in records[0].getMessage()


# -- configuration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("telemetry", "key"),
    [
        ({"traces": "jaeger"}, "host.telemetry.traces"),
        ({"traces": "console", "endpoint": "http://127.0.0.1:4318"}, "host.telemetry"),
        ({"traces": "otlp", "endpoint": "localhost:4318"}, "host.telemetry.endpoint"),
        ({"traces": "otlp", "exporter": "grpc"}, "host.telemetry.exporter"),
    ],
)
def test_bad_telemetry_settings_are_one_line_config_errors(
    tmp_path: Path, telemetry: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        host_config(tmp_path, telemetry=telemetry)
    assert caught.value.key == key
    assert "\n" not in str(caught.value)


async def test_traces_are_off_by_default(tmp_path: Path) -> None:
    config = host_config(tmp_path)
    assert config.host.telemetry.traces == "none"
    async with Host.open(config, capabilities=capabilities(ScriptedModel([Reply("ok")]))) as host:
        assert host.tracing is None
        await host.turns.run(request())


async def test_tracing_without_the_otel_extra_names_the_install_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the SDK were not installed: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    config = host_config(tmp_path, telemetry={"traces": "console"})
    with pytest.raises(ConfigError) as caught:
        await Host.open(config, capabilities=capabilities(ScriptedModel([])))
    assert caught.value.key == "host.telemetry.traces"
    assert str(caught.value).endswith('pip install "hostkit[otel]"')
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "hostkit.db").exists()


async def test_console_traces_go_to_stderr_when_the_host_closes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = host_config(tmp_path, telemetry={"traces": "console"})
    async with Host.open(config, capabilities=capabilities(ScriptedModel([Reply("ok")]))) as host:
        result = await host.turns.run(request())
    captured = capsys.readouterr()
    assert captured.out == ""
    assert '"name": "invoke_agent assistant"' in captured.err
    assert result.turn_id in captured.err
    assert '"service.name": "hostkit"' in captured.err


# -- OTLP/HTTP to a collector on loopback ----------------------------------------------


@dataclass
class Collector:
    """An OTLP/HTTP trace receiver: records each POST, answers ``status``."""

    status: int = 200
    posts: list[tuple[str, str, bytes]] = field(default_factory=list)
    received: threading.Event = field(default_factory=threading.Event)
    url: str = ""


@pytest.fixture
def collector() -> Iterator[Collector]:
    state = Collector()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.posts.append((self.path, self.headers.get("Content-Type", ""), body))
            self.send_response(state.status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            state.received.set()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def exported_spans(body: bytes) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, attributes, resource attributes) of every span in an OTLP protobuf request."""
    message = ExportTraceServiceRequest()
    message.ParseFromString(body)
    spans = []
    for resource_spans in message.resource_spans:
        resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                values = {}
                for a in span.attributes:
                    kind = a.value.WhichOneof("value")
                    values[a.key] = getattr(a.value, kind) if kind else None
                spans.append((span.name, values, resource))
    return spans


async def run_watching(host: Host, seen: list[str]) -> TurnResult:
    """Run a turn while subscribed to ``host.events`` (as the CLI and notebook are)."""
    async with host.events.subscribe() as events:
        result = await host.turns.run(request())
        while True:
            try:
                seen.append(events.receive_nowait().kind)
            except anyio.WouldBlock:
                return result


async def test_otlp_traces_reach_a_collector_as_protobuf(
    tmp_path: Path, collector: Collector
) -> None:
    config = host_config(
        tmp_path,
        telemetry={"traces": "otlp", "endpoint": collector.url, "service_name": "my-agent"},
    )
    model = ScriptedModel([CallTools(("demo_lookup", {"city": ARGUMENT})), Reply("sunny")])
    seen: list[str] = []
    async with Host.open(config, capabilities=capabilities(model, tools=[lookup])) as host:
        # Tracing rides on host.events: a front end's subscription sees every event still.
        result = await run_watching(host, seen)
    assert seen[0] == "turn.started"
    assert seen[-1] == "turn.completed"
    assert "provider.responded" in seen
    # Closing the Host flushed the batch to the collector.
    assert collector.posts
    path, content_type, _ = collector.posts[0]
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    spans = [span for _, _, body in collector.posts for span in exported_spans(body)]
    assert sorted(name for name, _, _ in spans) == [
        "chat scripted-1",
        "chat scripted-1",
        "execute_tool demo_lookup",
        "invoke_agent assistant",
    ]
    for _, values, resource in spans:
        assert values["hostkit.turn_id"] == result.turn_id
        assert values["gen_ai.conversation.id"] == result.session_id
        assert resource["service.name"] == "my-agent"
    (tool_values,) = [v for name, v, _ in spans if name.startswith("execute_tool")]
    assert tool_values["gen_ai.tool.call.id"] == result.effects[0].call_id
    assert ARGUMENT.encode() not in b"".join(body for _, _, body in collector.posts)


async def test_a_collector_that_refuses_spans_is_logged_and_costs_the_turn_nothing(
    tmp_path: Path, collector: Collector, caplog: pytest.LogCaptureFixture
) -> None:
    collector.status = 400
    config = host_config(tmp_path, telemetry={"traces": "otlp", "endpoint": collector.url})
    caplog.set_level(logging.ERROR)
    async with Host.open(config, capabilities=capabilities(ScriptedModel([Reply("ok")]))) as host:
        result = await host.turns.run(request())
        started = time.monotonic()
    assert result.outcome == "completed"
    assert time.monotonic() - started < 10
    assert collector.received.is_set()
    assert any("Failed to export" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
async def test_an_unreachable_collector_delays_closing_by_a_bounded_time(tmp_path: Path) -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as probe:
        port = probe.server_address[1]  # closed again before the Host exports: refused
    config = host_config(
        tmp_path, telemetry={"traces": "otlp", "endpoint": f"http://127.0.0.1:{port}/v1/traces"}
    )
    host = await Host.open(config, capabilities=capabilities(ScriptedModel([Reply("ok")])))
    try:
        with anyio.fail_after(5):
            result = await host.turns.run(request())
    finally:
        started = time.monotonic()
        await host.aclose()
    assert result.outcome == "completed"
    assert time.monotonic() - started < 12


def test_turns_without_an_end_are_bounded_and_ended_when_tracing_closes(traces: Traces) -> None:
    observer = TracingObserver(traces.provider, max_turns=2)
    for turn in ("t1", "t2", "t3"):
        observer.notify(TurnEvent("turn.started", "r", turn, "s", {"core_id": "assistant"}))
    # The oldest was ended to keep the bound; the others are still open.
    assert observer.open_turns == 2
    (evicted,) = traces.spans()
    assert attrs(evicted)["hostkit.turn_id"] == "t1"
    assert attrs(evicted)["error.type"] == "_OTHER"
    observer.close()
    assert observer.open_turns == 0
    assert sorted(attrs(s)["hostkit.turn_id"] for s in traces.spans()) == ["t1", "t2", "t3"]
    assert all(s.status.status_code == StatusCode.ERROR for s in traces.spans())
