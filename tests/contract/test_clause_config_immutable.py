"""Clause: a parsed configuration is immutable all the way down.

The models were frozen, but their lists and dicts were not: whoever held a
``HostConfig`` (an embedder's ``host.config``, a notebook, a capability source
handed ``request.config``) could append a tool module, clear a deny list or
add an agent in place, and every other holder (the running generation among
them) saw it, with no reload. Every container is now a tuple or a
``FrozenMap``, validated from the same input with the same messages, and
dumped (``model_dump``, JSON) back to what parses to an equal configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from hostkit.errors import ConfigError
from hostkit.host import HostConfig, default_config, load_config, parse_config

# Every kind of container a configuration holds, each at least once.
FULL = """
[host.limits]
processes = 64

[providers.p]
kind = "scripted"
attachments = ["text/plain"]
script = [
    { reply = "hi" },
    { tool = "notes.write", arguments = { text = "x", tags = ["a", { deep = [1, 2] }] } },
]

[agents.a]
provider = "p"
tool_modules = ["tools"]
tool_path = ["lib"]
builtins = ["files.read", "terminal.run"]
url_allow_private = ["10.0.0.0/8"]
secrets = ["TOKEN"]

[agents.a.policy]
allow = ["*"]
deny = ["files.write"]
ask = ["terminal.run"]

[agents.a.mcp.stdio]
command = ["/usr/bin/server", "--flag"]
env = { MODE = "test" }

[agents.a.mcp.remote]
url = "https://mcp.example.com/mcp"

[cores.c]
path = "core"

[secrets.TOKEN]
programs = ["/usr/bin/curl"]

[channels.hook]
kind = "webhook"
agent = "a"
secret_env = "HOOK_SECRET"

[channels.slack]
kind = "slack"
agent = "a"
secret_env = "SLACK_SECRET"
token_env = "SLACK_TOKEN"
allow = ["U123"]
"""


@pytest.fixture
def config(tmp_path: Path) -> HostConfig:
    (tmp_path / "hostkit.toml").write_text(FULL)
    return load_config(tmp_path / "hostkit.toml")


def _containers(value: object, where: str) -> Iterator[tuple[str, object]]:
    """Every container held anywhere under ``value``, with where it is."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _containers(getattr(value, name), f"{where}.{name}")
        return
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        return
    yield where, value
    items = value.items() if isinstance(value, Mapping) else enumerate(value)
    for key, item in items:
        yield from _containers(item, f"{where}[{key!r}]")


def test_every_container_of_a_parsed_config_is_immutable(config: HostConfig) -> None:
    found = dict(_containers(config, "config"))
    mutable = {where: type(value).__name__ for where, value in found.items()}
    mutable = {where: kind for where, kind in mutable.items() if kind not in ("tuple", "FrozenMap")}
    assert mutable == {}
    # Every table and list of FULL was walked (nested ones too).
    assert "config.agents['a'].mcp['stdio'].env" in found
    assert "config.providers['p'].script[1].arguments['tags'][1]['deep']" in found


EDITS: dict[str, Callable[[HostConfig], Any]] = {
    "add an agent": lambda c: c.agents.__setitem__("b", c.agents["a"]),
    "drop a provider": lambda c: c.providers.pop("p"),  # type: ignore[attr-defined]
    "append a tool module": lambda c: c.agents["a"].tool_modules.append("evil"),  # type: ignore[attr-defined]
    "clear a deny list": lambda c: c.agents["a"].policy.deny.clear(),  # type: ignore[attr-defined]
    "allow all": lambda c: c.agents["a"].policy.allow.append("*"),  # type: ignore[attr-defined]
    "grant a builtin": lambda c: c.agents["a"].builtins.append("files.write"),  # type: ignore[attr-defined]
    "hold a secret": lambda c: c.agents["a"].secrets.append("AWS_KEY"),  # type: ignore[attr-defined]
    "let a secret go": lambda c: c.secrets["TOKEN"].programs.append("/bin/sh"),  # type: ignore[attr-defined]
    "rewrite an MCP argv": lambda c: c.agents["a"].mcp["stdio"].command.append("--x"),  # type: ignore[union-attr]
    "set an MCP env": lambda c: c.agents["a"].mcp["stdio"].env.__setitem__("LD_PRELOAD", "x"),
    "declare an MCP server": lambda c: c.agents["a"].mcp.__setitem__("new", None),
    "open a channel": lambda c: c.channels["slack"].allow.append("*"),  # type: ignore[attr-defined]
    "add a core": lambda c: c.cores.__setitem__("d", c.cores["c"]),
    "rewrite a script step": lambda c: c.providers["p"].script[1].arguments.__setitem__("x", 1),
    "rewrite nested arguments": lambda c: c.providers["p"].script[1].arguments["tags"].append(0),
    "widen attachments": lambda c: c.providers["p"].attachments.append("image/png"),  # type: ignore[union-attr]
    "replace a policy": lambda c: setattr(c.agents["a"], "policy", None),
}


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_editing_a_parsed_config_raises_and_changes_nothing(
    config: HostConfig, tmp_path: Path, edit: str
) -> None:
    before = config.model_dump()
    with pytest.raises((TypeError, AttributeError, ValueError)):
        EDITS[edit](config)
    assert config.model_dump() == before
    assert config == load_config(tmp_path / "hostkit.toml")


def test_a_config_round_trips_through_model_dump_and_json(config: HostConfig) -> None:
    dumped = config.model_dump()
    again = parse_config(dumped, base_dir=config.base_dir, source=config.source)
    assert again == config
    assert dumped == again.model_dump()
    text = config.model_dump_json()
    assert parse_config(json.loads(text), base_dir=config.base_dir, source=config.source) == config
    # Plain data: JSON-ready lists and dicts, not the frozen containers.
    assert type(dumped["agents"]) is dict
    assert type(dumped["agents"]["a"]["policy"]["deny"]) is list
    assert dumped["providers"]["p"]["script"][1]["arguments"] == {
        "text": "x",
        "tags": ["a", {"deep": [1, 2]}],
    }
    # And hashable: equal configurations hash equal.
    assert hash(again) == hash(config)


def test_defaults_are_immutable_too(tmp_path: Path) -> None:
    config = default_config(base_dir=tmp_path, environ={})
    empty = parse_config({}, base_dir=tmp_path)
    for value in (config, empty, HostConfig(base_dir=tmp_path)):
        kinds = {type(v).__name__ for _, v in _containers(value, "config")}
        assert kinds <= {"tuple", "FrozenMap"}
    assert empty.agents == {}
    assert parse_config(empty.model_dump(), base_dir=tmp_path) == empty


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"agents": {"a": {"provider": "p", "tool_modules": "tools"}}}, "valid list"),
        (
            {"agents": {"a": {"provider": "p", "policy": {"deny": ["x"] * 1001}}}},
            "List should have at most 1000 items",
        ),
        (
            {"agents": {"a": {"provider": "p", "mcp": {"s": {"command": ["x"] * 129}}}}},
            "List should have at most 128 items",
        ),
        ({"secrets": {"T": {"programs": []}}}, "List should have at least 1 item"),
        ({"agents": []}, "must be a table, not list"),
        ({"cores": {f"c{i}": {"path": "p"} for i in range(65)}}, "Dictionary should have at most"),
    ],
)
def test_refusals_still_speak_of_lists_and_tables(document: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"providers": {"p": {"kind": "scripted"}}, **document}, base_dir=Path("."))
    assert message in caught.value.message
    assert "uple" not in caught.value.message
