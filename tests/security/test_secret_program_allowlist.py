"""``[secrets.<NAME>] programs``: a secret goes only to the programs the operator listed.

Refusing programs by name (shells, interpreters running inline code, programs
that run other programs) cannot be complete: an unsandboxed run can copy a
shell to ``/tmp/curl``, and the name then says nothing. An operator who lists
a secret's programs by absolute path closes that family: the run's program is
compared by its real path (after links) with each listed path's real path, so
a copy anywhere is refused, and a link to a listed program is that program.
The name checks still apply to listed programs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import (
    ProcessSupervisor,
    SandboxPolicy,
    TerminalRuns,
    probe_bubblewrap,
)
from hostkit.builtins.process import _terminal as terminal_module
from hostkit.builtins.process._terminal_checks import swappable
from hostkit.effects import ApprovalDecision, ApprovalRequest, ToolContext, ToolOutcome
from hostkit.errors import ConfigError, InvalidValue
from hostkit.host import Host, HostConfig, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from tests.hosts import request
from tests.parts import missing

pytestmark = pytest.mark.anyio

NAME = "HK_DEPLOY_TOKEN"
OTHER = "HK_OTHER_TOKEN"
SECRET = "deploy-token-7731-Xq"
PRINTENV = os.path.realpath("/usr/bin/printenv")
CAT = os.path.realpath("/bin/cat")
PYTHON = os.path.realpath(shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3")
KEY = b"allowlist-test-artifact-key-32by"


def policy(programs: Mapping[str, tuple[str, ...]]) -> SandboxPolicy:
    return SandboxPolicy(mode="none", secret_programs=programs)


@pytest.fixture
async def runs(tmp_path: Path) -> AsyncIterator[TerminalRuns]:
    workspace = tmp_path / "ws"
    await anyio.Path(workspace).mkdir()
    async with (
        ProcessSupervisor() as supervisor,
        TerminalRuns(
            supervisor=supervisor,
            workspace=WorkspaceScope(workspace),
            artifact_root=tmp_path / "artifacts",
            artifact_key=KEY,
        ) as opened,
    ):
        yield opened


async def invoke(
    runs: TerminalRuns, sandbox: SandboxPolicy, bound: Mapping[str, str], argv: list[str]
) -> ToolOutcome:
    """``terminal.run`` as the runtime calls it after binding ``bound``."""
    tool = next(t for t in runs.tools(sandbox=sandbox) if t.name == "terminal.run")
    context = ToolContext("turn", "sess", "core", "owner", Path("."), bound, None)
    outcome = await tool.invoke(context, tool.validate({"argv": argv, "secrets": tuple(bound)}))
    assert isinstance(outcome, ToolOutcome)
    return outcome


async def test_a_listed_program_receives_the_secret(runs: TerminalRuns) -> None:
    outcome = await invoke(runs, policy({NAME: (PRINTENV,)}), {NAME: SECRET}, [PRINTENV, NAME])
    assert outcome.status == "succeeded", outcome.error


async def test_a_copy_of_a_listed_program_outside_the_workspace_is_refused(
    runs: TerminalRuns, tmp_path: Path
) -> None:
    # The copy carries the listed program's name, so no name check can tell it apart.
    elsewhere = tmp_path / "elsewhere"
    await anyio.Path(elsewhere).mkdir()
    copy = elsewhere / "printenv"
    await anyio.to_thread.run_sync(shutil.copy2, "/bin/sh", copy)
    outcome = await invoke(
        runs,
        policy({NAME: (PRINTENV,)}),
        {NAME: SECRET},
        [str(copy), "-c", "echo $HK_DEPLOY_TOKEN"],
    )
    assert (outcome.status, outcome.output) == ("denied", None)
    assert f"{NAME} is bound only for the programs listed for it ({PRINTENV})" in (
        outcome.error or ""
    )
    assert str(copy) in (outcome.error or "")


async def test_a_program_not_refused_by_name_is_refused_when_not_listed(
    runs: TerminalRuns,
) -> None:
    outcome = await invoke(runs, policy({NAME: (PRINTENV,)}), {NAME: SECRET}, [CAT, "/dev/null"])
    assert outcome.status == "denied"
    assert "bound only for the programs listed" in (outcome.error or "")
    # Without a list for the secret, no program gets it: names alone cannot be complete.
    for argv in ([CAT, "/dev/null"], [PRINTENV, NAME]):
        unlisted = await invoke(runs, policy({}), {NAME: SECRET}, argv)
        assert unlisted.status == "denied"
        assert f"{NAME} is bound for no program" in (unlisted.error or "")
        assert f"[secrets.{NAME}] programs" in (unlisted.error or "")


async def test_programs_are_compared_by_real_path_on_both_sides(
    runs: TerminalRuns, tmp_path: Path
) -> None:
    # A link to the listed program is that program; a listed link stands for its target.
    link = tmp_path / "env-printer"
    await anyio.Path(link).symlink_to(PRINTENV)
    by_link = await invoke(runs, policy({NAME: (PRINTENV,)}), {NAME: SECRET}, [str(link), NAME])
    assert by_link.status == "succeeded", by_link.error
    listed_link = await invoke(runs, policy({NAME: (str(link),)}), {NAME: SECRET}, [PRINTENV])
    assert listed_link.status == "succeeded", listed_link.error


async def test_every_bound_secret_must_allow_the_program(runs: TerminalRuns) -> None:
    sandbox = policy({NAME: (PRINTENV,), OTHER: ("/usr/bin/curl",)})
    outcome = await invoke(runs, sandbox, {NAME: SECRET, OTHER: SECRET + "-2"}, [PRINTENV])
    assert outcome.status == "denied"
    assert f"{OTHER} is bound only for" in (outcome.error or "")


async def test_a_listed_interpreter_still_never_runs_inline_code_with_the_secret(
    runs: TerminalRuns,
) -> None:
    outcome = await invoke(
        runs, policy({NAME: (PYTHON,)}), {NAME: SECRET}, [PYTHON, "-c", "print(1)"]
    )
    assert outcome.status == "denied"
    assert "inline code" in (outcome.error or "")


@pytest.mark.parametrize(
    "programs",
    [
        {"k": ["relative/bin"]},
        {"k": []},
        {"k": "/usr/bin/printenv"},
        ["/usr/bin/printenv"],
        {"k": ["/usr/bin/print\0env"]},
    ],
)
def test_a_malformed_policy_is_invalid_value(programs: Any) -> None:
    with pytest.raises(InvalidValue, match="secret_programs"):
        SandboxPolicy(mode="none", secret_programs=programs)


# --- configuration and a real Host ----------------------------------------------------


class Approve:
    def __init__(self) -> None:
        self.seen: list[ApprovalRequest] = []

    async def decide(self, req: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(req)
        return "approve_once"


def host_config(tmp_path: Path, secrets: dict[str, Any]) -> HostConfig:
    state, workspace = tmp_path / "state", tmp_path / "workspace"
    state.mkdir(exist_ok=True)
    workspace.mkdir(exist_ok=True)
    agent = {
        "provider": "test",
        "memory": False,
        "policy": {"allow": ["*"]},
        "secrets": [NAME, OTHER],
        "builtins": ["terminal.run"],
    }
    return parse_config(
        {
            "host": {
                "database": str(state / "hostkit.db"),
                "artifacts": str(state / "artifacts"),
                "workspace": str(workspace),
            },
            "providers": {"test": {"kind": "scripted"}},
            "agents": {"assistant": agent},
            "secrets": secrets,
        },
        base_dir=state,
    )


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ({NAME: {"programs": ["bin/deploy"]}}, "is not an absolute path"),
        ({NAME: {"programs": []}}, "at least 1 item"),
        ({NAME: {"programs": ["/bin/x"] * 33}}, "at most 32 items"),
        ({"not-a-name": {"programs": ["/bin/x"]}}, "should match pattern"),
        ({NAME: {"programs": ["/bin/x"], "glob": True}}, "unknown key 'glob' in [secrets."),
        ({NAME: {"programs": ["/" + "x" * 5000]}}, "is not an absolute path"),
    ],
)
def test_a_malformed_secrets_table_is_a_config_error(
    tmp_path: Path, secrets: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        host_config(tmp_path, secrets)
    assert message in str(caught.value)
    assert len(str(caught.value)) <= 2000


async def test_a_host_binds_a_secret_only_for_its_listed_programs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(NAME, SECRET)
    monkeypatch.setenv(OTHER, SECRET + "-other")
    config = host_config(tmp_path, {NAME: {"programs": ["/usr/bin/printenv"]}})
    model = ScriptedModel(
        [
            CallTools(("terminal_run", {"argv": ["printenv", NAME], "secrets": [NAME]})),
            CallTools(("terminal_run", {"argv": ["cat", "/dev/null"], "secrets": [NAME]})),
            # A secret with no list goes to no program: refused before anyone is asked.
            CallTools(("terminal_run", {"argv": ["cat", "/dev/null"], "secrets": [OTHER]})),
            Reply("done"),
        ]
    )
    caps = capabilities(model, config=config)
    approver = Approve()
    async with Host.open(config, capabilities=caps, approver=approver) as host:
        # The operator hears of the secret no program is listed for when the Host opens.
        assert [w for w in host.warnings if "[secrets." in w] == [
            f"agent 'assistant' holds the secret {OTHER}, but no [secrets.{OTHER}] programs "
            "list names a program for it: terminal.run binds it for none "
            "(docs/effects.md, Secrets)"
        ]
        result = await host.turns.run(request("deploy"))
    assert [e.status for e in result.effects] == ["succeeded", "denied", "denied"], result.effects
    tool_texts = [m.content for m in model.requests[-1].messages if m.role == "tool"]
    assert f"[redacted:{NAME}]" in tool_texts[0]
    assert "bound only for the programs listed for it (/usr/bin/printenv)" in tool_texts[1]
    assert f"{OTHER} is bound for no program" in tool_texts[2]
    assert len(approver.seen) == 2, approver.seen  # the unlisted one was never asked


@pytest.mark.parametrize("into", ["link", "file"])
@pytest.mark.parametrize("mode", ["none", "bubblewrap"])
async def test_a_link_swapped_after_the_checks_runs_nothing_else_with_the_secret(
    runs: TerminalRuns, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, into: str
) -> None:
    """The checks read a link's target; the run executes that target, not the link.

    The agent's own background run can swap the link between the checks and the
    exec: here the swap happens exactly there, from the listed program's real path
    to a shell copy (re-pointed, or the copy renamed over the link: a plain file
    then, with no link left to see), and the shell must not run.
    """
    if mode == "bubblewrap":
        probe = await anyio.to_thread.run_sync(probe_bubblewrap)
        if not probe.ok:
            missing("sandbox", probe.reason)
    # Sandboxed, only the workspace is writable (and visible) to the agent.
    place = tmp_path / "ws" if mode == "bubblewrap" else tmp_path / "elsewhere"
    await anyio.Path(place).mkdir(exist_ok=True)
    # Unsandboxed, a directory anyone may write (as /tmp): the agent's own runs can.
    await anyio.Path(place).chmod(0o1777)
    shell = place / "sh-copy"
    await anyio.to_thread.run_sync(shutil.copy2, "/bin/sh", shell)
    link = place / "tool"
    await anyio.Path(link).symlink_to(PRINTENV)
    checked = terminal_module.secret_program_refusal

    def check_then_flip(real: str, names: Any, programs: Any) -> str | None:
        refusal = checked(real, names, programs)
        if into == "link":
            os.unlink(link)
            os.symlink(shell, link)
        else:
            os.replace(shell, link)
        return refusal

    monkeypatch.setattr(terminal_module, "secret_program_refusal", check_then_flip)
    sandbox = SandboxPolicy(mode=mode, secret_programs={NAME: (PRINTENV,)})  # type: ignore[arg-type]
    leak = place / "leak"
    # The workspace has the same path in the sandbox.
    outcome = await invoke(
        runs, sandbox, {NAME: SECRET}, [str(link), "-c", f"echo ${NAME} > {leak}"]
    )
    assert not await anyio.Path(leak).exists()
    # printenv ran, and refused the shell's -c.
    assert outcome.status == "failed", outcome
    assert "invalid option" in (outcome.output or {}).get("stderr", {}).get("tail", "")
    assert outcome.audit is not None
    assert outcome.audit["executable_real"] == PRINTENV


@pytest.mark.parametrize("mode", ["none", "bubblewrap"])
async def test_a_link_nobody_else_can_re_point_keeps_the_name_it_was_run_by(
    runs: TerminalRuns, tmp_path: Path, mode: str
) -> None:
    """Programs that read the name they were started by (Debian's psql through
    pg_wrapper, a virtualenv's python) keep it when no directory on the way is one the
    agent writes; through the workspace (or, unsandboxed, a world-writable directory or
    one a non-root Host's user may write) the real path runs instead."""
    sandboxed = mode == "bubblewrap"
    if sandboxed:
        probe = await anyio.to_thread.run_sync(probe_bubblewrap)
        if not probe.ok:
            missing("sandbox", probe.reason)
    system = "/usr/bin/python3"
    if not await anyio.Path(system).is_symlink():
        pytest.skip(f"{system} is not a link here")
    script = tmp_path / "ws" / "where.py"
    await anyio.Path(script).write_text("import sys\nprint(sys.executable)\n")
    own = tmp_path / "ws" / "py"
    await anyio.Path(own).symlink_to(PYTHON)
    listed = {NAME: (system, str(own))}
    sandbox = SandboxPolicy(mode=mode, secret_programs=listed)  # type: ignore[arg-type]
    through_system = await invoke(runs, sandbox, {NAME: SECRET}, [system, str(script)])
    through_workspace = await invoke(runs, sandbox, {NAME: SECRET}, [str(own), str(script)])
    assert through_system.status == "succeeded", through_system
    assert through_workspace.status == "succeeded", through_workspace
    assert through_system.output is not None
    assert through_workspace.output is not None
    # A system link (root-owned, in a directory the agent cannot write) keeps its name.
    assert through_system.output["stdout"]["tail"].strip() == system
    assert through_workspace.output["stdout"]["tail"].strip() == PYTHON


@pytest.mark.parametrize(
    ("layout", "sandboxed", "expected"),
    [
        ("plain file in the workspace", True, True),
        ("plain file in a directory under the workspace", True, True),
        ("plain file outside the workspace, sandboxed", True, False),
        ("plain file in a world-writable directory, unsandboxed", False, True),
    ],
)
def test_every_directory_on_the_way_counts_not_only_those_holding_a_link(
    tmp_path: Path, layout: str, sandboxed: bool, expected: bool
) -> None:
    """A name that was a link when the checks read it may be a plain file when the walk
    reads it: the directory holding every component is what the agent must not write."""
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    path = {
        "plain file in the workspace": workspace / "tool",
        "plain file in a directory under the workspace": workspace / "sub" / "tool",
        "plain file outside the workspace, sandboxed": outside / "tool",
        "plain file in a world-writable directory, unsandboxed": outside / "tool",
    }[layout]
    if not sandboxed:
        outside.chmod(0o1777)
    path.write_text("")
    assert swappable(str(path), workspace, sandboxed=sandboxed) is expected


@pytest.mark.parametrize("sandboxed", [True, False])
@pytest.mark.parametrize(
    "through", ["/proc/self/cwd", "/proc/1/root", "/dev/fd/../../proc/self/cwd"]
)
def test_a_path_through_procs_process_links_is_run_by_its_real_path(
    through: str, sandboxed: bool
) -> None:
    """``/proc/<pid>/cwd`` resolves in the Host to a system program, and in the child (whose
    working directory is the workspace) to whatever the agent wrote there."""
    path = f"{through}{os.path.realpath('/usr/bin/env')}"
    assert swappable(path, Path("/nonexistent-workspace"), sandboxed=sandboxed) is True
