"""The OS sandbox of every process the Host starts for an agent: bubblewrap, plus limits.

``sandbox_argv`` turns a resolved command into the argument vector that runs
it inside ``bwrap`` (any spawner can use it: ``terminal.run`` now, stdio MCP
servers later), and ``probe_bubblewrap`` says once per binary whether that
can work here. The sandbox (docs/effects.md, "Sandbox"):

- ``--unshare-all`` (user-try, IPC, PID, network, UTS, cgroup-try) with
  ``--share-net`` only for an agent holding the ``terminal.network`` grant; a
  fresh ``/proc`` showing the run's own processes; ``--die-with-parent``,
  ``--new-session`` (no TIOCSTI into the Host's terminal), ``--cap-drop ALL``.
  bwrap installs its own PID 1: when the command ends, the kernel ends every
  process left in the namespace.
- Only system directories, read-only, and the workspace, read-write at its
  own path; a private ``/tmp``; no home directory, no Host state. Host state
  an operator placed inside the workspace (database, its WAL/SHM/journal and
  backups, the artifact root, ``hostkit.toml``) is masked: ``/dev/null`` over
  a file, an empty read-only tmpfs over a directory.
- The environment is exactly what the spawner passes (the allowlist plus
  approved bindings): bwrap adds ``PWD`` only. Values never go on bwrap's
  command line, which other users can read in ``/proc``.
- The sandbox's own root (``/``, the tmpfs bwrap builds it in) is read-only
  once everything is mounted: memory no limit counts. ``/tmp``, ``/dev/shm``
  (each a tmpfs of ``tmp_mb``) and the workspace stay writable.
- A system-call filter (``_seccomp``) refuses set-user-ID and set-group-ID
  modes: the workspace is ``nosuid`` only inside the sandbox. Where no filter
  is known for the machine, the probe's reason says so and runs go without.
- Resource limits go through ``prlimit`` (util-linux) inside the sandbox, so
  they bind the command and its descendants, not bwrap. ``RLIMIT_NPROC``
  counts every process of the real user and does not bind root at all; the
  lifecycle's own per-tree process limit holds regardless.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from hostkit.builtins.process._mounts import MountedTree, mount_table
from hostkit.builtins.process._reaper import init_argv
from hostkit.builtins.process._seccomp import launcher_argv, machine
from hostkit.errors import InvalidValue, UserError, bounded
from hostkit.types import is_count

__all__ = [
    "INSTALL_HINT",
    "UNSANDBOXED",
    "ResourceLimits",
    "SandboxPolicy",
    "SandboxProbe",
    "SandboxUnavailable",
    "limited_argv",
    "mask_plan",
    "probe_bubblewrap",
    "sandbox_argv",
    "visible_roots",
]

INSTALL_HINT = (
    "bubblewrap is not installed: install bubblewrap with your package manager "
    "(Debian/Ubuntu: apt-get install bubblewrap)"
)
PROBE_TIMEOUT_S = 10.0
_SYSTEM_DIRS = ("/usr", "/etc", "/opt")
# Where a machine keeps its configuration, secrets among it: each run shows it only as
# any user of the machine may read it (see _private_entries).
_CONFIGURATION_DIR = "/etc"
# More entries than this under /etc is no machine's configuration: refuse to guess.
_MAX_CONFIGURATION_ENTRIES = 50_000
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
MB = 1024 * 1024
# What SQLite opens beside a database file, by name, whether or not it exists yet.
_SQLITE_SIDES = ("-journal", "-wal", "-shm")

SandboxMode = Literal["bubblewrap", "none"]


class SandboxUnavailable(UserError):
    """The agent's processes must run in bubblewrap, and bubblewrap cannot run here."""


# The ranges hostkit.toml's [sandbox.limits] accepts (hostkit/host/_config.py).
_LIMIT_RANGES = {
    "cpu_time_s": (1, 86_400),
    "address_space_mb": (64, 1_048_576),
    "file_size_mb": (1, 1_048_576),
    "processes": (1, 65_536),
    "tmp_mb": (1, 1_048_576),
}


