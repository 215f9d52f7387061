"""Clause: `hostkit core promote` shows a sign of life while its gates run, and says
where to look when Ctrl-C stops it.

The core's own tests may take minutes (`test_timeout_s`); a newcomer saw a
silent terminal for the whole wait and nothing after Ctrl-C. A real
`hostkit core promote` on a pseudo-terminal, its core's test sleeping.
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.contract._cli_cores import CORE, commit, live, make_project
from tests.contract.test_clause_cli_approval_interrupt import read_until

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
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm", "NO_COLOR": "1"}
    process = subprocess.Popen(  # noqa: ASYNC220 (a pty needs Popen's file descriptors)
        [sys.executable, "-m", "hostkit", "core", "promote", CORE, "--reason", "slow"],
        cwd=tmp_path,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    seen = bytearray()
    try:
        await read_until(leader, b"running the gates of HEAD", seen)
        text = seen.decode(errors="replace")
        assert "running the gates of HEAD (the core's own tests last)" in text, text
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(30):
            while process.poll() is None:
                with anyio.move_on_after(0.1):
                    await read_until(leader, b"\x00", seen)
        with anyio.move_on_after(0.5):
            await read_until(leader, b"\x00", seen)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        os.close(leader)
    text = seen.decode(errors="replace").replace("\r\n", "\n")
    assert process.returncode == 130, text
    assert f"interrupted: `hostkit core status` shows which revision of {CORE} is live" in text
    assert live(core) is None  # its gates never finished: nothing moved
