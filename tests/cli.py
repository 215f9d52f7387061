"""Running the ``hostkit`` command from a test, as a script does: a real process with no
terminal on stdin, its exit status and its output read whole.

Each command is forked from a warm ``python -m hostkit`` (``tests/_cli_zygote.py``,
one per test worker) instead of starting an interpreter and importing the CLI
again: the suite runs hundreds of commands, and that import was most of their
CPU. The child is still a process of its own that runs ``hostkit`` from its
``__main__`` to the interpreter's exit. A command whose environment differs from
the worker's in what is read before its command runs (``PYTHON*``, the locale, the
time zone, the console's colour and terminal settings: ``_startup``) starts a
fresh interpreter instead, as does every command when ``HOSTKIT_TEST_FORK=0``.
The tests' conftest starts the warm process before a worker's first test, so no
test's timing counts its import.
Tests of how the command starts (imports, signals while it loads, a reader that
leaves) start their processes themselves.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import anyio

__all__ = ["run_cli", "run_cli_async", "warm_up"]

ZYGOTE = Path(__file__).with_name("_cli_zygote.py")
DEFAULT_TIMEOUT_S = 120.0
# How long the warm process may take to import the CLI before commands start cold.
ZYGOTE_START_S = 60.0

_started = threading.Lock()
_zygote: _Zygote | None = None
_failed: Exception | None = None


class _Zygote:
    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="hostkit-cli-")
        self.path = os.path.join(self.directory, "socket")
        # Without a fixed size, Rich's console (made as the CLI is imported) reads the
        # command's own COLUMNS when it prints, as a fresh process's does.
        self.environment = {k: v for k, v in os.environ.items() if k not in _SIZE}
        self.process = subprocess.Popen(
            [sys.executable, str(ZYGOTE), self.path],
            stdin=subprocess.PIPE,  # its end: the zygote exits when this worker does
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # no terminal: the console decides no colours on one
            env=self.environment,
            cwd=self.directory,
        )
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as ready:
            ready.register(self.process.stdout, selectors.EVENT_READ)
            if not ready.select(ZYGOTE_START_S) or self.process.stdout.readline() != b"ready\n":
                self.process.kill()
                raise RuntimeError("the warm hostkit process did not start (tests/_cli_zygote.py)")

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a fork of this process starts as ``python -m hostkit`` would under ``env``."""
        return self.process.poll() is None and _startup(env) == _startup(self.environment)


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    """The variables read as the interpreter starts or the CLI is imported (a fork keeps
    what its parent read)."""
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "TYPER_")) or k in _READ}


# The locale (stdio and file name encodings), the time zone, and what Rich's console and
# typer read when the CLI is imported (colours, a terminal forced or not, traceback style).
_READ = frozenset(
    {
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "FORCE_COLOR",
        "NO_COLOR",
        "TTY_COMPATIBLE",
        "TTY_INTERACTIVE",
        "_TYPER_STANDARD_TRACEBACK",
    }
)
_SIZE = frozenset({"COLUMNS", "LINES"})


def warm_up() -> None:
    """Start this worker's warm process now, not inside the first test that runs a command."""
    _warm()


def _warm() -> _Zygote | None:
    """This worker's warm process, started on first use and again if it ended; None (every
    command then starts cold) when it is turned off or could not start."""
    global _zygote, _failed
    if os.environ.get("HOSTKIT_TEST_FORK") == "0":
        return None
    with _started:
        if _failed is None and (_zygote is None or _zygote.process.poll() is not None):
            if _zygote is not None:  # it ended (killed, say): its pipes go with it
                with _zygote.process:
                    pass
            try:
                _zygote = _Zygote()
            except (OSError, RuntimeError) as exc:
                _failed, _zygote = exc, None
                # Slower, not wrong: the commands run as they did before this helper.
                sys.stderr.write(f"tests/cli.py: hostkit commands start cold: {exc}\n")
        return _zygote


def run_cli(
    *args: str,
    cwd: Path | str = ".",
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    started: Callable[[int], None] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``hostkit ARGS`` in ``cwd`` under ``env`` (defaults: this process's), stdin empty;
    raises ``subprocess.TimeoutExpired`` (the command killed) past ``timeout``. ``started``
    is told the command's pid once it runs (a forked command's only)."""
    environment = dict(os.environ if env is None else env)
    argv = [sys.executable, "-m", "hostkit", *args]
    zygote = _warm()
    if zygote is None or not zygote.serves(environment):
        return subprocess.run(
            argv,
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    request = {"args": list(args), "cwd": os.path.abspath(cwd), "env": environment}
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        connection.connect(zygote.path)
        socket.send_fds(connection, [json.dumps(request).encode()], [out_write, err_write])
    finally:
        os.close(out_write)
        os.close(err_write)
    deadline = time.monotonic() + timeout
    return _collect(connection, out_read, err_read, argv, deadline, timeout, started)


def _collect(
    connection: socket.socket,
    out_read: int,
    err_read: int,
    argv: Sequence[str],
    deadline: float,
    timeout: float,
    started: Callable[[int], None] | None,
) -> subprocess.CompletedProcess[bytes]:
    """Read the child's output until both pipes close and its exit status arrives."""
    output: dict[int, list[bytes]] = {out_read: [], err_read: []}
    pid: int | None = None
    status: int | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(out_read, selectors.EVENT_READ)
        selector.register(err_read, selectors.EVENT_READ)
        selector.register(connection, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    if pid is not None and status is None:  # once reaped, its pid is free
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(list(argv), timeout)
                for key, _ in selector.select(left):
                    if key.fileobj is connection:
                        message = connection.recv(4096)
                        if not message:
                            selector.unregister(connection)
                            continue
                        answer = json.loads(message)
                        if "pid" in answer:
                            pid = answer["pid"]
                            if started is not None:
                                started(pid)
                        if "status" in answer:
                            status = answer["status"]
                            selector.unregister(connection)  # then only its output is read
                    else:
                        fd = key.fd
                        chunk = os.read(fd, 1 << 16)
                        if chunk:
                            output[fd].append(chunk)
                        else:
                            selector.unregister(fd)
        finally:
            connection.close()
            os.close(out_read)
            os.close(err_read)
    if status is None:
        raise RuntimeError(f"the warm hostkit process lost the command {list(argv)[3:]}")
    return subprocess.CompletedProcess(
        list(argv), status, b"".join(output[out_read]), b"".join(output[err_read])
    )


async def run_cli_async(
    *args: str, cwd: Path | str = ".", env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``run_cli`` off the event loop (a worker thread waits for the command); cancelled,
    it kills the command, as ``anyio.run_process`` does."""
    pids: list[int] = []
    run = functools.partial(run_cli, *args, cwd=cwd, env=env, started=pids.append)
    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise
