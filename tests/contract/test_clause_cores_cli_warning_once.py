"""Clause: a start-up problem (a core with no live revision) is one ``warning:`` line on
the CLI's stderr, not that line and the Host's log record of it as well.

A real process: with no logging configured, Python prints a warning record on
stderr itself (its last-resort handler), which pytest's own log capture hides
from an in-process run. A record the CLI does not show otherwise (a workspace
that cannot be created) still reaches stderr, once.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.cli import run_cli
from tests.contract._cli_cores import CONFIG, make_project


def test_a_core_without_a_live_revision_is_warned_about_once(tmp_path: Path) -> None:
    make_project(tmp_path)
    (tmp_path / "blocker").write_text("a file, not a folder\n", encoding="utf-8")
    # A plain agent's workspace is created at start-up (here it cannot be).
    config = CONFIG.replace("[host]\n", '[host]\nworkspace = "blocker/ws"\n')
    config += '\n[agents.helper]\nprovider = "p"\n'
    (tmp_path / "hostkit.toml").write_text(config, encoding="utf-8")
    result = run_cli(
        "core", "status", cwd=tmp_path, env={**os.environ, "COLUMNS": "200"}, timeout=60
    )
    err = result.stderr.decode()
    assert result.returncode == 0, err
    reason = (
        "core 'assistant' has no live revision; "
        'run `hostkit core promote assistant --reason "..."`'
    )
    assert err.count(reason) == 1, err
    assert f"warning: {reason}" in err
    assert err.count("cannot create the workspace") == 1, err
