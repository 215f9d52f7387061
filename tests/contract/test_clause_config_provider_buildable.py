"""Clause: a provider table its adapter would refuse to build is refused when the file is read.

What building a provider checks, ``parse_config`` checks first, naming the key:
the effective limits (``context_window`` and ``max_output_tokens``, the unset
one taken from the same defaults the build uses) must leave the output cap
below the window; a model id is 1 to 200 characters of text; the local
model's window is one its server can take; a scripted step's ``arguments``
are JSON values (a TOML date or time is not). So a live edit with any of them
rejects the reload and generation N keeps serving, instead of being applied and
then refusing (or failing as an internal error) every turn of the agents on
that provider. A provider's API key is read from the environment, not the
file: a reload bringing in a provider (new to the agents, or changed) whose
``api_key_env`` is unset is rejected the same way, while a key missing since
the Host opened (opening is lenient) blocks no unrelated reload.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from hostkit.errors import ConfigError
from hostkit.freeze import thaw
from hostkit.host import Host, ProviderRequest, parse_config
from hostkit.host._defaults import DefaultProviderSource
from tests.contract._config_apply import write_config
from tests.hosts import request

pytestmark = pytest.mark.anyio

REPLY = [{"reply": "ok"}]
# A provider table no adapter builds: (table, the key named, words of the sentence).
UNBUILDABLE: dict[str, tuple[dict[str, Any], str, str]] = {
    "a window below the default output cap": (
        {"kind": "scripted", "context_window": 1000},
        "providers.p",
        "max_output_tokens (4096, the default) must be smaller than context_window (1000)",
    ),
    "an openai window below the default output cap": (
        {"kind": "openai", "context_window": 1000},
        "providers.p",
        "max_output_tokens (4096, the default) must be smaller than context_window (1000)",
    ),
    "an output cap equal to the window": (
        {"kind": "scripted", "context_window": 100, "max_output_tokens": 100},
        "providers.p",
        "max_output_tokens (100) must be smaller than context_window (100)",
    ),
    "an output cap past the default window": (
        {"kind": "anthropic", "max_output_tokens": 200_000},
        "providers.p",
        "must be smaller than context_window (128000, the default)",
    ),
    "a model id past 200 characters": (
        {"kind": "scripted", "model": "m" * 201},
        "providers.p.model",
        "1 to 200 characters",
    ),
    "a megabyte model id": (
        {"kind": "openai", "model": "m" * 1_000_000},
        "providers.p.model",
        "1 to 200 characters",
    ),
    "a lone surrogate in the model id": (
        {"kind": "openai", "model": "gpt\udcff"},
        "providers.p.model",
        "characters of text",
    ),
    "a local window its server cannot take": (
        {"kind": "local", "context_window": 100},
        "providers.p.context_window",
        "the local model's window is 512 to",
    ),
    "a local window past its server's bound": (
        {"kind": "local", "context_window": 1 << 25},
        "providers.p.context_window",
        "the local model's window is 512 to",
    ),
}
# Script arguments no JSON document (so no model's tool call) can hold.
NOT_JSON: dict[str, tuple[Any, str]] = {
    "a datetime": (datetime.datetime(1979, 5, 27, 7, 32, tzinfo=datetime.UTC), "type datetime"),
    "a date": (datetime.date(1979, 5, 27), "type date"),
    "a time": (datetime.time(7, 32), "type time"),
    "NaN": (math.nan, "the number nan"),
    "infinity": (math.inf, "the number inf"),
    "a lone surrogate": ("a\udcffb", "lone surrogate"),
}


def refused(provider: dict[str, Any], tmp_path: Path) -> ConfigError:
    document = {"providers": {"p": provider}, "agents": {"a": {"provider": "p"}}}
    with pytest.raises(ConfigError) as caught:
        parse_config(document, base_dir=tmp_path)
    assert len(str(caught.value)) <= 300
    return caught.value


@pytest.mark.parametrize("case", sorted(UNBUILDABLE))
def test_a_provider_its_adapter_would_refuse_is_refused_naming_the_key(
    tmp_path: Path, case: str
) -> None:
    table, key, words = UNBUILDABLE[case]
    error = refused(table, tmp_path)
    assert error.key == key
    assert words in str(error)


@pytest.mark.parametrize("case", sorted(NOT_JSON))
def test_script_arguments_that_are_not_json_are_refused_naming_where(
    tmp_path: Path, case: str
) -> None:
    value, words = NOT_JSON[case]
    step = {"tool": "files.read", "arguments": {"path": "x", "nested": [{"at": value}]}}
    error = refused({"kind": "scripted", "script": [{"reply": "a"}, step]}, tmp_path)
    assert error.key == "providers.p.script.1.arguments"
    assert "(at nested[0].at)" in str(error)
    assert words in str(error)


def test_json_script_arguments_are_accepted(tmp_path: Path) -> None:
    arguments = {"s": "ü", "i": -(2**63), "f": 1.5, "b": True, "n": None, "l": [[], {"k": 1}]}
    step = {"tool": "files.read", "arguments": arguments}
    config = parse_config(
        {"providers": {"p": {"kind": "scripted", "script": [step]}}, "agents": {}},
        base_dir=tmp_path,
    )
    (kept,) = config.providers["p"].script
    assert kept.tool == "files.read"
    assert thaw(kept.arguments) == arguments
    # Exactly, type for type: True stays a bool (not 1), the integer is not a float.
    assert json.dumps(thaw(kept.arguments), sort_keys=True) == json.dumps(arguments, sort_keys=True)


BUILDABLE: dict[str, dict[str, Any]] = {
    "both limits": {"context_window": 1000, "max_output_tokens": 100},
    "a window above the default output cap": {"context_window": 4097},
    "an output cap below the default window": {"max_output_tokens": 127_999},
    "a 200-character model id": {"model": "m" * 200},
}


@pytest.mark.parametrize("case", sorted(BUILDABLE))
async def test_what_parses_builds_with_the_limits_the_table_says(tmp_path: Path, case: str) -> None:
    """The limits the provider is built with are the ones the check computed."""
    table = {"kind": "scripted", "script": REPLY, **BUILDABLE[case]}
    config = parse_config(
        {"providers": {"p": table}, "agents": {"a": {"provider": "p"}}}, base_dir=tmp_path
    )
    async with DefaultProviderSource(config) as source:
        provider = await source.model_provider(ProviderRequest(config, "a"))
    settings = config.providers["p"]
    if settings.limits() is not None:
        assert provider.limits == settings.limits()
    assert provider.model == (settings.model or "scripted-1")


# A live edit of [providers.test] (TOML, under ``kind = "scripted"``), and the key named.
LIVE_EDITS = {
    "a window alone": ("context_window = 1000", "providers.test"),
    "an output cap equal to the window": (
        "context_window = 100\nmax_output_tokens = 100",
        "providers.test",
    ),
    "a 300-character model id": (f'model = "{"m" * 300}"', "providers.test.model"),
    "a TOML datetime in script arguments": (
        'script = [{ tool = "files.read", arguments = { path = 1979-05-27T07:32:00Z } }]',
        "providers.test.script.0.arguments",
    ),
}


@pytest.mark.parametrize("case", sorted(LIVE_EDITS))
async def test_a_live_edit_no_provider_could_take_is_rejected_and_generation_n_serves(
    tmp_path: Path, case: str
) -> None:
    lines, key = LIVE_EDITS[case]
    path = write_config(tmp_path, reply="still here", times=2)
    good = path.read_text()
    script = re.search(r"^script = .*$", good, re.MULTILINE)
    assert script is not None
    if lines.startswith("script"):  # the edit replaces the script
        edited = good.replace(script[0], lines)
    else:
        edited = good.replace(script[0], f"{script[0]}\n{lines}")
    async with Host.open(path) as host:
        path.write_text(edited)
        outcome = await host.reload()
        served = await host.turns.run(request())
    assert outcome.rejected, outcome
    assert outcome.generation == 1
    assert outcome.reason is not None
    assert outcome.reason.startswith(f"{key}: ")
    assert (served.generation, served.text) == (1, "still here")


# A provider that needs an API key from a variable the environment lacks.
KEYLESS = 'kind = "openai"\nmodel = "gpt-4o"\napi_key_env = "HOSTKIT_TEST_UNSET_KEY"'


def config_with(path: Path, *, assistant: str, other: str, instructions: str = "First.") -> None:
    """``assistant`` on provider ``assistant`` (TOML), ``other`` on provider ``other``."""
    path.write_text(
        f"""
