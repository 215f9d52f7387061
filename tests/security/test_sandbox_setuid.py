"""No sandboxed run can make a set-user-ID or set-group-ID file (the system-call filter).

The workspace is ``nosuid`` only inside bubblewrap: a copy of a program marked
set-user-ID there runs as the Host's user (root, in many containers) for
anyone on the host who can reach the workspace. The filter (``_seccomp``) is
checked twice: loaded into a plain child process, call by call, and through a
real ``terminal.run`` in bubblewrap, where ordinary modes keep working.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from hostkit.builtins.process import SandboxPolicy, SandboxProbe, probe_bubblewrap, sandbox_argv
from hostkit.builtins.process import _sandbox as sandbox_module
from hostkit.builtins.process._seccomp import filter_program, machine
from tests.parts import missing
from tests.security.test_sandbox import PY3, Sandbox, open_sandbox, stdout

pytestmark = pytest.mark.anyio

MACHINE = machine()
KNOWN = filter_program(MACHINE) is not None

# Loads the filter given as hex (argv[1]) into this process, then runs each check in the
# working directory and prints {check: "ok" | errno name}.
FILTERED = r"""
import ctypes, errno, json, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
if sys.argv[1]:
    program = bytes.fromhex(sys.argv[1])
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = Fprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_char_p))
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0, ctypes.get_errno()
def raw(nr, *args):
    if libc.syscall(nr, *args) < 0:
        raise OSError(ctypes.get_errno(), "")
AT_FDCWD = -100
X86 = os.uname().machine == "x86_64"
open("f", "w").close()
checks = {
    "chmod 4755": lambda: os.chmod("f", 0o4755),
    "chmod 2755": lambda: os.chmod("f", 0o2755),
    "chmod 755": lambda: os.chmod("f", 0o755),
    "chmod 644": lambda: os.chmod("f", 0o644),
    "fchmod 4755": lambda: os.fchmod(os.open("f", os.O_RDONLY), 0o4755),
    "fchmodat 6755": lambda: os.chmod("f", 0o6755, dir_fd=os.open(".", os.O_RDONLY)),
    "fchmodat2 4755": lambda: raw(452, AT_FDCWD, b"f", 0o4755, 0),
    "openat O_CREAT 4755": lambda: os.open("g", os.O_CREAT | os.O_WRONLY, 0o4755),
    "openat O_TMPFILE 2755": lambda: os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o2755),
    "openat O_CREAT 644": lambda: os.open("h", os.O_CREAT | os.O_WRONLY, 0o644),
    "mkdirat 2755": lambda: os.mkdir("d", 0o2755),
    "mkdirat 755": lambda: os.mkdir("e", 0o755),
    "mknodat 4755": lambda: os.mknod("n", stat.S_IFREG | 0o4755),
    "mknodat 644": lambda: os.mknod("m", stat.S_IFREG | 0o644),
    "openat2": lambda: raw(437, AT_FDCWD, b"f", None, 0),
    "io_uring_setup": lambda: raw(425, 1, None),
}
if X86:  # the calls aarch64 does not have, by number
    checks.update({
        "open 4755": lambda: raw(2, b"o", os.O_CREAT | os.O_WRONLY, 0o4755),
        "creat 4755": lambda: raw(85, b"c", 0o4755),
        "mkdir 2755": lambda: raw(83, b"k", 0o2755),
        "chmod(90) 4755": lambda: raw(90, b"f", 0o4755),
        "mknod 4755": lambda: raw(133, b"p", stat.S_IFREG | 0o4755, 0),
        "x32 getpid": lambda: raw(0x40000000 | 39),
    })
found = {}
for name, check in checks.items():
    try:
        check()
        found[name] = "ok"
    except OSError as exc:
        found[name] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(found))
