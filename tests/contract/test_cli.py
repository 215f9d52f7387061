"""The headless front end, run as a real subprocess: init, run (streamed), sessions, demo."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from tests.cli import run_cli_async
from tests.wire import Reply, WireServer, serve_wire, sse_reply
from tests.wire import openai_chat as wire_openai

pytestmark = pytest.mark.anyio

CONFIG = """
[host]
database = "state/hostkit.db"

[providers.scripted]
kind = "scripted"
script = [
  { tool = "notes.read", arguments = { name = "welcome.md" } },
  { reply = "Every turn ends with exactly one terminal record." },
]

[agents.assistant]
provider = "scripted"
tool_modules = ["hostkit.examples.tools"]
"""


async def hostkit(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """Run the CLI as a user would, without a terminal on stdin (so nothing is ever asked)."""
    result = await run_cli_async(
        *args, cwd=cwd, env={**os.environ, "COLUMNS": "200", **(env or {})}
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.fixture
async def wire() -> AsyncIterator[WireServer]:
    async with serve_wire() as server:
        yield server


def text_answer(text: str) -> Reply:
    """A streamed chat completion that answers ``text``."""
    return sse_reply(
        wire_openai.sse(
            [
                wire_openai.chunk(role="assistant"),
                wire_openai.chunk(content=text),
                wire_openai.chunk(finish_reason="stop"),
                wire_openai.chunk(usage_block=wire_openai.usage(20, 5)),
            ]
        )
    )


async def test_init_writes_a_starter_config_once(tmp_path: Path) -> None:
    code, _, err = await hostkit("init", cwd=tmp_path)
    assert code == 0
    text = await anyio.Path(tmp_path / "hostkit.toml").read_text()
    assert "[cores.assistant]" in text
    assert 'workspace = "workspace"' in text
    assert await anyio.Path(tmp_path / "workspace").is_dir()
    code, _, err = await hostkit("init", cwd=tmp_path)
    assert code == 2  # a usage error, as every other (docs/cli.md, "Exit status")
    assert err.startswith("error: hostkit.toml exists")
    assert (await hostkit("init", "--force", cwd=tmp_path))[0] == 0


async def test_run_streams_the_answer_and_reports_the_outcome(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    code, out, err = await hostkit("run", "What is recorded?", cwd=tmp_path)
    assert code == 0, err
    assert "[calling notes.read]" in out
    assert "Every turn ends with exactly one terminal record." in out
    assert "outcome: completed" in err
    assert "effect notes.read: succeeded" in err
    assert str(tmp_path / "state" / "hostkit.db") in err.replace("\n", "")


async def test_sessions_records_the_given_reason_or_that_a_local_operator_acted(
    tmp_path: Path,
) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    assert (await hostkit("run", "hello", cwd=tmp_path))[0] == 0
    code, out, err = await hostkit("sessions", "--reason", "checking the demo", cwd=tmp_path)
    assert code == 0, err
    assert "ses_" in out
    assert "conversation" in out
    # The database is this user's own: no reason needed, and the audit says who acted.
    code, out, err = await hostkit("sessions", cwd=tmp_path)
    assert code == 0, err
    assert "ses_" in out
    with closing(sqlite3.connect(tmp_path / "state" / "hostkit.db")) as db, db:
        reasons = [
            row[0]
            for row in db.execute(
                "SELECT reason FROM audit WHERE kind = 'principal_scope.operator_issued' "
                "ORDER BY id"
            )
        ]
    assert reasons[0] == "checking the demo"
    assert reasons[1].startswith("local operator ")
    assert reasons[1].endswith(f"(uid {os.getuid()}) on their own database")


async def test_errors_are_typed_and_bounded(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    code, _, err = await hostkit("run", "--agent", "nobody", "hi", cwd=tmp_path)
    assert code == 2
    assert "error: turn rejected: no agent named 'nobody'" in err
    assert "Traceback" not in err
    await anyio.Path(tmp_path / "bad.toml").write_text('[agents.a]\nprovider = "missing"\n')
    code, _, err = await hostkit("run", "-c", "bad.toml", "hi", cwd=tmp_path)
    assert code == 2
    assert "agents" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("where", ["a file", "under a missing folder", "the database's folder"])
async def test_a_place_that_cannot_be_created_is_one_line_exit_2(
    tmp_path: Path, where: str
) -> None:
    """A demo directory or a database folder the OS refuses is the operator's input:
    one line naming it, exit status 2, no traceback."""
    await anyio.Path(tmp_path / "taken").write_text("a file, not a folder")
    if where == "the database's folder":
        await anyio.Path(tmp_path / "h.toml").write_text(
            '[host]\ndatabase = "taken/sub/hostkit.db"\n'
        )
        code, _, err = await hostkit("sessions", "-c", "h.toml", cwd=tmp_path)
        expected = "cannot create its folder"
    else:
        target = "taken" if where == "a file" else "taken/sub"
        code, _, err = await hostkit("demo", "--directory", target, cwd=tmp_path)
        expected = f"--directory {target}: cannot create it"
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert expected in lines[0]


async def test_a_workspace_that_cannot_be_created_is_one_warning_line(tmp_path: Path) -> None:
    """Not fatal (a turn without file tools still runs), but said once, as a warning."""
    await anyio.Path(tmp_path / "taken").write_text("a file, not a folder")
    await anyio.Path(tmp_path / "h.toml").write_text(
        '[host]\nworkspace = "taken/ws"\n\n[providers.s]\nkind = "scripted"\n'
        'script = [{ reply = "hi" }]\n\n[agents.assistant]\nprovider = "s"\n'
    )
    code, out, err = await hostkit("run", "-c", "h.toml", "hello", cwd=tmp_path)
    assert code == 0, err
    assert "hi" in out
    said = [line for line in err.splitlines() if "cannot create the workspace" in line]
    assert len(said) == 1, err
    assert said[0].startswith(f"warning: cannot create the workspace {tmp_path / 'taken' / 'ws'}")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("run", "--agent", " ", "hi"), "error: --agent needs an agent's name"),
        (("run", "--conversation", "", "hi"), "error: --conversation needs a key"),
        (("approvals", "revoke", ""), "error: revoke needs a session id (ses_...)"),
        (("sessions", "-c", "host.toml"), "error: host: must be a table, not str"),
    ],
)
async def test_blank_names_and_wrong_shapes_are_said_in_the_users_words(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    """Not the API's field names (core_id, conversation_key) or pydantic's class names."""
    await anyio.Path(tmp_path / "host.toml").write_text('host = "x"\n')
    code, out, err = await hostkit(*args, cwd=tmp_path)
    assert (code, out) == (2, ""), err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(says)
    for internal in ("core_id", "conversation_key", "session_id", "HostSection", "Value error"):
        assert internal not in lines[0]


async def test_demo_asks_before_writing_and_runs_again(tmp_path: Path, wire: WireServer) -> None:
    # The real-model step talks to a loopback OpenAI-compatible server, not the local model.
    wire.script(text_answer("A database stores data."), text_answer("Again."))
    env = {"OPENAI_BASE_URL": f"{wire.base_url}/v1", "OPENAI_MODEL": "demo"}
    usages: list[list[str]] = []
    prompts: list[str] = []
    for answer in ("A database stores data.", "Again."):
        code, out, err = await hostkit("demo", "--directory", "d", cwd=tmp_path, env=env)
        prompts.append(err[err.index("approval needed") : err.index("[o]nce")])
        assert code == 0, err
        usages.append(re.findall(r"usage: input (\d+) tokens", err))
        # It ends saying where to look at what it recorded, in a command that works as is.
        look = re.search(r"next: (hostkit sessions -c \S+) lists what the demo recorded", err)
        assert look, err
        assert "2. an agent asks before it writes a file" in err
        assert "approval needed: the agent wants to run files.write" in err
        assert "path: summary.md" in err
        assert "[o]nce / [s]ession / [d]eny? (no terminal: the demo approves once)" in err
        assert "effect files.write: succeeded" in err
        assert "file: summary.md (" in err
        assert "[calling files.write]" in out
        assert answer in out
        assert "Traceback" not in err
    # The second run read as the first: its own sessions, not the first run's history,
    # and the same prompt (a new file, not a diff against the first run's).
    assert usages[0][:2] == usages[1][:2]
    assert prompts[0] == prompts[1]
    assert "target file: a new file" in prompts[1]
    status, listed, said = await hostkit(
        *shlex.split(look[1])[1:], cwd=tmp_path / "d" / "workspace"
    )
    assert status == 0, said
    assert len(re.findall(r"\bses_[0-9a-f]{28}\b", listed)) == 6
    # files.write replaces the file: a second run leaves the same content, not an error.
    text = await anyio.Path(tmp_path / "d" / "workspace" / "summary.md").read_text()
    assert text.startswith("# What hostkit records")
    assert err.index("approval needed") < err.index("file: summary.md")


async def test_a_demo_never_points_at_a_hostkit_toml_it_did_not_write(
    tmp_path: Path, wire: WireServer
) -> None:
    """A file already at DIR/hostkit.toml (planted in a shared directory, or a project's
    own) stays as it was, and the demo's closing hint does not send anyone to it."""
    wire.script(text_answer("A database stores data."))
    planted = '[host]\ndatabase = "/elsewhere/other.db"\n'
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "hostkit.toml").write_text(planted)
    env = {"OPENAI_BASE_URL": f"{wire.base_url}/v1", "OPENAI_MODEL": "demo"}
    code, _, err = await hostkit("demo", "--directory", "d", cwd=tmp_path, env=env)
    assert code == 0, err
    said = " ".join(err.split())
    assert "hostkit.toml was not written by the demo" in said
    assert "sessions -c" not in said
    assert (tmp_path / "d" / "hostkit.toml").read_text() == planted


