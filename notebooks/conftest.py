"""The notebooks' kernels (nbval) talk to pytest over IPC sockets, not loopback TCP ports.

jupyter_client picks a kernel's five TCP ports by binding port 0 and letting it go; the
kernel binds them a moment later. With two xdist workers starting kernels while the
notebooks open loopback connections of their own, another socket can take one of those
ports in between, and the kernel dies before its first reply ("Kernel died before
replying to kernel_info"). An IPC socket's path is this kernel's alone: nothing races
for it. The kernels are the same real kernels; only their transport differs.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import nbval.kernel
from jupyter_client.manager import KernelManager


class _IpcKernelManager(KernelManager):
    def __init__(self, **kwargs: Any) -> None:
        # An absolute path of its own: the kernel runs in the notebook's directory, pytest
        # elsewhere, and a relative one would name two different sockets.
        ip = Path(tempfile.gettempdir()) / f"nbval-{uuid.uuid4().hex}-ipc"
        super().__init__(transport="ipc", ip=str(ip), **kwargs)


nbval.kernel.KernelManager = _IpcKernelManager
