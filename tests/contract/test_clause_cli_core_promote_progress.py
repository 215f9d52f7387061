"""Clause: `hostkit core promote` shows a sign of life while its gates run, and says
where to look when Ctrl-C stops it.

The core's own tests may take minutes (`test_timeout_s`); a newcomer saw a
silent terminal for the whole wait and nothing after Ctrl-C. A real
`hostkit core promote` on a pseudo-terminal, its core's test sleeping.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract._cli_cores import CORE, commit, live, make_project
from tests.contract.test_clause_cli_approval_interrupt import ctrl_c_hostkit, read_until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SLOW_TEST = "import time\n\n\ndef test_slow():\n    time.sleep(60)\n"


@pytest.fixture
def core(tmp_path: Path) -> Path:
    """The project's core, whose own test sleeps for a minute."""
    made = make_project(tmp_path)
    commit(made, {"tests/test_slow.py": SLOW_TEST}, "a slow test")
    return made


async def test_promote_shows_its_gates_running_and_ctrl_c_says_where_to_look(
    tmp_path: Path, core: Path
) -> None:

    async def gates_running(terminal: int, seen: bytearray) -> None:
        await read_until(terminal, b"running the gates of HEAD", seen)
        text = seen.decode(errors="replace")
        assert "running the gates of HEAD (the core's own tests last)" in text, text

    argv = ["core", "promote", CORE, "--reason", "slow"]
    code, text, _ = await ctrl_c_hostkit(argv, tmp_path, gates_running, term="xterm")
    assert code == 130, text
    assert f"interrupted: `hostkit core status` shows which revision of {CORE} is live" in text
    assert live(core) is None  # its gates never finished: nothing moved
