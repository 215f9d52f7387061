"""What a newcomer meets first: hints that work when pasted, help that shows every name,
ids kept whole at 80 columns, a failed gate's tail, one clear line per mistake.

Width-sensitive output runs as a real subprocess (its console reads ``COLUMNS`` at
start-up); the rest runs in-process (``CliRunner``), as in ``_cli_cores``.
"""

from __future__ import annotations

import io
import logging
import os
import re
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest
import typer
from click import Command
from rich.console import Console

from hostkit.cli import app
from hostkit.cli._approver import interrupted_line
from hostkit.cli._common import CommandWarnings, default_project_note
from hostkit.cli._core_render import gate_lines
from hostkit.cli._effects import audit_table
from hostkit.cli._inspect import budget_report
from hostkit.cli._render import command_line, resume_hints
from hostkit.freeze import freeze
from hostkit.inspect import BudgetView, StepUsage, TokenTotals, TurnUsage
from hostkit.store import PendingApproval
from hostkit.types import GateOutcome
from tests.cli import run_cli
from tests.contract._cli_cores import CORE, invoke, make_project

WRITER = """
[host]
database = "hostkit.db"
workspace = "workspace"

[providers.scripted]
kind = "scripted"
script = [
  { tool = "files.write", arguments = { path = "a.md", content = "x" } },
  { reply = "Done." },
]

[agents.writer]
provider = "scripted"
builtins = ["files.write"]
memory = false

[agents.writer.policy]
allow = ["*"]
ask = ["files.write"]
"""
SESSION_ID = re.compile(r"\bses_[0-9a-f]{28}\b")
TURN_ID = re.compile(r"\bturn_[0-9a-f]{26,}\b")


def hostkit(*args: str, cwd: Path, columns: int = 80) -> tuple[int, str, str]:
    """The CLI as a script runs it: a real process, no terminal on stdin, ``columns`` wide."""
    result = run_cli(*args, cwd=cwd, env={**os.environ, "COLUMNS": str(columns)}, timeout=120)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def paused_writer(tmp_path: Path) -> tuple[Path, str]:
    """A project in a folder with a space in its name whose ``writer`` turn paused; stderr."""
    folder = tmp_path / "sp ace"
    folder.mkdir()
    (folder / "hostkit.toml").write_text(WRITER)
    config = str(folder / "hostkit.toml")
    code, _, err = hostkit("run", "-c", config, "--agent", "writer", "write", cwd=tmp_path)
    assert code == 3, err
    return folder / "hostkit.toml", err


# -- 1. hints are shell-quoted ------------------------------------------------------


def test_the_approval_hints_of_a_paused_turn_paste_as_the_intended_arguments(
    tmp_path: Path,
) -> None:
    config, err = paused_writer(tmp_path)
    approval = re.search(r"\bapr_[0-9a-f]+\b", err)
    assert approval, err
    for verb in ("approve", "deny"):
        line = next(line for line in err.splitlines() if f"hostkit approvals {verb}" in line)
        argv = shlex.split(line.split(None, 1)[1])
        assert argv == [
            "hostkit",
            "approvals",
            verb,
            approval[0],
            "--reason",
            "...",
            "-c",
            str(config),
        ]


def test_init_next_line_pastes_as_the_intended_arguments(tmp_path: Path) -> None:
    code, _, err = invoke("init", str(tmp_path / "sub dir" / "my.toml"))
    assert code == 0, err
    line = next(line for line in err.splitlines() if line.startswith("next: "))
    promote, run = line.removeprefix("next: ").split(", then ")
    config = str(tmp_path / "sub dir" / "my.toml")
    assert shlex.split(promote) == [
        "hostkit",
        "core",
        "promote",
        "assistant",
        "--reason",
        "first revision",
        "-c",
        config,
    ]
    assert shlex.split(run) == ["hostkit", "run", "-c", config, "hello"]


