"""Clause: a generation that was installed is reported applied, even when the cleanup after
it fails.

Once a new generation is installed it serves every later turn. The store
write after it (forgetting the records of MCP servers no longer declared)
can still fail (another process holding the write lock past its bound): that
failure is one warning, and the reload's outcome is "generation N applied",
never a "reload failed" while generation N serves. The failure is injected
at the store seam of a real Host on a real file.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hostkit.errors import StoreError
from hostkit.host import ConfigWatcher, Host
from tests.contract._config_apply import write_config
from tests.hosts import request

pytestmark = pytest.mark.anyio

LOCKED = "another process held the write lock for 30 s: nothing of this write was done"


async def test_a_reload_whose_cleanup_write_fails_is_applied_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hostkit")
    path = write_config(tmp_path, reply="first", times=2)
    async with Host.open(path) as host:

        async def locked(*args: object, **kwargs: object) -> int:
            raise StoreError(LOCKED, retryable=True)

        monkeypatch.setattr(host.store.mcp_servers, "forget_mcp_servers", locked)
        write_config(tmp_path, reply="second", times=2)
        watcher = ConfigWatcher(host)
        watcher.trigger()  # as SIGHUP does
        outcome = await watcher.check()
        answered = await host.turns.run(request())
        seen = watcher.last
    assert outcome is not None
    assert outcome.applied
    assert (outcome.generation, host.generation) == (2, 2)
    assert seen == outcome
    assert (answered.generation, answered.text) == (2, "second")
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    warnings = [text for level, text in lines if level >= logging.WARNING]
    assert warnings == [
        "generation 2 applied; cleaning up after generation 1 failed (records of MCP "
        f"servers no longer declared may stay): {LOCKED}"
    ]
    assert any(text.startswith("generation 2 applied (") for _, text in lines)
