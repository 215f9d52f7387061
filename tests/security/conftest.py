"""Fixtures the security suites share with the contract suites."""

from tests.contract.test_effects_terminal import terminal  # noqa: F401 (a pytest fixture)
