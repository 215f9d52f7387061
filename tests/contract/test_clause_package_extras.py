"""Issue 19, "every extra is self-sufficient": a missing optional package is one line naming it
and the ``pip install "hostkit[extra]"`` that fixes it, at configuration time, never a failed turn.

In-process: a package is made missing with ``sys.modules[name] = None``, which makes
``find_spec`` answer None and an import raise (monkeypatch puts the real entry back).
The CLI's exit status and the fresh process are in test_clause_package_extras_cli.py.
"""

from __future__ import annotations

import importlib
import re
import sqlite3
import sys
import tomllib
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

import hostkit
from hostkit._extras import EXTRAS, install_command, missing_dependency, require_extra
from hostkit.errors import ConfigError, MissingDependency
from hostkit.host import DefaultCapabilities, Host, ProviderRequest, parse_config
from hostkit.store import RuntimeStore
from hostkit.testing import capabilities
from tests.hosts import config as scripted_config

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# Extras for notebooks, benchmarks and contributors: hostkit itself imports none of them.
NOT_FEATURES = {"mcp-servers", "bench", "test", "browser"}
# Never reached: every provider here is refused (or served by the test's own sources).
LOOPBACK = "http://127.0.0.1:9/v1"


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(requirements: list[str]) -> set[str]:
    return {normalized(re.split(r"[\s\[<>=!~;]", item, maxsplit=1)[0]) for item in requirements}


def block(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text
    return text


# -- the table ------------------------------------------------------------------------


def test_the_table_lists_exactly_each_feature_extras_requirements() -> None:
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    assert set(declared) - NOT_FEATURES == set(EXTRAS), "a feature extra is missing from the table"
    for extra, packages in EXTRAS.items():
        table = {normalized(package.distribution) for package in packages}
        assert table == requirement_names(declared[extra]), extra


@pytest.mark.parametrize(
    ("extra", "index"),
    [(extra, index) for extra, packages in EXTRAS.items() for index in range(len(packages))],
)
def test_each_package_of_each_extra_is_named_with_its_install_when_missing(
    monkeypatch: pytest.MonkeyPatch, extra: str, index: int
) -> None:
    package = EXTRAS[extra][index]
    require_extra(extra, feature="the feature")  # everything is installed here
    block(monkeypatch, package.module)
    with pytest.raises(MissingDependency) as caught:
        require_extra(extra, feature="the feature", key="some.key")
    error = caught.value
    assert (error.extra, error.package, error.packages) == (
        extra,
        package.distribution,
        (package.distribution,),
    )
    assert error.key == "some.key"
    assert one_line(error) == (
        f"the feature needs the package {package.distribution!r}, which is not installed: "
        f"{install_command(extra)}"
    )
    assert install_command(extra) == f'pip install "hostkit[{extra}]"'


def test_a_missing_parent_package_counts_every_module_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # find_spec("opentelemetry.sdk") imports "opentelemetry" first; blocked, it raises.
    for name in [n for n in sys.modules if n.startswith("opentelemetry.")]:
        monkeypatch.delitem(sys.modules, name)
    block(monkeypatch, "opentelemetry")
    with pytest.raises(MissingDependency) as caught:
        require_extra("otel", feature="tracing")
    assert caught.value.packages == (
        "opentelemetry-api",
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp-proto-http",
    )
    assert "needs the packages 'opentelemetry-api', 'opentelemetry-sdk', " in str(caught.value)


def test_the_error_is_a_config_error_and_an_import_error_and_keeps_the_fix() -> None:
    error = MissingDependency("x" * 2000, extra="local", packages=("xllamacpp",))
    assert isinstance(error, ConfigError)
    assert isinstance(error, ImportError)
    assert isinstance(error, hostkit.UserError)
    assert hostkit.MissingDependency is MissingDependency
    assert not error.retryable
    # A feature quoted from configuration is bounded: the command always survives.
    assert one_line(error).endswith('which is not installed: pip install "hostkit[local]"')
    assert len(error.message) < 400


@pytest.mark.parametrize(
    ("extra", "failed", "named"),
    [
        ("local", "gguf", "gguf"),
        ("otel", "opentelemetry.sdk.trace", "opentelemetry-sdk"),
        ("otel", "opentelemetry", "opentelemetry-api"),
        # A dependency of the extra's own package: reinstalling the extra brings it back.
        ("openai", "jiter", "jiter"),
    ],
)
def test_an_import_that_fails_anyway_names_the_package(extra: str, failed: str, named: str) -> None:
    error = missing_dependency(
        extra, ModuleNotFoundError(f"No module named {failed!r}", name=failed), feature="it"
    )
    assert (error.extra, error.package) == (extra, named)


# -- at configuration time: Host.open, apply_config, tracing ---------------------------


def provider_config(tmp_path: Path, provider: dict[str, Any]) -> hostkit.HostConfig:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"assistant": provider},
            "agents": {"assistant": {"provider": "assistant"}},
        },
        base_dir=tmp_path,
    )


def count_turns(database: Path) -> int:
    if not database.exists():
        return 0
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT count(*) FROM turns").fetchone()[0])