@dataclass(frozen=True, slots=True)
class ResourceLimits:
    """Per-process limits (setrlimit through ``prlimit``) for everything a run starts."""

    cpu_time_s: int = 600
    address_space_mb: int = 4096
    file_size_mb: int = 1024
    processes: int = 256
    # The sandbox's /tmp is memory (tmpfs): bounded, or many files fill the host's RAM.
    tmp_mb: int = 512

    def __post_init__(self) -> None:
        # prlimit reads -1 as "unlimited", and a float or NaN fails only when a run starts.
        for name, (low, high) in _LIMIT_RANGES.items():
            if not is_count(getattr(self, name), low=low, high=high):
                raise InvalidValue(f"ResourceLimits.{name} must be an integer from {low} to {high}")


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """How one agent's processes run: ``mode``, network grant, limits, Host state to hide.

    ``hidden`` lists the Host's own state paths; those that sit inside a
    workspace are masked in the sandbox (outside it they are not visible).
    ``secret_programs`` maps a secret's name to the absolute paths of the only
    programs it may be bound for (``[secrets.<NAME>] programs``); a secret
    not in it goes to no program.
    """

    mode: SandboxMode = "bubblewrap"
    network: bool = False
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    hidden: tuple[Path, ...] = ()
    secret_programs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A misspelt mode must not quietly mean "no sandbox".
        if self.mode not in ("bubblewrap", "none"):
            raise InvalidValue('SandboxPolicy.mode must be "bubblewrap" or "none"')
        if not isinstance(self.network, bool):
            raise InvalidValue("SandboxPolicy.network must be True or False")
        if not isinstance(self.limits, ResourceLimits):
            raise InvalidValue("SandboxPolicy.limits must be a ResourceLimits")
        programs: object = self.secret_programs
        if not isinstance(programs, Mapping) or not all(
            isinstance(name, str)
            and isinstance(paths, tuple | list)
            and paths
            and all(
                isinstance(path, str) and os.path.isabs(path) and "\0" not in path for path in paths
            )
            for name, paths in programs.items()
        ):
            raise InvalidValue(
                "SandboxPolicy.secret_programs must map secret names to absolute program paths"
            )
        frozen = MappingProxyType({name: tuple(paths) for name, paths in programs.items()})
        object.__setattr__(self, "secret_programs", frozen)

    @property
    def sandboxed(self) -> bool:
        return self.mode == "bubblewrap"


UNSANDBOXED = SandboxPolicy(mode="none")


@dataclass(frozen=True, slots=True)
class SandboxProbe:
    """Whether bubblewrap works here; ``reason`` says what is missing and how to fix it."""

    ok: bool
    reason: str
    bwrap: str | None = None
    prlimit: str | None = None
    # Whether this bubblewrap bounds a tmpfs (``--size``, bubblewrap 0.8 and later).
    sized_tmpfs: bool = False
    # The kernel's key listings in /proc that a run must not read (masked), where they exist.
    key_listings: tuple[str, ...] = ()
    # What goes before bwrap to load the system-call filter (``_seccomp``); empty where
    # no filter is known for this machine (the reason says so).
    filter_launcher: tuple[str, ...] = ()


# Every key of the machine the caller may view, and each user's key counts.
_KEY_LISTINGS = ("/proc/keys", "/proc/key-users")


