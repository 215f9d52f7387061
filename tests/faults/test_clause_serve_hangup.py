"""Serve clause: closing the terminal ``hostkit serve`` runs in stops it; SIGHUP otherwise reloads.

``hostkit serve`` runs for real on a pseudo-terminal that is its controlling
terminal (a new session whose leader opens the terminal, as a terminal
window's shell is). Closing the terminal's side (what closing the window
does) hangs the terminal up: the kernel sends the session SIGHUP and the
terminal is gone. That SIGHUP stops the daemon as a first SIGTERM does (a
graceful drain, exit 0, one log line saying the terminal closed), so its port
is free again; a process left serving would have no terminal to write to
and would keep the port taken. SIGHUP while the terminal is still open
(``kill -HUP``) reloads the configuration and the daemon keeps serving, as
SIGHUP does for a daemon started without a terminal (test_clause_serve_reload).
"""

from __future__ import annotations

import json
import os
import pty
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from tests.contract._config_apply import write_config

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LISTENING = b"hostkit serve: listening on "
# The daemon's own start and a drain with nothing in flight take a few seconds at most.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
# Made the session's leader, the child opens the terminal by name: that makes it its
# controlling terminal. Then it becomes ``hostkit serve`` (same process, same session).
_ON_A_TERMINAL = """
import os, sys
os.setsid()
terminal = os.open(sys.argv[1], os.O_RDWR)
for fd in sys.argv[2].split(","):
    os.dup2(terminal, int(fd))
os.close(terminal)
os.execv(sys.executable, [sys.executable, "-m", "hostkit", *sys.argv[3:]])
"""


@dataclass
class OnTerminal:
    """``hostkit serve`` whose controlling terminal is ``terminal``'s other side."""

    process: subprocess.Popen[bytes]
    terminal: int
    seen: bytearray

    async def read_until(self, wanted: bytes) -> None:
        """Read what the terminal shows until ``wanted`` appears (bounded)."""
        with anyio.fail_after(START_TIMEOUT_S):
            while wanted not in self.seen:
                await anyio.wait_readable(self.terminal)
                try:
                    chunk = os.read(self.terminal, 4096)
                except OSError:  # the terminal's other side is gone
                    chunk = b""
                assert chunk, f"the terminal closed before {wanted!r}: {self.text()}"
                self.seen.extend(chunk)

    def read_what_is_left(self) -> None:
        """What the process wrote before it ended (it is gone: nothing more comes)."""
        os.set_blocking(self.terminal, False)
        with suppress(OSError):
            while chunk := os.read(self.terminal, 4096):
                self.seen.extend(chunk)

    def text(self) -> str:
        return self.seen.decode(errors="replace").replace("\r\n", "\n")

    def port(self) -> int:
        line = self.seen.split(LISTENING, 1)[1].split(b"\r", 1)[0].decode()
        return int(line.rstrip("/").rsplit(":", 1)[1])

    def hang_up(self) -> None:
        """Close the terminal's side, as closing a terminal window does."""
        os.close(self.terminal)
        self.terminal = -1

    async def exit_code(self) -> int | None:
        """The status once the process ends, or None if it still runs after the bound."""
        with suppress(subprocess.TimeoutExpired):
            await anyio.to_thread.run_sync(self.process.wait, STOP_TIMEOUT_S)
        return self.process.poll()


@contextmanager
def serve_on_a_terminal(
    project: Path, *, stderr: int | None = None, args: tuple[str, ...] = ()
) -> Iterator[OnTerminal]:
    """``hostkit serve`` in a session of its own on a new pseudo-terminal: stdin, stdout and
    (unless ``stderr`` is given) stderr are the terminal; killed if the block leaves it
    running."""
    leader, follower = pty.openpty()
    name = os.ttyname(follower)
    fds = "0,1" if stderr is not None else "0,1,2"
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}
    argv = [sys.executable, "-c", _ON_A_TERMINAL, name, fds, "serve", "-c", "hostkit.toml"]
    process = subprocess.Popen([*argv, *args], cwd=project, env=env, stderr=stderr)
    running = OnTerminal(process, leader, bytearray())
    try:
        yield running
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        # Kept open until now: with no side open, reading the terminal fails before the
        # child has opened it (the hang-up closes the terminal's side all the same).
        os.close(follower)
        if running.terminal >= 0:
            os.close(running.terminal)


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def test_closing_the_terminal_drains_the_daemon_exits_0_and_frees_its_port(
    tmp_path: Path,
) -> None:
    """The newcomer's case: logs and the live status line on the terminal too."""
    write_config(tmp_path, reply="hello")
    with serve_on_a_terminal(tmp_path) as serving:
        await serving.read_until(LISTENING)
        await serving.read_until(b"\n")
        port = serving.port()
        assert not port_is_free(port)
        serving.hang_up()
        code = await serving.exit_code()
        assert code is not None, "hostkit serve kept running after its terminal closed"
    assert code == 0
    assert port_is_free(port)


