"""Shared fixtures: asyncio via anyio, blocking-call detection, a real store per test."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from blockbuster import BlockBuster, blockbuster_ctx

from hostkit.authority import AuthorityResolver, OperatorIssuer
from hostkit.store import RuntimeStore
from hostkit.types import PrincipalScope


@pytest.fixture
def anyio_backend() -> str:
    # aiosqlite and the Jupyter kernel are asyncio; hostkit runs on anyio's asyncio backend.
    return "asyncio"


@pytest.fixture(autouse=True)
def blockbuster() -> Iterator[BlockBuster]:
    """Fail any test in which hostkit makes a blocking call on the event loop thread."""
    with blockbuster_ctx("hostkit") as bb:
        yield bb


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "hostkit.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[RuntimeStore]:
    async with await RuntimeStore.open(db_path) as opened:
        yield opened


@pytest.fixture
async def authority(store: RuntimeStore) -> AsyncIterator[AuthorityResolver]:
    async with AuthorityResolver.bind(store) as resolver:
        yield resolver


@pytest.fixture
def issuer(authority: AuthorityResolver) -> OperatorIssuer:
    return authority.operator_issuer()


@pytest.fixture
async def operator(issuer: OperatorIssuer) -> PrincipalScope:
    return await issuer.issue("ops", reason="test fixture: inspect every owned row")


@pytest.fixture
def reaper() -> Iterator[list[Any]]:
    """Processes a test recorded (tests.security.test_process_tree.Record); any still
    running at teardown are killed, so a failing test never leaks a process tree."""
    from tests.security.test_process_tree import survivors

    records: list[Any] = []
    yield records
    for pid in survivors(records):
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).send_signal(signal.SIGKILL)
