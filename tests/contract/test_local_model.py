"""LocalModel: llama.cpp's server with SmolLM2-135M on loopback, reached through the OpenAI adapter.

What it answers (streaming, usage, the output budget, context overflow,
cancellation) is checked by the shared provider suite, ``test_providers``;
this file covers the server's life: options, start-up failures, its key, the
port, closing, and its exact tokenizer in a Host. One server serves the whole
module (starting one costs about a second); tests that start, break or close
a server start their own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import psutil
import pytest

from hostkit.adapters.local_llama import LocalModel, local_model_available
from hostkit.errors import MESSAGE_LIMIT, ConfigError, ProviderError, UserError
from tests.parts import local_model_missing, needs

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    needs("local-model", local_model_missing()),
]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # The module-scoped server below needs the backend fixture at the same scope.
    return "asyncio"


@pytest.fixture(scope="module")
async def local() -> AsyncIterator[LocalModel]:
    async with LocalModel.start() as running:
        yield running


async def child_pids() -> set[int]:
    def read() -> set[int]:
        return {child.pid for child in psutil.Process().children(recursive=True)}

    return await anyio.to_thread.run_sync(read)


async def children_since(before: set[int]) -> set[int]:
    """Children that appeared since `before`: other tests' children may exit meanwhile."""
    return await child_pids() - before


async def answers_health(base_url: str) -> bool:
    root = base_url.removesuffix("/v1")
    async with httpx.AsyncClient(trust_env=False, timeout=2.0) as client:
        try:
            response = await client.get(f"{root}/health")
        except httpx.TransportError:
            return False
    return response.status_code == httpx.codes.OK


async def test_provider_is_named_local_and_carries_the_window(local: LocalModel) -> None:
    opened = local.provider()
    try:
        assert opened.name == "local"
        assert opened.model == local.model == "SmolLM2-135M-Instruct.Q4_1"
        assert opened.limits == local.limits
        assert local.limits.context_window == 2048
        assert local.limits.max_output_tokens < local.limits.context_window
        assert local.base_url.startswith("http://127.0.0.1:")
        assert local.base_url.endswith("/v1")
    finally:
        await opened.aclose()


async def test_provider_output_cap_can_be_lowered_not_raised(local: LocalModel) -> None:
    lowered = local.provider(max_output_tokens=16)
    raised = local.provider(max_output_tokens=10_000)
    try:
        assert lowered.limits.max_output_tokens == 16
        assert raised.limits.max_output_tokens == local.limits.max_output_tokens
        assert lowered.limits.context_window == local.limits.context_window
    finally:
        await lowered.aclose()
        await raised.aclose()


async def test_server_refuses_requests_without_its_key(local: LocalModel) -> None:
    body = {"model": local.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as client:
        anonymous = await client.post(f"{local.base_url}/chat/completions", json=body)
        wrong = await client.post(
            f"{local.base_url}/chat/completions",
            json=body,
            headers={"Authorization": "Bearer not-the-key"},
        )
    assert anonymous.status_code == httpx.codes.UNAUTHORIZED
    assert wrong.status_code == httpx.codes.UNAUTHORIZED


async def test_missing_model_path_is_config_error(tmp_path: Path) -> None:
    before = await child_pids()
    with pytest.raises(ConfigError, match="no model file") as caught:
        async with LocalModel.start(model_path=tmp_path / "missing.gguf"):
            pytest.fail("a server started without a model file")
    assert caught.value.key == "model_path"
    assert not await children_since(before)


def test_availability_says_no_for_a_missing_model(tmp_path: Path) -> None:
    assert local_model_available(model_path=tmp_path / "missing.gguf") is False


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "example.com"])
async def test_server_stays_on_loopback(host: str) -> None:
    with pytest.raises(ConfigError) as caught:
        async with LocalModel.start(host=host):
            pytest.fail(f"a server started on {host}")
    assert caught.value.key == "host"


@pytest.mark.parametrize(
    ("option", "value"),
    [("port", 70000), ("context_window", 64), ("threads", 0), ("startup_timeout_s", 0.0)],
)
async def test_bad_options_are_config_errors(option: str, value: float) -> None:
    with pytest.raises(ConfigError) as caught:
        async with LocalModel.start(**{option: value}):  # type: ignore[arg-type]
            pytest.fail("a server started with a bad option")
    assert caught.value.key == option


async def test_unloadable_model_fails_start_and_cleans_up(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    await anyio.Path(broken).write_bytes(b"this is not a GGUF file")
    before = await child_pids()

    with pytest.raises(ProviderError) as caught:
        async with LocalModel.start(model_path=broken):
            pytest.fail("a server started with a broken model")

    assert caught.value.provider == "local"
    assert "did not start" in str(caught.value)
    assert len(str(caught.value)) <= MESSAGE_LIMIT
    assert not await children_since(before)


async def test_busy_port_fails_start_and_leaves_the_other_server_alone(
    local: LocalModel,
) -> None:
    port = httpx.URL(local.base_url).port
    assert port is not None

    with pytest.raises(ProviderError) as caught:
        async with LocalModel.start(port=port):
            pytest.fail("two servers bound the same port")

    assert caught.value.provider == "local"
    assert await answers_health(local.base_url)


async def test_startup_deadline_raises_and_leaves_no_process() -> None:
    before = await child_pids()

    with pytest.raises(ProviderError, match="not ready within") as caught:
        async with LocalModel.start(startup_timeout_s=0.01):
            pytest.fail("the server was ready within 10 ms")

    assert caught.value.provider == "local"
    assert not await children_since(before)


async def test_close_is_idempotent_and_frees_the_port() -> None:
    before = await child_pids()
    async with LocalModel.start() as own:
        base_url = own.base_url
        assert await answers_health(base_url)
        assert await children_since(before)
        await own.aclose()
        await own.aclose()
        with pytest.raises(UserError, match="closed"):
            own.provider()
    await own.aclose()

    assert not await answers_health(base_url)
    assert not await children_since(before)


@pytest.mark.parametrize("memory", [False, True], ids=["no tools", "memory tools"])
async def test_a_host_budgets_the_embedded_model_with_its_exact_tokenizer(
    tmp_path: Path, memory: bool
) -> None:
    from hostkit.host import Host, parse_config

    config = parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"local": {"kind": "local", "max_output_tokens": 8}},
            "agents": {"assistant": {"provider": "local", "memory": memory}},
        },
        base_dir=tmp_path,
    )
    async with Host.open(config) as host:
        await host.run_turn("assistant", "Say hi.")
        rows = await host.store.read(
            lambda c: c.execute(
                "SELECT d.summary, u.input_tokens FROM context_decisions d "
                "JOIN usage_observations u ON u.decision_id = d.decision_id"
            ).fetchall()
        )
    (summary, reported), *_ = rows
    decision = json.loads(summary)
    assert decision["estimator"].startswith("gguf:")
    assert decision["exact_estimator"] is True
    # Exact tokenizer and template framing: the raw estimate is the provider's count.
    assert abs(decision["raw_input_tokens"] - reported) <= max(2, reported // 50)
    if memory:
        # The memory tools' schemas are sent, and the chat template drops them: they cost
        # nothing (they were once counted, and the "exact" estimate was several times high).
        schemas = next(layer for layer in decision["layers"] if layer["name"] == "schemas")
        assert schemas["items"] > 0
        assert schemas["tokens"] == 0
        assert decision["raw_input_tokens"] == reported