async def test_closing_the_terminal_says_so_in_one_log_line(tmp_path: Path) -> None:
    """With the log written elsewhere (a file), the reason of the stop can be read there."""
    write_config(tmp_path, reply="hello")
    log = tmp_path / "serve.log"
    with log.open("wb") as written, serve_on_a_terminal(tmp_path, stderr=written.fileno()) as s:
        await s.read_until(LISTENING)
        s.hang_up()
        code = await s.exit_code()
        assert code is not None, "hostkit serve kept running after its terminal closed"
    assert code == 0
    messages = [json.loads(line)["msg"] for line in log.read_text().splitlines()]
    asked = [message for message in messages if message.startswith("shutdown requested")]
    assert len(asked) == 1, messages
    assert asked[0].startswith("shutdown requested (SIGHUP received: the terminal closed)")
    # Not taken for a reload as well: no generation was checked for.
    assert not [message for message in messages if "generation" in message]


async def test_sighup_with_the_terminal_still_open_reloads_and_keeps_serving(
    tmp_path: Path,
) -> None:
    """``kill -HUP`` from another shell: the terminal is there, so it is a reload."""
    write_config(tmp_path, reply="first", serve="reload_interval_s = 0")
    with serve_on_a_terminal(tmp_path, args=("--log-format", "json")) as serving:
        await serving.read_until(LISTENING)
        write_config(tmp_path, reply="second", serve="reload_interval_s = 0")
        serving.process.send_signal(signal.SIGHUP)
        await serving.read_until(b"generation 2 applied")
        assert serving.process.poll() is None
        assert "shutdown requested" not in serving.text()
        serving.process.send_signal(signal.SIGTERM)
        assert await serving.exit_code() == 0
        serving.read_what_is_left()
    assert "SIGTERM received" in serving.text()


# A shell with ``hostkit serve &`` as its background job: the session's leader opens the
# terminal, forks the job into a process group of its own, prints its pid, and exits when
# its stdin closes (the shell's ``exit``): the kernel then hangs up only the foreground.
_SHELL_WITH_A_JOB = """
import os, sys
os.setsid()
terminal = os.open(sys.argv[1], os.O_RDWR)
job = os.fork()
if job == 0:
    os.setpgid(0, 0)
    for fd in (0, 1):
        os.dup2(terminal, fd)
    os.execv(sys.executable, [sys.executable, "-m", "hostkit", *sys.argv[2:]])
print(job, flush=True)
sys.stdin.read()
"""


def shell_with_a_job(project: Path, log: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """The shell running the job (closing its stdin is its ``exit``; its stdout says the
    job's pid), and the terminal's two sides, the test's first."""
    leader, follower = pty.openpty()
    argv = [sys.executable, "-c", _SHELL_WITH_A_JOB, os.ttyname(follower)]
    argv += ["serve", "-c", "hostkit.toml", "--port", "0", "--log-format", "json"]
    with log.open("wb") as written:
        shell = subprocess.Popen(
            argv, cwd=project, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=written
        )
    assert shell.stdout is not None
    return shell, leader, follower


async def test_sighup_long_after_the_shell_left_its_job_behind_reloads(tmp_path: Path) -> None:
    """``hostkit serve &`` then ``exit``: the job outlives its shell with no SIGHUP (bash
    sends none to a job), and the terminal is gone. A later ``kill -HUP`` is a reload,
    as under nohup, not a hang-up."""
    write_config(tmp_path, reply="first", serve="reload_interval_s = 0")
    log = tmp_path / "serve.log"
    shell, leader, follower = shell_with_a_job(tmp_path, log)
    assert shell.stdout is not None
    assert shell.stdin is not None
    job = int(await anyio.to_thread.run_sync(shell.stdout.readline))
    try:
        with anyio.fail_after(START_TIMEOUT_S):
            while "daemon reload: running" not in log.read_text():  # noqa: ASYNC110 (another)
                await anyio.sleep(0.1)
        shell.stdin.close()  # the shell's exit
        await anyio.to_thread.run_sync(shell.wait, STOP_TIMEOUT_S)
        os.close(leader)  # the window closes with it
        leader = -1
        await anyio.sleep(4.0)  # the daemon's look at its terminal finds it gone
        write_config(tmp_path, reply="second", serve="reload_interval_s = 0")
        os.kill(job, signal.SIGHUP)
        with anyio.fail_after(STOP_TIMEOUT_S):
            while "generation 2 applied" not in log.read_text():  # noqa: ASYNC110
                await anyio.sleep(0.1)
        assert "shutdown requested" not in log.read_text()
        os.kill(job, signal.SIGTERM)
        with anyio.fail_after(STOP_TIMEOUT_S):
            while "SIGTERM received" not in log.read_text():  # noqa: ASYNC110
                await anyio.sleep(0.1)
    finally:
        with suppress(ProcessLookupError):
            os.kill(job, signal.SIGKILL)
        if shell.poll() is None:
            shell.kill()
        shell.wait()
        shell.stdout.close()
        os.close(follower)
        if leader >= 0:
            os.close(leader)
