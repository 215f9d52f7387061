"""Clause: every URL the Host sends requests to is checked once, where it is written down.

A provider's ``base_url``, a channel's ``deliver_url`` and ``api_base``, an MCP
server's ``url`` and the telemetry ``endpoint`` are refused by ``parse_config``
(a ``ConfigError`` naming the key) unless they are ``http://`` or ``https://``
with a host an HTTP client can encode, a port from 1 to 65535 if any, no
whitespace or control character, and at most 2,048 characters. A base URL the
vendor SDK would take from the environment (``OPENAI_BASE_URL``,
``ANTHROPIC_BASE_URL``) is held to the same check when the provider is built:
a bad one is a ``ConfigError`` naming the variable. Before, a port past 65535
failed each turn as ``internal error (ExceptionGroup)``, ``http://[::1`` as a
bare ``ValueError``, and a bad ``deliver_url`` was retried until dead-lettered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hostkit.adapters.anthropic_messages import AnthropicProvider
from hostkit.adapters.openai_chat import OpenAIChatProvider
from hostkit.errors import ConfigError, TurnRejected
from hostkit.host import Host, HostConfig, default_config, parse_config
from hostkit.types import ModelMessage, ModelRequest
from tests.wire import anthropic_messages as wire_anthropic
from tests.wire import json_reply, serve_wire
from tests.wire import openai_chat as wire_openai

pytestmark = pytest.mark.anyio

SCRIPTED = {"kind": "scripted", "script": [{"reply": "ok"}]}


def _agents(**agent: Any) -> dict[str, Any]:
    return {"providers": {"p": SCRIPTED}, "agents": {"a": {"provider": "p", **agent}}}


# Every configured URL: the document holding it, and the key a bad one is reported at.
URL_KEYS: dict[str, Callable[[str], dict[str, Any]]] = {
    "providers.o.base_url": lambda url: {"providers": {"o": {"kind": "openai", "base_url": url}}},
    "channels.h.deliver_url": lambda url: {
        **_agents(),
        "channels": {"h": {"kind": "webhook", "agent": "a", "secret_env": "S", "deliver_url": url}},
    },
    "channels.t.api_base": lambda url: {
        **_agents(),
        "channels": {
            "t": {
                "kind": "telegram",
                "agent": "a",
                "inbound": "polling",
                "token_env": "T",
                "allow": ["*"],
                "api_base": url,
            }
        },
    },
    "agents.a.mcp.s": lambda url: _agents(mcp={"s": {"url": url}}),
    "host.telemetry.endpoint": lambda url: {
        "host": {"telemetry": {"traces": "otlp", "endpoint": url}}
    },
}
BAD_URLS = {
    "a port past 65535": ("http://localhost:99999/v1", "port"),
    "port 0": ("http://localhost:0/v1", "port"),
    "a port that is not a number": ("http://localhost:80a/v1", "port"),
    "an unclosed IPv6 literal": ("http://[::1", "malformed host"),
    "another scheme": ("ftp://example.com/v1", "http:// or https://"),
    "no host": ("http:///v1", "host"),
    "a megabyte": ("http://example.com/" + "a" * 1_000_000, "2048"),
    "a newline": ("http://example.com/v1\nX-Forged: 1", "control character"),
    "a space in the host": ("http://exa mple.com/", "whitespace"),
    "a host IDNA cannot encode": ("http://\u2603.example/", "international name"),
    "a bracketed host that is no IPv6 address": ("http://[v1.fe]/", "IPv6"),
    "an IPv4 address past 255": ("http://10.0.0.999/", "IPv4"),
    "an invalid xn-- label": ("http://xn--zz.example/", "xn--"),
    "an empty label": ("http://a..b/", "host name"),
}
GOOD_URLS = [
    "http://127.0.0.1:8000/v1",
    "https://api.example.com",
    "http://[::1]:65535/v1",
    "http://localhost/",
    "http://model_server.internal:8080/v1?x=1",
    "https://xn--bcher-kva.example/api",
    "https://b\u00fccher.example/api",
    "http://[fe80::1%25eth0]:8080/",
    "https://hooks.example/in/",
]


@pytest.mark.parametrize("key", sorted(URL_KEYS))
@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_a_url_no_client_could_use_is_refused_naming_its_key(
    tmp_path: Path, key: str, case: str
) -> None:
    url, words = BAD_URLS[case]
    with pytest.raises(ConfigError) as caught:
        parse_config(URL_KEYS[key](url), base_dir=tmp_path)
    assert caught.value.key == key
    assert words in str(caught.value)
    assert len(str(caught.value)) <= 300
    assert "\n" not in str(caught.value)


# Where the parsed config keeps each URL.
KEPT: dict[str, Callable[[HostConfig], str | None]] = {
    "providers.o.base_url": lambda config: config.providers["o"].base_url,
    "channels.h.deliver_url": lambda config: config.channels["h"].deliver_url,
    "channels.t.api_base": lambda config: config.channels["t"].api_base,
    "agents.a.mcp.s": lambda config: config.agents["a"].mcp["s"].url,
    "host.telemetry.endpoint": lambda config: config.host.telemetry.endpoint,
}


@pytest.mark.parametrize("key", sorted(URL_KEYS))
@pytest.mark.parametrize("url", GOOD_URLS)
def test_a_usable_url_is_accepted(tmp_path: Path, key: str, url: str) -> None:
    """Kept exactly as written: only ``api_base``, an origin joined with "/method", loses
    a trailing '/'; a ``deliver_url`` ending in '/' is posted to with the '/'."""
    config = parse_config(URL_KEYS[key](url), base_dir=tmp_path)
    assert KEPT[key](config) == (url.rstrip("/") if key == "channels.t.api_base" else url)


async def test_a_bad_port_in_base_url_stops_the_host_opening_not_each_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    path = tmp_path / "hostkit.toml"
    path.write_text(
        '[host]\ndatabase = "h.db"\n[providers.o]\nkind = "openai"\nmodel = "m"\n'
        'base_url = "http://localhost:99999/v1"\n[agents.assistant]\nprovider = "o"\n'
    )
    with pytest.raises(ConfigError) as caught:
        async with Host.open(path):
            pass
    assert caught.value.key == "providers.o.base_url"


ADAPTERS = {"OPENAI_BASE_URL": OpenAIChatProvider, "ANTHROPIC_BASE_URL": AnthropicProvider}


@pytest.mark.parametrize("variable", sorted(ADAPTERS))
@pytest.mark.parametrize("case", ["a port past 65535", "an unclosed IPv6 literal", "a newline"])
def test_a_bad_base_url_in_the_environment_is_a_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, case: str
) -> None:
    monkeypatch.setenv(variable, BAD_URLS[case][0])
    with pytest.raises(ConfigError) as caught:
        ADAPTERS[variable](model="m", api_key="k")
    assert caught.value.key == variable


@pytest.mark.parametrize("variable", sorted(ADAPTERS))
def test_a_bad_base_url_given_to_an_adapter_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(ConfigError) as caught:
        ADAPTERS[variable](model="m", api_key="k", base_url="http://[::1")
    assert caught.value.key == "base_url"


# A usable base URL from the environment and the path a request to it arrives at.
SENT_TO = {
    "OPENAI_BASE_URL": ("/from-env/v1/chat/completions", wire_openai.completion(text="hi")),
    "ANTHROPIC_BASE_URL": (
        "/from-env/v1/messages",
        wire_anthropic.message([wire_anthropic.text_block("hi")]),
    ),
}


@pytest.mark.parametrize("variable", sorted(ADAPTERS))
async def test_a_usable_base_url_variable_builds(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The adapter is built, and its requests go to the URL the variable names."""
    path, answer = SENT_TO[variable]
    async with serve_wire() as wire:
        url = f"{wire.base_url}/from-env" + ("/v1" if variable == "OPENAI_BASE_URL" else "")
        monkeypatch.setenv(variable, url)
        wire.script(json_reply(answer))
        async with ADAPTERS[variable](model="m", api_key="k") as provider:
            response = await provider.complete(
                ModelRequest(messages=(ModelMessage(role="user", content="hello"),))
            )
    assert [seen.path for seen in wire.requests] == [path]
    assert response.text == "hi"


