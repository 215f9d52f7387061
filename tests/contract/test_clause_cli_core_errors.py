"""Clause: a `hostkit core` command that cannot be done is one bounded `error:` line on
stderr, exit status 2, nothing on stdout, and the Host-owned ref does not move.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract._cli_cores import CORE, head, invoke, live, make_project


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("core", "log", "Not-A-Core"), "'Not-A-Core' is not a core id"),
        (("core", "status", "x" * 300), "is not a core id"),
        (("core", "log", "nobody"), "no core 'nobody' under [cores] in the configuration"),
        (("core", "diff", "nobody"), "no core 'nobody' under [cores]"),
        (("core", "promote", "journal", "--reason", "r"), "its [cores.journal] table"),
        (("core", "promote", CORE), "--reason is required"),
        (("core", "promote", CORE, "--reason", "  "), "--reason is required"),
        (("core", "promote", CORE, "--reason", "x" * 501), "--reason is at most 500"),
        (("core", "rollback", CORE), "--reason is required"),
        (("core", "promote", CORE, "zzzz", "--reason", "r"), "no revision 'zzzz' in this core"),
        (("core", "promote", CORE, "0" * 40, "--reason", "r"), "0000000000"),
        (("core", "diff", CORE, "--target", "no-such-branch"), "no revision 'no-such-branch'"),
        (("core", "rollback", CORE, "--reason", "r"), "has no live revision to roll back"),
        (("core", "log", CORE, "--limit", "0"), "Invalid value for '--limit'"),
    ],
)
def test_a_command_that_cannot_be_done_is_one_error_line(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    core = make_project(tmp_path)
    code, out, err = invoke(*args, project=tmp_path)
    assert code == 2
    assert out == ""
    assert expected in err
    assert "Traceback" not in err
    if "Invalid value" not in err:  # click's own usage errors keep click's format
        # The Host that opened may warn first (this core is not live yet): one line each.
        lines = [line for line in err.splitlines() if not line.startswith("warning: ")]
        assert len(lines) == 1
        assert lines[0].startswith("error: ")
        assert len(lines[0]) < 400
    assert live(core) is None


@pytest.mark.parametrize("command", ["status", "log", "diff", "promote", "rollback"])
def test_a_mistyped_core_id_is_refused_with_the_closest_before_any_host_opens(
    tmp_path: Path, command: str
) -> None:
    make_project(tmp_path)
    typo = CORE[:-1] + "x"
    reason = ("--reason", "r") if command in ("promote", "rollback") else ()
    code, out, err = invoke("core", command, typo, *reason, project=tmp_path)
    assert (code, out) == (2, "")
    assert err == (
        f"error: no core {typo!r} under [cores] in the configuration; did you mean {CORE!r}? "
        f"(cores here: {CORE})\n"
    )  # one line: no start-up warning about the other core, no database opened for it


def test_promoting_the_live_revision_again_is_refused_in_one_line(tmp_path: Path) -> None:
    core = make_project(tmp_path)
    assert invoke("core", "promote", CORE, "--reason", "first", project=tmp_path)[0] == 0
    code, out, err = invoke("core", "promote", CORE, "--reason", "again", project=tmp_path)
    assert code == 2
    assert out == ""
    assert err == (
        f"error: {head(core)[:12]} is already the live revision of core '{CORE}'; "
        "commit your change first (only committed files are promoted)\n"
    )
    assert live(core) == head(core)