@pytest.mark.slow
async def test_the_starter_layout_keeps_host_state_outside_the_workspace(tmp_path: Path) -> None:
    """After init and a real turn, the database, its WAL and the config are beside the
    workspace, not in it, and nothing warns."""
    assert (await hostkit("init", cwd=tmp_path))[0] == 0
    starter = await anyio.Path(tmp_path / "hostkit.toml").read_text()
    # The starter's local model is swapped for a scripted one; the layout is kept.
    scripted = CONFIG.split("[providers.scripted]", 1)[1]
    await anyio.Path(tmp_path / "hostkit.toml").write_text(
        starter.split("# The embedded local model", 1)[0] + "[providers.scripted]" + scripted
    )
    code, _, err = await hostkit("run", "hello", cwd=tmp_path)
    assert code == 0, err
    assert "warning" not in err
    workspace = tmp_path / "workspace"
    for name in ("hostkit.db", "hostkit.toml"):
        assert await anyio.Path(tmp_path / name).exists()
        assert not await anyio.Path(workspace / name).exists()
    assert [p.name async for p in anyio.Path(workspace).iterdir()] == []


TOOLS_AND_FILES = 'tool_modules = ["hostkit.examples.tools"]\nbuiltins = ["files.read"]'


@pytest.mark.slow
async def test_an_overlapping_workspace_is_one_warning_line(tmp_path: Path) -> None:
    overlapping = CONFIG.replace(
        'database = "state/hostkit.db"', 'database = "state/hostkit.db"\nworkspace = "."'
    ).replace('tool_modules = ["hostkit.examples.tools"]', TOOLS_AND_FILES)
    await anyio.Path(tmp_path / "hostkit.toml").write_text(overlapping)
    code, _, err = await hostkit("run", "hello", cwd=tmp_path)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, err
    assert "overlaps the Host's own state (hostkit.db" in warnings[0]
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "--operator", "\udcff", "--reason", "audit"),
        ("run", "hi", "--conversation", "\udcff"),
        ("init", "dir\udcff/hostkit.toml"),
        ("context", "\udcff"),
    ],
    ids=["operator", "conversation", "init-path", "session"],
)
async def test_an_argument_of_undecodable_bytes_is_one_line_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    # A byte the locale cannot decode (bash: $'\xff') reaches Python as a lone surrogate.
    argv = [arg.encode("utf-8", "surrogateescape") for arg in args]
    result = await anyio.run_process(
        [sys.executable.encode(), b"-m", b"hostkit", *argv],
        cwd=tmp_path,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "LC_ALL": "C.UTF-8", "COLUMNS": "200"},
    )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "not valid text" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert [entry async for entry in anyio.Path(tmp_path).iterdir()] == []