@functools.cache
def probe_bubblewrap(binary: str = "bwrap") -> SandboxProbe:
    """Blocking (worker thread): can ``binary`` create the sandbox here? Cached per binary
    (two first callers may both probe; the answers are the same)."""
    bwrap = shutil.which(binary)
    if bwrap is None:
        return SandboxProbe(False, f"{INSTALL_HINT} ({bounded(binary, 80)!r} not found)")
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin")
    if prlimit is None:
        return SandboxProbe(False, "prlimit (util-linux) is missing: `apt-get install util-linux`")
    # As every run starts: behind the filter's launcher, with a read-only root. A kernel
    # that cannot load the filter fails the probe (bwrap says why): runs are refused, not
    # quietly started without it.
    launcher = launcher_argv(machine()) or []
    argv = [*launcher, bwrap, *_system_mounts(), "--unshare-all", "--die-with-parent"]
    argv += ["--new-session", "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev"]
    argv += ["--remount-ro", "/", "--", prlimit, "true"]
    # Under the per-run init, as every sandboxed run: bwrap's namespace init can outlive
    # the bwrap waited for by a moment, and the init reaps it instead of a subreaper Host.
    report, write_end = os.pipe()
    try:
        command = init_argv(argv, {}, report_fd=write_end) or argv
        done = subprocess.run(
            command,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            env={},
            check=False,
            pass_fds=(write_end,) if command is not argv else (),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxProbe(False, bounded(f"bubblewrap cannot run here: {exc}", 300))
    finally:
        os.close(report)
        os.close(write_end)
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        return SandboxProbe(
            False, bounded(f"bubblewrap cannot create namespaces here: {detail}", 300)
        )
    sized = _knows_option(bwrap, "--size")
    reason = "bubblewrap works" if sized else "bubblewrap works (older than 0.8: /tmp unbounded)"
    if not launcher:
        reason += (
            f"; no system-call filter for {bounded(machine(), 40)}: "
            "a run can make set-user-ID files in the workspace"
        )
    listings = tuple(path for path in _KEY_LISTINGS if os.path.exists(path))
    return SandboxProbe(
        True,
        reason,
        bwrap=bwrap,
        prlimit=prlimit,
        sized_tmpfs=sized,
        key_listings=listings,
        filter_launcher=tuple(launcher),
    )


def _knows_option(bwrap: str, option: str) -> bool:
    """Blocking: whether ``bwrap --help`` lists ``option``."""
    try:
        done = subprocess.run(
            [bwrap, "--help"], capture_output=True, timeout=PROBE_TIMEOUT_S, env={}, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return f"{option} ".encode() in done.stdout + done.stderr


def _system_mounts() -> list[str]:
    """Read-only system directories; merged-/usr links are recreated as links; the
    private entries of /etc masked (blocking: it reads /etc)."""
    args: list[str] = []
    for path in _SYSTEM_DIRS:
        if os.path.isdir(path) and not os.path.islink(path):
            args += ["--ro-bind", path, path]
    for path in _SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    if os.path.isdir(_CONFIGURATION_DIR) and not os.path.islink(_CONFIGURATION_DIR):
        for entry, is_dir in _private_entries(_CONFIGURATION_DIR):
            if is_dir:
                args += ["--perms", "0500", "--tmpfs", entry, "--remount-ro", entry]
            else:
                args += ["--ro-bind", "/dev/null", entry]
    return args


def _private_entries(top: str) -> list[tuple[str, bool]]:
    """(path, is a directory) of each entry under ``top`` that other users may not read:
    a file without the others' read bit, a directory without their read or search bit.

    ``--cap-drop ALL`` takes root's power to read anything, not an owner's right to
    read its own files: a Host running as root (common in containers) would show its
    runs ``/etc/shadow``, SSH host keys, ``/etc/ssl/private`` and any secret file a
    service manager keeps there for the Host (``EnvironmentFile=``, mode 0600). What a
    machine keeps from its other users a run is not shown either, whoever the Host
    runs as. Links are not followed; a private directory is masked whole.
    """
    found: list[tuple[str, bool]] = []
    pending = [top]
    seen = 0
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > _MAX_CONFIGURATION_ENTRIES:
                raise SandboxUnavailable(
                    f"{top} holds more than {_MAX_CONFIGURATION_ENTRIES} entries: too many "
                    "to check which of them a sandboxed run may read"
                )
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                continue
            if stat.S_ISDIR(info.st_mode):
                if info.st_mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
                    found.append((entry.path, True))
                else:
                    pending.append(entry.path)
            elif not info.st_mode & stat.S_IROTH:
                found.append((entry.path, False))
    return sorted(found)


def visible_roots(workspace: Path) -> tuple[Path, ...]:
    """Where a sandboxed program can live: the system directories and the workspace."""
    dirs = [Path(p) for p in (*_SYSTEM_DIRS, *_SYSTEM_LINKS) if os.path.isdir(p)]
    return (*dirs, workspace)


def mask_plan(workspace: Path, hidden: Sequence[Path], *, roots: Sequence[Path] = ()) -> list[str]:
    """Blocking: bwrap options masking each existing Host state path the sandbox would
    show: inside ``workspace``, under a read-only system directory (``/etc``, ``/opt``)
    or inside one of the extra ``roots`` a spawner binds (a tool module's import path).

    A database's siblings that share its name as a prefix (``-wal``, ``-shm``,
    ``.v3.backup``) are masked with it. Inside the workspace, where the sandbox
    can write, its SQLite side files are masked even when absent (bwrap leaves an
    empty file there; not on a read-only mount, where none can be created): a
    planted ``-journal`` would be replayed into the database by the next open,
    and a planted ``-wal`` read as its newest pages. Any other
    path that does not exist yet cannot be masked: create directories such as the
    artifact root before planning. Every directory between the workspace and a
    masked path is bound onto itself, so no run can rename it away from its mask.
    """
    root = workspace.resolve()
    shown = [Path(os.path.realpath(r)) for r in (*visible_roots(root), *roots)]
    # Every tree the sandbox shows: the state is masked wherever one shows it, under its
    # own name or another a mount gives it (a bind of the workspace, of the state's
    # directory into the workspace or under /opt, an overlay with it as a layer).
    table = mount_table()
    trees = [MountedTree(top, table=table) for top in dict.fromkeys((root, *shown))]
    targets: set[Path] = set()
    for path in hidden:
        resolved = path.resolve()
        places: list[Path] = []
        for tree in trees:
            places += [place for place in tree.shown_at(resolved) if place not in places]
        for place in places:
            if place.exists():
                targets.add(place)
            # Where nothing can be written (a read-only mount) nothing can be planted; a
            # directory's mode is no bar (the agent runs as the Host's user: it may chmod).
            writable = place.is_relative_to(root) and not _read_only_mount(place.parent)
            if place.is_file() and writable:
                targets.update(place.with_name(place.name + side) for side in _SQLITE_SIDES)
            if place.parent.is_dir():
                for sibling in place.parent.iterdir():
                    if sibling.name.startswith(place.name) and sibling != place:
                        targets.add(sibling)
    # A mask covers a path: a run that renamed a directory on the way to it would leave
    # the next run's masks on a name that no longer exists. A mount point cannot be
    # renamed, so each such directory is bound onto itself first.
    masked_dirs = [t for t in targets if t.is_dir()]
    # What lies under a masked directory is hidden by its empty tmpfs already (and no
    # mount point could be made in that read-only tmpfs for a mask of its own).
    targets = {t for t in targets if not any(t != d and t.is_relative_to(d) for d in masked_dirs)}
    on_the_way = {
        parent
        for target in targets
        for parent in target.parents
        if parent != root
        and parent.is_relative_to(root)
        and not any(parent == d or parent.is_relative_to(d) for d in masked_dirs)
    }
    args: list[str] = []
    for directory in sorted(on_the_way):
        args += ["--bind", str(directory), str(directory)]
    for target in sorted(targets):
        if target == root:
            continue  # the workspace itself is the Host's state: refused before this
        if target.is_dir():
            args += ["--perms", "0500", "--tmpfs", str(target), "--remount-ro", str(target)]
        else:
            args += ["--ro-bind", "/dev/null", str(target)]
    return args


def _read_only_mount(directory: Path) -> bool:
    """Whether ``directory`` lies on a read-only mount (blocking); unknown counts as not."""
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def limited_argv(prlimit: str, limits: ResourceLimits, command: Sequence[str]) -> list[str]:
    """``command`` under ``prlimit`` with the policy's limits (soft = hard)."""
    return [
        prlimit,
        f"--cpu={limits.cpu_time_s}",
        f"--as={limits.address_space_mb * MB}",
        f"--fsize={limits.file_size_mb * MB}",
        f"--nproc={limits.processes}",
        "--",
        *command,
    ]


def sandbox_argv(
    probe: SandboxProbe,
    policy: SandboxPolicy,
    command: Sequence[str],
    *,
    workspace: Path,
    workdir: Path,
    masks: Sequence[str] = (),
    read_only: Sequence[Path] = (),
) -> list[str]:
    """The argument vector that runs ``command`` (absolute argv[0]) in ``policy``'s sandbox.

    ``workspace`` is bound read-write at its own (resolved) path, ``workdir``
    (inside it) becomes the working directory, ``masks`` come from
    ``mask_plan`` (pass ``read_only`` to it as ``roots``). ``read_only`` are
    extra directories bound read-only at their own paths: where a program
    outside the system directories lives (a virtualenv, its base interpreter).
    The vector starts with the probe's ``filter_launcher`` where there is one
    (it execs bwrap with the system-call filter); it needs no descriptor from
    its spawner. Raises ``SandboxUnavailable`` when the probe failed.
    """
    if not probe.ok or probe.bwrap is None or probe.prlimit is None:
        raise SandboxUnavailable(probe.reason)
    argv = [*probe.filter_launcher, probe.bwrap, "--unshare-all"]
    if policy.network:
        argv.append("--share-net")
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += _system_mounts()
    # A fresh /proc, but its sysctls read-only: the sandbox's uid 0 maps to the real
    # root when the Host runs as root, and /proc/sys/kernel/core_pattern (run a program
    # outside every namespace) or vm/drop_caches would be writable.
    argv += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    # Keys the machine's users hold (their descriptions and owners) are not the run's to
    # list; the run's own session keyring is a fresh one (the init joins it).
    for listing in probe.key_listings:
        argv += ["--ro-bind", "/dev/null", listing]
    # bwrap's /dev is a tmpfs too, with /dev/shm a directory in it: memory that no limit
    # counts. /dev/shm and /tmp are each a tmpfs held to tmp_mb, and /dev itself is
    # read-only once set up (its device nodes are still written: /dev/null, a pty).
    size = ["--size", str(policy.limits.tmp_mb * MB)] if probe.sized_tmpfs else []
    argv += ["--dev", "/dev", *size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    argv += [*size, "--tmpfs", "/tmp"]
    for root in read_only:
        argv += ["--ro-bind", str(root), str(root)]
    argv += ["--bind", str(workspace), str(workspace), *masks]
    # bwrap builds the root in a tmpfs of its own, writable and unbounded: once every
    # mount point is made, it is read-only (not recursively: /tmp, /dev/shm and the
    # workspace are mounts of their own and stay as they are).
    argv += ["--remount-ro", "/", "--chdir", str(workdir)]
    argv += ["--", *limited_argv(probe.prlimit, policy.limits, command)]
    return argv
