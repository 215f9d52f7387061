"""Keeping every descendant findable: a per-run init process and the Host as a subreaper.

A descendant that calls ``setsid()`` and whose parent exits at once leaves
its process group and session, and without help is re-parented to the
machine's init, out of sight. Two things stop that on Linux:

- Each run's root is a tiny init (``INIT``, run by this interpreter with
  ``-I -S``) that marks itself a child subreaper, so every orphan in the run
  comes back to it and stays a descendant of the root the Host tracks. When
  the command ends, the init kills (SIGKILL) and reaps whatever is left, then
  exits with the command's own status (re-raising its signal), so nothing
  outlives the run and exit codes read as if the command were the root. It
  ignores TERM/INT/HUP (an init does) and kills its tree when the Host dies
  (``PR_SET_PDEATHSIG``), so a Host killed with SIGKILL leaves nothing behind.
  It joins a new, empty session keyring before it starts the command
  (``keyctl(KEYCTL_JOIN_SESSION_KEYRING)``): keyrings are not namespaced, and
  the Host's session keyring, inherited, would hand a run the keys the Host
  holds there, as an environment variable the allowlist never passes would.
  Before it exits it reports the command's wait status on a status pipe
  (``read_report``): an init that ends without a report was killed (from
  inside the run, when it is not sandboxed), so the orphans it kept may have
  escaped and the run cannot be confirmed clean. The init makes itself
  non-dumpable (``PR_SET_DUMPABLE`` 0) before it starts the command: a
  command of the same user could otherwise open ``/proc/<init>/fd/<status
  fd>``, write a status of its choosing, kill the init, and have the run read
  as a clean exit (or ptrace the init). Root, who may open any process's
  descriptors, is not stopped by this; nothing unsandboxed stops root.
- The Host's process is a child subreaper too, while it owns an unsandboxed
  tree (``adopting``): if the init itself is killed by something else, its
  orphans come back to the Host, where the run's scans find them, kill them
  and reap them (only those known to belong to one of its trees; never
  ``waitpid(-1)``, which would steal exit statuses from asyncio's child
  watcher and from ``Popen``). Only while a tree lives: the flag makes the
  process adopt *every* orphan of its descendants, and the Host shares its
  process with others (a notebook's ``!cmd &``, a script's ``subprocess.run``
  of a daemon), whose orphans then stay zombies of it, since nothing may reap
  them. When the last tree ends the flag is cleared, unless the process was a
  subreaper before (its own supervisor's choice, kept).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import shutil
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import anyio
import psutil
from anyio.abc import Process

__all__ = [
    "INIT",
    "adopting",
    "executable",
    "init_argv",
    "read_report",
    "reap",
    "spawn_under_init",
]

PR_SET_CHILD_SUBREAPER = 36

# Run as ``python -I -S -c INIT <host pid> <status fd> <LC_CTYPE marker> <argv...>``. The
# status fd gets the command's wait status as one line just before the init exits. The marker is
# "=value" or "" (absent): Python's start-up coerces a C locale by *setting* LC_CTYPE in
# its own environment, which must not reach the command.
INIT = r"""
import ctypes, os, signal, sys
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
           signal.SIGPIPE, signal.SIGXFSZ)
KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "i386": 288, "i686": 288,
          "armv7l": 311, "ppc64le": 271, "s390x": 280}
def children():
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                            found.append(int(name))
                except (OSError, ValueError, IndexError):
                    pass
        return found
def kill_children():
    for pid in children():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
orphaned = []
def parent_died(*_):
    orphaned.append(True)
    kill_children()
def main():
    parent, report, lc, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    os.set_inheritable(report, False)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:
        os._exit(125)
    libc.prctl(36, 1, 0, 0, 0)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, parent_died)
    libc.prctl(1, int(signal.SIGUSR1), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(125)
    keyctl = KEYCTL.get(os.uname().machine)
    if keyctl is not None:
        libc.syscall(keyctl, 1, None)
    env = dict(os.environ)
    if lc:
        env["LC_CTYPE"] = lc[1:]
    else:
        env.pop("LC_CTYPE", None)
    pid = os.fork()
    if pid == 0:
        for sig in HANDLED:
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execve(argv[0], argv, env)
        except OSError as exc:
            os.write(2, f"cannot run {argv[0]}: {exc.strerror}\n".encode())
        os._exit(127)
    status = None
    while True:
        try:
            got, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if got == pid:
            status = st
        if status is not None or orphaned:
            kill_children()
    if status is None:
        os._exit(125)
    try:
        os.write(report, f"{status}\n".encode())
    except OSError:
        pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))