async def test_a_channel_secret_left_unset_stops_only_the_command_that_delivers(
    tmp_path: Path,
) -> None:
    """Secrets are for sending, and only ``hostkit serve`` sends: a listing and a terminal
    turn run without them (a routed turn's answer would wait in the outbox), while
    ``serve`` refuses before it starts, naming the variable."""
    config = (
        '[providers.test]\nkind = "scripted"\nscript = [{reply = "hi"}]\n'
        '[agents.assistant]\nprovider = "test"\nmemory = false\n'
        '[channels.hooks]\nkind = "webhook"\nsecret_env = "HK_TEST_HOOKS_SECRET"\n'
        'deliver_url = "https://hooks.example.com/in"\n'
    )
    await anyio.Path(tmp_path / "hostkit.toml").write_text(config)
    unset = {k: v for k, v in os.environ.items() if k != "HK_TEST_HOOKS_SECRET"}
    for listing in (("sessions",), ("approvals", "list"), ("inbox", "counts")):
        code, _, err = await hostkit(*listing, cwd=tmp_path, env=unset)
        assert code == 0, (listing, err)
    code, out, err = await hostkit("run", "hello", cwd=tmp_path, env=unset)
    assert code == 0, err
    assert "hi" in out
    code, _, err = await hostkit("serve", "--port", "0", cwd=tmp_path, env=unset)
    assert code == 2
    assert "HK_TEST_HOOKS_SECRET is not set" in err


