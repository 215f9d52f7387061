"""Serve clause: a real ``hostkit serve`` applies configuration changes while it runs.

The "reload" daemon polls ``hostkit.toml`` every ``[serve] reload_interval_s``
and picks up an edit, and a core's live ref moved by another process (this
test, with a compare-and-swap straight on the repository); SIGHUP reloads at
once (here with polling off, so nothing else could have); an invalid edit is
logged as rejected with its reason while the process keeps serving on the
generation it had, and a later valid edit applies; SIGTERM still drains and
exits 0 with the watcher running.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import anyio
import httpx
import pytest

from tests.contract._config_apply import write_config
from tests.contract.test_clause_config_apply_cores import manifest, move_ref
from tests.cores_support import commit, make_core
from tests.faults._serve_proc import Served, eventually, serving

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def messages(served: Served) -> list[str]:
    """The ``msg`` of every JSON log line written so far (stderr is not a terminal)."""
    lines = "".join(served.stderr).splitlines()
    return [json.loads(line)["msg"] for line in lines if line.startswith("{")]


async def logged(served: Served, text: str) -> str:
    """Wait until a log message contains ``text``; that message."""

    async def seen() -> bool:
        return any(text in message for message in messages(served))

    await eventually(seen, what=f"a log line with {text!r}", timeout_s=15)
    return next(message for message in messages(served) if text in message)


async def test_the_watcher_applies_edits_and_core_moves_and_survives_an_invalid_one(
    tmp_path: Path,
) -> None:
    core, first = make_core(tmp_path, "notes", manifest=manifest("first revision"))
    second = commit(core, {"agent.yaml": manifest("second revision")}, "second")
    options = {"serve": "reload_interval_s = 0.2", "extra": f'[cores.notes]\npath = "{core}"'}
    path = write_config(tmp_path, reply="first", **options)
    async with serving(path) as served:
        write_config(tmp_path, reply="second", **options)
        applied = await logged(served, "generation 2 applied")
        await anyio.to_thread.run_sync(move_ref, core, first, second)
        moved = await logged(served, "generation 3 applied")
        path.write_text(path.read_text().replace("[agents.assistant]", "[agents.assistant"))
        rejected = await logged(served, "config rejected")
        async with httpx.AsyncClient(base_url=served.url, timeout=5) as client:
            assert (await client.get("/readyz")).status_code == 200
        assert served.process.returncode is None
        write_config(tmp_path, reply="third", **options)
        await logged(served, "generation 4 applied")
        served.signal(signal.SIGTERM)
        assert await served.exit_code(20) == 0
    assert applied == "generation 2 applied (providers.test)"
    assert moved == f"generation 3 applied (core 'notes' moved {first[:12]} -> {second[:12]})"
    assert "is not valid TOML" in rejected
    assert rejected.endswith("; generation 3 keeps serving")


async def test_sighup_reloads_at_once(tmp_path: Path) -> None:
    # Polling off: only the signal can have made generation 2.
    path = write_config(tmp_path, reply="first", serve="reload_interval_s = 0")
    async with serving(path) as served:
        write_config(tmp_path, reply="second", serve="reload_interval_s = 0")
        served.signal(signal.SIGHUP)
        assert await logged(served, "applied") == "generation 2 applied (providers.test)"
        served.signal(signal.SIGHUP)
        assert await logged(served, "nothing changed") == (
            "nothing changed; generation 2 keeps serving"
        )
        served.signal(signal.SIGTERM)
        assert await served.exit_code(20) == 0
