"""The CLI's listings and reports as a person and a script use them (issue 13, "The CLI").

IDs never wrap at 80 columns, every listing speaks JSON, ``context`` and
``budget`` default to the latest session, ``--reason`` is optional only on a
database the local user owns, ``sessions`` shows what a person scans for,
contradictory flags are refused, and a spinner says the turn is waiting for
its model. Commands run as real subprocesses, except the spinner, which needs
a terminal and is driven in-process.
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest
from rich.console import Console

from hostkit import tool
from hostkit.cli._approver import ConsoleApprover
from hostkit.cli._common import local_reason
from hostkit.cli._render import print_result
from hostkit.cli._turn import Waiting, stream_turn
from hostkit.effects import ApprovalKey, ApprovalRequest
from hostkit.errors import InvalidValue
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.types import ModelRequest
from tests.cli import run_cli_async
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

CONFIG = """
[host]
database = "state/hostkit.db"
workspace = "workspace"

[providers.scripted]
kind = "scripted"
script = [
  { tool = "files.write", arguments = { path = "a.md", content = "x" } },
  { reply = "Done." },
]

[agents.assistant]
provider = "scripted"
builtins = ["files.write"]
memory = false

[agents.assistant.policy]
allow = ["*"]
ask = ["files.write"]
"""
SESSION_ID = re.compile(r"\bses_[0-9a-f]{28}\b")
APPROVAL_ID = re.compile(r"\bapr_[0-9a-f]{28}\b")


async def hostkit(
    *args: str, cwd: Path, columns: int = 80, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    """The CLI as a script runs it (no terminal on stdin), ``columns`` wide."""
    result = await run_cli_async(
        *args, cwd=cwd, env={**os.environ, "COLUMNS": str(columns), **(env or {})}
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.fixture
async def project(tmp_path: Path) -> Path:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    await anyio.Path(tmp_path / "workspace").mkdir()
    # Two conversations, the second one the most recent; each pauses for its approval.
    for conversation in ("first", "second"):
        code, _, err = await hostkit("run", "--conversation", conversation, "go", cwd=tmp_path)
        assert code == 3, err
    return tmp_path


async def sessions_json(project: Path) -> list[dict[str, object]]:
    code, out, err = await hostkit("sessions", "--json", cwd=project)
    assert code == 0, err
    rows = json.loads(out)
    assert rows["truncated"] is False
    return rows["sessions"]  # type: ignore[no-any-return]


async def test_ids_never_wrap_or_get_cut_at_80_columns(project: Path) -> None:
    expected = {row["session"]["session_id"] for row in await sessions_json(project)}  # type: ignore[index]
    assert len(expected) == 2
    for columns in (80, 100, 200):
        code, out, err = await hostkit("sessions", cwd=project, columns=columns)
        assert code == 0, err
        assert all(len(line) <= columns for line in out.splitlines()), out
        assert set(SESSION_ID.findall(out)) == expected
        code, out, err = await hostkit("approvals", "list", cwd=project, columns=columns)
        assert code == 0, err
        assert all(len(line) <= columns for line in out.splitlines()), out
        assert len(set(APPROVAL_ID.findall(out))) == 2
        assert "files.write" in out
        assert "pending" in out


async def test_sessions_shows_agent_last_activity_turns_and_outcome(project: Path) -> None:
    rows = await sessions_json(project)
    assert [row["agent"] for row in rows] == ["assistant", "assistant"]
    assert [row["turns"] for row in rows] == [1, 1]
    assert [row["last_outcome"] for row in rows] == ["needs_user", "needs_user"]
    # Most recent activity first.
    activity = [str(row["last_activity"]) for row in rows]
    assert activity == sorted(activity, reverse=True)
    code, out, err = await hostkit("sessions", cwd=project, columns=120)
    assert code == 0, err
    header = out.splitlines()[0]
    for column in ("session", "agent", "last activity", "turns", "outcome"):
        assert column in header
    first_row = next(line for line in out.splitlines() if SESSION_ID.search(line))
    assert "assistant" in first_row
    assert "needs_user" in first_row


async def test_every_listing_and_report_speaks_json(project: Path) -> None:
    latest = (await sessions_json(project))[0]["session"]["session_id"]  # type: ignore[index]
    code, out, err = await hostkit("approvals", "list", "--json", cwd=project)
    assert code == 0, err
    listed = json.loads(out)
    # An object, as every other listing: the page and whether it was cut.
    assert (listed["status"], listed["truncated"]) == ("open", False)
    approvals = listed["approvals"]
    assert {a["effect"] for a in approvals} == {"files.write"}
    assert {a["status"] for a in approvals} == {"pending"}
    code, out, err = await hostkit("context", "--json", cwd=project)
    assert code == 0, err
    context = json.loads(out)
    assert context["session_id"] == latest
    assert context["steps"], "the paused turn made one provider call"
    code, out, err = await hostkit("budget", "--json", cwd=project)
    assert code == 0, err
    budget = json.loads(out)
    assert budget["session_id"] == latest
    assert len(budget["turns"]) == 1


async def test_sessions_and_approvals_page_on_through_the_hint_they_print(
    project: Path,
) -> None:
    """Both listings showed only the newest page (200 approvals, 499 sessions) and offered
    no way to the rest: now a cut page says which ``--before`` lists the older rows, in
    the table's hint and in ``--json`` (``next_before``), and following it reaches them."""
    for listing, ids in (("sessions",), SESSION_ID), (("approvals", "list"), APPROVAL_ID):
        code, everything, err = await hostkit(*listing, "--json", cwd=project)
        assert code == 0, err
        whole = json.loads(everything)
        assert (whole["truncated"], whole["next_before"]) == (False, None)
        code, out, err = await hostkit(*listing, "--limit", "1", cwd=project, columns=200)
        assert code == 0, err
        (newest,) = set(ids.findall(out))
        hint = re.search(r"--before (\S+) shows older ones\)", err)
        assert hint is not None, err
        code, out, err = await hostkit(
            *listing, "--limit", "1", "--before", hint[1], cwd=project, columns=200
        )
        assert code == 0, err
        (older,) = set(ids.findall(out))
        assert older != newest
        assert "--before" not in err  # the last page
        assert {newest, older} == set(ids.findall(everything))
        code, out, err = await hostkit(*listing, "--limit", "1", "--json", cwd=project)
        assert code == 0, err
        page = json.loads(out)
        assert (page["truncated"], str(page["next_before"])) == (True, hint[1])
        code, out, err = await hostkit(
            *listing, "--limit", "1", "--json", "--before", hint[1], cwd=project
        )
        assert code == 0, err
        assert set(ids.findall(out)) == {older}
        assert (json.loads(out)["truncated"], json.loads(out)["next_before"]) == (False, None)


