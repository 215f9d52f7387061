"""Options, the wheel check and the log of the llama.cpp server behind ``LocalModel``.

Checked before anything is started, without importing the 100 MB native
library: a bad option or a missing piece is a ``ConfigError`` naming it.
"""

from __future__ import annotations

import ipaddress
import os
import re
from typing import IO

from hostkit._extras import require_extra
from hostkit.errors import ConfigError
from hostkit.types import is_count, is_seconds

__all__ = [
    "MAX_CONTEXT_WINDOW",
    "MIN_CONTEXT_WINDOW",
    "check_options",
    "check_wheel",
    "read_tail",
]

# Below this the model's own chat template plus the safety margin leave no room to talk.
MIN_CONTEXT_WINDOW = 512
# Far past any model's window (16M tokens); llama.cpp would try to allocate it.
MAX_CONTEXT_WINDOW = 1 << 24
LOG_TAIL_BYTES = 4096
LOG_TAIL_CHARS = 300
# llama.cpp prefixes each log line with an elapsed time ("0.00.003.439 ").
_LOG_STAMP = re.compile(r"^\s*[\d.]+\s+")


def check_options(
    *, host: str, port: int, context_window: int, threads: int, startup_timeout_s: float
) -> None:
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError as exc:
            raise ConfigError("must be a loopback IP address or 'localhost'", key="host") from exc
        if not loopback:
            raise ConfigError(
                "the local server speaks plain HTTP and stays on loopback", key="host"
            )
    # Whole numbers and finite times: NaN and inf passed the comparisons below them.
    if not is_count(port, low=0, high=65535):
        raise ConfigError("must be 0 (any free port) or a TCP port number", key="port")
    if not is_count(context_window, low=MIN_CONTEXT_WINDOW, high=MAX_CONTEXT_WINDOW):
        raise ConfigError(
            f"must be {MIN_CONTEXT_WINDOW} to {MAX_CONTEXT_WINDOW} tokens", key="context_window"
        )
    if not is_count(threads, high=1024):
        raise ConfigError("must be an integer from 1 to 1024", key="threads")
    if not is_seconds(startup_timeout_s, high=86_400):
        raise ConfigError("must be in (0, 86400] seconds", key="startup_timeout_s")


def check_wheel() -> None:
    """Raise ``MissingDependency`` unless the ``local`` extra is installed (nothing imported:
    the xllamacpp wheel's native library alone is 100 MB)."""
    require_extra("local", feature="the embedded local model (LocalModel)")


def read_tail(log: IO[bytes]) -> str:
    """The last whole lines of the child's log that fit ``LOG_TAIL_CHARS``, as one line.

    ``pread`` leaves the file offset alone: the child writes through the same
    open file, and moving the offset would make it overwrite its own log.
    """
    fd = log.fileno()
    size = os.fstat(fd).st_size
    data = os.pread(fd, LOG_TAIL_BYTES, max(0, size - LOG_TAIL_BYTES))
    lines = [
        " ".join(_LOG_STAMP.sub("", line).split())
        for line in data.decode("utf-8", "replace").splitlines()
    ]
    tail: list[str] = []
    for line in reversed([line for line in lines if line]):
        if tail and sum(map(len, tail)) + len(line) > LOG_TAIL_CHARS:
            break
        tail.insert(0, line)
    return " | ".join(tail)[-LOG_TAIL_CHARS:] or "(empty)"