async def test_an_operator_command_where_there_is_no_project_creates_nothing(
    tmp_path: Path,
) -> None:
    """Run from the wrong directory, a listing (or an answer) says there is nothing here
    instead of creating an empty database and workspace to list."""
    for command in (("sessions",), ("approvals", "list"), ("approvals", "approve", "apr_x")):
        code, _, err = await hostkit(*command, cwd=tmp_path)
        assert code == 2, (command, err)
        assert "no hostkit.toml in this directory or above it and no database" in err
    assert [p.name async for p in anyio.Path(tmp_path).iterdir()] == []


async def test_run_dash_reads_the_message_from_stdin(tmp_path: Path) -> None:
    """One argument holds at most 128 KiB, less than a turn's input may be: ``-`` reads
    the message from stdin ("-" itself was sent as the message). Bad input is one line."""
    config = (
        '[host]\ndatabase = "hostkit.db"\n'
        '[providers.test]\nkind = "scripted"\ncontext_window = 400000\n'
        'script = [{reply = "read it"}]\n'
        '[agents.assistant]\nprovider = "test"\nmemory = false\n'
    )
    await anyio.Path(tmp_path / "hostkit.toml").write_text(config)
    message = "é" * 90_000  # 180 KB: past what one argument may hold

    async def run_with(stdin: bytes) -> tuple[int, str]:
        done = await anyio.run_process(
            [sys.executable, "-m", "hostkit", "run", "-"],
            cwd=tmp_path,
            input=stdin,
            check=False,
            env={**os.environ, "COLUMNS": "200"},
        )
        return done.returncode, done.stderr.decode()

    code, err = await run_with(message.encode() + b"\n")
    assert code == 0, err

    def user_messages() -> list[str]:
        with closing(sqlite3.connect(tmp_path / "hostkit.db")) as db, db:
            rows = db.execute("SELECT content FROM messages WHERE role = 'user'").fetchall()
        return [json.loads(row[0]).get("text", row[0]) for row in rows]

    assert await anyio.to_thread.run_sync(user_messages) == [message]
    for stdin, said in (
        (b"\xff\xfe", "the message on stdin is not UTF-8 text"),
        (b"  \n", "the message on stdin is empty"),
    ):
        code, err = await run_with(stdin)
        assert (code, err.strip()) == (2, f"error: {said}")


