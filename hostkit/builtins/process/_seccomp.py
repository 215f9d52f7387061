"""The sandbox's system-call filter: no run can make a set-user-ID or set-group-ID file.

The workspace is ``nosuid`` only inside bubblewrap. A file a run marks
set-user-ID there is set-user-ID on the host, where anyone who can reach the
workspace runs it as its owner: the Host's user, root in many containers.
``--cap-drop ALL`` does not stop that (an owner may set the bits on its own
file), so bwrap loads this filter (``--seccomp FD``) before it starts the
command:

- ``chmod``, ``fchmod``, ``fchmodat``, ``fchmodat2`` and the calls that create
  a file with a mode (``open``, ``openat``, ``creat``, ``mknod``, ``mknodat``)
  fail with ``EPERM`` when the mode holds ``S_ISUID`` or ``S_ISGID``. Making a
  directory is not filtered: no directory runs as a program, and in a
  set-group-ID tree every new directory inherits the bit. The mode is
  checked whatever the flags: ``O_TMPFILE`` creates with it too, and without
  ``O_CREAT`` the kernel ignores the mode, so refusing one that holds these
  bits costs a correct program nothing.
- ``openat2`` keeps its mode in a struct a filter cannot read, and io_uring
  opens and creates files no filter sees: both fail with ``ENOSYS``, which
  programs read as an older kernel and fall back from.
- On x86_64 the x32 ABI (numbers from ``0x40000000``) fails with ``ENOSYS``;
  a call of any other ABI than the machine's own (32-bit ``int 0x80``) ends
  the process, whose numbers the filter does not know.

The filter is classic BPF built here with ``struct.pack``: no maintained
Python binding exists, and libseccomp is not needed for a dozen comparisons.
Only x86_64 and aarch64 (little-endian) are known; elsewhere there is no
filter and the sandbox probe says so.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["LAUNCHER", "filter_program", "launcher_argv", "machine"]

# Classic BPF opcodes (linux/bpf_common.h) and seccomp's return values (linux/seccomp.h).
_LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_KILL_PROCESS = 0x80000000
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_NR_AT = 0
_ARCH_AT = 4
_ARGS_AT = 16
_X32_SYSCALL_BIT = 0x40000000
_SPECIAL_BITS = 0o6000  # S_ISUID | S_ISGID
_EPERM = 1
_ENOSYS = 38


@dataclass(frozen=True, slots=True)
class _Arch:
    """One ABI: its audit number, which argument holds the mode of each moded call, the
    calls refused outright, and whether the x32 numbers must be refused."""

    audit: int
    mode_argument: Mapping[int, int]
    unsupported: tuple[int, ...]
    x32: bool = False


# io_uring_setup, io_uring_enter, io_uring_register and openat2 share their numbers.
_NO_SUCH_CALL = (425, 426, 427, 437)
_ARCHES = {
    "x86_64": _Arch(
        audit=0xC000003E,  # AUDIT_ARCH_X86_64
        mode_argument={
            2: 2,  # open(path, flags, mode)
            85: 1,  # creat(path, mode)
            90: 1,  # chmod(path, mode)
            91: 1,  # fchmod(fd, mode)
            133: 1,  # mknod(path, mode, dev)
            257: 3,  # openat(dirfd, path, flags, mode)
            259: 2,  # mknodat(dirfd, path, mode, dev)
            268: 2,  # fchmodat(dirfd, path, mode)
            452: 2,  # fchmodat2(dirfd, path, mode, flags)
        },
        unsupported=_NO_SUCH_CALL,
        x32=True,
    ),
    "aarch64": _Arch(
        audit=0xC00000B7,  # AUDIT_ARCH_AARCH64
        mode_argument={
            33: 2,  # mknodat
            52: 1,  # fchmod
            53: 2,  # fchmodat
            56: 3,  # openat
            452: 2,  # fchmodat2
        },
        unsupported=_NO_SUCH_CALL,
    ),
}

# An instruction whose jump targets may still be label names; a bare string is a label.
_Op = tuple[int, int | str, int | str, int]


def machine() -> str:
    """The machine this Host runs on, as the kernel names it (``x86_64``, ``aarch64``)."""
    return os.uname().machine


def filter_program(machine_name: str) -> bytes | None:
    """The filter for ``machine_name`` as bwrap reads it (``struct sock_filter`` array),
    or None where no filter is known (another architecture, a big-endian host)."""
    arch = _ARCHES.get(machine_name)
    if arch is None or sys.byteorder != "little":
        return None
    code: list[_Op | str] = [
        (_LD_ABS_W, 0, 0, _ARCH_AT),
        (_JEQ, 0, "kill", arch.audit),
        (_LD_ABS_W, 0, 0, _NR_AT),
    ]
    if arch.x32:
        code.append((_JGE, "nosys", 0, _X32_SYSCALL_BIT))
    code += [(_JEQ, "nosys", 0, nr) for nr in arch.unsupported]
    code += [(_JEQ, f"mode{at}", 0, nr) for nr, at in sorted(arch.mode_argument.items())]
    code.append((_RET, 0, 0, _ALLOW))
    for at in sorted(set(arch.mode_argument.values())):
        # The low 32 bits of the 64-bit argument (little-endian): a mode is an int.
        code += [f"mode{at}", (_LD_ABS_W, 0, 0, _ARGS_AT + 8 * at)]
        code += [(_JSET, "perm", 0, _SPECIAL_BITS), (_RET, 0, 0, _ALLOW)]
    code += ["perm", (_RET, 0, 0, _ERRNO | _EPERM)]
    code += ["nosys", (_RET, 0, 0, _ERRNO | _ENOSYS)]
    code += ["kill", (_RET, 0, 0, _KILL_PROCESS)]
    return _assemble(code)


def _assemble(code: Sequence[_Op | str]) -> bytes:
    """Resolve labels to forward jump offsets and pack the instructions."""
    labels: dict[str, int] = {}
    ops: list[_Op] = []
    for item in code:
        if isinstance(item, str):
            labels[item] = len(ops)
        else:
            ops.append(item)

    def offset(target: int | str, at: int) -> int:
        if isinstance(target, int):
            return target
        jump = labels[target] - at - 1
        if not 0 <= jump <= 255:  # classic BPF jumps forward, by a byte
            raise ValueError(f"jump to {target} out of range")
        return jump

    return b"".join(
        struct.pack("=HBBI", op, offset(yes, at), offset(no, at), k)
        for at, (op, yes, no, k) in enumerate(ops)
    )


# Run as ``python -I -S -c LAUNCHER <filter as hex> <bwrap> <bwrap's arguments...>``: it
# puts the filter in a pipe and becomes bwrap with ``--seccomp <read end>``. The
# environment is passed on as this process received it (``/proc/self/environ``): Python's
# start-up may coerce a C locale by setting LC_CTYPE, which must not reach the command.
LAUNCHER = r"""
import os, sys
program = bytes.fromhex(sys.argv[1])
read, write = os.pipe()
os.write(write, program)
os.close(write)
os.set_inheritable(read, True)
with open("/proc/self/environ", "rb") as f:
    env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
bwrap = sys.argv[2]
os.execve(bwrap, [bwrap, "--seccomp", str(read), *sys.argv[3:]], env)
"""


def launcher_argv(machine_name: str) -> list[str] | None:
    """The prefix that hands ``machine_name``'s filter to the bwrap command after it, or
    None where there is none (no filter known, or no Python executable to run it)."""
    program = filter_program(machine_name)
    if program is None or not sys.executable:
        return None
    return [sys.executable, "-I", "-S", "-c", LAUNCHER, program.hex()]