def test_every_other_printed_command_quotes_its_paths_and_ids() -> None:
    config = Path("my project/hostkit.toml")
    line = interrupted_line("apr_1", config=config)
    commands = re.findall(r"`([^`]+)`", line)
    assert [shlex.split(command) for command in commands] == [
        ["hostkit", "approvals", verb, "apr_1", "-c", str(config)] for verb in ("approve", "deny")
    ]
    answered = PendingApproval(
        approval_id="apr_2",
        session_id="ses_1",
        turn_id="turn_1",
        principal_id="cli:local-user",
        core_id="writer",
        core_revision="r",
        effect="files.write",
        call_id="call_1",
        view={},
        policy_fingerprint="apf_1",
        rule_key="files.write",
        status="approved",
        decision="approve_once",
        decided_by="cli",
        continuation_turn_id=None,
        created_at="2026-01-01T00:00:00Z",
        decided_at="2026-01-01T00:01:00Z",
    )
    assert [shlex.split(hint) for hint in resume_hints([answered], config=config)] == [
        ["hostkit", "approvals", "resume", "apr_2", "-c", str(config)]
    ]
    assert shlex.split(command_line("run", "it's", config=config, agent="m:a")) == [
        "hostkit",
        "run",
        "it's",
        "-c",
        str(config),
        "--agent",
        "m:a",
    ]


# -- 2. the not-promoted hint runs as printed ---------------------------------------


def test_the_not_promoted_hint_is_a_command_that_works_as_printed(tmp_path: Path) -> None:
    make_project(tmp_path)
    code, _, err = invoke("core", "status", project=tmp_path)
    assert code == 0, err
    hint = re.search(r"has no live revision; run `([^`]+)`", err)
    assert hint, err
    argv = shlex.split(hint[1])
    assert argv[:4] == ["hostkit", "core", "promote", CORE]
    code, out, err = invoke(*argv[1:], project=tmp_path)
    assert code == 0, err
    assert f"promoted {CORE}" in out


def test_a_core_without_a_repository_says_so_and_how_to_make_one(tmp_path: Path) -> None:
    """Not "no live revision; run promote" (promote would fail next): the path names no
    repository, and the hint that creates one works as printed."""
    core = make_project(tmp_path)
    shutil.rmtree(core)
    _, _, err = invoke("core", "status", project=tmp_path)
    assert "has no live revision" not in err
    hint = re.search(rf"core '{CORE}' has no repository at (\S+) .*create one with `([^`]+)`", err)
    assert hint, err
    assert Path(hint[1]) == core
    argv = shlex.split(hint[2])
    assert argv == ["hostkit", "core", "init", str(core)]
    code, _, err = invoke(*argv[1:], project=tmp_path)
    assert code == 0, err
    code, _, err = invoke("core", "status", project=tmp_path)
    assert "has no live revision" in err


# -- 3. bracketed names survive Rich markup -------------------------------------------


def commands() -> Iterator[tuple[list[str], Command]]:
    def walk(command: Command, path: list[str]) -> Iterator[tuple[list[str], Command]]:
        yield path, command
        for name, sub in (getattr(command, "commands", None) or {}).items():
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


def bracketed(text: str) -> list[str]:
    """The ``[name]`` tokens a help text means to show (``\\[`` is Rich's escape)."""
    return re.findall(r"\[[^\]\s]+\]", text.replace("\\[", "["))


def test_every_bracketed_name_in_help_is_shown() -> None:
    checked = 0
    for path, command in commands():
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        names = [name for text in texts for name in bracketed(text)]
        if not names:
            continue
        code, out, _ = invoke(*path, "--help")
        assert code == 0, path
        flat = " ".join(out.replace("│", " ").split())
        for name in names:
            assert name in flat, (path, name, out)
            checked += 1
    assert checked >= 4  # serve's [serve] twice, core init's [cores.<id>] and [providers]


def test_help_shows_no_docstring_markup() -> None:
    """Help is read on a terminal: no reST literals (````ask````) or roles from docstrings."""
    shown = 0
    for path, _ in commands():
        code, out, _ = invoke(*path, "--help")
        assert code == 0, path
        assert "``" not in out, (path, out)
        assert not re.search(r":(class|func|meth|mod|attr):", out), (path, out)
        shown += 1
    assert shown >= 30  # every command and group, not a few


def test_help_lists_a_flag_without_a_type_as_if_it_took_a_value() -> None:
    """``--json <bool>`` reads as an option that takes a value, and ``--json true`` is a
    usage error: a flag is listed bare, an option that takes one with its type."""
    flags = 0
    for path, command in commands():
        code, out, _ = invoke(*path, "--help")
        assert code == 0, path
        assert "<bool>" not in out, (path, out)
        flags += sum(1 for p in command.params if getattr(p, "is_flag", False))
    assert flags >= 10
    _, out, _ = invoke("run", "--help")
    assert "<str>" in out  # --session takes an id


