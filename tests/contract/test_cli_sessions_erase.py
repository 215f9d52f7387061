"""`hostkit sessions erase SESSION_ID --reason TEXT`: one session's content, erased.

The turns are real (a Host with a scripted model ran them on the project's database);
the CLI runs in-process (``CliRunner``, no terminal on stdin). The erase needs a reason
and, off a terminal, ``--yes``; it writes one ``session.erased`` audit row. Bad input is
one bounded line and exit status 2, and nothing is erased.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from hostkit.cli import app
from hostkit.store import RuntimeStore
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import TurnResult
from tests.contract.test_clause_cli_inbox_delivery import run_here
from tests.contract.test_cli_inbox import CONFIG
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

SECRET = "PASSPORT-X7Q4-ZEBRAFISH"


@pytest.fixture
async def turn(tmp_path: Path) -> TurnResult:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    async with open_host(tmp_path, ScriptedModel([Reply(f"noted {SECRET}")])) as host:
        return await host.turns.run(request(f"my passport is {SECRET}"))


async def transcript(tmp_path: Path, session_id: str) -> int:
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        row = await store.read(
            lambda c: c.execute(
                "SELECT count(*) FROM messages WHERE session_id = ?", [session_id]
            ).fetchone()
        )
    return int(row[0])


async def test_erase_empties_the_session_and_says_what_it_did(
    tmp_path: Path, turn: TurnResult
) -> None:
    code, out, err = await run_here(
        "sessions",
        "erase",
        turn.session_id,
        "--reason",
        "alice asked to be forgotten",
        "--yes",
        cwd=tmp_path,
        columns=200,
    )
    said = out + err
    assert code == 0, said
    assert f"erased session {turn.session_id}: 1 turns" in said
    assert SECRET not in said
    assert await transcript(tmp_path, turn.session_id) == 0
    # The listing still works, and still shows the session (its turn is a tombstone).
    code, out, _ = await run_here("sessions", "--json", cwd=tmp_path, columns=200)
    assert code == 0
    assert turn.session_id in out
    assert SECRET not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--yes",), "--reason is required"),
        (("--reason", "why"), "add --yes"),
        (("--reason", "x" * 600, "--yes"), "--reason is at most"),
    ],
    ids=["no-reason", "no-yes-off-a-terminal", "long-reason"],
)
async def test_bad_input_is_one_line_and_nothing_is_erased(
    tmp_path: Path, turn: TurnResult, args: tuple[str, ...], message: str
) -> None:
    code, out, err = await run_here(
        "sessions", "erase", turn.session_id, *args, cwd=tmp_path, columns=200
    )
    assert code == 2
    assert message in out + err
    assert len((out + err).strip().splitlines()) == 1
    assert await transcript(tmp_path, turn.session_id) == 2


async def test_an_unknown_session_is_not_found(tmp_path: Path, turn: TurnResult) -> None:
    code, out, err = await run_here(
        "sessions", "erase", "ses_nothing", "--reason", "why", "--yes", cwd=tmp_path
    )
    assert code == 2
    assert "session not found" in out + err
    assert await transcript(tmp_path, turn.session_id) == 2


def invoke_as_said(*args: str) -> tuple[int, str]:
    """The CLI with exactly these arguments (``run_here`` adds ``--config`` at the end)."""
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout + result.stderr


async def test_options_said_before_erase_are_the_erases(tmp_path: Path, turn: TurnResult) -> None:
    """``hostkit sessions -c X --operator O erase ...`` erases in X's database and audits
    O: options said before the subcommand are not dropped (another project's session, the
    wrong operator in the audit); the listing's own options are refused there."""
    config = str(tmp_path / "hostkit.toml")
    for listing in (("--limit", "3"), ("--before", "x")):
        refused = ("sessions", "-c", config, *listing, "erase", turn.session_id)
        code, said = await anyio.to_thread.run_sync(
            lambda refused=refused: invoke_as_said(*refused, "--reason", "x", "--yes")
        )
        assert code == 2
        assert "--limit, --before and --json list sessions; erase takes none" in said
    assert await transcript(tmp_path, turn.session_id) == 2
    before = ("sessions", "-c", config, "--operator", "alice-oncall", "--reason", "gdpr 42")
    code, said = await anyio.to_thread.run_sync(
        lambda: invoke_as_said(*before, "erase", turn.session_id, "--yes")
    )
    assert code == 0, said
    assert await transcript(tmp_path, turn.session_id) == 0
    async with await RuntimeStore.open(tmp_path / "hostkit.db") as store:
        row = await store.read(
            lambda c: c.execute(
                "SELECT principal_id, reason FROM audit WHERE kind = 'session.erased'"
            ).fetchone()
        )
    assert tuple(row) == ("operator:alice-oncall", "gdpr 42")
