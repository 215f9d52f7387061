"""Clause: Ctrl-C at a terminal approval prompt leaves the approval pending and answerable.

`hostkit run` runs for real, its stdin a pseudo-terminal (so it asks there),
its model a loopback server scripted by the test. SIGINT at the prompt ends
the command; the approval recorded before the prompt stays pending, the
terminal says so in one line with the command that answers it, and that
command then runs the call once.
"""

from __future__ import annotations

import io
import os
import pty
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import NamedTuple

import anyio
import pytest
from rich.console import Console

from hostkit.cli._approver import ConsoleApprover, interrupted_line
from hostkit.effects import DIFF_KEY, ApprovalKey, ApprovalRequest, ApprovalRuntime
from tests.contract.test_cli_approvals import CONFIG, answer, hostkit, write_call
from tests.wire import WireServer, serve_wire, sse_reply
from tests.wire import openai_chat as wire_openai

pytestmark = pytest.mark.anyio

PROMPT = b"[o]nce / [s]ession / [d]eny? "
# A model answer that starts and then holds: the turn waits on its model until killed.
OPENING_HELD = sse_reply(
    wire_openai.sse([wire_openai.chunk(role="assistant")], done=False), hold=True
)


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


@pytest.fixture
async def project(tmp_path: Path, wire: WireServer) -> Path:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG.format(base_url=wire.base_url))
    return tmp_path


def pending_rows(database: Path) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(database)) as connection, connection:
        return connection.execute("SELECT approval_id, status FROM approvals").fetchall()


async def read_until(fd: int, wanted: bytes, seen: bytearray, timeout_s: float = 30.0) -> None:
    """Read the terminal's output until ``wanted`` appears (bounded)."""
    with anyio.fail_after(timeout_s):
        while wanted not in seen:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the other side closed
                return
            if not chunk:
                return
            seen.extend(chunk)


class Interrupted(NamedTuple):
    """How a command sent Ctrl-C ended: its status, all it wrote, and the seconds from
    the SIGINT to its exit (its start-up, however slow, is not counted)."""

    code: int | None
    text: str
    took: float


