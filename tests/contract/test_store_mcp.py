"""The store's MCP group, written against ``RuntimeStore`` and run on every adapter.

A status row per (agent, server) survives the process that wrote it, is
overwritten by each change, holds only bounded server-supplied text, and is
forgotten when its server is no longer declared.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hostkit.effects import McpServerDeclaration
from hostkit.errors import InvalidValue
from hostkit.store import (
    MAX_MCP_DESCRIPTION_CHARS,
    MAX_MCP_DETAIL_CHARS,
    MAX_MCP_TOOLS,
    McpStatusStore,
)
from hostkit.types import McpServerStatus, McpToolRow
from tests.contract._store_adapters import ADAPTERS, StoreUnderTest, open_adapter, open_store

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sut(store_adapter: str, tmp_path: Path) -> AsyncIterator[StoreUnderTest]:
    async with open_adapter(store_adapter, tmp_path) as opened:
        yield opened


@pytest.fixture
def mcp(sut: StoreUnderTest) -> McpStatusStore:
    return sut.store.mcp_servers


def connected(agent: str, server: str, *tools: str) -> McpServerStatus:
    declaration = McpServerDeclaration(
        name=server, transport="stdio", command=("srv", "--flag"), env={"TOKEN": "s3cret"}
    )
    return McpServerStatus(
        agent=agent,
        server=server,
        state="connected",
        tools=tuple(McpToolRow(f"mcp.{server}.{t}", t, f"does {t}") for t in tools),
        updated_at=1_800_000_000.5,
        declaration=declaration.view(),
    )


async def test_a_recorded_status_reads_back_whole_and_frozen(mcp: McpStatusStore) -> None:
    status = connected("assistant", "files", "read", "write")
    await mcp.record_mcp_status(status)
    (back,) = await mcp.mcp_statuses()
    assert back == status
    assert back.tools[1] == McpToolRow("mcp.files.write", "write", "does write")
    assert back.declaration["env"] == ("TOKEN",)
    assert "s3cret" not in repr(back)
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.state = "closed"  # type: ignore[misc]


async def test_recording_again_replaces_the_row_of_that_agent_and_server(
    mcp: McpStatusStore,
) -> None:
    await mcp.record_mcp_status(connected("assistant", "files", "read"))
    failing = McpServerStatus(
        agent="assistant",
        server="files",
        state="failing",
        detail="the server exited with status 1",
        failing_until=1_800_000_060.0,
        updated_at=1_800_000_001.0,
    )
    await mcp.record_mcp_status(failing)
    assert await mcp.mcp_statuses() == (failing,)


async def test_statuses_are_ordered_by_agent_then_server_and_filter_by_agent(
    mcp: McpStatusStore,
) -> None:
    for agent, server in [("zed", "a"), ("assistant", "web"), ("assistant", "files")]:
        await mcp.record_mcp_status(connected(agent, server))
    every = await mcp.mcp_statuses()
    assert [(s.agent, s.server) for s in every] == [
        ("assistant", "files"),
        ("assistant", "web"),
        ("zed", "a"),
    ]
    assert [s.server for s in await mcp.mcp_statuses("zed")] == ["a"]
    assert await mcp.mcp_statuses("nobody") == ()


async def test_server_supplied_text_is_cut_to_its_bounds(mcp: McpStatusStore) -> None:
    tools = tuple(
        McpToolRow(f"mcp.big.t{i}", f"t{i}", "x" * 5_000) for i in range(MAX_MCP_TOOLS + 40)
    )
    status = McpServerStatus(
        agent="assistant",
        server="big",
        state="failing",
        detail="line one\nline two " + "y" * 5_000,
        tools=tools,
        failing_until=1.0,
        updated_at=2.0,
    )
    await mcp.record_mcp_status(status)
    (back,) = await mcp.mcp_statuses()
    assert len(back.detail) == MAX_MCP_DETAIL_CHARS
    assert "\n" not in back.detail
    assert back.detail.startswith("line one line two")
    assert len(back.tools) == MAX_MCP_TOOLS
    assert [t.name for t in back.tools[:2]] == ["t0", "t1"]
    assert {len(t.description) for t in back.tools} == {MAX_MCP_DESCRIPTION_CHARS}


async def test_an_unset_update_time_is_stamped_with_now(mcp: McpStatusStore) -> None:
    before = time.time()
    await mcp.record_mcp_status(McpServerStatus(agent="a", server="s", state="closed"))
    (back,) = await mcp.mcp_statuses()
    assert before <= back.updated_at <= time.time() + 1


async def test_forgetting_keeps_only_the_declared_servers_of_that_agent(
    mcp: McpStatusStore,
) -> None:
    for agent, server in [("assistant", "files"), ("assistant", "old"), ("other", "old")]:
        await mcp.record_mcp_status(connected(agent, server))
    assert await mcp.forget_mcp_servers("assistant", {"files"}) == 1
    assert [(s.agent, s.server) for s in await mcp.mcp_statuses()] == [
        ("assistant", "files"),
        ("other", "old"),
    ]
    assert await mcp.forget_mcp_servers("other", ()) == 1
    assert [(s.agent, s.server) for s in await mcp.mcp_statuses()] == [("assistant", "files")]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (McpServerStatus(agent="", server="s", state="closed"), "agent"),
        (McpServerStatus(agent="a", server="s" * 201, state="closed"), "server"),
        (McpServerStatus(agent="a", server="s", state="running"), "state"),  # type: ignore[arg-type]
        (
            McpServerStatus(agent="a", server="s", state="closed", updated_at=float("nan")),
            "updated",
        ),
        (
            McpServerStatus(agent="a", server="s", state="failing", failing_until=float("inf")),
            "failing_until",
        ),
    ],
)
async def test_bad_status_is_refused_and_writes_nothing(
    mcp: McpStatusStore, status: McpServerStatus, message: str
) -> None:
    with pytest.raises(InvalidValue, match=message):
        await mcp.record_mcp_status(status)
    assert await mcp.mcp_statuses() == ()


async def test_forget_refuses_a_bare_string_for_keep(mcp: McpStatusStore) -> None:
    await mcp.record_mcp_status(connected("assistant", "files"))
    with pytest.raises(InvalidValue, match="collection"):
        await mcp.forget_mcp_servers("assistant", "files")
    assert len(await mcp.mcp_statuses()) == 1


@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_statuses_survive_reopening_the_store(adapter: str, tmp_path: Path) -> None:
    status = connected("assistant", "files", "read")
    async with open_store(adapter, tmp_path) as store:
        await store.mcp_servers.record_mcp_status(status)
    async with open_store(adapter, tmp_path) as store:
        assert await store.mcp_servers.mcp_statuses("assistant") == (status,)
