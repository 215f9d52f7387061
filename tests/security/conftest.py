"""Fixtures the security suites share with the contract suites, and among themselves."""

from collections.abc import AsyncIterator

import pytest

from tests.contract.test_effects_terminal import terminal  # noqa: F401 (a pytest fixture)
from tests.wire import WireServer, serve_wire
from tests.wire.rigs import ScriptableRig


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    """A loopback server speaking the providers' APIs (``tests.wire``)."""
    async with serve_wire() as server:
        yield server


@pytest.fixture
async def built() -> AsyncIterator[list[ScriptableRig]]:
    """Rigs built during the test (``make_rig``), closed after it."""
    built: list[ScriptableRig] = []
    try:
        yield built
    finally:
        for each in built:
            await each.aclose()
