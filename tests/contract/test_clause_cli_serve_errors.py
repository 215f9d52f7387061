"""CLI clause: ``hostkit serve`` on an address it cannot bind is one error line, exit 2.

The listener is bound before any task group opens, and ``run_command``
reads a task group that failed with one typed error (nested groups of one
included) as that error: the user sees ``error: cannot listen on ...``,
not a traceback of an exception group. A group of several errors is not
hidden.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
import re
import signal
import socket
import time
from pathlib import Path

import anyio
import pytest
import typer
from typer.testing import CliRunner

from hostkit.cli import app
from hostkit.cli._common import EXIT_ERROR, run_command
from hostkit.errors import ConfigError, InvalidValue
from tests.faults._serve_proc import serving

CONFIG = """
[host]
database = "{root}/hostkit.db"
workspace = "{root}/ws"

[providers.test]
kind = "scripted"
script = [{{reply = "hi"}}]

[agents.assistant]
provider = "test"

[channels.hook]
kind = "webhook"
secret_env = "CLI_HOOK_SECRET"

[serve]
listen = "127.0.0.1"
"""


def serve_project(tmp_path: Path, *options: str) -> tuple[int, str]:
    """``hostkit serve`` of a project with one webhook channel: exit code, all output."""
    config = tmp_path / "hostkit.toml"
    config.write_text(CONFIG.format(root=tmp_path))
    result = CliRunner().invoke(
        app,
        ["serve", "--config", str(config), *options],
        env={"CLI_HOOK_SECRET": "s3cret-value-8d1f2a", "COLUMNS": "200"},
    )
    return result.exit_code, result.stdout + result.stderr


def test_a_port_in_use_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        code, output = serve_project(tmp_path, "--port", str(port), "--log-format", "json")
    finally:
        taken.close()
    assert code == EXIT_ERROR, output
    assert (
        f"error: serve.listen: cannot listen on 127.0.0.1:{port}: Address already in use: "
        "another process listens there (stop it, or choose another --port)"
    ) in output
    assert "while attempting to bind" not in output  # no Python tuple of the address
    assert "Traceback" not in output
    assert "ExceptionGroup" not in output
    assert len(output.strip().splitlines()) <= 3


async def _nested_group_of_one() -> int:
    async with anyio.create_task_group() as outer:

        async def inner() -> None:
            async with anyio.create_task_group() as group:
                group.start_soon(_raise, ConfigError("the port is taken", key="serve.listen"))

        outer.start_soon(inner)
    return 0


async def _raise(error: Exception) -> None:
    raise error


async def _group_of_two() -> int:
    async with anyio.create_task_group() as group:
        group.start_soon(_raise, InvalidValue("first"))
        group.start_soon(_raise, InvalidValue("second"))
    return 0


def test_run_command_reads_a_group_of_one_typed_error_as_that_error() -> None:
    with pytest.raises(typer.Exit) as caught:
        run_command(_nested_group_of_one)
    assert caught.value.exit_code == EXIT_ERROR


def test_run_command_does_not_hide_a_group_of_several_errors() -> None:
    with pytest.raises(BaseExceptionGroup) as caught:
        run_command(_group_of_two)
    assert len(caught.value.exceptions) == 2


def test_an_explicit_log_format_wins_and_the_default_follows_stderr() -> None:
    from hostkit.cli._serve import LogChoice, log_format_of

    assert log_format_of(LogChoice.text, terminal=False) == "text"
    assert log_format_of(LogChoice.json, terminal=True) == "json"
    assert log_format_of(None, terminal=True) == "text"
    assert log_format_of(None, terminal=False) == "json"


def test_a_listen_name_that_does_not_resolve_says_so(tmp_path: Path) -> None:
    code, output = serve_project(tmp_path, "--listen", "localhostt.invalid", "--port", "0")
    assert code == EXIT_ERROR, output
    assert "'localhostt.invalid' is not an address or a name this machine resolves" in output
    assert "Unknown error" not in output


@pytest.mark.anyio
async def test_json_logs_hold_the_start_up_warnings_once_and_as_json(tmp_path: Path) -> None:
    """Under ``--log-format json`` every start-up warning is one JSON record on stderr: it is
    not printed a second time as a plain ``warning:`` line a log shipper cannot parse."""
    config = tmp_path / "hostkit.toml"
    # The workspace holds the database: a start-up warning the Host logs.
    text = CONFIG.format(root=tmp_path).replace(f'"{tmp_path}/ws"', f'"{tmp_path}"')
    config.write_text(
        text.replace('provider = "test"', 'provider = "test"\nbuiltins = ["files.read"]')
    )
    async with serving(config, env={"CLI_HOOK_SECRET": "s3cret-value-8d1f2a"}) as served:
        served.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            await served.process.wait()
    lines = "".join(served.stderr).strip().splitlines()
    records = [json.loads(line) for line in lines]  # every line is a JSON record
    warned = [r for r in records if r["level"] == "warning" and "workspace" in r["msg"]]
    assert len(warned) == 1, lines


def test_serve_where_there_is_no_project_refuses_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["serve", "--port", "0"], env={"COLUMNS": "200"})
    output = result.stdout + result.stderr
    assert result.exit_code == EXIT_ERROR, output
    assert "no hostkit.toml in this directory or above it" in output
    assert "no project to serve here (cd to the project, or pass -c FILE)" in output
    assert list(tmp_path.iterdir()) == []


def test_text_logs_escape_what_a_message_quotes() -> None:
    """``hostkit serve``'s text log is a terminal too: a record quoting a platform's or a
    model's text (ESC, OSC, bidi) is written escaped, as every other CLI line."""
    from rich.console import Console

    from hostkit.cli._serve_logs import serve_logging

    out = io.StringIO()
    with serve_logging("text", Console(file=out, width=200, color_system=None)):
        logging.getLogger("hostkit.test").warning("channel said %s", "\x1b]0;pwned\x07\u202e")
    text = out.getvalue()
    assert "channel said" in text
    assert "\x1b" not in text
    assert "\u202e" not in text


