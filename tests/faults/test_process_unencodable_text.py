"""Text with no bytes for the kernel (a lone surrogate) starts nothing and leaks nothing.

``"x\\ud800"`` is valid JSON and a valid Python string, but ``os.fsencode``
cannot encode it. The spawn found out only after the two artifact files were
opened, and its ``UnicodeEncodeError`` (not an ``OSError``) skipped their
cleanup: two descriptors and two files per call, and an internal error for
the model. It is refused by ``terminal.run``'s preflight (before anyone is
asked), by ``run_process`` (any other caller), and a spawn failing with any
error at all takes its artifacts with it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.builtins.process import ProcessSupervisor, run_process
from hostkit.builtins.process import _process as process_module
from hostkit.errors import InvalidValue, UserError
from tests.contract.test_effects_terminal import PY, Terminal, terminal  # noqa: F401 (fixture)

pytestmark = pytest.mark.anyio

LONE = "x\ud800"


def _held_under(directory: Path) -> list[str]:
    """Blocking: what this process holds open under ``directory``."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            held.append(target)
    return held


def _files_under(directory: Path) -> list[Path]:
    """Blocking: every file under ``directory`` (none when it does not exist)."""
    return [path for path in directory.rglob("*") if path.is_file()]


@pytest.fixture
async def supervisor() -> AsyncIterator[ProcessSupervisor]:
    async with ProcessSupervisor() as opened:
        yield opened


@pytest.mark.parametrize(
    "arguments",
    [
        {"argv": ["echo", LONE]},
        {"argv": [LONE]},
    ],
)
async def test_terminal_run_refuses_it_before_anything_is_asked_or_spawned(
    terminal: Terminal,  # noqa: F811 (the fixture imported above)
    arguments: dict[str, Any],
) -> None:
    session = await terminal.session()
    for _ in range(3):
        result = await session.call("terminal.run", **arguments)
        # started=False: the preflight refused it; the tool (and any approver) never saw it.
        assert (result.status, result.started) == ("denied", False), result
        assert "file system can encode" in (result.error or "")
    assert await anyio.to_thread.run_sync(_held_under, terminal.artifacts) == []
    assert await anyio.to_thread.run_sync(_files_under, terminal.artifacts) == []
    assert terminal.supervisor.owners() == ()


async def test_the_preflight_refuses_it_in_argv_and_cwd(
    terminal: Terminal,  # noqa: F811 (the fixture imported above)
) -> None:
    """The schema already refuses a lone surrogate in ``cwd``; the preflight does not
    count on it (it is what refuses before an approval, whoever calls it)."""
    check = terminal.tool("terminal.run").preflight
    assert check is not None
    base = {"argv": ("true",), "cwd": ".", "deadline_s": 5.0, "background": False, "secrets": ()}
    check(base)
    for changed in ({"argv": ("echo", LONE)}, {"cwd": LONE}):
        with pytest.raises(UserError, match="file system can encode"):
            check({**base, **changed})


@pytest.mark.parametrize(
    "options",
    [
        {"argv": [sys.executable, "-c", "pass", LONE]},
        {"env": {"NAME": LONE}},
        {"env": {LONE: "value"}},
        {"cwd": Path(LONE)},
    ],
)
async def test_run_process_refuses_it_as_an_invalid_value_with_no_artifacts(
    supervisor: ProcessSupervisor, tmp_path: Path, options: dict[str, Any]
) -> None:
    artifacts = tmp_path / "artifacts"
    call: dict[str, Any] = {
        "argv": [sys.executable, "-c", "pass"],
        "cwd": tmp_path,
        "env": {},
        **options,
    }
    with pytest.raises(InvalidValue, match="file system can encode") as raised:
        await run_process(
            call.pop("argv"), supervisor=supervisor, deadline_s=5.0, artifact_dir=artifacts, **call
        )
    assert len(raised.value.message) < 200
    assert "\ud800" not in raised.value.message  # shown escaped, if at all
    assert not await anyio.Path(artifacts).exists()
    assert await anyio.to_thread.run_sync(_held_under, artifacts) == []


class NotAnOSError(Exception):
    """What a spawn may raise besides ``OSError`` (a ``UnicodeEncodeError``, a bug)."""


async def test_a_spawn_failing_with_any_error_takes_its_artifacts_with_it(
    supervisor: ProcessSupervisor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(*args: object, **kwargs: object) -> None:
        raise NotAnOSError("the spawn failed after the artifacts were opened")

    monkeypatch.setattr(process_module, "spawn_under_init", failing)
    artifacts = tmp_path / "artifacts"
    for _ in range(3):
        with pytest.raises(NotAnOSError):
            await run_process(
                [PY, "-c", "pass"],
                supervisor=supervisor,
                cwd=tmp_path,
                env={},
                deadline_s=5.0,
                artifact_dir=artifacts,
            )
    assert await anyio.to_thread.run_sync(_held_under, artifacts) == []
    assert await anyio.to_thread.run_sync(_files_under, artifacts) == []
    assert supervisor.owners() == ()
