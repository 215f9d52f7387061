"""What ``terminal.run`` checks and shapes: argument refusals, the child's world, its views.

Pure pieces (no event loop): the preflight over validated arguments, the
allowlisted environment, the execution-control targets that may not receive
secrets, the model-facing output of a ``ProcessOutcome`` and secret redaction
of its tails. The blocking pieces (finding the program on ``PATH``, opening
the working directory inside the workspace, building the launcher's argument
vector, deleting a secret-bound run's artifacts) are plain functions that the
tools run in a worker thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process._mounts import MountedTree
from hostkit.builtins.process._process import ProcessOutcome, StreamCapture, _encodable
from hostkit.builtins.process._sandbox import (
    SandboxPolicy,
    SandboxProbe,
    SandboxUnavailable,
    limited_argv,
    mask_plan,
    sandbox_argv,
    visible_roots,
)
from hostkit.effects import DEFAULT_ENV_ALLOWLIST, ENV_NAME_PATTERN, ToolOutcome, redact_secrets
from hostkit.errors import UserError, bounded
from hostkit.types import EffectStatus

__all__ = ["DEFAULT_ENV_ALLOWLIST", "EXECUTION_CONTROL_TARGETS", "TerminalRefused"]


# A secret is approved for *this* program. A shell, or a wrapper whose job is to run
# another command (with other privileges, in another namespace, under a tracer, later),
# would hand it to a program nobody approved, so secrets never go to one of these,
# whatever its arguments. So do the programs that run another one through an option, a
# script language of their own or a file in the workspace (find -exec, awk's system(),
# GNU sed's e command, a Makefile, git's aliases and hooks, tar's --to-command, an
# editor's or pager's shell escape).
EXECUTION_CONTROL_TARGETS = frozenset(
    {
        # shells
        "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "csh", "tcsh", "fish", "busybox",
        # run another command: environment, privileges, scheduling, session, time
        "env", "sudo", "su", "doas", "pkexec", "runuser", "setpriv", "chroot", "unshare",
        "nsenter", "nohup", "setsid", "timeout", "xargs", "nice", "ionice", "chrt",
        "taskset", "stdbuf", "flock", "watch", "script", "command", "exec", "time",
        "prlimit", "setarch", "linux32", "linux64", "i386", "x86_64", "uname26", "capsh",
        "sg", "newgrp", "sudoedit", "setuidgid", "chpst", "runcon", "aa-exec", "numactl",
        "cgexec", "systemd-run", "machinectl", "run-parts", "start-stop-daemon",
        "daemonize", "at", "batch", "tmux", "screen", "unbuffer", "rlwrap", "fakeroot",
        "fakechroot", "faketime", "eatmydata", "torsocks", "proxychains", "proxychains4",
        "sshpass", "ssh-agent", "dbus-run-session", "dbus-launch", "xvfb-run", "socat",
        "bwrap", "firejail", "proot", "toybox", "chronic", "ifne", "ip", "catchsegv",
        # containers run whatever image and command they are given
        "docker", "podman", "nerdctl", "lxc-attach", "lxc-execute",
        # tracers and debuggers run (and can steer) whatever they are given
        "strace", "ltrace", "gdb", "lldb", "valgrind", "perf", "bpftrace",
        # run another program through an option, their own language or a workspace file
        "find", "parallel", "sem", "make", "gmake", "git", "awk", "gawk", "mawk", "nawk",
        "sed", "gsed", "tar", "rsync", "ssh", "scp", "sftp", "expect", "tclsh", "wish",
        "lua", "luajit", "R", "Rscript", "julia", "vi", "vim", "nvim", "ex", "ed", "emacs",
        "view", "rvim", "vimdiff", "editor", "vipe", "less", "more", "man", "sqlite3", "m4",
        "dc", "zip", "wget", "gcc", "cc", "g++", "c++", "clang", "pandoc",
        # package and project runners: their scripts, builds and hooks are workspace files
        "npx", "npm", "npx-cli.js", "npm-cli.js", "yarn", "yarnpkg", "pnpm", "pnpx", "bun",
        "bunx", "deno", "uv", "uvx", "pipx", "poetry", "pdm", "hatch", "tox", "nox",
        "cargo", "go",
    }
)  # fmt: skip

# Interpreters that are fine with a script file but run inline code with these options
# (short letters, possibly clustered as in ``-Ic``, and long spellings). The check looks
# at every argument, not only those before the script: an option value can hide the
# flag from a parser-aware scan (``python -W x -c code``), so refusing a script's own
# ``-c`` now and then is the price of not guessing.
_INLINE_CODE: tuple[tuple[re.Pattern[str], str, frozenset[str]], ...] = (
    (re.compile(r"(python|pypy)[0-9.]*"), "c", frozenset()),
    (re.compile(r"perl[0-9.]*"), "eE", frozenset()),
    (re.compile(r"ruby[0-9.]*"), "e", frozenset()),
    (re.compile(r"node(js)?[0-9.]*"), "ep", frozenset({"--eval", "--print"})),
    (re.compile(r"php[0-9.]*"), "r", frozenset()),
)

# Secret names become environment names; these would change what the child loads or
# runs (a "secret" named LD_PRELOAD is execution control), or override the allowlist.
_LOADER_VARIABLES = frozenset(
    {
        "BASH_ENV", "ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PERL5OPT",
        "PERL5LIB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "IFS",
    }
)  # fmt: skip
_LOADER_PREFIXES = ("LD_", "DYLD_")
# What a secret's name may be: the pipeline's own pattern (hostkit.toml validates with it too).
_ENV_NAME = re.compile(ENV_NAME_PATTERN)

MAX_ARGV_ITEMS = 256
MAX_ARGV_CHARS = 64 * 1024
MAX_SECRETS = 16
MIN_CUT_SECRET_CHARS = 4  # a tail that starts with a secret's last 4+ characters is cut there
MIN_LINE_SECRET_CHARS = 8  # each line of a multi-line secret at least this long is one too


class TerminalRefused(UserError):
    """``terminal.run`` will not start this command; the message says why."""


# The dynamic loader (``ld.so /bin/sh ...``) runs whatever program it is given.
_LOADER = re.compile(r"ld(\.so[\d.]*|-linux[\w.-]*|-musl[\w.-]*)")
# A distribution's flavour of a program: emacs-nox, perl5.36-x86_64-linux-gnu.
_FLAVOUR = re.compile(r"-(nox|gtk\w*|lucid|x11|motif|\w+-linux-\w+)$")


def _program_names(name: str) -> frozenset[str]:
    """``name`` and the program it is a version or flavour of: ``vim.basic`` (what ``vi``
    links to on Debian) is ``vim``, ``tclsh8.6`` is ``tclsh``, ``emacs-nox`` is ``emacs``.

    The real path of a short name is often such a file: checked by the short
    name alone, the programs listed here would be let through by their own path.
    """
    base = _FLAVOUR.sub("", name)
    base = base.split(".", 1)[0] or base
    return frozenset({name, base, base.rstrip("0123456789") or base})


def program_refusal(argv0: str, argv: Sequence[str], *, in_workspace: bool = False) -> str | None:
    """Why ``argv`` may not receive secrets (None when it may); pure.

    ``in_workspace`` (what ``in_workspace()`` says of the real path that runs)
    refuses a program inside the workspace: the agent can write there, so its
    name says nothing of what it is (a copy of ``bash`` named ``fmt``).
    """
    if in_workspace:
        return (
            "secrets are never passed to a program inside the workspace: the agent "
            "can write there, so it may be any program under any name"
        )
    name = os.path.basename(argv0)
    if _LOADER.fullmatch(name):
        return f"secrets are never passed to {name!r}: the dynamic loader runs any program"
    names = _program_names(name)
    if names & EXECUTION_CONTROL_TARGETS:
        return f"secrets are never passed to {name!r}: it runs other programs"
    for pattern, letters, long_forms in _INLINE_CODE:
        if not any(pattern.fullmatch(candidate) for candidate in names):
            continue
        for arg in argv[1:]:
            if arg.startswith("--"):
                if arg.split("=", 1)[0] in long_forms:
                    return f"secrets are never passed to {name!r} running inline code"
            elif arg.startswith("-") and any(letter in arg[1:] for letter in letters):
                return f"secrets are never passed to {name!r} running inline code"
    return None


def secret_program_refusal(
    real: str, names: Iterable[str], programs: Mapping[str, Sequence[str]]
) -> str | None:
    """Worker thread: why the program at ``real`` (a real path) may not receive the secrets
    ``names`` under their ``[secrets.<NAME>] programs`` lists; None when it may.

    Each listed path is compared by its own real path, read now: a link in the
    list follows its target, as the run's program does. A secret with no list
    goes to no program: refusing by name alone cannot be complete (a wrapper,
    a runner, an interpreter's option nobody listed), so the operator names
    the programs.
    """
    for name in sorted(names):
        allowed = programs.get(name)
        if allowed is None:
            return _unlisted(name)
        if real not in {os.path.realpath(path) for path in allowed}:
            listed = ", ".join(bounded(path, 80) for path in allowed[:4])
            more = f" and {len(allowed) - 4} more" if len(allowed) > 4 else ""
            return (
                f"{name} is bound only for the programs listed for it ({listed}{more}); "
                f"this run's program is {bounded(real, 120)!r}"
            )
    return None


def _unlisted(name: str) -> str:
    return (
        f"{name} is bound for no program: list the programs it may go to, by absolute "
        f'path, in hostkit.toml as [secrets.{name}] programs = ["/usr/bin/..."]'
    )


def in_workspace(real: str, workspace: Path) -> bool:
    """Worker thread: whether the real path ``real`` lies in the (real) ``workspace``,
    under its own name or a mount that shows it elsewhere (a bind of it or of a
    directory inside it)."""
    return MountedTree(workspace).holds(Path(real))


_PROC = Path("/proc")
# Symbolic links followed at most, as the kernel does (ELOOP past it).
_MAX_LINKS = 40


def swappable(path: str, workspace: Path, *, sandboxed: bool) -> bool:
    """Worker thread: whether the agent could re-point ``path`` after it was checked.

    True when any directory ``path`` resolves through (the one holding each of
    its components: a link, or a plain name that was a link when the checks read
    it) is one the agent can write: the workspace (at any path a mount shows
    it); unsandboxed also a world-writable one, and for a non-root Host any its
    user owns or may write. A secret run of such a path executes its real path
    instead; any other keeps the name it was given (``psql`` through its
    wrapper, a virtualenv's ``python``), which its program may depend on. A
    path that cannot be walked counts as swappable.
    """
    try:
        tree = MountedTree(workspace)
        return any(
            _agent_writes(directory, tree, sandboxed=sandboxed)
            for directory in _walked_directories(path)
        )
    except (OSError, ValueError):
        return True


def _walked_directories(path: str) -> list[Path]:
    """The real directories holding each component ``path`` resolves through, in order."""
    held: list[Path] = []
    links = 0
    current = Path("/")
    pending = list(Path(path).parts[1:])
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent
            continue
        if current not in held:
            held.append(current)
        candidate = current / name
        if not candidate.is_symlink():
            current = candidate
            continue
        links += 1
        if links > _MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links")
        target = Path(os.readlink(candidate))
        if target.is_absolute():
            current = Path("/")
            pending = list(target.parts[1:]) + pending
        else:
            pending = list(target.parts) + pending
    return held


def _agent_writes(directory: Path, workspace: MountedTree, *, sandboxed: bool) -> bool:
    # /proc's per-process links (cwd, root, fd) name what the process reading them
    # sees: the child reads them again at exec, from its own working directory.
    if workspace.holds(directory) or directory.is_relative_to(_PROC):
        return True
    if sandboxed:
        return False  # the sandbox writes nothing of the Host's outside the workspace
    info = os.stat(directory)
    if info.st_mode & stat.S_IWOTH:
        return True
    uid = os.geteuid()
    if uid == 0:
        # Root may write anywhere: its other directories are the operator's (docs/effects.md).
        return False
    # An owner may chmod its own directory; access() also reads ACLs and groups.
    return info.st_uid == uid or os.access(directory, os.W_OK, effective_ids=True)


def run_preflight(
    *,
    workspace: WorkspaceScope,
    max_deadline_s: float,
    env_allowlist: Sequence[str],
    secret_programs: Mapping[str, Sequence[str]],
) -> Callable[[Mapping[str, Any]], None]:
    """The pure Host check for ``terminal.run``; raises ``TerminalRefused`` or a workspace error.

    Run before anyone is asked to approve: a secret no program is listed for
    (``secret_programs``) is refused here, not after a person said yes.
    """
    allowlisted = frozenset(env_allowlist)

    def check(arguments: Mapping[str, Any]) -> None:
        argv: Sequence[str] = arguments["argv"]
        secrets: Sequence[str] = arguments["secrets"]
        if not argv or not argv[0]:
            raise TerminalRefused("argv must name a program")
        if len(argv) > MAX_ARGV_ITEMS or sum(len(arg) for arg in argv) > MAX_ARGV_CHARS:
            raise TerminalRefused(
                f"argv is limited to {MAX_ARGV_ITEMS} items, {MAX_ARGV_CHARS} chars"
            )
        if any("\0" in arg for arg in argv):
            raise TerminalRefused("argv items must not contain NUL bytes")
        # A lone surrogate ("\ud800", valid JSON) has no bytes to become: refused before
        # anyone is asked, not when the spawn fails (so the spawner checks it too).
        if not all(_encodable(arg) for arg in (*argv, arguments["cwd"])):
            raise TerminalRefused(
                "argv items and cwd must be text the file system can encode (no lone surrogates)"
            )
        if "/" in argv[0] and not argv[0].startswith("/"):
            # Relative to what? The Host's cwd is not the workspace; say so instead of guessing.
            raise TerminalRefused("argv[0] must be a program on PATH or an absolute path")
        workspace.check(arguments["cwd"])  # absolute, '..' above the root, NUL: refused here
        deadline = arguments["deadline_s"]
        if not 0 < deadline <= max_deadline_s:
            raise TerminalRefused(f"deadline_s must be in (0, {max_deadline_s:g}]")
        if not secrets:
            return
        if arguments["background"]:
            raise TerminalRefused("secrets are bound to foreground runs only")
        if len(secrets) > MAX_SECRETS:
            raise TerminalRefused(f"at most {MAX_SECRETS} secrets per run")
        for name in secrets:
            if not _ENV_NAME.fullmatch(name):
                raise TerminalRefused("secret names must be environment variable names")
            if (
                name in allowlisted
                or name in _LOADER_VARIABLES
                or name.startswith(_LOADER_PREFIXES)
            ):
                raise TerminalRefused(f"{name} cannot be bound as a secret: it controls the child")
        refusal = program_refusal(argv[0], argv)
        if refusal is not None:
            raise TerminalRefused(refusal)
        for name in secrets:
            if name not in secret_programs:
                raise TerminalRefused(_unlisted(name))

    return check


def child_environment(
    allowlist: Sequence[str], secrets: Mapping[str, str], environ: Mapping[str, str]
) -> dict[str, str]:
    """Allowlisted names from ``environ`` plus exactly the bound secrets; nothing inherited else."""
    env = {name: environ[name] for name in allowlist if name in environ}
    env.update(secrets)
    return env


def resolve_program(
    argv0: str, search_path: str, sandbox_workspace: Path | None = None
) -> tuple[str | None, str | None]:
    """Worker thread: ``argv0`` found on ``search_path`` (absolute entries only) and its target.

    Returns the path to execute and the real path behind it (for the
    execution-control check: ``/tmp/x`` may be a link to ``bash``). With
    ``sandbox_workspace``, only programs the sandbox shows count: under the
    system directories or that workspace (a program in the Host's home or
    virtualenv does not exist in there).
    """
    entries = [d for d in search_path.split(os.pathsep) if os.path.isabs(d)]
    if sandbox_workspace is not None:
        roots = [Path(os.path.realpath(r)) for r in visible_roots(sandbox_workspace)]

        def visible(path: str) -> bool:
            real = Path(os.path.realpath(path))
            return any(real == r or real.is_relative_to(r) for r in roots)

        entries = [d for d in entries if visible(d)]
        if os.sep in argv0 and not visible(argv0):
            return None, None
    found = shutil.which(argv0, path=os.pathsep.join(entries))
    if found is None:
        return None, None
    return found, os.path.realpath(found)


def open_workdir(workspace: WorkspaceScope, cwd: str) -> tuple[int, Path]:
    """Worker thread: open ``cwd`` inside the workspace; return its descriptor and a child cwd.

    The directory is resolved by the workspace's own contained walk (no
    ``..``, absolute or symlink escape) and held open; the child changes into
    that very directory through ``/proc/self/fd``, so a swap after the check
    changes nothing. The caller closes the descriptor once the run is over.
    """
    fd = workspace.open_directory(cwd)
    if os.path.isdir("/proc/self/fd"):
        return fd, Path(f"/proc/self/fd/{fd}")
    # Without /proc (macOS), the opened directory's current path: a narrow check-then-use.
    import fcntl

    get_path: int | None = getattr(fcntl, "F_GETPATH", None)
    try:
        if get_path is None:
            raise OSError("F_GETPATH is not available")
        path = os.fsdecode(fcntl.fcntl(fd, get_path, bytes(1024)).rstrip(b"\0"))
    except (AttributeError, OSError) as exc:
        os.close(fd)
        raise TerminalRefused("this platform cannot pin a working directory") from exc
    return fd, Path(path)


def _variants(secrets: Mapping[str, str]) -> list[tuple[str, str]]:
    """(value, name) pairs to cut, longest first: each value, its other line ending, its lines.

    A multi-line value (a PEM key) may come back with ``\r\n`` for ``\n`` or
    one line at a time, so every line of at least ``MIN_LINE_SECRET_CHARS`` is
    a secret of its own.
    """
    found: dict[str, str] = {}
    for name, value in secrets.items():
        if not value:
            continue
        found.setdefault(value, name)
        if "\n" in value:
            lf = value.replace("\r\n", "\n")
            found.setdefault(lf, name)
            found.setdefault(lf.replace("\n", "\r\n"), name)
            for line in lf.split("\n"):
                if len(line.strip()) >= MIN_LINE_SECRET_CHARS:
                    found.setdefault(line.strip(), name)
    return sorted(found.items(), key=lambda item: -len(item[0]))


def _cut_edges(text: str, variants: Sequence[tuple[str, str]]) -> str:
    """Redact a head that ends a secret and a tail that begins one (4+ characters each).

    A tail whose start was cut off, two read chunks, or a value written half
    to stderr and half to stdout all leave a secret split at an edge.
    """
    head: tuple[int, str] | None = None
    tail: tuple[int, str] | None = None
    for value, name in variants:
        for size in range(min(len(value) - 1, len(text)), MIN_CUT_SECRET_CHARS - 1, -1):
            if (head is None or size > head[0]) and text.startswith(value[-size:]):
                head = (size, name)
            if (tail is None or size > tail[0]) and text.endswith(value[:size]):
                tail = (size, name)
    if tail is not None and (head is None or head[0] + tail[0] <= len(text)):
        text = text[: len(text) - tail[0]] + f"[redacted:{tail[1]}]"
    if head is not None and head[0] <= len(text):
        text = f"[redacted:{head[1]}]" + text[head[0] :]
    return text


def redact(
    text: str,
    secrets: Mapping[str, str],
    *,
    cut: bool,
    mask: Callable[[str], str] | None = None,
) -> str:
    """Replace every secret value in ``text`` with ``[redacted:NAME]``.

    Multi-line values are matched whole with either line ending and line by
    line, and any piece of 8+ characters anywhere (half a value on each stream)
    by ``mask``, the effects redactor of ``secrets`` (the call's
    ``ToolContext.redact_bound``, built once from the runtime's kept spellings;
    without it one is built here, milliseconds for a PEM key). ``cut`` says
    ``text`` is an output tail: a shorter piece of a secret may also sit at
    either edge (see ``_cut_edges``).
    """
    if not secrets:
        return text
    variants = _variants(secrets)
    for value, name in variants:
        text = text.replace(value, f"[redacted:{name}]")
    if cut:
        text = _cut_edges(text, variants)
    return mask(text) if mask is not None else redact_secrets(text, secrets)


def _stream(
    capture: StreamCapture,
    name: str,
    spawn_id: str | None,
    secrets: Mapping[str, str],
    mask: Callable[[str], str] | None,
) -> dict[str, Any]:
    return {
        "total_bytes": capture.total_bytes,
        "total_chars": capture.total_chars,
        "truncated": capture.truncated,
        # A reference, never the path: the path names the session's opaque directory.
        "artifact": f"{spawn_id}:{name}" if spawn_id and capture.artifact else None,
        "tail": redact(capture.tail, secrets, cut=True, mask=mask),
    }


def outcome_view(
    outcome: ProcessOutcome,
    secrets: Mapping[str, str],
    *,
    mask: Callable[[str], str] | None = None,
    run_id: str | None = None,
    sandbox: str | None = None,
) -> ToolOutcome:
    """The model-facing result of a finished run: a status and a bounded, redacted output.

    Metadata comes first and the tails last (stderr before stdout), so the
    model view's own truncation cuts output text, never the exit code.
    ``mask`` is the call's redactor of ``secrets`` (``redact``), one for every
    stream. ``sandbox`` names how the run was isolated ("none" says unsandboxed).
    """
    spawn_id = outcome.owner.spawn_id if outcome.owner else None
    output: dict[str, Any] = {} if run_id is None else {"run_id": run_id}
    output.update(
        status=outcome.status,
        exit_code=outcome.exit_code,
        reason=outcome.reason,
        duration_s=round(outcome.duration_s, 3),
    )
    if sandbox is not None:
        output["sandbox"] = sandbox
    output.update(
        stderr=_stream(outcome.stderr, "stderr", spawn_id, secrets, mask),
        stdout=_stream(outcome.stdout, "stdout", spawn_id, secrets, mask),
    )
    status: EffectStatus
    if outcome.status == "exited":
        status = "succeeded" if outcome.exit_code == 0 else "failed"
    else:
        status = outcome.status
    error = None if status == "succeeded" else redact(outcome.reason, secrets, cut=False, mask=mask)
    return ToolOutcome(status, output, error)


def launch_argv(
    probe: SandboxProbe | None,
    policy: SandboxPolicy,
    command: list[str],
    workspace: Path,
    fd: int,
    artifact_root: Path,
) -> tuple[list[str], Path, str | None]:
    """Worker thread: the argument vector that starts ``command`` under ``policy``, the
    working directory it gets (for the audit view) and the launcher (bwrap, prlimit or None).

    Sandboxed, the working directory is where the held descriptor points now,
    checked to be inside the workspace (the sandbox shows nothing else anyway).
    The artifact root exists before the masks are planned: another run's output
    appearing there later must already be covered.
    """
    workdir = _held_path(fd)
    if not policy.sandboxed:
        prlimit = shutil.which("prlimit", path="/usr/bin:/bin")
        if prlimit is None:
            return command, workdir, None
        return limited_argv(prlimit, policy.limits, command), workdir, prlimit
    assert probe is not None  # probed (and ok) before the launch
    root = workspace.resolve()
    if workdir != root and not workdir.is_relative_to(root):
        raise SandboxUnavailable("the working directory moved out of the workspace")
    artifact_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    masks = mask_plan(root, (*policy.hidden, artifact_root))
    argv = sandbox_argv(probe, policy, command, workspace=root, workdir=workdir, masks=masks)
    return argv, workdir, probe.bwrap


def _held_path(fd: int) -> Path:
    """Where the held working-directory descriptor points now (blocking)."""
    if os.path.isdir("/proc/self/fd"):
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    import fcntl

    get_path: int = getattr(fcntl, "F_GETPATH", 50)
    return Path(os.fsdecode(fcntl.fcntl(fd, get_path, bytes(1024)).rstrip(b"\0")))


def drop_artifacts(outcome: ProcessOutcome) -> ProcessOutcome:
    """Delete a run's artifact files (blocking: call in a worker thread); references go too."""
    streams = {}
    for name in ("stdout", "stderr"):
        capture = getattr(outcome, name)
        if capture.artifact is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(capture.artifact)
        streams[name] = dataclasses.replace(capture, artifact=None)
    return dataclasses.replace(outcome, **streams)