"""

REFUSED = {
    "chmod 4755": "EPERM",
    "chmod 2755": "EPERM",
    "fchmod 4755": "EPERM",
    "fchmodat 6755": "EPERM",
    "fchmodat2 4755": "EPERM",
    "openat O_CREAT 4755": "EPERM",
    "openat O_TMPFILE 2755": "EPERM",
    "mknodat 4755": "EPERM",
    "openat2": "ENOSYS",
    "io_uring_setup": "ENOSYS",
}
# A directory's mode is not filtered: none runs as a program, and in a set-group-ID
# tree every new directory inherits the bit (cp -r asks for it again).
ALLOWED = (
    "chmod 755",
    "chmod 644",
    "openat O_CREAT 644",
    "mkdirat 755",
    "mkdirat 2755",
    "mknodat 644",
)
X86_REFUSED = {
    "open 4755": "EPERM",
    "creat 4755": "EPERM",
    "chmod(90) 4755": "EPERM",
    "mknod 4755": "EPERM",
    "x32 getpid": "ENOSYS",
}


def _modes(directory: Path) -> dict[str, int]:
    """Blocking: each entry's permission bits, special ones included."""
    return {entry.name: entry.stat().st_mode & 0o7777 for entry in os.scandir(directory)}


def _argv(probe: SandboxProbe, workspace: Path) -> list[str]:
    """Blocking (it reads /etc): a sandboxed ``/bin/true``."""
    return sandbox_argv(
        probe, SandboxPolicy(), ["/bin/true"], workspace=workspace, workdir=workspace
    )


def _filtered(tmp_path: Path, program: bytes | None) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-I", "-c", FILTERED, program.hex() if program else ""],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict[str, str] = json.loads(done.stdout)
    return found


@pytest.mark.skipif(not KNOWN, reason=f"no system-call filter for {MACHINE}")
def test_the_filter_refuses_special_modes_and_lets_ordinary_ones_through(tmp_path: Path) -> None:
    found = _filtered(tmp_path, filter_program(MACHINE))
    expected = {**REFUSED, **(X86_REFUSED if MACHINE == "x86_64" else {})}
    assert {name: found[name] for name in expected} == expected
    assert {name: found[name] for name in ALLOWED} == dict.fromkeys(ALLOWED, "ok")
    modes = _modes(tmp_path)
    assert not any(mode & 0o6000 for mode in modes.values()), modes


def test_without_the_filter_the_same_calls_set_the_bits(tmp_path: Path) -> None:
    """The checks above can fail: unfiltered, the very same calls succeed."""
    found = _filtered(tmp_path, None)
    assert found["chmod 4755"] == found["openat O_CREAT 4755"] == found["mkdirat 2755"] == "ok"


# mov eax, 20 (getpid in the i386 table); int 0x80; ret
_INT80_GETPID = """
import ctypes, mmap
code = bytes.fromhex("b814000000cd80c3")
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print("pid", call(), flush=True)
"""


