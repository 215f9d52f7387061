"""A missing system part skips its tests, or fails them where the run requires it."""

from __future__ import annotations

import pytest

import tests.parts as parts
from tests.parts import missing, part_of_skip, required_parts, skipped_summary


def test_a_missing_part_skips_with_a_reason_the_summary_recognizes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(parts.REQUIRE, raising=False)
    monkeypatch.delenv(parts.REQUIRE_OLDEST_KERNEL, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        missing("postgres", "no PostgreSQL server binaries")
    assert part_of_skip(str(skipped.value)) == "postgres"
    assert skipped.value.__suppress_context__


def test_a_required_part_that_is_missing_fails_saying_what_and_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(parts.REQUIRE, "postgres,sandbox")
    with pytest.raises(pytest.fail.Exception) as failed:
        missing("sandbox", "bubblewrap cannot create namespaces here")
    message = str(failed.value)
    assert message.startswith("sandbox is required (HOSTKIT_REQUIRE=postgres,sandbox)")
    assert "bubblewrap cannot create namespaces here" in message
    assert "`make bubblewrap`" in message
    with pytest.raises(pytest.skip.Exception):
        missing("local-model", "no GGUF")  # not named: still a skip


def test_the_older_oldest_kernel_switch_still_requires_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(parts.REQUIRE, raising=False)
    monkeypatch.setenv(parts.REQUIRE_OLDEST_KERNEL, "1")
    assert required_parts() == {"oldest-kernel"}


def test_installed_requires_what_the_make_targets_installed_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parts, "installed_parts", lambda: frozenset({"sandbox"}))
    env = {parts.REQUIRE: "oldest-kernel, installed"}
    assert required_parts(env) == {"oldest-kernel", "sandbox"}


def test_an_unknown_part_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(pytest.UsageError, match=r"unknown part 'postgresql'.*postgres, sandbox"):
        required_parts({parts.REQUIRE: "postgresql"})


def test_the_summary_says_per_part_how_many_skipped_why_and_how_to_install() -> None:
    reasons = [
        "Skipped: missing postgres: no server binaries",
        "missing postgres: no server binaries",
        "missing sandbox: bwrap not found",
        "no /dev/full on this system",  # not a part's skip
    ]
    postgres, sandbox = skipped_summary(reasons)
    assert postgres.startswith("postgres (")
    assert "2 tests skipped: no server binaries." in postgres
    assert "`make postgresql`" in postgres
    assert "HOSTKIT_REQUIRE=postgres fails them instead" in postgres
    assert "1 tests skipped: bwrap not found." in sandbox
