"""The whole-Host sweep: after real turns that handle a bound secret every way a tool can,
no trace of it is anywhere the Host keeps or shows things, and another owner reads nothing.

One Host on a real SQLite file runs turns whose tools hand the secret back in every
shape (plain, inside a dict, inside a structured outcome, in an exception message,
line by line with ``\\r\\n``, in a persisted audit view), plus ``terminal.run``
printing it from a real child. Then every cell of every table of the database, the
bytes of its WAL (read while the Host is open, before closing checkpoints it away), every
artifact file, every event an observer saw and every view of every result are searched
for the value, each of its lines, and its JSON- and repr-escaped forms.
The expected count is zero.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.effects import ApprovalRequest, AuthoredTool, ToolContext, ToolOutcome
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.turns import TurnEvent
from hostkit.types import ModelRequest, TurnResult
from tests.hosts import request
from tests.support import table_rows

pytestmark = pytest.mark.slow

SECRET_NAME = "HK_SWEEP_TOKEN"
# Quotes, a backslash, non-ASCII and two lines: every escaping step changes its bytes.
SECRET = 'sw33p-"Quoted"\\back-sl\u00e4sh\nsecond-line-Z9Y8X7'
SHAPES = ("plain", "dict", "outcome", "raise", "crlf", "audit")


class Always:
    async def decide(self, request: ApprovalRequest) -> str:
        return "approve_once"


class Recorder:
    def __init__(self) -> None:
        self.events: list[TurnEvent] = []

    def notify(self, event: TurnEvent) -> None:
        self.events.append(event)


async def _leak(ctx: ToolContext, shape: str, secrets: list[str]) -> Any:
    value = ctx.secrets.get(SECRET_NAME, "")
    if shape == "plain":
        return f"the value is {value} (end)"
    if shape == "dict":
        return {"nested": [{"v": value}], "text": f"x{value}y"}
    if shape == "outcome":
        return ToolOutcome("failed", {"out": value}, f"exit: {value}")
    if shape == "raise":
        raise RuntimeError("x" * 400 + f" failed with {value!r} and {value}")
    if shape == "audit":
        # The audit view is persisted, not shown: it is redacted all the same.
        return ToolOutcome("succeeded", "audited", audit={"cwd": f"/w/{value}", "env": [value]})
    return "\r\n".join(value.split("\n"))  # crlf


LEAK = AuthoredTool(
    "sweep.leak",
    _leak,
    description="Returns what it was given, in many shapes.",
    secrets_argument="secrets",
)


def _decide(request: ModelRequest) -> Reply | CallTools:
    last = request.messages[-1]
    if last.role == "tool":
        return Reply("ok")
    shape = last.content.strip()
    if shape == "terminal":
        return CallTools(
            ("terminal_run", {"argv": ["printenv", SECRET_NAME], "secrets": [SECRET_NAME]})
        )
    if shape.startswith("read:"):
        return CallTools(("files_read", {"path": shape.removeprefix("read:")}))
    return CallTools(("sweep_leak", {"shape": shape, "secrets": [SECRET_NAME]}))


def _forms(value: str) -> list[str]:
    lines = [line for line in value.splitlines() if len(line) >= 6]
    return [value, *lines, json.dumps(value)[1:-1], repr(value)[1:-1]]


def _count(text: str) -> int:
    return sum(text.count(form) for form in _forms(SECRET))


def _files_text(root: Path) -> Iterator[str]:
    for path in root.rglob("*"):
        if path.is_file():
            yield path.read_bytes().decode("utf-8", "replace")


def _result_text(result: TurnResult) -> str:
    return repr(result) + json.dumps(result.to_json(), ensure_ascii=False)


@pytest.mark.anyio
async def test_no_trace_of_a_bound_secret_anywhere_and_no_cross_owner_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET)
    state, workspace = tmp_path / "state", tmp_path / "workspace"
    state.mkdir()
    workspace.mkdir()
    agent = {
        "provider": "test",
        "memory": False,
        "secrets": [SECRET_NAME],
        "builtins": ["terminal.run", "files.read", "files.list"],
    }
    config = parse_config(
        {
            "host": {
                "database": str(state / "hostkit.db"),
                "artifacts": str(state / "artifacts"),
                "workspace": str(workspace),
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": agent},
            "secrets": {SECRET_NAME: {"programs": [shutil.which("printenv")]}},
        },
        base_dir=state,
    )
    recorder = Recorder()
    model = ScriptedModel([_decide], repeat_last=True)
    caps = capabilities(model, tools=[LEAK], observer=recorder, config=config)
    results: list[TurnResult] = []
    async with Host.open(config, capabilities=caps, approver=Always()) as host:
        for shape in (*SHAPES, "terminal"):
            results.append(await host.turns.run(request(shape, principal="alice")))
        # Another owner's agent tries the Host's own state by every path it could name.
        database = config.database_path
        for path in (
            "../state/hostkit.db",
            str(database),
            f"{database}-wal",
            str(config.artifact_root),
        ):
            results.append(await host.turns.run(request(f"read:{path}", principal="bob")))
        # The WAL holds the newest pages and is checkpointed away when the Host closes:
        # read it now, while it still has them (``-shm`` is only an index of it).
        wal = database.with_name(database.name + "-wal")
        wal_seen = wal.exists()
        wal_bytes = await anyio.to_thread.run_sync(wal.read_bytes) if wal_seen else b""
        operator = await host.operator("ops", reason="sweep the effect audit views")
        audit_kinds = {
            record.kind
            for result in results
            for record in await host.store.inspect.effect_audits(operator, result.session_id)
        }

    statuses = {r.effects[0].status for r in results[: len(SHAPES) + 1] if r.effects}
    assert "succeeded" in statuses, [r.effects for r in results]
    terminal_effect = results[len(SHAPES)].effects[0]
    assert terminal_effect.status == "succeeded", terminal_effect
    bob = results[len(SHAPES) + 1 :]
    assert all(r.outcome == "completed" for r in bob)
    assert [r.effects[0].status for r in bob] == ["denied"] * len(bob)

    found = {
        "results": sum(_count(_result_text(r)) for r in results),
        "events": sum(_count(repr(event)) for event in recorder.events),
        "database": sum(_count(text) for text in table_rows(config.database_path)),
        "wal": _count(wal_bytes.decode("utf-8", "replace")),
        "state_files": sum(_count(text) for text in _files_text(state)),
        "workspace": sum(_count(text) for text in _files_text(workspace)),
        "cross_owner_reads": sum("alice" in _result_text(r) for r in bob),
    }
    assert wal_seen
    # It is the live WAL of these turns (not an empty file): Bob's last requests are in it.
    assert b"read:../state/hostkit.db" in wal_bytes
    # The audit views were written (so the database sweep above covered them).
    assert {"effect.sweep.leak", "effect.terminal.run"} <= audit_kinds
    assert found == dict.fromkeys(found, 0)