async def test_a_reader_that_leaves_early_neither_cuts_the_turn_nor_prints_a_traceback(
    tmp_path: Path,
) -> None:
    """``hostkit run ... | head -c 5``: a BrokenPipeError ended the turn cancelled, with a
    152-line traceback and status 1. The turn finishes; its outcome sets the status."""
    long = "fruit\\n" * 40_000  # past the pipe's buffer: the write after head left breaks
    config = (
        f'[providers.test]\nkind = "scripted"\nscript = [{{reply = "{long}"}}]\n'
        '[agents.assistant]\nprovider = "test"\nmemory = false\n'
    )
    await anyio.Path(tmp_path / "hostkit.toml").write_text(config)
    line = (
        f"{shlex.quote(sys.executable)} -m hostkit run 'list fruit' 2>err.txt | head -c 5;"
        " echo ${PIPESTATUS[0]} > status.txt"
    )
    await anyio.run_process(["bash", "-c", line], cwd=tmp_path, stdin=subprocess.DEVNULL)
    status = (await anyio.Path(tmp_path / "status.txt").read_text()).strip()
    err = await anyio.Path(tmp_path / "err.txt").read_text()
    assert "Traceback" not in err
    assert "outcome: completed" in err
    assert status == "0", err


def closed_pipe() -> int:
    """The write end of a pipe whose reader is already gone: every write to it breaks."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize(
    ("args", "gone", "status", "other"),
    [
        (("--help",), "stdout", 0, ""),
        (("core", "--help"), "stdout", 0, ""),
        (("--version",), "stdout", 0, ""),
        (("nosuch",), "stderr", 2, ""),
        (("run", "--bad-flag"), "stderr", 2, ""),
        # Our own stderr console: its notes and outcome lines break, the answer does not.
        (("run", "hello"), "stderr", 0, "hi there\n"),
    ],
)
async def test_help_usage_errors_and_notes_keep_their_status_when_the_reader_is_gone(
    tmp_path: Path, args: tuple[str, ...], gone: str, status: int, other: str
) -> None:
    """``hostkit --help | head -1`` exited 1 ("refused by a gate"): typer's help, usage
    errors and ``--version`` print through typer's own rich console, which answers a
    broken pipe with ``SystemExit(1)``, and rich's stderr console then also silenced
    stdout. Whatever stream's reader left, the rest of that stream goes nowhere, the
    other stream is untouched (no traceback, no ``BrokenPipeError`` noted at exit),
    and the status is the command's: 0 for help, 2 for a usage error as click says."""
    await anyio.Path(tmp_path / "hostkit.toml").write_text(
        '[providers.test]\nkind = "scripted"\nscript = [{reply = "hi there"}]\n'
        '[agents.assistant]\nprovider = "test"\nmemory = false\n'
    )
    broken = closed_pipe()
    try:
        done = await anyio.run_process(
            [sys.executable, "-m", "hostkit", *args],
            cwd=tmp_path,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=broken if gone == "stdout" else subprocess.PIPE,
            stderr=broken if gone == "stderr" else subprocess.PIPE,
        )
    finally:
        os.close(broken)
    shown = (done.stderr if gone == "stdout" else done.stdout).decode()
    assert (done.returncode, shown) == (status, other)


async def _answering_project(tmp_path: Path, reply: str = "hi there") -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(
        f'[providers.test]\nkind = "scripted"\nscript = [{{reply = "{reply}"}}]\n'
        '[agents.assistant]\nprovider = "test"\nmemory = false\n'
    )


async def _outcomes(tmp_path: Path) -> list[str]:
    code, out, err = await hostkit("sessions", "--json", cwd=tmp_path)
    assert code == 0, err
    return [row["last_outcome"] for row in json.loads(out)["sessions"]]


