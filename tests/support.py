"""Small helpers shared by test modules."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import psutil
import pytest

from hostkit.inbox import ChannelInbox
from hostkit.store import LeaseOwner
from hostkit.types import ClaimedInbound, ConversationFacts, InboundResult


def facts(
    conversation: str, principal: str = "user", channel: str = "webhook"
) -> ConversationFacts:
    """Authenticated adapter facts for a test conversation."""
    return ConversationFacts(
        channel=channel, conversation_key=conversation, principal_key=principal
    )


class SteppedMonotonic:
    """A module's ``time`` (monkeypatched in), its monotonic clock moved by the test only
    (a cooldown is then neither shortened nor overrun by a loaded machine's scheduling)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


async def claim_all(inbox: ChannelInbox) -> list[ClaimedInbound]:
    """Claim every due inbound, completing each (``ignored``) as a worker would: a
    conversation's next inbound is claimed only after the one before it ends."""
    claimed: list[ClaimedInbound] = []
    while (item := await inbox.claim()) is not None:
        claimed.append(item)
        await inbox.complete(item, InboundResult("ignored"))
    return claimed


async def file_bytes(path: Path) -> bytes:
    """Read a file without blocking the event loop."""
    return await anyio.Path(path).read_bytes()


T = TypeVar("T")


async def peak_rss_growth(run: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """``run()``'s result and how far this process's RSS rose above its start while it ran."""
    me = psutil.Process()
    baseline = peak = me.memory_info().rss
    done = anyio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, me.memory_info().rss)
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(sample)
        try:
            value = await run()
        finally:
            done.set()
    return value, peak - baseline


async def peak_allocation_growth(run: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """``run()``'s result and the most memory Python allocated above its start while it ran.

    RSS also moves with the heap's history (what earlier tests freed, where the
    allocator put a large block), by a few MiB either way; a bound of a few MiB
    is checked against what tracemalloc counts, which is exact.
    """
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    try:
        value = await run()
        return value, tracemalloc.get_traced_memory()[1] - baseline
    finally:
        if not tracing:
            tracemalloc.stop()


def table_rows(database: Path) -> Iterator[str]:
    """Every cell of every table as text, through a read-only connection (blocking: call
    it when the Host is closed, or from a worker thread)."""
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for cell in row:
                    if isinstance(cell, bytes):
                        yield cell.decode("utf-8", "replace")
                    elif cell is not None:
                        yield str(cell)


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting to be reaped has)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@asynccontextmanager
async def child_process(argv: Sequence[str], **options: Any) -> AsyncIterator[anyio.abc.Process]:
    """``anyio.open_process(argv)`` whose exit never waits on a child the test gave up on.

    Leaving ``async with await anyio.open_process(...)`` waits for the child to end,
    with no deadline. A test that fails or times out while its child sleeps at a
    marker (waiting for the signal the test meant to send) would hang there, not
    fail: the child is killed first. A block that ends normally waits as before.
    """
    async with await anyio.open_process(list(argv), **options) as child:
        try:
            yield child
        except BaseException:
            if child.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    child.kill()
            raise


async def sigkill_when(
    argv: Sequence[str],
    reached: Callable[[], Awaitable[bool]],
    *,
    what: str,
    timeout_s: float = 60.0,
) -> int:
    """Run ``argv``, SIGKILL it the moment ``reached()`` is true, and return its exit code.

    The crash tests' one shape: a real process stopped at a chosen point. Fails
    the test if the process exits on its own first (``what`` says where it was
    meant to be), or if the point is not reached within ``timeout_s``.
    """
    # Nothing reads its output: a pipe left full would stop the child short of its point.
    async with child_process(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as child:
        with anyio.fail_after(timeout_s):
            while not await reached():
                assert child.returncode is None, f"the child exited before {what}"
                await anyio.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL
    return child.returncode


def git_repository(repo: Path, *, message: str, files: dict[str, str]) -> Path:
    """Blocking: a git repository at ``repo`` with ``files`` in one commit (fixed identity,
    no user configuration read), for the MCP git server tests."""
    repo.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "HOME": str(repo),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    for name, text in files.items():
        (repo / name).write_text(text)
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", *files],
        ["git", "commit", "-q", "-m", message],
    ):
        subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True)
    return repo


def in_mount_namespace(script: str, *args: str) -> Any:
    """Run the Python ``script`` in a private mount namespace (its mounts are real and
    vanish with it); the JSON its last line printed. Skips where no namespace can be made.
    """
    unshare = shutil.which("unshare")
    if unshare is None or shutil.which("mount") is None:
        pytest.skip("util-linux's unshare and mount are needed for a private mount namespace")
    namespace = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        namespace.insert(1, "--map-root-user")
    done = subprocess.run(
        [*namespace, sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    refused = done.stderr.startswith("unshare:") or (
        "mount" in done.stderr and "permission" in done.stderr.lower()
    )
    if done.returncode != 0 and refused:  # no namespace here (a container's defaults, say)
        pytest.skip(f"this machine cannot mount in a new namespace: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


async def this_process(instance: str) -> LeaseOwner:
    """This test process as the lease owner ``instance`` (reads /proc: off the loop)."""
    return await anyio.to_thread.run_sync(LeaseOwner.current, instance)


async def dead_owner(instance: str, how: str = "reused_pid") -> str:
    """An owner on this machine whose process is provably gone: its pid exited, or now
    belongs to a process with another start time."""
    me = await this_process(instance)
    if how == "exited_pid":
        async with await anyio.open_process([sys.executable, "-c", "pass"]) as process:
            await process.wait()
        return LeaseOwner(me.host, process.pid, me.started, instance).encode()
    return LeaseOwner(me.host, me.pid, me.started - 100, instance).encode()


def page_tree(pages: int) -> bytes:
    """The body of an object stream as pdfTeX writes one: the offsets, then a catalog, the
    page tree and ``pages`` page objects (objects 1, 2 and 3 on)."""
    kids = b" ".join(b"%d 0 R" % (3 + page) for page in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        *(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R >>"
            % (100 + page)
            for page in range(pages)
        ),
    ]
    offsets, at = [], 0
    for number, body in enumerate(objects, start=1):
        offsets.append(b"%d %d" % (number, at))
        at += len(body) + 1
    header = b" ".join(offsets) + b"\n"
    return header + b"\n".join(objects) + b"\n"


def object_stream_pdf(
    body: bytes,
    *,
    filters: bytes = b"/FlateDecode",
    direct_length: bool = True,
    keep: int | None = None,
) -> bytes:
    """A PDF 1.5 whose objects are all in one object stream holding ``body`` compressed
    (none of them visible in the file): ``filters`` is its /Filter, ``direct_length``
    False gives its /Length as a reference, ``keep`` keeps only that many of its bytes
    (a file cut short)."""
    data = zlib.compress(body)
    length = b"%d" % len(data) if direct_length else b"99 0 R"
    stream = data if keep is None else data[:keep]
    dictionary = b"<<\n/Type /ObjStm\n/Length " + length + b"\n/Filter " + filters + b"\n>>"
    return b"".join(
        (
            b"%PDF-1.5\n%\xd0\xd4\xc5\xd8\n",
            b"98 0 obj\n" + dictionary + b"\nstream\n" + stream + b"\nendstream\nendobj\n",
            b"99 0 obj\n%d\nendobj\n" % len(data),
            b"startxref\n0\n%%EOF\n",
        )
    )
