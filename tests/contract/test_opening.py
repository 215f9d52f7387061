"""One idiom for opening resources: ``async with X.open(...)`` or ``x = await X.open(...)``."""

from __future__ import annotations

from pathlib import Path

import pytest

import hostkit
from hostkit.errors import StoreClosed
from hostkit.store import RuntimeStore
from hostkit.testing import capabilities
from tests.hosts import config

pytestmark = pytest.mark.anyio


async def test_store_open_as_context_manager_closes_on_exit(db_path: Path) -> None:
    async with RuntimeStore.open(db_path) as store:
        assert not store.closed
        assert store.location.endswith("hostkit.db")
    assert store.closed
    with pytest.raises(StoreClosed):
        await store.owner_facts("session-1")


async def test_store_open_awaited_stays_open_until_aclose(db_path: Path) -> None:
    store = await RuntimeStore.open(db_path)
    try:
        assert not store.closed
    finally:
        await store.aclose()
    assert store.closed
    await store.aclose()  # idempotent


async def test_store_open_closes_when_the_block_raises(db_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with RuntimeStore.open(db_path) as store:
            raise RuntimeError("boom")
    assert store.closed


async def test_an_opening_is_entered_once(db_path: Path) -> None:
    opening = RuntimeStore.open(db_path)
    async with opening:
        with pytest.raises(RuntimeError, match="already entered"):
            await opening.__aenter__()


async def test_host_open_awaited_and_as_context_manager(tmp_path: Path) -> None:
    model = hostkit.ScriptedModel(["hello"], repeat_last=True)
    host = await hostkit.Host.open(config(tmp_path), capabilities=capabilities(model))
    try:
        assert await host.run_turn("assistant", "hi") == "hello"
    finally:
        await host.aclose()
    assert host.store.closed
    async with hostkit.Host.open(config(tmp_path), capabilities=capabilities(model)) as again:
        assert await again.run_turn("assistant", "hi") == "hello"
    assert again.store.closed