def test_output_outside_a_project_names_the_cores_table(tmp_path: Path) -> None:
    (tmp_path / "hostkit.toml").write_text('[host]\ndatabase = "hostkit.db"\n')
    code, _, err = invoke("core", "status", project=tmp_path)
    assert code == 0, err
    assert "no cores configured ([cores.<id>] in hostkit.toml)" in err


# -- 4. ids whole at 80 columns -----------------------------------------------------


def budget(model: str = "scripted-1", cost: float | None = 0.0) -> BudgetView:
    totals = TokenTotals(1, 76, 2, 0, 0, cost, 0 if cost is not None else 1)
    step = StepUsage(
        step_id=0,
        decision_id="dec_01a2372c3a7dfd1add4f7dc976e7",
        provider="p",
        model=model,
        input_tokens=12_345,
        output_tokens=2,
        cache_read_tokens=1_000,
        cache_write_tokens=0,
        estimated_input_tokens=12_000,
        raw_input_tokens=12_000,
        error_pct=-2.8,
        finish_reason="stop",
        cost_usd=cost,
        at="2026-01-01T00:00:00Z",
    )
    turns = tuple(
        TurnUsage(turn, "completed", "writer", "2026-01-01T00:00:00Z", (step,), totals, False)
        for turn in ("turn_01a2372c3a71ca42930d8fa46d22", "turn_01a2372c3a71ca42930d8fa46d23")
    )
    return BudgetView("ses_01a2372c3a77b3550ede62a2d39d", turns, None, totals, False)


@pytest.mark.parametrize("width", [80, 100, 200])
def test_budget_keeps_every_id_whole_on_one_line(width: int) -> None:
    shown = io.StringIO()
    Console(file=shown, width=width, color_system=None).print(budget_report(budget(), width=width))
    out = shown.getvalue()
    assert all(len(line) <= width for line in out.splitlines()), out
    assert set(TURN_ID.findall(out)) == {
        "turn_01a2372c3a71ca42930d8fa46d22",
        "turn_01a2372c3a71ca42930d8fa46d23",
    }, out
    assert "ses_01a2372c3a77b3550ede62a2d39d" in out
    assert "12,345" in out  # the input column is never the one left out


@pytest.mark.parametrize("width", [80, 100, 200])
def test_the_effects_audit_view_keeps_a_run_id_whole_on_one_line(width: int) -> None:
    """The view column wraps at spaces; at 80 columns it is kept wide enough for
    ``run_id=run_…`` (the optional columns make room), so the id is never split."""
    run_id = "run_01a2493b8b0d730551ae1a8f5205"
    detail = {
        "outcome": "succeeded",
        "cwd_resolved": "/srv/agents/workspace",
        "executable": "/usr/bin/sleep",
        "sandbox": "bwrap",
        "run_id": run_id,
    }
    record = SimpleNamespace(
        at="2026-12-06T02:50:00.000Z",
        kind="effect.terminal.run",
        subject="call_01a2493b8b0d730551ae1a8f",
        detail=freeze(detail),
    )
    shown = io.StringIO()
    table = audit_table(SimpleNamespace(audits=[record]), width=width)  # type: ignore[arg-type]
    Console(file=shown, width=width, color_system=None).print(table)
    out = shown.getvalue()
    assert all(len(line) <= width for line in out.splitlines()), out
    assert run_id in out, out


def test_budget_says_an_unpriced_cost_is_unknown_never_a_dash() -> None:
    shown = io.StringIO()
    Console(file=shown, width=200, color_system=None).print(
        budget_report(budget("gpt-x", None), width=200)
    )
    rows = [line for line in shown.getvalue().splitlines() if "gpt-x" in line]
    assert rows, shown.getvalue()
    assert all(line.rstrip().endswith("unknown") for line in rows), shown.getvalue()


def test_the_run_footer_keeps_the_session_and_turn_ids_whole(tmp_path: Path) -> None:
    _, err = paused_writer(tmp_path)
    footer = next(line for line in err.splitlines() if line.startswith("session: "))
    assert SESSION_ID.search(footer), err
    assert TURN_ID.search(footer), err


# -- 5. a failed gate shows the end of its output, line by line -----------------------