main()
"""

PR_GET_CHILD_SUBREAPER = 37


class _Adoption:
    """How many trees this process owns now, and whether it set the subreaper flag for them.

    Hosts may run on several threads' loops: the first tree's setting and the last
    one's clearing happen under the lock, never interleaved.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.trees = 0
        self.set_here = False


_ADOPTION = _Adoption()


def _forget_after_fork() -> None:
    # A forked child owns none of its parent's trees, and the flag is not inherited.
    global _ADOPTION
    _ADOPTION = _Adoption()


os.register_at_fork(after_in_child=_forget_after_fork)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _is_subreaper(libc: ctypes.CDLL) -> bool:
    flag = ctypes.c_int(0)
    return int(libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)) == 0 and bool(
        flag.value
    )


@contextlib.contextmanager
def adopting(*, sandboxed: bool = False) -> Iterator[None]:
    """This process is a child subreaper while the block runs (Linux; see the module doc).

    Enter it before a tree is spawned and leave it once the tree was ended, so
    an orphan of the tree comes back here for its whole life. Nothing to do for
    a ``sandboxed`` tree (bubblewrap, ``--die-with-parent``, in its own PID
    namespace: nothing in it outlives its init, so nothing of it is ever
    orphaned out here), elsewhere, or where prctl cannot be called (the per-run
    init still keeps the tree's orphans).
    """
    libc = _libc() if sys.platform.startswith("linux") and not sandboxed else None
    if libc is None:
        yield
        return
    with _ADOPTION.lock:
        _ADOPTION.trees += 1
        if _ADOPTION.trees == 1 and not _is_subreaper(libc):
            _ADOPTION.set_here = int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    try:
        yield
    finally:
        with _ADOPTION.lock:
            _ADOPTION.trees -= 1
            if _ADOPTION.trees == 0 and _ADOPTION.set_here:
                libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
                _ADOPTION.set_here = False


def init_argv(
    command: Sequence[str], env: Mapping[str, str], *, report_fd: int
) -> list[str] | None:
    """``command`` run under the per-run init, which reports on ``report_fd`` (pass it to
    the child); None where there is no init (not Linux, or no Python executable)."""
    if not sys.platform.startswith("linux") or not sys.executable:
        return None
    marker = "=" + env["LC_CTYPE"] if "LC_CTYPE" in env else ""
    host = str(os.getpid())
    return [sys.executable, "-I", "-S", "-c", INIT, host, str(report_fd), marker, *command]


def executable(program: str, env: Mapping[str, str]) -> str | None:
    """Worker thread: ``program`` as an absolute executable path, searched like ``execvpe``
    (the init executes an absolute path)."""
    if os.sep in program:
        path = os.path.abspath(program)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(program, path=os.pathsep.join(os.get_exec_path(dict(env))))


async def spawn_under_init(
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    stdin: int,
    stdout: int,
    stderr: int,
) -> tuple[Process, int | None]:
    """Start ``command`` in a new session, under the per-run init where there is one.

    Returns the process and the read end of the init's status pipe (None
    without an init). Raises ``FileNotFoundError`` for a program that is not
    there and ``OSError`` when it cannot start; no descriptor is left open then.
    """
    found = await anyio.to_thread.run_sync(executable, command[0], env)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "no such executable")
    report, write_end = os.pipe()
    os.set_blocking(report, False)
    try:
        argv = init_argv([found, *command[1:]], env, report_fd=write_end)
        process = await anyio.open_process(
            argv or [found, *command[1:]],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            pass_fds=(write_end,) if argv else (),
        )
    except BaseException:
        os.close(report)
        raise
    finally:
        os.close(write_end)
    if argv is None:
        os.close(report)
        return process, None
    return process, report


def read_report(fd: int) -> int | None:
    """The wait status the init reported on its (non-blocking) status pipe, or None when
    it wrote nothing: it was killed before it could."""
    try:
        data = os.read(fd, 64)
    except (BlockingIOError, OSError):
        return None
    try:
        return int(data.strip())
    except ValueError:
        return None


def reap(members: Sequence[psutil.Process]) -> None:
    """Reap processes the Host adopted from one of its own trees (never any other pid).

    Only a zombie whose pid *and* start time match a member is reaped: nobody
    else waits for an adopted orphan, so its pid cannot be reused before this.
    """
    own = os.getpid()
    for proc in members:
        with contextlib.suppress(psutil.Error, OSError):
            same = psutil.Process(proc.pid)
            if same == proc and same.ppid() == own and same.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(proc.pid, os.WNOHANG)