def test_serve_logs_hold_http_clients_to_warnings_and_restore_their_levels() -> None:
    """httpx and httpcore log a line per request at INFO (each health check, completion and
    delivery): while serving only their warnings are written; their levels come back after."""
    from rich.console import Console

    from hostkit.cli._serve_logs import serve_logging

    httpx_logger, httpcore_logger = logging.getLogger("httpx"), logging.getLogger("httpcore")
    # The model clients' own copy of httpx logs under its own name.
    httpx2_logger = logging.getLogger("httpx2")
    before = (httpx_logger.level, httpcore_logger.level)
    out = io.StringIO()
    with serve_logging("text", Console(file=out, width=200, color_system=None)):
        assert httpx_logger.getEffectiveLevel() == logging.WARNING
        assert httpcore_logger.getEffectiveLevel() == logging.WARNING
        assert httpx2_logger.getEffectiveLevel() == logging.WARNING
        httpx2_logger.info('HTTP Request: POST http://127.0.0.1:8081/v1/chat "HTTP/1.1 200 OK"')
        httpx_logger.info('HTTP Request: POST http://127.0.0.1:8080/v1/chat "HTTP/1.1 200 OK"')
        httpcore_logger.info("connect_tcp.complete")
        httpx_logger.warning("the proxy dropped the connection")
        logging.getLogger("hostkit.delivery").info("delivered out_1")
    text = out.getvalue()
    assert "HTTP Request" not in text
    assert "connect_tcp" not in text
    assert "the proxy dropped the connection" in text
    assert "delivered out_1" in text
    assert (httpx_logger.level, httpcore_logger.level) == before