@pytest.mark.parametrize(
    ("listing", "before", "said"),
    [
        (("sessions",), "not-a-cursor", "cursor is not one this store issued"),
        (("sessions",), "W" * 5000, "cursor is not one this store issued"),
        (("approvals", "list"), str(2**63), "before must be an integer from 0 to"),
    ],
)
async def test_a_before_the_listing_never_printed_is_refused_in_one_line(
    project: Path, listing: tuple[str, ...], before: str, said: str
) -> None:
    code, out, err = await hostkit(*listing, "--before", before, cwd=project)
    assert (code, out) == (2, "")
    assert said in err
    assert before not in err
    assert len(err.strip().splitlines()) == 1


async def test_context_and_budget_default_to_the_most_recently_active_session(
    project: Path,
) -> None:
    rows = await sessions_json(project)
    latest = rows[0]["session"]["session_id"]  # type: ignore[index]
    older = rows[1]["session"]["session_id"]  # type: ignore[index]
    for command in ("context", "budget"):
        code, out, err = await hostkit(command, cwd=project, columns=200)
        assert code == 0, err
        assert latest in out
        assert older not in out
        code, out, err = await hostkit(command, str(older), cwd=project, columns=200)
        assert code == 0, err
        assert older in out


async def test_context_and_budget_before_any_session_say_so_in_one_line(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    for command in ("context", "budget"):
        code, out, err = await hostkit(command, cwd=tmp_path)
        assert code == 2
        assert out == ""
        assert err.strip().startswith("error: there are no sessions yet")
        assert len(err.strip().splitlines()) == 1


async def test_reason_is_optional_only_on_a_database_the_local_user_owns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "hostkit.db"
    await anyio.Path(database).write_bytes(b"")
    assert "on their own database" in await local_reason(database)
    # The same file seen by another local user: they must say why.
    other = (await anyio.Path(database).stat()).st_uid + 1
    monkeypatch.setattr(os, "getuid", lambda: other)
    with pytest.raises(InvalidValue, match=r"--reason is required: .* belongs to another user"):
        await local_reason(database)
    with pytest.raises(InvalidValue, match="--reason is required"):
        await local_reason(tmp_path / "missing.db")


async def test_contradictory_flags_are_refused_before_anything_runs(tmp_path: Path) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(CONFIG)
    code, out, err = await hostkit("run", "--new", "--session", "ses_x", "hello", cwd=tmp_path)
    assert code == 2
    assert out == ""
    assert "choose one of --new" in err
    assert len(err.strip().splitlines()) == 1
    assert not await anyio.Path(tmp_path / "state").exists()


def after(delay_s: float, text: str) -> ScriptedModel:
    """A model that answers ``text`` after ``delay_s``, as a local model still loading does."""

    async def decide(request: ModelRequest) -> Reply:
        await anyio.sleep(delay_s)
        return Reply(text)

    return ScriptedModel([decide])


async def test_a_spinner_shows_while_the_turn_waits_for_its_model(tmp_path: Path) -> None:
    model = after(0.6, "ready")
    terminal = io.StringIO()
    progress = Console(file=terminal, force_terminal=True, width=80)
    out = io.StringIO()
    async with open_host(tmp_path, model) as host:
        result = await stream_turn(
            host, "hi", agent="assistant", conversation="c", out=out, progress=progress
        )
    assert result.outcome == "completed"
    assert out.getvalue() == "ready\n"
    assert "waiting for the model" in terminal.getvalue()
    # Not a terminal (a pipe, a log file): nothing is drawn.
    quiet = io.StringIO()
    async with open_host(tmp_path, after(0.3, "again")) as host:
        await stream_turn(
            host,
            "hi",
            agent="assistant",
            conversation="c",
            out=io.StringIO(),
            progress=Console(file=quiet, force_terminal=False),
        )
    assert quiet.getvalue() == ""


async def test_the_spinner_is_put_away_before_any_prompt_is_drawn(tmp_path: Path) -> None:
    """A prompt can come before the model is called (an MCP server's connect): the
    spinner line, still drawn then, is put away first, or it redraws over the question."""
    terminal = io.StringIO()
    progress = Console(file=terminal, force_terminal=True, width=80)
    approver = ConsoleApprover(console=progress, stdin=io.StringIO("o\n"))
    during: list[object] = []

    async def decide(request: ModelRequest) -> Reply:
        during.append(getattr(approver.before_prompt, "__func__", None))
        return Reply("ready")

    drawn_before: list[str] = []
    async with open_host(tmp_path, ScriptedModel([decide])) as host:
        host.approvals.runtime.provider = approver
        await stream_turn(
            host, "hi", agent="assistant", conversation="c", out=io.StringIO(), progress=progress
        )
        # While the turn streamed, the approver held its spinner's stop; not after.
        assert during == [Waiting.stop]
        assert getattr(approver.before_prompt, "__func__", None) is None
        approver.before_prompt = lambda: drawn_before.append(terminal.getvalue())
        request = ApprovalRequest(
            "apr_1", ApprovalKey("p", "s", "f", "mcp.connect:git"), "mcp.connect:git", "t", {}
        )
        assert await approver.decide(request) == "approve_once"
    # Called before the prompt printed anything of its own.
    assert len(drawn_before) == 1
    assert "mcp.connect:git" not in drawn_before[0]
    assert "mcp.connect:git" in terminal.getvalue()


async def test_a_failed_effect_says_why_on_its_line(tmp_path: Path) -> None:
    """The person who wrote a tool sees the exception it raised, bounded and escaped, not
    only the model that was told it; a succeeded effect's line stays short."""

    @tool
    async def delete_file(name: str) -> str:
        """Delete a file."""
        raise FileNotFoundError(f"no such file: {name}\x1b[2J")

    model = ScriptedModel(
        [CallTools(("delete_file", {"name": "old.log"})), Reply("done")], repeat_last=True
    )
    async with open_host(tmp_path, model, tools=[delete_file]) as host:
        result = await host.turns.run(request("clean up"))
    shown = io.StringIO()
    print_result(Console(file=shown, width=200), result, database="db")
    (line,) = [text for text in shown.getvalue().splitlines() if "effect delete_file" in text]
    assert line == "  effect delete_file: failed: FileNotFoundError: no such file: old.log\\x1b[2J"
