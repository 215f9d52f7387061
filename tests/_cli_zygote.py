"""A warm ``python -m hostkit`` for the test suite: one per test worker, forked per command.

A test that runs the CLI starts a real process and reads its exit status and
output, as a user's script does. Most of such a process's CPU is the import of
the CLI (about 0.7 s on a quiet machine, over 1 s on a busy one), and the suite
starts hundreds of them. This script imports what ``python -m hostkit`` imports
before its command runs (``hostkit._launch`` and ``hostkit.cli``, nothing else
of hostkit) and then forks once per command: the child takes the command's
working directory, environment, arguments and stdio, and runs ``hostkit`` as
``-m`` does, through to the interpreter's normal exit. Each command is still a
process of its own, with its own pid, signals and exit status.

Run as a script (``python tests/_cli_zygote.py SOCKET``) by ``tests/cli.py``;
it serves one ``SOCK_SEQPACKET`` request per connection (JSON: args, cwd, env;
the stdout and stderr descriptors passed with it), answers the child's pid and
then its exit status, and exits when its starter closes its stdin. Nothing
here may be inside a ``try``/``with`` block the child would unwind through.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys

MAX_REQUEST = 1 << 20


def serve(path: str) -> None:
    import hostkit._launch
    import hostkit.cli  # noqa: F401  (what `python -m hostkit` loads before its command)

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "request")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    selector.register(0, selectors.EVENT_READ, "starter")
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    waiting: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select():
            if key.data == "starter":
                if not os.read(0, 4096):  # the test worker is gone
                    os.unlink(path)
                    os.rmdir(os.path.dirname(path))
                    os._exit(0)
            elif key.data == "child":
                drain(wake_read)
                report_ended(waiting)
            else:
                connection, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(connection, MAX_REQUEST, 2)
                if len(fds) != 2 or not message:  # a requester gone before it asked
                    for fd in fds:
                        os.close(fd)
                    connection.close()
                    continue
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    # Detached, not closed: run_command closes every descriptor but stdio,
                    # other commands' result connections among them, as a fresh process has
                    # none of them.
                    for held in (listener, connection, *waiting.values()):
                        held.detach()
                    run_command(request, fds)
                for fd in fds:
                    os.close(fd)
                try:
                    connection.send(json.dumps({"pid": pid}).encode())
                except OSError:  # its requester gave up (its deadline) before it began
                    os.kill(pid, signal.SIGKILL)
                waiting[pid] = connection


def drain(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 4096):
                return
        except BlockingIOError:
            return


def report_ended(waiting: dict[int, socket.socket]) -> None:
    """Send each ended child's exit status (``-N``: killed by signal N) to its requester."""
    while waiting:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        connection = waiting.pop(pid, None)
        if connection is not None:
            ended = {"status": os.waitstatus_to_exitcode(status)}
            with contextlib.suppress(OSError):  # the requester gave up on it (its deadline)
                connection.send(json.dumps(ended).encode())
            connection.close()


def run_command(request: dict[str, object], fds: list[int]) -> None:
    """In the child: become ``python -m hostkit ARGS`` in the request's directory."""
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # fds, stdin's copy, the server's own
    cwd, env, args = request["cwd"], request["env"], request["args"]
    assert isinstance(cwd, str)
    assert isinstance(env, dict)
    assert isinstance(args, list)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[0] = os.getcwd()  # as `-m` puts it first
    sys.argv = ["-m", *args]  # run_module puts the module's path first, as `-m` does
    runpy.run_module("hostkit", run_name="__main__", alter_sys=True)
    raise SystemExit(0)


if __name__ == "__main__":
    serve(sys.argv[1])