def test_serve_logs_say_a_failure_repeating_at_every_retry_once_with_a_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through a PostgreSQL outage psycopg.pool warns at every connection attempt (54 lines a
    minute); at the file-descriptor limit asyncio logs a failed accept with its traceback per
    backlog slot (1,100 lines a second). Each is written once per streak window, the next one
    after the window saying how many came meanwhile; other records pass untouched."""
    from rich.console import Console

    from hostkit.cli import _serve_logs
    from hostkit.cli._serve_logs import serve_logging

    clock = [1_000.0]
    monkeypatch.setattr(_serve_logs.time, "monotonic", lambda: clock[0])
    pool, loop = logging.getLogger("psycopg.pool"), logging.getLogger("asyncio")
    out = io.StringIO()
    with serve_logging("text", Console(file=out, width=400, color_system=None)):
        for attempt in range(50):
            pool.warning("error connecting in %r: %s", "pool-1", f"refused ({attempt})")
            pool.warning("reconnection attempt in pool %r failed after %s sec", "pool-1", 4.0)
            try:
                raise OSError(24, "Too many open files")
            except OSError as exc:
                loop.error("socket.accept() out of system resource\nsocket: <s>", exc_info=exc)
            logging.getLogger("hostkit.inbox").warning("inbox claim failed (%d)", attempt)
        clock[0] += 301
        pool.warning("error connecting in %r: %s", "pool-1", "refused (later)")
    text = out.getvalue()
    assert text.count("error connecting") == 2, text
    assert "refused (later) (49 more times since)" in text
    assert text.count("reconnection attempt") == 1
    assert text.count("socket.accept() out of system resource") == 1
    assert text.count("[Errno 24]") == 1
    assert text.count("inbox claim failed") == 50


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "file"])
def test_serve_log_lines_carry_a_utc_time_marked_z_not_the_locales(
    terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rich's default is the locale's date (12/04/26) in local time; every time hostkit
    prints is UTC marked ``Z`` (hostkit.cli._clock), and a log read next to another's
    (or a ``--json`` listing) must name the same instant, whatever ``TZ`` says."""
    from rich.console import Console

    from hostkit.cli._serve_logs import serve_logging

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        out = io.StringIO()
        console = Console(file=out, width=200, color_system=None, force_terminal=terminal)
        before = datetime.datetime.now(datetime.UTC)
        with serve_logging("text", console):
            logging.getLogger("hostkit.delivery").warning("a line with its time")
    finally:
        monkeypatch.undo()
        time.tzset()
    first = out.getvalue().splitlines()[0]
    found = re.match(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}):\d{2}Z\] WARNING ", first)
    assert found, first
    # The UTC minute, not Tokyo's (nine hours on).
    assert found.group(1) in {
        (before + datetime.timedelta(minutes=m)).strftime("%Y-%m-%d %H:%M") for m in (0, 1)
    }, first


def test_text_logs_off_a_terminal_are_one_line_per_record() -> None:
    """``hostkit serve --log-format text 2>>serve.log``: Rich wrapped each record at 80
    columns and padded it, so a grep for a message found only a piece of it."""
    from rich.console import Console

    from hostkit.cli._serve_logs import serve_logging

    out = io.StringIO()
    message = "config rejected: " + "an unknown key, with a did-you-mean; " * 6
    with serve_logging("text", Console(file=out, width=80, color_system=None)):
        logging.getLogger("hostkit.host").warning(message)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].endswith(f"WARNING hostkit.host: {message}")
    # Bounded as a JSON line is, a traceback included, and still one line.
    out.truncate(0)
    out.seek(0)
    with serve_logging("text", Console(file=out, width=80, color_system=None)):
        try:
            raise ValueError("x" * 10_000)
        except ValueError:
            logging.getLogger("hostkit.host").exception("y" * 10_000)
    (line,) = out.getvalue().splitlines()
    assert len(line) < 4_200, len(line)


def test_an_agent_not_named_as_module_attribute_is_refused_not_dropped(tmp_path: Path) -> None:
    code, output = serve_project(tmp_path, "--port", "0", "--agent", "my_agents.agent")
    assert code == EXIT_ERROR, output
    assert "--agent 'my_agents.agent': name it as module:attribute" in output
    assert not (tmp_path / "hostkit.db").exists()
