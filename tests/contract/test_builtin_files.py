"""Builtin workspace file effects through the Host: opt-in, contained, refused before start."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from hostkit.host import DefaultCapabilities, Host, RuntimeCapabilities, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, StaticProviderSource
from tests.hosts import request

pytestmark = pytest.mark.anyio


def builtin_config(
    tmp_path: Path, builtins: list[str], url_allow_private: tuple[str, ...] = ()
) -> dict[str, object]:
    agent = {"provider": "test", "memory": False, "builtins": builtins}
    return {
        "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path / "ws")},
        "providers": {"test": {"kind": "scripted"}},
        "agents": {"assistant": {**agent, "url_allow_private": list(url_allow_private)}},
    }


async def open_builtin_host(
    tmp_path: Path,
    model: ScriptedModel,
    builtins: list[str],
    url_allow_private: tuple[str, ...] = (),
) -> Host:
    """A real Host with the default tool and memory sources and a scripted provider."""
    await anyio.Path(tmp_path / "ws").mkdir(exist_ok=True)
    cfg = parse_config(builtin_config(tmp_path, builtins, url_allow_private), base_dir=tmp_path)
    host = await Host.open(cfg)
    defaults = DefaultCapabilities.from_config(cfg, store=host.store)
    caps = RuntimeCapabilities(
        providers=StaticProviderSource(model),
        memory=defaults.memory,
        tools=defaults.tools,
        channels=defaults.channels,
    )
    await host.apply_config(cfg, capabilities=caps)
    return host


async def test_builtins_are_opt_in_and_named_per_agent(tmp_path: Path) -> None:
    model = ScriptedModel([Reply("ok")], repeat_last=True)
    host = await open_builtin_host(tmp_path, model, ["files.read", "files.list"])
    try:
        await host.turns.run(request())
    finally:
        await host.aclose()
    assert sorted(d.name for d in model.requests[0].tools) == ["files_list", "files_read"]


async def test_an_agent_reads_and_writes_inside_its_workspace(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            CallTools(("files_write", {"path": "notes/todo.md", "content": "buy milk"})),
            CallTools(("files_read", {"path": "notes/todo.md"})),
            Reply("done"),
        ]
    )
    host = await open_builtin_host(tmp_path, model, ["files.read", "files.write"])
    try:
        result = await host.turns.run(request())
    finally:
        await host.aclose()
    assert [e.status for e in result.effects] == ["succeeded", "succeeded"]
    assert await anyio.Path(tmp_path / "ws" / "notes" / "todo.md").read_text() == "buy milk"
    assert "buy milk" in model.requests[2].messages[-1].content


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "a/../../outside.txt"])
async def test_an_escape_is_denied_before_anything_runs(tmp_path: Path, path: str) -> None:
    outside = anyio.Path(tmp_path / "outside.txt")
    model = ScriptedModel(
        [CallTools(("files_write", {"path": path, "content": "pwned"})), Reply("ok")]
    )
    host = await open_builtin_host(tmp_path, model, ["files.write"])
    try:
        result = await host.turns.run(request())
    finally:
        await host.aclose()
    assert result.effects[0].status == "denied"
    assert not await outside.exists()


async def test_unknown_builtins_are_a_config_error(tmp_path: Path) -> None:
    from hostkit.errors import ConfigError

    with pytest.raises(ConfigError, match="builtins"):
        parse_config(builtin_config(tmp_path, ["shell.exec"]), base_dir=tmp_path)


async def test_web_extract_builtin_reads_an_allowlisted_page_and_refuses_others(
    tmp_path: Path,
) -> None:
    from tests.wire import serve_wire, text_reply

    async with serve_wire() as server:
        server.script(
            text_reply(
                "<html><head><title>T</title></head><body><article><p>"
                + "Lemmings live under the snow all winter long. " * 5
                + "</p></article></body></html>",
                content_type="text/html; charset=utf-8",
            )
        )
        model = ScriptedModel(
            [
                CallTools(("web_extract", {"url": f"{server.base_url}/page"})),
                CallTools(("web_extract", {"url": "http://169.254.169.254/latest/meta-data"})),
                Reply("done"),
            ]
        )
        host = await open_builtin_host(tmp_path, model, ["web.extract"], ("127.0.0.1",))
        try:
            result = await host.turns.run(request())
        finally:
            await host.aclose()
    assert [e.status for e in result.effects] == ["succeeded", "denied"]
    assert "Lemmings live under the snow" in model.requests[1].messages[-1].content
    assert "metadata" in model.requests[2].messages[-1].content
    assert len(server.requests) == 1, "the refused URL was never requested"
