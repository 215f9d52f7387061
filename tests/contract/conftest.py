"""Fixtures the contract suites of several seams share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hostkit.authority import AuthorityResolver
from hostkit.store import RuntimeStore
from tests.contract._store_adapters import open_store


@pytest.fixture
async def runtime(store_adapter: str, tmp_path: Path) -> AsyncIterator[RuntimeStore]:
    """One empty store of each adapter (the store matrix, tests/conftest.py)."""
    async with open_store(store_adapter, tmp_path) as store:
        yield store


@pytest.fixture
async def resolver(runtime: RuntimeStore) -> AsyncIterator[AuthorityResolver]:
    async with AuthorityResolver.bind(runtime) as bound:
        yield bound
