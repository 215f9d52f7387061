"""The headless front end, run as a real subprocess: init, run (streamed), sessions."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.anyio

CONFIG = """
[host]
database = "state/hostkit.db"

[providers.scripted]
kind = "scripted"
script = [
  { tool = "notes.read", arguments = { name = "welcome.md" } },
  { reply = "Every turn ends with exactly one terminal record." },
]

[agents.assistant]
provider = "scripted"
tool_modules = ["hostkit.examples.tools"]
"""


async def hostkit(*args: str, cwd: Path) -> tuple[int, str, str]:
    result = await anyio.run_process([sys.executable, "-m", "hostkit", *args], cwd=cwd, check=False)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_init_writes_a_starter_config_once(tmp_path: Path) -> None:
    code, _, err = await hostkit("init", cwd=tmp_path)
    assert code == 0
    text = await anyio.Path(tmp_path / "hostkit.toml").read_text()
    assert "[agents.assistant]" in text
    code, _, err = await hostkit("init", cwd=tmp_path)
    assert code == 1
    assert "exists" in err
    assert (await hostkit("init", "--force", cwd=tmp_path))[0] == 0


async def test_run_streams_the_answer_and_reports_the_outcome(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    code, out, err = await hostkit("run", "What is recorded?", cwd=tmp_path)
    assert code == 0, err
    assert "[calling notes_read]" in out
    assert "Every turn ends with exactly one terminal record." in out
    assert "outcome: completed" in err
    assert "effect notes.read: succeeded" in err
    assert str(tmp_path / "state" / "hostkit.db") in err.replace("\n", "")


async def test_sessions_needs_an_audited_reason(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    assert (await hostkit("run", "hello", cwd=tmp_path))[0] == 0
    code, _, err = await hostkit("sessions", cwd=tmp_path)
    assert code == 2
    assert "--reason" in err
    code, out, err = await hostkit("sessions", "--reason", "checking the demo", cwd=tmp_path)
    assert code == 0, err
    assert "ses_" in out
    assert "conversation" in out


async def test_errors_are_typed_and_bounded(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    code, _, err = await hostkit("run", "--agent", "nobody", "hi", cwd=tmp_path)
    assert code == 2
    assert "error: turn rejected: no agent named 'nobody'" in err
    assert "Traceback" not in err
    await anyio.Path(tmp_path / "bad.toml").write_text('[agents.a]\nprovider = "missing"\n')
    code, _, err = await hostkit("run", "-c", "bad.toml", "hi", cwd=tmp_path)
    assert code == 2
    assert "agents" in err
    assert "Traceback" not in err
