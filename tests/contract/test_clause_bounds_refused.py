"""Clause: a limit, timeout or count given to a public constructor is checked when given.

The family: ``NaN`` passes ``value < 1`` and then bounds nothing; ``inf``
waits forever; ``-1`` is "unlimited" to ``prlimit``; ``True`` is an ``int``;
``"5"`` fails deep inside a call; a bare ``str`` where a list of rules is
meant is a sequence of one-character rules. Each such value is refused with
the constructor's typed error (``InvalidValue``, or ``ConfigError`` naming
the key) and a bounded message, before anything runs.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from hostkit.adapters._llama_setup import check_options as check_local_options
from hostkit.adapters.openai_chat import OpenAIChatProvider
from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import (
    ProcessSupervisor,
    ResourceLimits,
    SandboxPolicy,
    TerminalRuns,
    run_process,
)
from hostkit.builtins.web import UrlPolicy
from hostkit.channels import TelegramPoller, ingress_app, sign_slack, sign_webhook
from hostkit.context import (
    CharEstimator,
    ContextManager,
    SessionCompactor,
    TokenizerEstimator,
    WorkspaceBootstrap,
)
from hostkit.cores import init_core
from hostkit.cores._yaml import YamlProblem, parse_yaml
from hostkit.delivery import (
    DeliveryPolicy,
    SlackChannel,
    TelegramChannel,
    WebhookChannel,
)
from hostkit.delivery._http import retry_after
from hostkit.effects import (
    ApprovalRuntime,
    AuthoredTool,
    EffectPolicy,
    SchemaTool,
    ToolContext,
    schema_problem,
)
from hostkit.errors import (
    ConfigError,
    HostkitError,
    InvalidTurnRequest,
    InvalidValue,
    NotFoundOrUnauthorized,
)
from hostkit.host import Host, parse_config
from hostkit.host._config import ChannelConfig
from hostkit.inbox import ChannelInbox, RetentionPolicy, RetryPolicy
from hostkit.inspect import ModelPrice, cost_text
from hostkit.providers import RetryPolicy as ProviderRetryPolicy
from hostkit.store import MAX_MEMORY_CHARS, MAX_RECALL, LeaseOwner, RuntimeStore
from hostkit.telemetry import TracingObserver, open_tracing
from hostkit.testing import (
    CallTools,
    Fail,
    Reply,
    ScriptedModel,
    StaticProviderSource,
    StaticToolSource,
    capabilities,
)
from hostkit.testing._sources import InMemoryMemory
from hostkit.turns import TurnExecution
from hostkit.types import (
    ConversationFacts,
    DeliveryFailure,
    InboundFailure,
    ModelLimits,
    ResumeSession,
    TurnRequest,
)
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

NAN, INF = float("nan"), float("inf")
KEY = b"bounds-test-artifact-key-32bytes"


def refused(make: Callable[[], object], error: type[HostkitError], *names: str) -> HostkitError:
    """``make()`` raises ``error`` with a short message that names one of ``names``."""
    with pytest.raises(error) as caught:
        make()
    text = f"{caught.value} {getattr(caught.value, 'key', '')}"
    assert len(str(caught.value)) < 300
    assert any(name in text for name in names), text
    return caught.value


@pytest.mark.parametrize("rules", ["terminal.run", ["x", 3], [""], ["a" * 300], None])
def test_an_effect_policy_takes_lists_of_globs_only(rules: object) -> None:
    # A bare string used to be matched character by character: ask="terminal.run" then
    # asked for nothing, and deny="terminal.run" denied nothing.
    for name in ("allow", "deny", "ask"):
        options = {name: rules}
        refused(lambda: EffectPolicy(**options), InvalidValue, name)  # type: ignore[arg-type]  # noqa: B023
    policy = EffectPolicy(ask=["terminal.*"], deny={"files.delete"})  # type: ignore[arg-type]
    assert policy.decide("terminal.run") == "ask"
    assert policy.decide("files.delete") == "deny"
    assert isinstance(policy.deny, tuple)


@pytest.mark.parametrize(
    "limits",
    [
        {"cpu_time_s": -1},
        {"cpu_time_s": NAN},
        {"address_space_mb": True},
        {"file_size_mb": 2.5},
        {"processes": "7"},
        {"processes": 0},
        {"tmp_mb": 0},
        {"tmp_mb": -1},
        {"address_space_mb": 10},
    ],
    ids=str,
)
def test_process_limits_are_whole_numbers_in_range(limits: dict[str, Any]) -> None:
    # prlimit reads -1 as "unlimited": a limit must never be able to switch itself off.
    refused(lambda: ResourceLimits(**limits), InvalidValue, *limits)


def test_a_misspelt_sandbox_mode_is_refused_not_unsandboxed() -> None:
    refused(lambda: SandboxPolicy(mode="bwrap"), InvalidValue, "mode")  # type: ignore[arg-type]
    refused(lambda: SandboxPolicy(network="yes"), InvalidValue, "network")  # type: ignore[arg-type]
    assert SandboxPolicy().sandboxed
    assert not SandboxPolicy(mode="none").sandboxed


@pytest.mark.parametrize("value", [NAN, INF, 0, -5, "100", True, 2.5])
@pytest.mark.parametrize("key", ["max_read_bytes", "max_write_bytes", "max_path_chars"])
def test_workspace_bounds_are_positive_integers(tmp_path: Path, key: str, value: object) -> None:
    refused(lambda: WorkspaceScope(tmp_path, **{key: value}), ConfigError, key)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"max_redirects": NAN},
        {"max_redirects": INF},
        {"max_redirects": -1},
        {"max_body_bytes": 10.5},
        {"max_body_bytes": INF},
        {"max_url_chars": NAN},
        {"connect_timeout_s": "10"},
        {"total_timeout_s": INF},
        {"read_timeout_s": 0},
    ],
    ids=str,
)
def test_url_policy_bounds_are_finite(options: dict[str, Any]) -> None:
    refused(lambda: UrlPolicy(**options), ConfigError, *options)


@pytest.mark.parametrize(
    "options",
    [
        {"max_background": NAN},
        {"max_finished_runs": 2.5},
        {"max_finished_runs": 0},
        {"grace_s": INF},
        {"start_timeout_s": NAN},
        {"confirm_s": -1},
        {"max_deadline_s": INF},
        {"default_deadline_s": NAN},
        {"default_deadline_s": 601},
    ],
    ids=str,
)
async def test_terminal_runs_options_are_checked(tmp_path: Path, options: dict[str, Any]) -> None:
    async with ProcessSupervisor() as supervisor:
        refused(
            lambda: TerminalRuns(
                supervisor=supervisor,
                workspace=WorkspaceScope(tmp_path),
                artifact_root=tmp_path / "artifacts",
                artifact_key=KEY,
                **options,
            ),
            ConfigError,
            *options,
        )


@pytest.mark.parametrize(
    "options",
    [
        {"ttl_s": NAN},
        {"ttl_s": INF},
        {"ttl_s": 0},
        {"decision_timeout_s": NAN},
        {"watch_interval_s": 0},
        {"watch_interval_s": "1"},
    ],
    ids=str,
)
def test_approval_runtime_times_are_finite(options: dict[str, Any]) -> None:
    # An infinite ttl would keep an "approve for the session" answer for ever.
    refused(lambda: ApprovalRuntime(**options), InvalidValue, *options)


async def _call(ctx: object, **arguments: object) -> str:
    return "ok"


@pytest.mark.parametrize(
    ("name", "timeout_s"), [("Not A Name!", 5.0), ("ok.tool", NAN), ("ok.tool", 0)]
)
def test_a_schema_tool_checks_its_name_and_timeout(name: str, timeout_s: float) -> None:
    refused(
        lambda: SchemaTool(
            name, _call, description="d", parameters={"type": "object"}, timeout_s=timeout_s
        ),
        InvalidValue,
        "name",
        "timeout",
    )


def test_a_reference_with_a_non_ascii_digit_names_no_subschema() -> None:
    # "²".isdigit() is true and int("²") fails: a discovered schema must not raise that.
    schema = {"type": "object", "allOf": [{}], "properties": {"a": {"$ref": "#/allOf/²"}}}
    assert "names no subschema" in (schema_problem(schema) or "")


@pytest.mark.parametrize("deadline_s", ["5", NAN, INF, 0, True])
async def test_run_process_refuses_an_unusable_deadline(tmp_path: Path, deadline_s: object) -> None:
    async with ProcessSupervisor() as supervisor:
        with pytest.raises(InvalidValue, match="deadline_s"):
            await run_process(
                ["true"],
                supervisor=supervisor,
                cwd=tmp_path,
                env={},
                deadline_s=deadline_s,  # type: ignore[arg-type]
                artifact_dir=tmp_path / "artifacts",
            )


@pytest.mark.parametrize(
    "options",
    [
        {"lease_s": 1e-9},
        {"lease_s": 1e300},
        {"max_delay_s": 1e300},
        {"base_delay_s": INF},
        {"jitter": "0.5"},
        {"jitter": None},
    ],
    ids=str,
)
def test_a_retry_policy_keeps_claims_and_retries_in_a_usable_range(
    options: dict[str, Any],
) -> None:
    # A lease of a nanosecond expired as it was granted: the next claim took the same
    # inbound again, and again, until it was dead-lettered while still being worked on.
    refused(lambda: RetryPolicy(**options), InvalidValue, *options)


def test_a_retention_batch_is_refused_when_given_not_at_the_first_prune() -> None:
    refused(lambda: RetentionPolicy(batch=10**7), InvalidValue, "batch")


@pytest.mark.parametrize(
    "options",
    [
        {"policy": {"lease_s": 1}},
        {"retention": 5},
        {"rng": 7},
        {"owner": "own\udcff"},
        {"owner": ""},
    ],
    ids=str,
)
def test_a_channel_inbox_checks_its_parts_when_built(options: dict[str, Any]) -> None:
    refused(lambda: ChannelInbox.in_memory(**options), InvalidValue, *options)
    assert ChannelInbox.in_memory(rng=random.Random(1), owner="worker.a")


@pytest.mark.parametrize(
    "options",
    [
        {"accept_timeout_s": "5"},
        {"accept_timeout_s": 0},
        {"body_timeout_s": NAN},
        {"body_timeout_s": INF},
    ],
    ids=str,
)
def test_ingress_timeouts_are_checked_when_the_app_is_built(options: dict[str, Any]) -> None:
    # Each of these used to answer every request with a 500 or a 503.
    inbox = ChannelInbox.in_memory()
    refused(lambda: ingress_app({}, inbox, secrets={}, **options), ConfigError, *options)


@pytest.mark.parametrize(
    "options",
    [
        {"limit": "5"},
        {"limit": 2.5},
        {"limit": True},
        {"max_response_bytes": NAN},
        {"max_response_bytes": -1},
        {"accept_timeout_s": NAN},
        {"token": 123},
    ],
    ids=str,
)
def test_a_telegram_poller_checks_its_options(options: dict[str, Any]) -> None:
    config = ChannelConfig(
        kind="telegram",
        inbound="polling",
        token_env="TG_TOKEN",
        api_base="http://127.0.0.1:9",
        allow=["*"],
    )
    arguments: dict[str, Any] = {"token": "123456:token", **options}
    refused(
        lambda: TelegramPoller("tg", config, ChannelInbox.in_memory(), **arguments),
        ConfigError,
        *options,
        "token_env",
    )


@pytest.mark.parametrize("sign", [sign_slack, sign_webhook])
@pytest.mark.parametrize("timestamp", [NAN, INF, -1])
def test_signing_refuses_a_timestamp_that_is_no_time(
    sign: Callable[..., dict[str, str]], timestamp: float
) -> None:
    refused(lambda: sign("secret", b"{}", timestamp=timestamp), InvalidValue, "timestamp")


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ({"providers": {"p": {"kind": "scripted", "timeout_s": INF}}}, "timeout_s"),
        ({"providers": {"p": {"kind": "scripted", "timeout_s": NAN}}}, "timeout_s"),
        ({"agents": {"a": {"provider": "p", "policy": {"ask": [""]}}}}, "ask"),
        ({"agents": {"a": {"provider": "p", "policy": {"deny": ["x" * 300]}}}}, "deny"),
    ],
    ids=["timeout inf", "timeout nan", "empty rule", "long rule"],
)
def test_config_numbers_are_numbers(tmp_path: Path, section: dict[str, Any], problem: str) -> None:
    document: dict[str, Any] = {
        "providers": {"p": {"kind": "scripted"}},
        "agents": {"a": {"provider": "p"}},
    }
    for key, value in section.items():
        document[key] = {**document[key], **value}
    refused(lambda: parse_config(document, base_dir=tmp_path), ConfigError, problem)


def test_failure_texts_keep_a_lone_surrogate_as_a_question_mark() -> None:
    # From an exception or a platform's answer: refusing it would lose the record.
    assert DeliveryFailure("permanent", "telegram_400", "Bad \udcff").message == "Bad ?"
    assert InboundFailure("transient", "handler", "it broke \ud83d").message == "it broke ?"


@pytest.mark.parametrize(
    "fields",
    [
        {"input": "hi \udcff"},
        {"request_id": "req-\udcff"},
        {"injected_context": ("note \ud83d",)},
        {"continues": "apr_\udcff"},
    ],
    ids=["input", "request_id", "injected_context", "continues"],
)
def test_a_turn_request_refuses_text_that_cannot_be_stored(fields: dict[str, Any]) -> None:
    def make() -> TurnRequest:
        facts = ConversationFacts("cli", "chat-1", "alice")
        return TurnRequest(**{"input": "hi", "principal": facts, "request_id": "r1", **fields})

    with pytest.raises(InvalidTurnRequest, match="valid text"):
        make()
    with pytest.raises(InvalidTurnRequest, match="valid text"):
        ResumeSession("ses_\udcff")


def test_conversation_facts_refuse_text_that_cannot_be_stored() -> None:
    refused(lambda: ConversationFacts("cli", "chat-\udcff", "alice"), InvalidValue, "conversation")
    refused(lambda: ConversationFacts("cli", "chat-1", "\udcff"), InvalidValue, "principal")


# -- the second sweep: turns, context, delivery, providers, cores, the Host --------------


@pytest.mark.parametrize(
    "options",
    [
        {"turn_timeout_s": NAN},
        {"turn_timeout_s": "900"},
        {"turn_timeout_s": -1},
        {"admission_timeout_s": INF},
        {"terminal_timeout_s": 0},
        {"lease_ttl_s": True},
        {"lease_ttl_s": "60"},
    ],
    ids=str,
)
def test_turn_execution_deadlines_are_checked(options: dict[str, Any]) -> None:
    # NaN failed every turn with a raw ValueError; inf never rejected a waiting turn.
    refused(
        lambda: TurnExecution(
            store=None,  # type: ignore[arg-type]
            authority=None,  # type: ignore[arg-type]
            context=None,  # type: ignore[arg-type]
            cores=None,  # type: ignore[arg-type]
            **options,
        ),
        InvalidValue,
        *options,
    )


@pytest.mark.parametrize(
    "options",
    [
        {"max_output_fraction": NAN},
        {"max_output_fraction": 1.5},
        {"window_cache": NAN},
        {"window_cache_chars": -1},
        {"window_cache_chars": INF},
        {"pending_decisions": 2.5},
        {"history_window": "200"},
        {"degraded_factor": INF},
        {"protect_tail": -1},
    ],
    ids=str,
)
def test_context_manager_options_are_checked(options: dict[str, Any]) -> None:
    refused(lambda: ContextManager(None, **options), ConfigError, *options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [
        lambda: CharEstimator(chars_per_token=INF),
        lambda: CharEstimator(chars_per_token=NAN),
        lambda: CharEstimator(message_overhead=2.5),
        lambda: TokenizerEstimator(object(), estimator_id=5),  # type: ignore[arg-type]
        lambda: TokenizerEstimator(object(), estimator_id="t", cache_entries=NAN),
    ],
    ids=["ratio inf", "ratio nan", "overhead float", "id not text", "cache nan"],
)
def test_estimator_options_are_checked(make: Callable[[], object]) -> None:
    # An infinite ratio counted every text as one token: the budget bounded nothing.
    refused(make, ConfigError, "per_token", "overhead", "estimator_id", "cache")


@pytest.mark.parametrize(
    "options",
    [
        {"summary_max_chars": NAN},
        {"lease_ttl_s": 10**400},
        {"wait_s": -1},
        {"summarize_timeout_s": INF},
    ],
    ids=str,
)
async def test_session_compactor_options_are_checked(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    owner = await anyio.to_thread.run_sync(LeaseOwner.current, "bounds")
    refused(lambda: SessionCompactor(None, owner=owner, **options), InvalidValue, *options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [{"names": "AGENTS.md"}, {"max_chars": NAN}, {"max_chars": "4000"}, {"names": [""]}],
    ids=str,
)
def test_workspace_bootstrap_options_are_checked(options: dict[str, Any]) -> None:
    # A bare string was read as one file name per character, and found nothing.
    refused(lambda: WorkspaceBootstrap(**options), InvalidValue, "names", "max_chars")


@pytest.mark.parametrize("channel", [SlackChannel, TelegramChannel, WebhookChannel])
@pytest.mark.parametrize(
    ("target", "timeout_s"), [("http://127.0.0.1:9", NAN), ("http://127.0.0.1:9", 0), (None, 30.0)]
)
def test_delivery_channels_check_their_target_and_timeout(
    channel: Callable[..., object], target: object, timeout_s: object
) -> None:
    refused(
        lambda: channel(target, "secret-token", httpx.AsyncClient(), timeout_s=timeout_s),
        InvalidValue,
        "timeout_s",
        "target",
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: DeliveryPolicy(backoff_s=10**400),
        lambda: DeliveryFailure("transient", "rate_limited", retry_after_s=10**400),
        lambda: DeliveryFailure("transient", "rate_limited", retry_after_s=NAN),
    ],
    ids=["policy backoff", "retry after huge", "retry after nan"],
)
def test_delivery_times_past_the_float_range_are_invalid_value(
    make: Callable[[], object],
) -> None:
    # math.isfinite(10**400) raises OverflowError: these used to escape as that.
    refused(make, InvalidValue, "backoff_s", "retry_after_s")


def test_a_retry_after_past_the_float_range_is_the_longest_wait() -> None:
    assert retry_after(10**400) == retry_after(86_400 * 30)


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": NAN},
        {"max_attempts": 0},
        {"jitter": 3},
        {"base_delay_s": NAN},
        {"max_delay_s": INF},
    ],
    ids=str,
)
def test_a_provider_retry_policy_is_checked(options: dict[str, Any]) -> None:
    # NaN attempts retried without end; a jitter of 3 made delays negative.
    refused(lambda: ProviderRetryPolicy(**options), InvalidValue, *options)


@pytest.mark.parametrize("timeout_s", [NAN, INF, "5", None, 0])
def test_a_provider_timeout_is_checked(timeout_s: object) -> None:
    refused(
        lambda: OpenAIChatProvider(
            model="m", base_url="http://127.0.0.1:9/v1", api_key="k", timeout_s=timeout_s
        ),
        ConfigError,
        "timeout_s",
    )


@pytest.mark.parametrize(
    "options",
    [
        {"startup_timeout_s": NAN},
        {"startup_timeout_s": INF},
        {"threads": 2.5},
        {"threads": True},
        {"context_window": 4096.5},
        {"port": 80.5},
    ],
    ids=str,
)
def test_local_model_options_are_checked(options: dict[str, Any]) -> None:
    arguments = {
        "host": "127.0.0.1",
        "port": 0,
        "context_window": 4096,
        "threads": 2,
        "startup_timeout_s": 60.0,
        **options,
    }
    refused(lambda: check_local_options(**arguments), ConfigError, *options)


@pytest.mark.parametrize(
    "limits",
    [{"context_window": NAN}, {"max_output_tokens": 10.5}, {"safety_margin_tokens": -1}],
    ids=str,
)
def test_model_limits_are_whole_numbers(limits: dict[str, Any]) -> None:
    options: dict[str, Any] = {"context_window": 8192, "max_output_tokens": 512, **limits}
    refused(lambda: ModelLimits(**options), InvalidValue, *limits)


@pytest.mark.parametrize(
    "document",
    ['name: "\\udcff"\n', 'dependencies: ["ok", "\\udcff"]\n'],
    ids=["scalar", "in a list"],
)
def test_core_yaml_refuses_a_lone_surrogate_escape(document: str) -> None:
    with pytest.raises(YamlProblem, match="surrogate"):
        parse_yaml(document)


def test_a_core_path_that_is_no_text_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    target = tmp_path / "core-\udcff"
    refused(lambda: init_core(target, "assistant"), ConfigError, "path")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("config", ["a\x00b.toml", 123])
async def test_host_open_refuses_a_config_that_is_no_path(config: object) -> None:
    with pytest.raises(ConfigError):
        async with Host.open(config):  # type: ignore[arg-type]
            pass


# -- the third sweep: notebook, telemetry, testing helpers, prices, @tool ----------------


@pytest.mark.parametrize("max_turns", [NAN, INF, 0, -1, "5"])
def test_a_tracing_observer_bound_is_a_whole_number(max_turns: object) -> None:
    # 0 ended every turn's span at once; NaN bounded nothing.
    refused(lambda: TracingObserver(max_turns=max_turns), InvalidValue, "max_turns")  # type: ignore[arg-type]


@pytest.mark.parametrize("keep", [NAN, -1, "5", True, 1_000_001])
def test_the_test_sources_request_logs_are_bounded_by_a_whole_number(keep: object) -> None:
    refused(
        lambda: StaticProviderSource(ScriptedModel([]), keep_requests=keep),
        InvalidValue,
        "keep_requests",
    )  # type: ignore[arg-type]
    refused(lambda: StaticToolSource(keep_requests=keep), InvalidValue, "keep_requests")  # type: ignore[arg-type]


async def test_a_long_lived_hosts_test_sources_keep_only_their_newest_requests(
    tmp_path: Path,
) -> None:
    """One ProviderRequest per turn, each holding the whole configuration: a Host built
    from ``hostkit.testing.capabilities`` (benches, notebooks) must not grow with turns."""
    model = ScriptedModel([Reply("ok")], repeat_last=True, keep_requests=3)
    providers = StaticProviderSource(model, keep_requests=3)
    caps = dataclasses.replace(capabilities(model), providers=providers)
    async with open_host(tmp_path, model, caps=caps) as host:
        for index in range(5):
            await host.turns.run(request(f"turn {index}"))
    assert len(providers.requests) == 3
    assert [r.agent for r in providers.requests] == ["assistant"] * 3
    assert len(model.requests) == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda: ScriptedModel("hello"),  # type: ignore[arg-type]
        lambda: ScriptedModel([42]),  # type: ignore[list-item]
        lambda: ScriptedModel([Reply("x")], keep_requests=NAN),  # type: ignore[arg-type]
        lambda: CallTools("tool", {"a": 1}),  # type: ignore[arg-type]
        lambda: Reply(None),  # type: ignore[arg-type]
        lambda: Fail("boom"),  # type: ignore[arg-type]
    ],
    ids=["bare str", "a number", "keep nan", "call not a pair", "reply none", "fail str"],
)
def test_a_scripted_model_is_checked_when_written(make: Callable[[], object]) -> None:
    # Each of these used to fail only at the first model call, as a raw exception.
    with pytest.raises(InvalidValue):
        make()


@pytest.mark.parametrize(
    "price", [(NAN, 1.0), (INF, 1.0), (-3.0, 1.0), ("3", 1.0), (1.0, 1.0, NAN)], ids=str
)
def test_a_model_price_is_a_finite_amount(price: tuple[Any, ...]) -> None:
    with pytest.raises(InvalidValue, match="ModelPrice"):
        ModelPrice(*price)
    assert cost_text(NAN) == cost_text(-1.0) == "unknown"


async def _tagged(ctx: ToolContext, text: str, _tag: str = "x") -> str:
    return text


async def _callable_arg(ctx: ToolContext, fn: Callable[[], None]) -> str:
    return ""


async def _named(ctx: ToolContext, env: str, secrets: list[str] | None = None) -> str:
    return env


@pytest.mark.parametrize(
    "make",
    [
        lambda: AuthoredTool("t.tagged", _tagged),
        lambda: AuthoredTool("t.callable", _callable_arg),
        lambda: AuthoredTool("t.named", _named, description=5),  # type: ignore[arg-type]
        lambda: AuthoredTool("t.named", _named, secrets_argument="env"),
        lambda: AuthoredTool("t.named", _named, secrets_argument="nope"),
    ],
    ids=["underscore arg", "callable arg", "description int", "secrets str arg", "no such arg"],
)
def test_an_authored_tool_is_checked_when_declared(make: Callable[[], object]) -> None:
    with pytest.raises(InvalidValue):
        make()
    assert AuthoredTool("t.named", _named, secrets_argument="secrets").secrets_argument


async def _reserved(ctx: ToolContext, model_config: str) -> str:
    return model_config


async def _model_named(ctx: ToolContext, model_name: str) -> str:
    return model_name


def test_only_names_pydantic_reserves_are_refused_as_tool_arguments() -> None:
    with pytest.raises(InvalidValue, match="reserves"):
        AuthoredTool("t.reserved", _reserved)
    assert AuthoredTool("t.model", _model_named).validate({"model_name": "m"}) == {
        "model_name": "m"
    }


async def test_zero_where_zero_means_no_wait_is_accepted(tmp_path: Path) -> None:
    async with ProcessSupervisor() as supervisor:
        runs = TerminalRuns(
            supervisor=supervisor,
            workspace=WorkspaceScope(tmp_path),
            artifact_root=tmp_path / "artifacts",
            artifact_key=KEY,
            grace_s=0,
        )
        await runs.aclose()
    async with await RuntimeStore.open(tmp_path / "db.sqlite", busy_timeout_s=0) as store:
        assert await store.read(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0]) == 0


async def test_host_open_takes_any_path_like(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no configuration file"):
        async with Host.open(anyio.Path(tmp_path / "missing.toml")):  # type: ignore[arg-type]
            pass


async def _numbers(
    ctx: ToolContext, m: dict[int, str], c: complex = 0j, d: Decimal = Decimal(0)
) -> str:
    return ""


@pytest.mark.parametrize(
    "arguments",
    [{"m": {"9" * 30: "a"}}, {"m": {}, "c": "inf+infj"}, {"m": {}, "d": "1e999999999"}],
    ids=["wide key", "complex inf", "huge decimal"],
)
def test_a_model_cannot_pass_a_number_no_tool_should_receive(arguments: dict[str, Any]) -> None:
    tool_ = AuthoredTool("t.numbers", _numbers)
    with pytest.raises(InvalidValue, match=r"arguments for t\.numbers"):
        tool_.validate(arguments)
    assert tool_.validate({"m": {"1": "a"}, "d": "1.5"})["d"] == Decimal("1.5")


@pytest.mark.parametrize("traces", ["Console", "jaeger", ""])
def test_tracing_refuses_an_unknown_exporter(traces: str) -> None:
    # Any other word used to build an OTLP exporter to the default collector.
    refused(lambda: open_tracing(traces), ConfigError, "traces")  # type: ignore[arg-type]


async def test_the_in_memory_memory_is_as_strict_as_the_store() -> None:
    memory = InMemoryMemory()
    for text in ("", "   ", "x" * (MAX_MEMORY_CHARS + 1), "bad \udcff", "a\x00b"):
        with pytest.raises(InvalidValue):
            await memory.remember("alice", text)
    for index in range(30):
        await memory.remember("alice", f"fact {index}")
    assert len(await memory.recall("alice", "fact", limit=-1)) == 1
    assert len(await memory.recall("alice", "fact", limit=10**6)) == MAX_RECALL
    with pytest.raises(InvalidValue, match="limit"):
        await memory.recall("alice", "fact", limit="5")  # type: ignore[arg-type]
    # Forgetting: by the id recall gave, only the owner's own, never the same id twice.
    (first, *_) = await memory.recall("alice", "fact 0")
    for item_id in (0, -1, True, "1"):
        with pytest.raises(InvalidValue, match="item id"):
            await memory.forget("alice", item_id)  # type: ignore[arg-type]
    with pytest.raises(NotFoundOrUnauthorized):
        await memory.forget("bob", first.item_id)
    await memory.forget("alice", first.item_id)
    with pytest.raises(NotFoundOrUnauthorized):
        await memory.forget("alice", first.item_id)
    await memory.remember("alice", "a new one")
    (fresh,) = await memory.recall("alice", "new")
    assert fresh.item_id > first.item_id


async def test_a_hosts_own_options_are_checked(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("x")], repeat_last=True)
    async with open_host(tmp_path, model) as host:
        for read_timeout_s in (NAN, "30", 0):
            with pytest.raises(ConfigError, match="read_timeout_s"):
                await host.reload(read_timeout_s=read_timeout_s)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="HostConfig"):
            await host.apply_config({"host": {}})  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="require_cores"):
            await host.apply_config(host.declared_config, require_cores="abc")
        with pytest.raises(InvalidValue, match="listen"):
            host.serve(listen="\udcff", port=0)
        daemon = host.serve(port=0)
        with pytest.raises(InvalidValue, match="deadline_s"):
            daemon.request_shutdown(deadline_s=NAN)  # refused now, not when run() starts
        with pytest.raises(InvalidValue, match="policy"):
            host.delivery_runtime(policy={"max_attempts": 3})
        runtime = host.delivery_runtime()
        with pytest.raises(InvalidValue, match="within_s"):
            runtime.stop(within_s=10**400)
