"""The kernels every test here runs on: the pinned ipykernel and the oldest supported one."""

from __future__ import annotations

import pytest

from tests.kernel.frontend import KernelChoice, kernel_choices
from tests.parts import missing


@pytest.fixture(scope="module")
def choices(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KernelChoice | str]:
    return kernel_choices(tmp_path_factory.mktemp("kernelspecs"))


@pytest.fixture(params=["pinned", "oldest"])
def kernel(request: pytest.FixtureRequest, choices: dict[str, KernelChoice | str]) -> KernelChoice:
    """Each kernel in turn; the oldest is skipped when missing, unless the run requires it
    (``HOSTKIT_REQUIRE``, tests/parts.py)."""
    choice = choices[request.param]
    if isinstance(choice, str):
        missing("oldest-kernel", choice)
    return choice