def test_a_failed_gate_keeps_the_tail_of_its_output_line_by_line() -> None:
    output = "pytest exited 1\n" + "\n".join(f"line {i} token=sk-{i:032d}" for i in range(400))
    gate = GateOutcome("tests", False, output)
    assert len(gate.detail) <= 2_000
    assert gate.detail.splitlines()[:2] == ["pytest exited 1", "…"]  # the headline, then the cut
    assert gate.detail.splitlines()[-1].startswith("line 399 ")
    assert "sk-" not in gate.detail  # still redacted
    lines = gate_lines([gate])
    assert lines[0] == "FAILED  tests"
    assert [line.split()[:2] for line in lines[-3:]] == [
        ["line", "397"],
        ["line", "398"],
        ["line", "399"],
    ]


def test_a_gate_detail_keeps_short_output_whole() -> None:
    gate = GateOutcome("tests", False, "pytest exited 1\r\nE   assert 1 == 2\n1 failed")
    assert gate.detail == "pytest exited 1\nE   assert 1 == 2\n1 failed"


# -- 6. one clear line per mistake ------------------------------------------------------


def test_a_paused_turn_says_it_waits_once_and_not_as_an_error(tmp_path: Path) -> None:
    _, err = paused_writer(tmp_path)
    assert "error:" not in err, err
    assert err.count("waiting for approval") == 1, err


def test_init_over_an_existing_file_is_one_error_line_with_status_2(tmp_path: Path) -> None:
    (tmp_path / "hostkit.toml").write_text("# mine\n")
    code, _, err = invoke("init", str(tmp_path / "hostkit.toml"))
    assert code == 2
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    assert "--force" in err
    assert (tmp_path / "hostkit.toml").read_text() == "# mine\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--session", ""), "--session needs a session id"),
        (("--session", "fresh"), "--session needs a session id (ses_...); use --new"),
        (("--session", "bound"), "--session needs a session id"),
        (("--attach", "d.png"), "d.png: is a directory, not a file"),
        (("--attach", ""), "--attach needs a file path"),
    ],
)
def test_run_refuses_an_empty_or_wrong_argument_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], said: str
) -> None:
    (tmp_path / "hostkit.toml").write_text(WRITER)
    (tmp_path / "d.png").mkdir()
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke("run", "--agent", "writer", *args, "hello", project=tmp_path)
    assert code == 2
    assert err.startswith(f"error: {said}"), err
    assert err.count("\n") == 1, err
    assert out == ""


# -- 5. stop 33's newcomer review -------------------------------------------------------


def test_the_not_promoted_hint_names_the_config_it_was_given_and_works_elsewhere(
    tmp_path: Path,
) -> None:
    # Printed for a project opened with -c, the hint used to leave -c out: pasted where
    # the user stood it acted on no project (and created a stray database there).
    project = tmp_path / "my proj"
    project.mkdir()
    code, _, err = hostkit("init", cwd=project)
    assert code == 0, err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, _, err = hostkit("sessions", "-c", str(project / "hostkit.toml"), cwd=elsewhere)
    assert code == 0, err
    hint = re.search(r"has no live revision; run `([^`]+)`", err)
    assert hint, err
    argv = shlex.split(hint[1])
    assert argv[:4] == ["hostkit", "core", "promote", "assistant"]
    assert argv[-2:] == ["-c", str(project / "hostkit.toml")]
    code, out, err = hostkit(*argv[1:], cwd=elsewhere)
    assert code == 0, err
    assert "promoted assistant" in out
    assert sorted(p.name for p in elsewhere.iterdir()) == []
    # Opened from the project itself, the hint needs no -c.
    code, _, err = hostkit("sessions", cwd=project)
    assert "has no live revision" not in err


def test_a_missing_config_file_names_the_init_that_writes_it(tmp_path: Path) -> None:
    code, _, err = hostkit("sessions", "-c", "sp ace/nope.toml", cwd=tmp_path)
    assert code == 2
    hint = re.search(r"run `([^`]+)`", err)
    assert hint, err
    assert shlex.split(hint[1]) == ["hostkit", "init", "sp ace/nope.toml"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ("core", "status"),
        ("core", "log", "assistant"),
        ("core", "diff", "assistant"),
        ("core", "promote", "assistant", "--reason", "x"),
        ("core", "rollback", "assistant", "--reason", "x"),
    ],
)
def test_core_commands_outside_a_project_refuse_and_create_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    code, out, err = hostkit(*args, cwd=tmp_path)
    assert code == 2
    assert "nothing to read here" in err, err
    assert out == ""
    assert list(tmp_path.iterdir()) == []