async def test_a_run_started_without_stdout_completes_its_turn(tmp_path: Path) -> None:
    """Started with descriptor 1 closed (``>&-``), Python leaves ``sys.stdout`` None: the
    streamed answer raised inside the turn (recorded ``indeterminate``, status 1), and
    the next file opened took descriptor 1. The answer now goes nowhere; the turn ends
    as it would have."""
    await _answering_project(tmp_path)
    done = await anyio.run_process(
        ["sh", "-c", 'exec "$0" -m hostkit run hello >&-', sys.executable],
        cwd=tmp_path,
        check=False,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert "Traceback" not in done.stderr.decode()
    assert await _outcomes(tmp_path) == ["completed"]


async def test_a_full_disk_under_the_answer_is_one_error_line_not_a_cut_off_turn(
    tmp_path: Path,
) -> None:
    """``hostkit run ... > /dev/full``: the write failure broke the turn's stream inside
    its task group (the turn recorded ``indeterminate``) and ended in a traceback with
    status 120. It is an error (status 2, one line saying how the turn ended), and the
    turn is not cut off by where its answer is printed."""
    if not await anyio.Path("/dev/full").exists():
        pytest.skip("no /dev/full on this system")
    await _answering_project(tmp_path)
    with open("/dev/full", "wb") as full:  # noqa: ASYNC230 - opening a device, no I/O
        done = await anyio.run_process(
            [sys.executable, "-m", "hostkit", "run", "hello"],
            cwd=tmp_path,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=full,
            stderr=subprocess.PIPE,
        )
    shown = done.stderr.decode()
    assert done.returncode == 2, shown
    assert "could not write the answer (No space left on device)" in shown
    assert "the turn ended completed" in shown
    assert "Traceback" not in shown
    assert "Exception ignored" not in shown
    assert await _outcomes(tmp_path) == ["completed"]


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "python-u"])
async def test_stderr_reaches_its_reader_before_the_process_is_killed(
    tmp_path: Path, unbuffered: bool
) -> None:
    """Under ``python -u`` (``PYTHONUNBUFFERED``, common in containers) the streams have no
    buffer; put on a buffered writer, a warning waited for 8 KiB and was lost to a
    SIGKILL (docker stop). Line by line on stderr either way."""
    script = (
        "import os, sys\n"
        "from hostkit._stdio import survive_readers_leaving\n"
        "survive_readers_leaving()\n"
        "sys.stderr.write('a warning\\n')\n"
        "sys.stdout.write('partial')\n"
        "os.kill(os.getpid(), 9)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    flags = ["-u"] if unbuffered else []
    done = await anyio.run_process(
        [sys.executable, *flags, "-c", script], cwd=tmp_path, check=False, env=env
    )
    assert done.stderr.decode() == "a warning\n"
    assert done.stdout.decode() == ("partial" if unbuffered else "")


def test_a_write_to_a_terminal_that_went_away_is_a_reader_that_left(tmp_path: Path) -> None:
    """``hostkit serve &``, then the window closes: the next write to its old terminal gets
    ``EIO`` from the kernel. That is a reader that left, like a broken pipe, not a failure
    that ends the command (a serve whose window closed before it said it was listening
    died of it)."""
    script = (
        "import sys\n"
        "from hostkit._stdio import survive_readers_leaving\n"
        "survive_readers_leaving()\n"
        "sys.stdin.readline()\n"  # the test closes the terminal, then says go
        "sys.stdout.write('listening\\n')\n"
        "sys.stdout.flush()\n"
        "sys.stderr.write('still here\\n')\n"
    )
    leader, follower = pty.openpty()
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=follower,
            stderr=stderr,
            start_new_session=True,
        )
    os.close(follower)
    assert child.stdin is not None
    os.close(leader)  # the window closes
    child.stdin.write(b"go\n")
    child.stdin.close()
    assert child.wait(timeout=30) == 0, log.read_text()
    assert log.read_text() == "still here\n"