@pytest.mark.skipif(MACHINE != "x86_64", reason="the 32-bit ABI of x86_64")
def test_a_call_through_the_32_bit_abi_ends_the_process(tmp_path: Path) -> None:
    """``int 0x80`` reaches the i386 table, where chmod is another number the filter
    does not compare: any call of another ABI ends the process instead."""
    plain = subprocess.run(
        [sys.executable, "-I", "-c", _INT80_GETPID], capture_output=True, text=True, timeout=60
    )
    if plain.returncode != 0 or not plain.stdout.startswith("pid "):
        pytest.skip("no 32-bit ABI here (or no executable memory)")
    program = filter_program(MACHINE)
    assert program is not None
    loader = FILTERED.split("def raw", 1)[0]
    done = subprocess.run(
        [sys.executable, "-I", "-c", loader + _INT80_GETPID, program.hex()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGSYS, (done.returncode, done.stdout, done.stderr)
    assert "pid" not in done.stdout


def test_the_filter_of_each_known_machine_checks_its_own_abi() -> None:
    """Built for aarch64 too, where this suite may not run: whole instructions, the
    first comparing the ABI with the machine's own (AUDIT_ARCH_*)."""
    for name, audit in (("x86_64", 0xC000003E), ("aarch64", 0xC00000B7)):
        program = filter_program(name)
        assert program is not None
        assert len(program) % 8 == 0
        assert program[:8] == bytes.fromhex("2000000004000000")  # load seccomp_data.arch
        assert program[12:16] == audit.to_bytes(4, "little")
    assert filter_program("riscv64") is None


# --- in bubblewrap --------------------------------------------------------------------


@pytest.fixture
async def filtered(tmp_path: Path) -> AsyncIterator[Sandbox]:
    probe = await anyio.to_thread.run_sync(probe_bubblewrap)
    if not probe.ok:
        missing("sandbox", probe.reason)
    if not probe.filter_launcher:
        pytest.skip(probe.reason)
    async for opened in open_sandbox(tmp_path):
        yield opened


async def test_a_sandboxed_run_cannot_plant_a_set_user_id_program(filtered: Sandbox) -> None:
    script = (
        "cp /usr/bin/id ./suid-id; chmod 4755 ./suid-id; echo chmod=$?; "
        "install -m 4755 /usr/bin/id ./installed; echo install=$?; "
        "mkdir -m 2775 shared; echo mkdir=$?"
    )
    outcome = await filtered.run(SandboxPolicy(), "sh", "-c", script)
    assert stdout(outcome).split() == ["chmod=1", "install=1", "mkdir=1"], outcome
    assert "Operation not permitted" in outcome.output["stderr"]["tail"]
    modes = await anyio.to_thread.run_sync(_modes, filtered.workspace)
    assert {"suid-id", "installed"} <= set(modes)
    assert not any(mode & 0o6000 for mode in modes.values()), modes


async def test_ordinary_modes_and_new_files_still_work_in_the_sandbox(filtered: Sandbox) -> None:
    script = (
        "cp /usr/bin/id ./tool && chmod 755 tool && ./tool -u >/dev/null && chmod 644 tool "
        "&& install -m 700 /usr/bin/id installed && mkdir -p dir/sub && echo text > dir/f "
        "&& echo scratch > /tmp/s && echo done"
    )
    outcome = await filtered.run(SandboxPolicy(), "sh", "-c", script)
    assert outcome.status == "succeeded", outcome
    assert stdout(outcome) == "done\n"
    ws = anyio.Path(filtered.workspace)
    assert (await (ws / "tool").stat()).st_mode & 0o7777 == 0o644
    assert (await (ws / "installed").stat()).st_mode & 0o7777 == 0o700
    assert await (ws / "dir" / "f").read_text() == "text\n"


async def test_without_a_filter_for_the_machine_the_probe_says_so_and_runs_still_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another architecture: no filter (and no failure), said in the probe's reason."""
    monkeypatch.setattr(sandbox_module, "machine", lambda: "riscv64")
    probe_bubblewrap.cache_clear()
    try:
        probe = await anyio.to_thread.run_sync(probe_bubblewrap)
        if not probe.ok:
            missing("sandbox", probe.reason)
        assert probe.filter_launcher == ()
        assert "no system-call filter for riscv64" in probe.reason
        argv = await anyio.to_thread.run_sync(_argv, probe, tmp_path)
        # No launcher before bwrap: the filter's launcher is what would load one.
        assert argv[0] == probe.bwrap
        assert sys.executable not in argv
        async for plain in open_sandbox(tmp_path):
            outcome = await plain.run(SandboxPolicy(), PY3, "-c", "print('ran')")
            assert stdout(outcome) == "ran\n", outcome
    finally:
        probe_bubblewrap.cache_clear()


async def test_where_the_filter_is_known_the_probe_loads_it(tmp_path: Path) -> None:
    if not KNOWN:
        pytest.skip(f"no system-call filter for {MACHINE}")
    probe = await anyio.to_thread.run_sync(probe_bubblewrap)
    if not probe.ok:
        missing("sandbox", probe.reason)
    assert probe.filter_launcher
    assert "system-call filter" not in probe.reason
    argv = await anyio.to_thread.run_sync(_argv, probe, tmp_path)
    assert argv[: len(probe.filter_launcher)] == list(probe.filter_launcher)
    assert argv[len(probe.filter_launcher)] == probe.bwrap


async def test_directories_in_a_set_group_id_tree_are_made_and_copied(
    filtered: Sandbox,
) -> None:
    """Every directory made in a set-group-ID tree inherits the bit, and cp -r asks for
    it again: making directories is not filtered, or copying a tree there failed."""
    await anyio.Path(filtered.workspace).chmod(0o2775)
    script = "mkdir -p a/b && echo x > a/b/f && cp -r a c && echo done"
    outcome = await filtered.run(SandboxPolicy(), "sh", "-c", script)
    assert stdout(outcome) == "done\n", outcome
    copied = await anyio.Path(filtered.workspace, "c", "b").stat()
    assert copied.st_mode & 0o2000