[host]
database = "hostkit.db"
workspace = "ws"

[providers.scripted]
kind = "scripted"
script = [{{ reply = "still here" }}, {{ reply = "still here" }}]

[providers.keyless]
{KEYLESS}

[agents.assistant]
provider = "{assistant}"
memory = false
instructions = "{instructions}"

[agents.other]
provider = "{other}"
memory = false
"""
    )


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    monkeypatch.delenv("HOSTKIT_TEST_UNSET_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.mark.usefixtures("no_key")
async def test_a_reload_bringing_in_a_provider_whose_key_is_unset_is_rejected(
    tmp_path: Path,
) -> None:
    """Its key is read when its first turn builds it: applied, the reload would leave every
    turn of the agent refused until the file is edited again."""
    path = write_config(tmp_path, reply="still here", times=2)
    good = path.read_text()
    async with Host.open(path) as host:
        path.write_text(good.replace('kind = "scripted"', KEYLESS))
        outcome = await host.reload()
        served = await host.turns.run(request())
    assert outcome.rejected, outcome
    assert outcome.generation == 1
    assert outcome.reason is not None
    assert outcome.reason.startswith(
        "providers.test.api_key_env: HOSTKIT_TEST_UNSET_KEY is not set"
    )
    assert (served.generation, served.text) == (1, "still here")


@pytest.mark.usefixtures("no_key")
async def test_an_agent_moved_to_a_declared_provider_whose_key_is_unset_is_rejected(
    tmp_path: Path,
) -> None:
    """A provider no agent used was never checked: one an agent takes up is new to it."""
    path = tmp_path / "hostkit.toml"
    config_with(path, assistant="scripted", other="scripted")
    async with Host.open(path) as host:
        config_with(path, assistant="scripted", other="keyless")
        outcome = await host.reload()
    assert outcome.rejected, outcome
    assert outcome.reason is not None
    assert outcome.reason.startswith("providers.keyless.api_key_env: ")


@pytest.mark.usefixtures("no_key")
async def test_a_key_missing_since_open_does_not_block_an_unrelated_reload(
    tmp_path: Path,
) -> None:
    """Opening is lenient (a listing needs no key); the reload that does not touch that
    provider applies, and the agents on other providers run on the new generation."""
    path = tmp_path / "hostkit.toml"
    config_with(path, assistant="scripted", other="keyless")
    async with Host.open(path) as host:
        config_with(path, assistant="scripted", other="keyless", instructions="Second.")
        outcome = await host.reload()
        served = await host.turns.run(request())
    assert outcome.applied, outcome
    assert outcome.changes == ("agents.assistant",)
    assert (served.generation, served.text) == (2, "still here")


@pytest.mark.parametrize(
    ("kind", "variable", "instead"),
    [
        ("openai", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
        ("anthropic", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    ],
)
async def test_a_reload_bringing_in_a_provider_without_its_sdks_default_key_is_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, variable: str, instead: str
) -> None:
    """No ``api_key_env`` means the SDK's own variable, by the rule its adapter builds
    with: unset (and nothing that lets it go without), the reload is refused as one
    naming an unset variable is; the variable that lets it go without lets it apply."""
    pytest.importorskip(kind)
    for name in (variable, instead):
        monkeypatch.delenv(name, raising=False)
    path = write_config(tmp_path, reply="still here", times=2)
    good = path.read_text()
    async with Host.open(path) as host:
        path.write_text(good.replace('kind = "scripted"', f'kind = "{kind}"\nmodel = "m"'))
        refused = await host.reload()
        served = await host.turns.run(request())
        monkeypatch.setenv(instead, "http://127.0.0.1:9" if "URL" in instead else "token-x")
        applied = await host.reload()
    assert refused.rejected, refused
    assert refused.reason is not None
    assert refused.reason.startswith(
        f"providers.test.api_key_env: no API key: set the environment variable {variable}"
    )
    assert (served.generation, served.text) == (1, "still here")
    assert applied.applied, applied