async def test_an_answer_the_terminal_cannot_encode_is_written_escaped(tmp_path: Path) -> None:
    """An ASCII terminal (``PYTHONIOENCODING=ascii``, a C locale without UTF-8 mode) and an
    answer with an accent: the write raised inside the turn (status 1, the turn recorded
    however far it got). It is written escaped, and the turn completes."""
    await _answering_project(tmp_path, "déjà vu")
    done = await run_cli_async(
        "run", "hello", cwd=tmp_path, env={**os.environ, "PYTHONIOENCODING": "ascii"}
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().startswith("d\\xe9j\\xe0 vu")
    assert await _outcomes(tmp_path) == ["completed"]


async def test_a_stream_that_writes_back_undecodable_bytes_escapes_any_other_surrogate(
    tmp_path: Path,
) -> None:
    """Under a C locale (or ``PYTHONIOENCODING=utf-8:surrogateescape``) stdout writes a
    byte ``surrogateescape`` smuggled in back as that byte, but raised on any other lone
    surrogate (an answer a transcript kept before such text was made valid): the command
    ended in a traceback. That one is written escaped; the byte still goes out as it was."""
    script = (
        "import sys\n"
        "from hostkit._stdio import survive_readers_leaving\n"
        "survive_readers_leaving()\n"
        "sys.stdout.write('a\\udcff b\\ud800 \\u00e9\\n')\n"
    )
    done = await anyio.run_process(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8:surrogateescape"},
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"a\xff b\\ud800 \xc3\xa9\n"


async def test_each_agent_continues_its_own_terminal_conversation(tmp_path: Path) -> None:
    """``--agent notes`` after the assistant must not continue (and relabel) the
    assistant's session, whose history is about something else."""
    config = (
        '[providers.test]\nkind = "scripted"\nscript = [{reply = "hi"}]\n'
        '[agents.assistant]\nprovider = "test"\nmemory = false\n'
        '[agents.notes]\nprovider = "test"\nmemory = false\n'
    )
    await anyio.Path(tmp_path / "hostkit.toml").write_text(config)

    async def session_of(*args: str) -> str:
        code, out, err = await hostkit("run", *args, "hello", cwd=tmp_path)
        assert code == 0, err
        found = re.search(r"session: (ses_\w+)", out + err)
        assert found, out + err
        return found.group(1)

    first = await session_of()
    notes = await session_of("--agent", "notes")
    assert notes != first
    assert await session_of() == first
    assert await session_of("--agent", "notes") == notes
    assert await session_of("--conversation", "terminal/notes") == notes


async def test_output_commands_keep_their_status_when_the_reader_is_gone(
    tmp_path: Path,
) -> None:
    """``hostkit core promote ... | head -1``: rich's answer to the broken pipe was
    ``SystemExit(1)``, so a promotion that moved the revision said "refused by a gate"
    (1), and listings failed too. The output goes nowhere; the status is the command's."""
    hk = f"{shlex.quote(sys.executable)} -m hostkit"
    commit = "git -c user.name=t -c user.email=t@t commit -qm more"
    script = "; ".join(
        [
            f"{hk} init >/dev/null 2>&1",
            f"{hk} core promote assistant --reason first >/dev/null 2>&1",
            f"(cd cores/assistant && seq 1 300 > agent/more.txt && git add -A && {commit})",
            # A reader that is gone before the first write: every write finds the pipe broken.
            f"{hk} core diff assistant 2>/dev/null | true; echo diff=${{PIPESTATUS[0]}}",
            f"{hk} core log assistant 2>/dev/null | true; echo log=${{PIPESTATUS[0]}}",
            f"{hk} core promote assistant --reason piped 2>/dev/null | true;"
            " echo promote=${PIPESTATUS[0]}",
            f"{hk} core status assistant --json",
        ]
    )
    done = await anyio.run_process(
        ["bash", "-c", script], cwd=tmp_path, stdin=subprocess.DEVNULL, check=False
    )
    out = done.stdout.decode()
    assert [
        line for line in out.splitlines() if line.split("=")[0] in ("diff", "log", "promote")
    ] == ["diff=0", "log=0", "promote=0"], done.stderr.decode()
    (status,) = json.loads(out[out.index("[") :])
    assert status["live"] == status["head"], status
