"""The kernels every test here runs on: the pinned ipykernel and the oldest supported one."""

from __future__ import annotations

import os

import pytest

from tests.kernel.frontend import REQUIRE_OLDEST, KernelChoice, kernel_choices


@pytest.fixture(scope="module")
def choices(tmp_path_factory: pytest.TempPathFactory) -> dict[str, KernelChoice | str]:
    return kernel_choices(tmp_path_factory.mktemp("kernelspecs"))


@pytest.fixture(params=["pinned", "oldest"])
def kernel(request: pytest.FixtureRequest, choices: dict[str, KernelChoice | str]) -> KernelChoice:
    """Each kernel in turn; the oldest is skipped when missing, unless CI requires it."""
    choice = choices[request.param]
    if isinstance(choice, str):
        if os.environ.get(REQUIRE_OLDEST):
            pytest.fail(choice)
        pytest.skip(choice)
    return choice
