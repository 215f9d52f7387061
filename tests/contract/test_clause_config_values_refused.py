"""Clause: a value no turn could use is refused when the file is read, naming its key.

Every path (no NUL, 1-4096 characters), each ``tool_modules`` name (Python module
syntax), each ``url_allow_private`` entry (a host or a CIDR) and each agent name
(1-128 characters, no control or format characters) is checked by
``parse_config``: a typo in a live edit rejects the reload and generation N
keeps serving, rather than replacing it with one whose every turn is refused or
raising an untyped error into ``hostkit serve``'s watcher. The watcher never dies
of a reload either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.errors import ConfigError
from hostkit.host import (
    ConfigWatcher,
    DefaultCapabilities,
    Host,
    HostConfig,
    ReloadOutcome,
    parse_config,
)
from hostkit.store import RuntimeStore
from tests.contract._config_apply import write_config
from tests.hosts import request

pytestmark = pytest.mark.anyio

SCRIPTED = {"p": {"kind": "scripted", "script": [{"reply": "x"}]}}


def data(agent: dict[str, Any] | None = None, **tables: Any) -> dict[str, Any]:
    return {"providers": SCRIPTED, "agents": {"a": {"provider": "p", **(agent or {})}}, **tables}


# Every path field: where it goes in a document, and the key a bad value is reported at.
PATHS = {
    "host.database": lambda v: data(host={"database": v}),
    "host.workspace": lambda v: data(host={"workspace": v}),
    "host.artifacts": lambda v: data(host={"artifacts": v}),
    "host.cores_dir": lambda v: data(host={"cores_dir": v}),
    "store.backup_dir": lambda v: data(store={"backup_dir": v}),
    "agents.a.workspace": lambda v: data({"workspace": v}),
    "agents.a.tool_path.0": lambda v: data({"tool_path": [v]}),
    "cores.c.path": lambda v: data(cores={"c": {"path": v}}),
    "providers.local.model_path": lambda v: {
        **data(),
        "providers": {**SCRIPTED, "local": {"kind": "local", "model_path": v}},
    },
}
# Where the parsed config keeps each path, as written.
KEPT_PATHS: dict[str, Callable[[HostConfig], object]] = {
    "host.database": lambda config: config.host.database,
    "host.workspace": lambda config: config.host.workspace,
    "host.artifacts": lambda config: config.host.artifacts,
    "host.cores_dir": lambda config: config.host.cores_dir,
    "store.backup_dir": lambda config: config.store.backup_dir,
    "agents.a.workspace": lambda config: config.agents["a"].workspace,
    "agents.a.tool_path.0": lambda config: config.agents["a"].tool_path[0],
    "cores.c.path": lambda config: config.cores["c"].path,
    "providers.local.model_path": lambda config: config.providers["local"].model_path,
}
IMPOSSIBLE_PATHS = {"a NUL": "a\0b", "a lone NUL": "\0", "empty": "", "too long": "x" * 4097}


def refused(document: dict[str, Any], tmp_path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(document, base_dir=tmp_path)
    error = caught.value
    assert len(str(error)) <= 300
    assert "\n" not in str(error)
    return error


@pytest.mark.parametrize("key", sorted(PATHS))
@pytest.mark.parametrize("case", sorted(IMPOSSIBLE_PATHS))
def test_an_impossible_path_is_refused_naming_its_key(tmp_path: Path, key: str, case: str) -> None:
    error = refused(PATHS[key](IMPOSSIBLE_PATHS[case]), tmp_path)
    assert error.key == key
    if "NUL" in case:
        assert "NUL" in str(error)


def test_a_core_path_keeps_its_own_tighter_bound(tmp_path: Path) -> None:
    """A core's repository path is held to 1,000 characters, inside the 4,096 every path
    has: the shared path type must not widen it."""
    error = refused(PATHS["cores.c.path"]("x" * 1001), tmp_path)
    assert error.key == "cores.c.path"
    parse_config(PATHS["cores.c.path"]("x" * 1000), base_dir=tmp_path)


ORDINARY_PATH = "some dir/ünïcode ~ file.db"


@pytest.mark.parametrize("key", sorted(PATHS))
def test_an_ordinary_path_is_accepted(tmp_path: Path, key: str) -> None:
    """Kept exactly as written: spaces, non-ASCII and a '~' not at the start untouched."""
    config = parse_config(PATHS[key](ORDINARY_PATH), base_dir=tmp_path)
    assert KEPT_PATHS[key](config) == ORDINARY_PATH


@pytest.mark.parametrize("name", ["../../etc", "a-b", "", "tools.", ".tools", "a b", "x;y"])
def test_a_tool_module_that_is_not_a_module_name_is_refused(tmp_path: Path, name: str) -> None:
    error = refused(data({"tool_modules": ["fine", name]}), tmp_path)
    assert error.key == "agents.a.tool_modules"
    assert "is not a Python module name" in str(error)


def test_module_names_are_accepted(tmp_path: Path) -> None:
    config = parse_config(
        data({"tool_modules": ["tools", "pkg.tools", "_x.y2"]}), base_dir=tmp_path
    )
    assert config.agents["a"].tool_modules == ("tools", "pkg.tools", "_x.y2")


@pytest.mark.parametrize("entry", ["not a host!!", "", "http://intranet", "10.0.0.0/33", "a" * 300])
def test_a_private_allowance_that_is_neither_host_nor_cidr_is_refused(
    tmp_path: Path, entry: str
) -> None:
    error = refused(data({"url_allow_private": ["intranet.example", entry]}), tmp_path)
    assert error.key == "agents.a.url_allow_private"
    assert "is neither a host nor a CIDR" in str(error)


def test_hosts_and_networks_are_accepted_as_private_allowances(tmp_path: Path) -> None:
    entries = ["intranet.example", "localhost", "10.0.0.0/8", "::1", "192.168.1.7"]
    config = parse_config(data({"url_allow_private": entries}), base_dir=tmp_path)
    assert config.agents["a"].url_allow_private == tuple(entries)


BAD_NAMES = {
    "empty": "",
    "too long": "x" * 129,
    "huge": "x" * 100_000,
    "a newline": "assistant\nINFO forged log line",
    "a carriage return": "a\rb",
    "a right-to-left override": "ass\u202eistant",
    "a zero-width joiner": "a\u200db",
    "a line separator": "a\u2028b",
    "a lone surrogate": "a\udcffb",
    "a NUL": "a\0b",
}


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
def test_an_agent_name_no_log_or_turn_can_carry_is_refused(tmp_path: Path, case: str) -> None:
    name = BAD_NAMES[case]
    document = {"providers": SCRIPTED, "agents": {name: {"provider": "p", "max_steps": 0}}}
    # Refused for its name, before its table: no key is built from the bad name.
    error = refused(document, tmp_path)
    assert error.key == "agents"
    assert "is not a usable agent name" in str(error)


@pytest.mark.parametrize("case", sorted(BAD_NAMES))
def test_a_provider_name_no_log_or_usage_record_can_carry_is_refused(
    tmp_path: Path, case: str
) -> None:
    name = BAD_NAMES[case]
    document = {"providers": {name: SCRIPTED["p"]}, "agents": {"a": {"provider": name}}}
    error = refused(document, tmp_path)
    assert error.key == "providers"
    assert "is not a usable provider name" in str(error)


@pytest.mark.parametrize("name", ["a", "x" * 128, "ассистент", "support/billing", "Support Bot"])
async def test_agent_names_a_turn_can_carry_are_accepted_and_run(tmp_path: Path, name: str) -> None:
    config = parse_config(
        {
            "host": {"database": str(tmp_path / "h.db")},
            "providers": SCRIPTED,
            "agents": {name: {"provider": "p", "memory": False}},
        },
        base_dir=tmp_path,
    )
    async with Host.open(config) as host:
        # The default conversation is default/<agent>: '/' in a name is only text.
        assert await host.run_turn(name, "hi") == "x"


def test_a_python_built_configuration_is_checked_the_same_way(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        HostConfig(
            base_dir=tmp_path,
            providers=SCRIPTED,
            agents={"a": {"provider": "p", "workspace": "a\0b"}},
        )
    assert caught.value.key == "agents.a.workspace"


# A live edit that would have replaced generation N (or raised into the watcher).
LIVE_TYPOS = {
    "a NUL in a workspace": ('workspace = "a\\u0000b"', "agents.assistant.workspace"),
    "a NUL in a tool_path": ('tool_path = ["\\u0000"]', "agents.assistant.tool_path.0"),
    "a tool module path": ('tool_modules = ["../../etc"]', "agents.assistant.tool_modules"),
    "a bad private allowance": (
        'url_allow_private = ["not a host!!"]',
        "agents.assistant.url_allow_private",
    ),
}


@pytest.mark.parametrize("case", sorted(LIVE_TYPOS))
async def test_a_live_typo_is_rejected_and_generation_n_keeps_serving(
    tmp_path: Path, case: str
) -> None:
    line, key = LIVE_TYPOS[case]
    path = write_config(tmp_path, reply="still here", times=2)
    good = path.read_text()
    async with Host.open(path) as host:
        path.write_text(good.replace("memory = false", f"memory = false\n{line}"))
        outcome = await host.reload()
        served = await host.turns.run(request())
    assert outcome.rejected, outcome
    assert outcome.generation == 1
    assert outcome.reason is not None
    assert outcome.reason.startswith(f"{key}: ")
    assert (served.generation, served.text) == (1, "still here")


async def test_the_watcher_reports_a_nul_path_and_keeps_watching(tmp_path: Path) -> None:
    """Under hostkit serve the watcher died of this edit and restarted with the bad file as
    its baseline, so the rejection was never reported."""
    path = write_config(tmp_path, reply="first")
    good = path.read_text()
    send, outcomes = anyio.create_memory_object_stream[ReloadOutcome](10)
    async with Host.open(path) as host, send, outcomes:
        watcher = ConfigWatcher(host, interval_s=0.05, on_outcome=send.send_nowait)
        async with anyio.create_task_group() as group:
            await group.start(watcher.run)
            path.write_text(
                good.replace("memory = false", 'memory = false\nworkspace = "a\\u0000b"')
            )
            with anyio.fail_after(10):
                bad = await outcomes.receive()
            write_config(tmp_path, reply="second")
            with anyio.fail_after(10):
                fixed = await outcomes.receive()
            await watcher.stop()
    assert bad.rejected
    assert bad.reason is not None
    assert bad.reason.startswith("agents.assistant.workspace: ")
    assert (fixed.applied, fixed.generation) == (True, 2)


async def test_an_unexpected_error_while_applying_is_a_rejected_reload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The backstop for input a validator missed, or a bug: logged, bounded, rejected."""
    path = write_config(tmp_path, reply="still here", times=2)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("an unforeseen failure " + "x" * 2_000)

    async with Host.open(path) as host:
        monkeypatch.setattr(DefaultCapabilities, "from_config", broken)
        path.write_text(path.read_text().replace("first revision", "second revision"))
        with caplog.at_level(logging.ERROR, logger="hostkit.host"):
            outcome = await host.reload()
        served = await host.turns.run(request())
    assert outcome.rejected
    assert outcome.generation == 1
    assert outcome.reason is not None
    assert "ValueError: an unforeseen failure" in outcome.reason
    assert len(outcome.reason) <= 500
    assert any(record.exc_info for record in caplog.records)
    assert (served.generation, served.text) == (1, "still here")


class _BrokenHost:
    """A Reloadable whose reload fails with an error no check foresaw."""

    def __init__(self, config: HostConfig, store: RuntimeStore) -> None:
        self.config = config
        self.store = store
        self.calls: list[anyio.Event] = [anyio.Event(), anyio.Event()]

    async def reload(self) -> ReloadOutcome:
        next(call for call in self.calls if not call.is_set()).set()
        raise ValueError("embedded null byte")


async def test_the_watcher_never_dies_of_a_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``check()`` never raises but for cancellation: ``run()`` goes on polling."""
    path = write_config(tmp_path, reply="x")
    async with Host.open(path) as host:
        broken = _BrokenHost(host.config, host.store)
        watcher = ConfigWatcher(broken, interval_s=0)
        with caplog.at_level(logging.ERROR, logger="hostkit.host"):
            async with anyio.create_task_group() as group:
                await group.start(watcher.run)
                for call in broken.calls:
                    watcher.trigger()
                    with anyio.fail_after(10):
                        await call.wait()
                await watcher.stop()
    failures = [r.getMessage() for r in caplog.records if r.name == "hostkit.host"]
    assert failures == ["reload failed unexpectedly: ValueError: embedded null byte"] * 2