def test_a_run_refused_before_it_started_prints_nothing_on_stdout(tmp_path: Path) -> None:
    (tmp_path / "hostkit.toml").write_text(WRITER)
    code, out, err = hostkit("run", "--agent", "nosuch", "hi", cwd=tmp_path)
    assert code == 2
    assert "no agent named 'nosuch'" in err
    assert out == ""


def test_init_of_a_new_name_without_a_suffix_writes_a_project_there(tmp_path: Path) -> None:
    """``hostkit init proj`` is a project directory (as ``proj/`` is), and ``-c proj``
    reads the hostkit.toml in it; a name with a suffix is the file itself."""
    code, _, err = hostkit("init", "proj", cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / "proj" / "hostkit.toml").is_file()
    assert (tmp_path / "proj" / "workspace").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]  # nothing scattered here
    code, out, err = hostkit("sessions", "-c", "proj", cwd=tmp_path)
    assert code == 0, err
    assert "is a directory" not in err
    assert (out, "no sessions yet" in err) == ("", True)  # not a header over nothing
    code, _, err = hostkit("init", "staging.toml", cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / "staging.toml").is_file()


def test_a_run_outside_any_project_says_where_it_keeps_state_it_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hostkit run`` prints this once its Host opened (a refused open creates nothing
    and prints only its error), and only when the default project is new."""
    monkeypatch.chdir(tmp_path)
    note = anyio.run(default_project_note, None)
    assert note is not None
    assert "no hostkit.toml here or in a parent directory" in note
    assert f"state in {tmp_path / 'hostkit.db'}" in note
    assert "hostkit init" in note
    # Once the default project exists it is simply used, and a found project is no news.
    (tmp_path / "hostkit.db").touch()
    assert anyio.run(default_project_note, None) is None
    (tmp_path / "hostkit.db").unlink()
    assert anyio.run(default_project_note, Path("hostkit.toml")) is None


def test_a_run_refused_for_an_unpromoted_core_says_so_once_with_a_hint_naming_c(
    tmp_path: Path,
) -> None:
    assert hostkit("init", "proj", cwd=tmp_path)[0] == 0
    code, out, err = hostkit("run", "-c", "proj", "hello", cwd=tmp_path, columns=300)
    assert code == 2
    assert out == ""
    lines = [line for line in err.splitlines() if "no live revision" in line]
    assert len(lines) == 1, err  # the refusal, not also a warning saying the same
    hint = re.search(r"run `([^`]+)`", lines[0])
    assert hint, lines[0]
    assert shlex.split(hint[1]) == [
        "hostkit", "core", "promote", "assistant", "--reason", "...", "-c", "proj"
    ]  # fmt: skip


def test_an_unknown_agent_is_refused_with_the_closest_name_and_the_agents_there(
    tmp_path: Path,
) -> None:
    (tmp_path / "hostkit.toml").write_text(WRITER)
    code, out, err = hostkit("run", "--agent", "writr", "hi", cwd=tmp_path, columns=300)
    assert (code, out) == (2, "")
    assert "no agent named 'writr'; did you mean 'writer'? (agents here: writer)" in err
    code, _, err = hostkit("run", "--agent", "zzz", "hi", cwd=tmp_path, columns=300)
    assert code == 2
    assert "no agent named 'zzz' (agents here: writer)" in err
    assert "--agent" not in err
    # Refused before the Host opens: a mistyped name leaves no database or workspace behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostkit.toml"]


def test_an_unknown_agent_without_a_project_creates_nothing(tmp_path: Path) -> None:
    code, out, err = hostkit("run", "--agent", "assistent", "hi", cwd=tmp_path, columns=300)
    assert (code, out) == (2, "")
    assert "no agent named 'assistent'; did you mean 'assistant'?" in err
    assert "no hostkit.toml here" not in err  # no note about state that is not created
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_agent_named_like_a_python_file_here_gets_the_module_form(
    tmp_path: Path,
) -> None:
    """`janitor.py` defines the Agent; `--agent janitor` is refused with how to load it."""
    (tmp_path / "hostkit.toml").write_text(WRITER)
    (tmp_path / "janitor.py").write_text("import hostkit\n")
    code, out, err = hostkit("run", "--agent", "janitor", "hi", cwd=tmp_path, columns=300)
    assert (code, out) == (2, "")
    assert (
        "no agent named 'janitor' (agents here: writer); an Agent defined in janitor.py "
        "runs with --agent janitor:NAME (NAME: the variable that holds it)"
    ) in err


@pytest.mark.parametrize(
    ("reference", "working"),
    [
        ("janitor.py:janitor", "--agent janitor:janitor\n"),
        ("./janitor.py:janitor", "--agent janitor:janitor\n"),
        ("agents/janitor.py:janitor", "--agent janitor:janitor, run in agents (cd agents first)"),
        ("../up/janitor:janitor", "--agent janitor:janitor, run in ../up (cd ../up first)"),
        ("/srv/a b/janitor.py:j", "--agent janitor:j, run in /srv/a b (cd '/srv/a b' first)"),
        (".janitor:janitor", "--agent janitor:janitor\n"),
    ],
)
def test_an_agent_named_by_its_file_is_refused_with_the_module_form(
    tmp_path: Path, reference: str, working: str
) -> None:
    """`--agent janitor.py:janitor` names a file where Python wants a module: say which,
    and where to run it; nothing is imported (a relative name would raise a TypeError)."""
    (tmp_path / "hostkit.toml").write_text(WRITER)
    code, out, err = hostkit("run", "--agent", reference, "hi", cwd=tmp_path, columns=400)
    assert (code, out) == (2, "")
    assert f"error: --agent takes module:attribute, not a file: {working}" in err
    assert "Traceback" not in err
    assert "Error:" not in err


def test_init_inside_another_project_is_refused_unless_forced(tmp_path: Path) -> None:
    assert hostkit("init", "proj", cwd=tmp_path)[0] == 0
    inner = tmp_path / "proj" / "workspace"
    code, out, err = hostkit("init", cwd=inner, columns=300)
    assert (code, out) == (2, "")
    assert f"is inside the project of {tmp_path / 'proj' / 'hostkit.toml'}" in err
    assert sorted(p.name for p in inner.iterdir()) == []  # nothing was written
    assert hostkit("init", "--force", cwd=inner)[0] == 0
    assert (inner / "hostkit.toml").is_file()


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        (("inspect",), "`hostkit context`"),
        (("inspect", "turn_x", "--json"), "`hostkit budget`"),
        (("Chat", "hello"), "`hostkit run MESSAGE`"),
        (("daemon",), "`hostkit serve`"),
    ],
)
def test_another_tools_word_for_a_command_says_which_one_is_meant(
    tmp_path: Path, typed: tuple[str, ...], meant: str
) -> None:
    code, out, err = hostkit(*typed, cwd=tmp_path, columns=300)
    assert (code, out) == (2, "")
    assert f"No such command {typed[0]!r}: try " in err
    assert meant in err
    assert list(tmp_path.iterdir()) == []


def test_a_close_spelling_still_gets_clicks_suggestion_and_no_synonym(tmp_path: Path) -> None:
    code, _, err = hostkit("sesions", cwd=tmp_path, columns=300)
    assert code == 2
    assert "No such command 'sesions'. Did you mean 'sessions'?" in err
    code, _, err = hostkit("bogus", cwd=tmp_path, columns=300)
    assert code == 2
    assert "No such command 'bogus'." in err
    assert "try " not in err


def test_a_policy_rule_one_typo_away_from_a_tool_is_said_before_the_turn(tmp_path: Path) -> None:
    """`ask = ["file.write"]` asks for nothing, so files.write would run unasked: the run
    says so, with the tool meant. A rule for a tool the agent does not have stays quiet."""
    mistyped = WRITER.replace(
        'ask = ["files.write"]', 'ask = ["file.write"]\ndeny = ["files.red", "terminal.run"]'
    ).replace('builtins = ["files.write"]', 'builtins = ["files.write", "files.read"]')
    (tmp_path / "hostkit.toml").write_text(mistyped)
    code, _, err = hostkit("run", "--agent", "writer", "hi", cwd=tmp_path, columns=400)
    assert code == 0, err
    assert (
        "agent 'writer': the policy's ask rule 'file.write' matches none of its tools; "
        "did you mean 'files.write'? (files.write is not asked for by it)"
    ) in err
    assert "the policy's deny rule 'files.red' matches none of its tools; did you mean" in err
    assert "'terminal.run'" not in err
    # A warning is a warning line, printed once however often the agent's tools are built.
    assert err.count("rule 'file.write' matches none") == 1
    assert "warning: agent 'writer': the policy's ask rule 'file.write'" in err


def test_a_rule_for_a_sibling_tool_the_agent_lacks_is_no_typo(tmp_path: Path) -> None:
    """`deny = ["files.edit"]` beside `files.write` names a tool the agent does not have,
    not a misspelling of one it has: no "did you mean" pushing toward denying files.write."""
    sibling = WRITER.replace(
        'ask = ["files.write"]', 'ask = ["files.write"]\ndeny = ["files.edit"]'
    )
    (tmp_path / "hostkit.toml").write_text(sibling)
    code, _, err = hostkit("run", "--agent", "writer", "hi", cwd=tmp_path, columns=400)
    assert code == 3, err  # files.write is still asked for
    assert "did you mean" not in err


AGENTS_MODULE = '''import hostkit

@hostkit.tool
async def write_note(name: str) -> str:
    """Write a note."""
    return name

agent = hostkit.Agent("writer", model="local", tools=[write_note])

def make():
    return 42
'''


@pytest.mark.parametrize(
    ("reference", "said"),
    [
        ("my_agents:agnt", "'my_agents' has no attribute 'agnt'; did you mean 'agent'?"),
        ("my_agents:write_note", "'my_agents:write_note' is not a hostkit.Agent (its type is"),
        (
            "my_agents:make",
            "calling 'my_agents:make' returned no hostkit.Agent (its type is int)",
        ),
    ],
)
def test_an_agent_reference_that_misses_names_the_agents_the_module_has(
    tmp_path: Path, reference: str, said: str
) -> None:
    (tmp_path / "my_agents.py").write_text(AGENTS_MODULE)
    code, out, err = hostkit("run", "--agent", reference, "hi", cwd=tmp_path, columns=400)
    assert (code, out) == (2, "")
    assert said in err
    assert err.rstrip().endswith("(Agents in it: agent)")


def test_a_python_agent_without_its_providers_key_is_told_which_variable_to_set(
    tmp_path: Path,
) -> None:
    """A model string has no [providers] table to name: the line names the variable."""
    (tmp_path / "my_agents.py").write_text(
        AGENTS_MODULE.replace('model="local"', 'model="openai:gpt-4o-mini"')
    )
    environ = {
        k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")
    }
    done = run_cli(
        "run",
        "--agent",
        "my_agents:agent",
        "hi",
        cwd=tmp_path,
        env={**environ, "COLUMNS": "300"},
        timeout=120,
    )
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (2, b"")
    assert "api_key_env: no API key: set the environment variable OPENAI_API_KEY" in err
    assert "providers.openai:" not in err


def test_resuming_another_agents_session_says_to_name_its_agent(tmp_path: Path) -> None:
    """`--session` of a session the writer runs, asked of another agent: the refusal (the
    same words as for no such session) says what a user most often meant."""
    (tmp_path / "hostkit.toml").write_text(
        WRITER + '\n[agents.notes]\nprovider = "scripted"\nmemory = false\n'
    )
    code, _, err = hostkit("run", "--agent", "writer", "hi", cwd=tmp_path, columns=400)
    assert code in (0, 3), err
    found = SESSION_ID.search(err)
    assert found, err
    code, out, err = hostkit(
        "run", "--agent", "notes", "--session", found[0], "hi", cwd=tmp_path, columns=400
    )
    assert (code, out) == (2, "")
    assert (
        "error: turn rejected: the requested session is not available; check the id (it may "
        "be mistyped), or, for a session of another agent, pass that agent's --agent "
        "(`hostkit sessions` lists each session with its agent)"
    ) in err


def test_command_warnings_never_fail_the_code_that_logs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A library's malformed logging call, a long message, an exception: the handler
    prints what it can, bounded and once, and raises into nobody."""
    warnings = CommandWarnings()
    logger = logging.getLogger("tests.command_warnings")
    logger.addHandler(warnings)
    logger.propagate = False
    try:
        logger.warning("bad %d", "x")  # the format does not fit its argument
        logger.warning("x" * 10_000)
        logger.warning("x" * 10_000)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception("it failed")
    finally:
        logger.removeHandler(warnings)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(("warning: ", "error: "))]
    assert [len(line) < 2_100 for line in lines] == [True, True]
    assert lines[1] == "error: it failed (RuntimeError)"