async def ctrl_c_hostkit(
    argv: Sequence[str],
    cwd: Path,
    ready: Callable[[int, bytearray], Awaitable[None]],
    *,
    term: str = "dumb",
) -> Interrupted:
    """``hostkit ARGV`` on a pseudo-terminal, sent SIGINT (what Ctrl-C sends) once
    ``ready(terminal, seen)`` returns."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "200", "TERM": term, "NO_COLOR": "1"}
    process = subprocess.Popen(  # noqa: ASYNC220 (a pty needs Popen's file descriptors)
        [sys.executable, "-m", "hostkit", *argv],
        cwd=cwd,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    seen = bytearray()
    try:
        await ready(leader, seen)
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        with anyio.fail_after(30):
            while process.poll() is None:
                with anyio.move_on_after(0.1):
                    await read_until(leader, b"\x00", seen)
        took = time.monotonic() - interrupted
        with anyio.move_on_after(0.5):
            await read_until(leader, b"\x00", seen)  # what was written last
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        os.close(leader)
    text = seen.decode(errors="replace").replace("\r\n", "\n")
    return Interrupted(process.returncode, text, took)


async def test_ctrl_c_at_the_prompt_leaves_the_approval_pending_and_says_how_to_answer(
    project: Path, wire: WireServer
) -> None:
    wire.script(write_call(), answer("Written."))

    async def at_the_prompt(terminal: int, seen: bytearray) -> None:
        await read_until(terminal, PROMPT, seen)
        assert PROMPT in seen, seen.decode(errors="replace")

    _, text, _ = await ctrl_c_hostkit(
        ["run", "--agent", "writer", "write out.md"], project, at_the_prompt
    )
    rows = pending_rows(project / "state" / "hostkit.db")
    assert len(rows) == 1, text
    approval_id, status = rows[0]
    assert status == "pending", text
    line = interrupted_line(approval_id)
    assert "stays pending" in line
    assert text.count(line) == 1, text  # one unwrapped line, copyable at any width
    with closing(sqlite3.connect(project / "state" / "hostkit.db")) as connection, connection:
        turns = connection.execute("SELECT status FROM turns").fetchall()
    assert turns == [("needs_user",)]  # the turn paused on it: nothing was lost or denied
    assert not (project / "workspace" / "out.md").exists()
    # The approval is answerable as the line says, and runs the call once.
    code, _, err = await hostkit("approvals", "approve", approval_id, cwd=project)
    assert code == 0, err
    assert (project / "workspace" / "out.md").read_text() == "hello"
    assert pending_rows(project / "state" / "hostkit.db")[0][1] != "pending"


async def test_a_cancelled_prompt_prints_the_same_line_and_nothing_else_claims() -> None:
    shown = io.StringIO()
    console = Console(file=shown, width=200, color_system=None, force_terminal=False)
    read_fd, write_fd = os.pipe()
    reader, writer = os.fdopen(read_fd, "r"), os.fdopen(write_fd, "w")
    try:
        approver = ConsoleApprover(console=console, stdin=reader)
        request = ApprovalRequest(
            "apr_7",
            ApprovalKey("p", "s", "f", "files.write"),
            "files.write",
            "turn_1",
            {"effect": "files.write", "arguments": {"path": "a.md"}},
        )
        with anyio.move_on_after(0.2):
            await approver.decide(request)
    finally:
        writer.close()
        reader.close()
    assert shown.getvalue().count(interrupted_line("apr_7")) == 1


class Record:
    """A test adapter for the durable ask: answered elsewhere once ``open`` turns False."""

    def __init__(self) -> None:
        self.open = True

    async def asked(self) -> bool:
        return True

    async def answered(self, decision: str) -> bool:
        return True

    async def status(self) -> str:
        return "pending" if self.open else "denied"


async def test_a_prompt_answered_elsewhere_says_so_and_never_claims_it_is_pending() -> None:
    shown = io.StringIO()
    console = Console(file=shown, width=200, color_system=None, force_terminal=False)
    read_fd, write_fd = os.pipe()
    reader, writer = os.fdopen(read_fd, "r"), os.fdopen(write_fd, "w")
    record = Record()
    request = ApprovalRequest(
        "apr_9", ApprovalKey("p", "s", "f", "files.write"), "files.write", "turn_1", {}
    )
    try:
        approver = ConsoleApprover(console=console, stdin=reader)
        runtime = ApprovalRuntime(provider=approver, watch_interval_s=0.02)
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                outcome = await runtime.resolve(
                    request.key, lambda: request, approver, record=record
                )
                assert outcome == "unanswered"

            tg.start_soon(ask)
            with anyio.fail_after(5):
                while "[o]nce" not in shown.getvalue():  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            record.open = False  # answered from another process
    finally:
        writer.close()
        reader.close()
    text = shown.getvalue()
    assert "(no answer here: no longer pending (answered elsewhere, or void): denied" in text
    assert "`hostkit approvals list --all` shows it" in text
    assert "stays pending" not in text
    assert "still pending" not in text


def render(view: dict[str, object]) -> str:
    shown = io.StringIO()
    console = Console(file=shown, width=200, color_system=None, force_terminal=False)
    approver = ConsoleApprover(console=console, stdin=io.StringIO("d\n"))
    request = ApprovalRequest(
        "apr_1", ApprovalKey("p", "s", "f", "files.write"), "files.write", "turn_1", view
    )
    anyio.run(approver.decide, request)  # type: ignore[arg-type]
    return shown.getvalue()


def test_multi_line_content_and_a_diff_are_shown_as_lines_with_controls_escaped() -> None:
    text = render(
        {
            "effect": "files.write",
            "arguments": {"path": "n.md", "content": "first\nsecond \x1b[2J\nthird"},
            DIFF_KEY: "--- a/n.md\n+++ b/n.md\n@@ -1 +1 @@\n-old\n+new\n",
        }
    )
    lines = text.splitlines()
    assert "  content:" in lines
    start = lines.index("  content:")
    assert lines[start + 1 : start + 4] == ["    │ first", "    │ second \\x1b[2J", "    │ third"]
    assert "\x1b" not in text
    assert "  the file exists; this write replaces it:" in lines
    assert "    -old" in lines
    assert "    +new" in lines


async def test_ctrl_c_while_the_model_answers_says_the_turn_stopped_and_where_to_read_it(
    project: Path, wire: WireServer
) -> None:
    """No prompt open: the command still says in one line what became of the turn."""
    wire.script(
        sse_reply(wire_openai.sse([wire_openai.chunk(role="assistant")], done=False), hold=True)
    )

    async def model_called(terminal: int, seen: bytearray) -> None:
        with anyio.fail_after(30):
            while not wire.requests:  # until the model call is in flight, keep reading
                with anyio.move_on_after(0.05):
                    await read_until(terminal, b"\x00", seen)

    code, text, _ = await ctrl_c_hostkit(
        ["run", "--agent", "writer", "hello"], project, model_called
    )
    assert code == 130, text
    line = "interrupted: the turn stopped and was recorded as it ended; `hostkit sessions` shows it"
    assert text.count(line) == 1, text
    with closing(sqlite3.connect(project / "state" / "hostkit.db")) as connection, connection:
        turns = connection.execute("SELECT status FROM turns").fetchall()
    assert turns == [("cancelled",)]


async def test_ctrl_c_before_the_turn_started_says_nothing_was_recorded(
    project: Path, wire: WireServer
) -> None:
    """Interrupted while it waits for a busy session: no turn exists, and it says so rather
    than send the reader to `hostkit sessions` for a record that is not there."""
    wire.script(
        sse_reply(wire_openai.sse([wire_openai.chunk(role="assistant")], done=False), hold=True)
    )
    holder = await anyio.open_process(
        [sys.executable, "-m", "hostkit", "run", "--agent", "writer", "first"],
        cwd=project,
        stdin=subprocess.DEVNULL,
    )
    try:
        with anyio.fail_after(30):
            await wire.holding.wait()  # the first turn holds the session, its model answering

        async def waiting_for_the_session(terminal: int, seen: bytearray) -> None:
            await read_until(terminal, b"another turn runs in it", seen)

        code, text, _ = await ctrl_c_hostkit(
            ["run", "--agent", "writer", "second"], project, waiting_for_the_session, term="xterm"
        )
    finally:
        holder.kill()
        await holder.aclose()
    assert code == 130, text
    assert text.count("interrupted before the turn started: nothing was recorded") == 1, text
    assert "hostkit sessions" not in text
    with closing(sqlite3.connect(project / "state" / "hostkit.db")) as connection, connection:
        requests = connection.execute("SELECT count(*) FROM turns").fetchone()
    assert requests == (1,)  # the holder's turn only


async def test_ctrl_c_in_the_demo_says_it_stopped_and_where_its_record_is(
    tmp_path: Path,
) -> None:
    """The demo asks before its write (here on a terminal); Ctrl-C there ends it with
    one line saying so and naming the command that lists what it recorded."""

    async def at_the_prompt(terminal: int, seen: bytearray) -> None:
        await read_until(terminal, PROMPT, seen, timeout_s=60)
        assert PROMPT in seen, seen.decode(errors="replace")

    directory = tmp_path / "demo"
    code, text, _ = await ctrl_c_hostkit(
        ["demo", "--directory", str(directory)], tmp_path, at_the_prompt
    )
    assert code == 130, text
    line = f"interrupted: the demo stopped; hostkit sessions -c {directory} shows what it recorded"
    assert text.count(line) == 1, text
    assert "Traceback" not in text


async def test_ctrl_c_while_an_approvals_continuation_runs_says_where_it_was_left(
    project: Path, wire: WireServer
) -> None:
    """`hostkit approvals approve` runs a continuation turn: interrupted while its model
    answers, it says in one line what became of the approval and where to read it."""
    wire.script(write_call(), OPENING_HELD)
    code, _, err = await hostkit("run", "--agent", "writer", "write out.md", cwd=project)
    assert code == 3, err
    ((approval_id, status),) = pending_rows(project / "state" / "hostkit.db")
    assert status == "pending"

    async def continuation_called(terminal: int, seen: bytearray) -> None:
        with anyio.fail_after(30):
            while len(wire.requests) < 2:  # the continuation's model call is in flight
                with anyio.move_on_after(0.05):
                    await read_until(terminal, b"\x00", seen)

    code, text, _ = await ctrl_c_hostkit(
        ["approvals", "approve", approval_id], project, continuation_called
    )
    assert code == 130, text
    ((_, status),) = pending_rows(project / "state" / "hostkit.db")
    line = (
        f"interrupted: {approval_id} is {status} and its continuation was recorded as it "
        "ended; `hostkit approvals list --all` and `hostkit sessions` show them"
    )
    assert text.count(line) == 1, text
    assert (project / "workspace" / "out.md").read_text() == "hello"  # the call ran once
