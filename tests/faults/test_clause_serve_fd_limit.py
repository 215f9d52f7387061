"""Serve clause: ``hostkit serve`` at its file-descriptor limit, as a real process.

Under ``ulimit -n 64`` sixty idle connections use up every descriptor: each
accept fails with EMFILE until one closes. asyncio logged the failure, its
traceback included, once per listen-backlog slot every second (10,201 lines
in 9 s); now it is one record per streak, and the daemon answers again once
the connections close. At start the soft limit is raised to the hard one,
said in one info line.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

LISTENING = "hostkit serve: listening on "
CONFIG = """
[host]
database = "hostkit.db"

[providers.demo]
kind = "scripted"
script = [ { reply = "hi" } ]

[agents.assistant]
provider = "demo"

[channels.hooks]
kind = "webhook"
secret_env = "HOOK_SECRET"
allow = ["*"]

[serve]
port = 0
drain_timeout_s = 3
"""


def _open_files(soft: int) -> Callable[[], None]:
    """A ``preexec_fn`` setting the child's soft open-file limit (the hard one kept)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _serve(tmp_path: Path, preexec: Callable[[], None]) -> tuple[subprocess.Popen[bytes], str]:
    (tmp_path / "hostkit.toml").write_text(CONFIG)
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "hostkit", "serve", "-c", "hostkit.toml"],
            cwd=tmp_path,
            env={**os.environ, "HOOK_SECRET": "s3cret-s3cret-s3cret-s3cret-s3cret"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=preexec,
        )
    assert process.stdout is not None
    with selectors.DefaultSelector() as waiting:
        waiting.register(process.stdout, selectors.EVENT_READ)
        if not waiting.select(timeout=60):
            process.kill()
            pytest.fail("hostkit serve did not say where it listens within 60 s")
    first = process.stdout.readline().decode()
    assert first.startswith(LISTENING), first
    return process, first.removeprefix(LISTENING).strip()


def _stop(process: subprocess.Popen[bytes], tmp_path: Path) -> list[dict[str, object]]:
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()
    text = (tmp_path / "serve.log").read_text()
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_failed_accepts_at_the_descriptor_limit_are_one_record_and_serving_recovers(
    tmp_path: Path,
) -> None:
    # Soft and hard both 64: raising the soft limit cannot lift this one.
    process, url = _serve(tmp_path, lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
    try:
        port = int(url.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(70)]
        time.sleep(3.5)  # asyncio retries the accept every second
        for connection in idle:
            connection.close()
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "serve did not answer after the connections closed"
            time.sleep(0.5)
    finally:
        records = _stop(process, tmp_path)
    said = [str(r["msg"]) for r in records if r["logger"] == "asyncio"]
    assert said, "the connections did not reach the descriptor limit"
    assert said[0].startswith("socket.accept() out of system resource"), said[0][:200]
    # At most one more: a retry asyncio scheduled per failed accept, failing on the closed
    # listener when the daemon stops within a second of the last.
    assert len(said) <= 2, [m[:80] for m in said[:5]] + [len(said)]


def test_serve_raises_its_soft_open_file_limit_to_the_hard_one(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY or hard <= 256:
        pytest.skip(f"the hard open-file limit here ({hard}) leaves nothing to raise")
    process, _ = _serve(tmp_path, _open_files(256))
    try:
        limits = Path(f"/proc/{process.pid}/limits").read_text()
    finally:
        records = _stop(process, tmp_path)
    (line,) = [row for row in limits.splitlines() if row.startswith("Max open files")]
    assert line.split()[3:5] == [str(hard), str(hard)], line
    raised = [r for r in records if "open-file limit" in str(r["msg"])]
    assert [(r["level"], r["msg"]) for r in raised] == [
        ("info", f"open-file limit raised from 256 to {hard} (the hard limit)")
    ]