@pytest.mark.parametrize(
    ("kind", "blocked", "package"),
    [
        ("openai", "openai", "openai"),
        ("anthropic", "anthropic", "anthropic"),
        ("local", "xllamacpp", "xllamacpp"),
        # The reported bug: the local model speaks through the OpenAI adapter.
        ("local", "openai", "openai"),
        ("local", "tokenizers", "tokenizers"),
    ],
)
@pytest.mark.anyio
async def test_host_open_refuses_a_provider_whose_package_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, blocked: str, package: str
) -> None:
    block(monkeypatch, blocked)
    settings = {"kind": kind} if kind == "local" else {"kind": kind, "base_url": LOOPBACK}
    config = provider_config(tmp_path, settings)
    with pytest.raises(MissingDependency) as caught:
        await Host.open(config)
    assert caught.value.key == "providers.assistant.kind"
    assert one_line(caught.value) == (
        f"provider 'assistant' (kind {kind}) needs the package {package!r}, which is not "
        f'installed: pip install "hostkit[{kind}]"'
    )
    assert await anyio.to_thread.run_sync(count_turns, tmp_path / "hostkit.db") == 0


@pytest.mark.anyio
async def test_a_python_agent_shorthand_is_checked_like_a_configured_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block(monkeypatch, "anthropic")
    agent = hostkit.Agent("cloud", model="anthropic:claude-sonnet-4-5")
    with pytest.raises(MissingDependency, match=r'hostkit\[anthropic\]"$'):
        await Host.open(scripted_config(tmp_path), agents=[agent])


@pytest.mark.anyio
async def test_apply_config_refuses_a_provider_whose_package_is_missing_and_keeps_the_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Host.open(scripted_config(tmp_path)) as host:
        before = host.generation
        block(monkeypatch, "xllamacpp")
        with pytest.raises(MissingDependency, match=r"needs the package 'xllamacpp'"):
            await host.apply_config(provider_config(tmp_path, {"kind": "local"}))
        assert host.generation == before
        assert host.config.providers["test"].kind == "scripted"


@pytest.mark.anyio
async def test_supplied_sources_are_not_held_to_the_config_provider_kinds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The embedder's own sources serve the providers: the config's kinds import nothing.
    block(monkeypatch, "openai")
    config = provider_config(tmp_path, {"kind": "openai", "base_url": LOOPBACK})
    async with Host.open(config, capabilities=capabilities(hostkit.ScriptedModel([]))) as host:
        assert host.generation == 1


@pytest.mark.anyio
async def test_default_sources_built_by_an_embedder_name_the_package_not_the_import_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: RuntimeStore
) -> None:
    # Without the Host's check (from_config called directly) the provider is built at its
    # first turn: the adapter import fails, and the error is still the one line.
    monkeypatch.delitem(sys.modules, "hostkit.adapters.openai_chat", raising=False)
    block(monkeypatch, "openai")
    config = provider_config(tmp_path, {"kind": "openai", "base_url": LOOPBACK})
    caps = DefaultCapabilities.from_config(config, store=store)
    try:
        with pytest.raises(MissingDependency) as caught:
            await caps.providers.model_provider(ProviderRequest(config, "assistant"))
    finally:
        await caps.aclose()
    assert caught.value.package == "openai"
    assert one_line(caught.value).endswith('pip install "hostkit[openai]"')


@pytest.mark.parametrize("traces", ["console", "otlp"])
@pytest.mark.anyio
async def test_tracing_without_the_otel_extra_is_refused_before_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traces: str
) -> None:
    block(monkeypatch, "opentelemetry.exporter.otlp.proto.http")
    config = parse_config(
        {
            "host": {
                "database": str(tmp_path / "hostkit.db"),
                "telemetry": {"traces": traces},
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": {"provider": "test"}},
        },
        base_dir=tmp_path,
    )
    with pytest.raises(MissingDependency) as caught:
        await Host.open(config, capabilities=capabilities(hostkit.ScriptedModel([])))
    assert caught.value.key == "host.telemetry.traces"
    assert one_line(caught.value) == (
        f'[host.telemetry] traces = "{traces}" needs the package '
        "'opentelemetry-exporter-otlp-proto-http', which is not installed: "
        'pip install "hostkit[otel]"'
    )
    assert not (tmp_path / "hostkit.db").exists()


# -- on import: the notebook front end -------------------------------------------------


def test_import_hostkit_notebook_without_ipywidgets_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [
        n for n in sys.modules if n == "hostkit.notebook" or n.startswith("hostkit.notebook.")
    ]:
        monkeypatch.delitem(sys.modules, name)
    block(monkeypatch, "ipywidgets")
    with pytest.raises(MissingDependency) as caught:
        importlib.import_module("hostkit.notebook")
    assert one_line(caught.value) == (
        "hostkit.notebook needs the package 'ipywidgets', which is not installed: "
        'pip install "hostkit[notebook]"'
    )
    # An ImportError too: code guarding an optional import keeps working, and
    # %load_ext hostkit says the same line.
    with pytest.raises(ImportError) as guarded:
        hostkit.load_ipython_extension(object())
    assert isinstance(guarded.value, MissingDependency)
    assert guarded.value.extra == "notebook"
    assert "hostkit.notebook._turn" not in sys.modules