@pytest.mark.parametrize("variable", sorted(ADAPTERS))
def test_an_empty_base_url_variable_is_refused_not_sent_to(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The SDKs take a set but empty variable as the URL itself, not as unset."""
    monkeypatch.setenv(variable, "")
    with pytest.raises(ConfigError) as caught:
        ADAPTERS[variable](model="m", api_key="k")
    assert caught.value.key == variable


async def test_a_turn_on_a_bad_openai_base_url_variable_is_rejected_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused as the agent's provider is built: not a failed turn, not an internal error."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://[::1")
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "h.db")},
            "providers": {"o": {"kind": "openai", "model": "m"}},
            "agents": {"assistant": {"provider": "o", "memory": False}},
        },
        base_dir=tmp_path,
    )
    async with Host.open(config) as host:
        with pytest.raises(TurnRejected, match="OPENAI_BASE_URL: has a malformed host"):
            await host.run_turn("assistant", "hi")


@pytest.mark.parametrize("case", ["a port past 65535", "an unclosed IPv6 literal"])
def test_the_default_configuration_names_a_bad_openai_base_url_variable(
    tmp_path: Path, case: str
) -> None:
    environ = {"OPENAI_BASE_URL": BAD_URLS[case][0]}
    with pytest.raises(ConfigError) as caught:
        default_config(base_dir=tmp_path, environ=environ)
    assert caught.value.key == "OPENAI_BASE_URL"
