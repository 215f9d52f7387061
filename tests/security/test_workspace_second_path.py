"""A workspace a mount also shows at another path is still the agent's workspace there.

Secrets never go to a program inside the workspace: the agent can write there,
so a copy of a shell may sit under any name. A bind mount shows the workspace,
or a directory inside it, at a second path that no prefix check recognises;
the same file the agent wrote then looked like an operator's program and ran
with the secret. So does a directory of the operator's bound into the
workspace read-write, the workspace's own mount shown elsewhere, and an
overlay with a layer in it; a read-only bind of a system directory into the
workspace does not make that directory the agent's. The Host's own state is
masked in the sandbox wherever the workspace shows it: named through a bind of
the workspace, bound into it from outside, or a layer of an overlay in it.
Each case runs in a child in its own mount namespace (the
mounts are real and vanish with it), through ``terminal.run`` itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.builtins.process import probe_bubblewrap
from tests.parts import missing
from tests.support import in_mount_namespace

SECRET = "s3cr3t-Value-9f2c"

CHILD = r"""
import asyncio, dataclasses, json, shutil, subprocess, sys
from pathlib import Path

from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import UNSANDBOXED, MountedTree, ProcessSupervisor, TerminalRuns
from hostkit.builtins.process._terminal_checks import swappable
from hostkit.effects import ToolContext

root = Path(sys.argv[1])
secret = sys.argv[2]
ws, alias, tools, nested = root / "ws", root / "alias", root / "tools dir", root / "nested"
for directory in (ws / "bin", ws / "scratch", alias, tools, nested):
    directory.mkdir(parents=True)
subprocess.run(["mount", "-t", "tmpfs", "scratch", str(ws / "scratch")], check=True)
for planted in (ws / "bin" / "fmt", ws / "scratch" / "fmt"):
    shutil.copy("/bin/sh", planted)
    planted.chmod(0o755)
(ws / "bin" / "link").symlink_to(shutil.which("printenv"))
subprocess.run(["mount", "--bind", str(ws), str(alias)], check=True)
subprocess.run(["mount", "--bind", str(ws / "bin"), str(tools)], check=True)
subprocess.run(["mount", "--rbind", str(ws), str(nested)], check=True)
# An operator's directory bound into the workspace read-write: the agent writes it there.
ops, scratch, merged, lower = root / "ops", root / "scratch", root / "merged", root / "lower"
for directory in (ops, ws / "ops", scratch, merged, lower, ws / "upper", ws / "work", ws / "sys"):
    directory.mkdir()
shutil.copy("/bin/sh", ops / "fmt")
subprocess.run(["mount", "--bind", str(ops), str(ws / "ops")], check=True)
# The file system mounted in the workspace, bound at another path by itself.
subprocess.run(["mount", "--bind", str(ws / "scratch"), str(scratch)], check=True)
# An overlay whose upper layer is in the workspace: what the agent writes there shows.
shutil.copy("/bin/sh", ws / "upper" / "fmt")
layers = f"lowerdir={lower},upperdir={ws / 'upper'},workdir={ws / 'work'}"
subprocess.run(["mount", "-t", "overlay", "overlay", "-o", layers, str(merged)], check=True)
# The same, its layers named through a link to the workspace (mountinfo keeps the names
# as typed at mount time: the link is never resolved for us).
(root / "via").symlink_to(ws)
for directory in (root / "lower2", ws / "upper2", ws / "work2", root / "merged2"):
    directory.mkdir()
shutil.copy("/bin/sh", ws / "upper2" / "fmt")
via = root / "via"
layers = f"lowerdir={root / 'lower2'},upperdir={via / 'upper2'},workdir={via / 'work2'}"
overlay = ["mount", "-t", "overlay", "overlay", "-o"]
subprocess.run([*overlay, layers, str(root / "merged2")], check=True)
# An overlay outside the workspace whose layers are relative (as Docker's overlay2 names
# a container's root): they name no place here, and nothing says they are the agent's.
for directory in (root / "rel-a", root / "rel-b", root / "rel-merged"):
    directory.mkdir()
(root / "rel-a" / "tool").write_text("operator's")
subprocess.run(
    [*overlay, "lowerdir=rel-a:rel-b", str(root / "rel-merged")], check=True, cwd=root
)
# A system directory bound into the workspace read-only: not the agent's to write.
printenv = Path(shutil.which("printenv"))
subprocess.run(["mount", "--bind", str(printenv.parent), str(ws / "sys")], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", str(ws / "sys")], check=True)
programs = {
    "workspace bound at a second path": alias / "bin" / "fmt",
    "a directory inside it bound elsewhere": tools / "fmt",
    "a file system mounted in it, through a recursive bind": nested / "scratch" / "fmt",
    "an operator's directory bound into it": ops / "fmt",
    "a file system mounted in it, bound elsewhere": scratch / "fmt",
    "an overlay with its upper layer in it": merged / "fmt",
    "an overlay with its upper layer in it, named through a link": root / "merged2" / "fmt",
    "an operator's program": printenv,
}


async def main():
    answers = {}
    async with (
        ProcessSupervisor() as supervisor,
        TerminalRuns(
            supervisor=supervisor,
            workspace=WorkspaceScope(ws),
            artifact_root=root / "artifacts",
            artifact_key=b"terminal-test-artifact-key-32byt",
        ) as runs,
    ):
        # The operator lists the one program API_TOKEN may go to; the agent's copies of
        # sh are refused before the list is read (inside the workspace, by any path).
        policy = dataclasses.replace(UNSANDBOXED, secret_programs={"API_TOKEN": (str(printenv),)})
        run = next(t for t in runs.tools(sandbox=policy) if t.name == "terminal.run")
        context = ToolContext("turn", "sess", "core", "owner", ws, {"API_TOKEN": secret}, None)
        for case, program in programs.items():
            rest = ["API_TOKEN"] if "operator" in case else ["-c", "echo $API_TOKEN | rev"]
            arguments = {"argv": [str(program), *rest], "secrets": ["API_TOKEN"]}
            outcome = await run.invoke(context, run.validate(arguments))
            answers[case] = [outcome.status, outcome.error or ""]
    link = alias / "bin" / "link"
    answers["link swappable, sandboxed"] = swappable(str(link), ws, sandboxed=True)
    # What the checks read may change under them: a program renamed away, a directory
    # on the way turned into a link out of the workspace. Each is placed where it was.
    (ws / "bin" / "away").symlink_to(printenv.parent)
    tree = MountedTree(ws)
    answers["renamed away"] = tree.holds(alias / "bin" / "gone")
    answers["through a link placed on the way"] = tree.holds(alias / "bin" / "away" / "printenv")
    answers["an overlay elsewhere, relative layers"] = tree.holds(root / "rel-merged" / "tool")
    print(json.dumps(answers), flush=True)


asyncio.run(main())
"""


STATE_CHILD = r"""
import asyncio, json, os, subprocess, sys
from pathlib import Path

from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import ProcessSupervisor, SandboxPolicy, TerminalRuns
from hostkit.effects import ToolContext

root = Path(sys.argv[1])
ws, alias, state = root / "ws", root / "alias", root / "state"
for directory in (ws / "bound", alias, state):
    directory.mkdir(parents=True)
(ws / "hostkit.db").write_text("SECRET-db-in-the-workspace")
(state / "other.db").write_text("SECRET-db-bound-in")
subprocess.run(["mount", "--bind", str(ws), str(alias)], check=True)
subprocess.run(["mount", "--bind", str(state), str(ws / "bound")], check=True)
# An overlay in the workspace with the state directory as its lower layer.
(ws / "merged").mkdir()
(root / "empty").mkdir()
overlay = f"lowerdir={state}:{root / 'empty'}"  # read-only: two lower layers, no upper
subprocess.run(["mount", "-t", "overlay", "overlay", "-o", overlay, str(ws / "merged")], check=True)
# The same, the state directory named through a link (mountinfo keeps it as typed).
(root / "state-link").symlink_to(state)
(ws / "merged2").mkdir()
layers = f"lowerdir={root / 'state-link'}:{root / 'empty'}"
subprocess.run(["mount", "-t", "overlay", "overlay", "-o", layers, str(ws / "merged2")], check=True)
# The state directory bound under /opt, which the sandbox shows read-only (/opt is a
# private tmpfs here, so nothing is left behind on this machine).
subprocess.run(["mount", "-t", "tmpfs", "opt", "/opt"], check=True)
os.makedirs("/opt/data")
subprocess.run(["mount", "--bind", str(state), "/opt/data"], check=True)
# The operator names the state where it lives for them: through the bind of the
# workspace, and at the state directory's own path.
hidden = (alias / "hostkit.db", state / "other.db")
code = (
    "import sys\n"
    "for n in sys.argv[1:]:\n"
    "    try: print(n, open(n).read())\n"
    "    except OSError as e: print(n, 'refused', e.errno)\n"
)


async def main():
    async with (
        ProcessSupervisor() as supervisor,
        TerminalRuns(
            supervisor=supervisor,
            workspace=WorkspaceScope(ws),
            artifact_root=root / "artifacts",
            artifact_key=b"sandbox-test-artifact-key-32byte",
        ) as runs,
    ):
        tools = runs.tools(sandbox=SandboxPolicy(hidden=hidden))
        run = next(t for t in tools if t.name == "terminal.run")
        context = ToolContext("turn", "sess", "core", "owner", ws)
        names = ["hostkit.db", "bound/other.db", "merged/other.db", "merged2/other.db"]
        argv = ["/usr/bin/python3", "-c", code, *names, "/opt/data/other.db"]
        outcome = await run.invoke(context, run.validate({"argv": argv}))
    tail = outcome.output["stdout"]["tail"] if outcome.output else outcome.error
    print(json.dumps([outcome.status, tail]))


asyncio.run(main())
"""


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    found: dict[str, object] = in_mount_namespace(
        CHILD, str(tmp_path_factory.mktemp("second-path")), SECRET
    )
    return found


@pytest.mark.parametrize(
    "case",
    [
        "workspace bound at a second path",
        "a directory inside it bound elsewhere",
        "a file system mounted in it, through a recursive bind",
        "an operator's directory bound into it",
        "a file system mounted in it, bound elsewhere",
        "an overlay with its upper layer in it",
        "an overlay with its upper layer in it, named through a link",
    ],
)
def test_a_program_the_agent_wrote_gets_no_secret_by_another_mount_path(
    answers: dict[str, object], case: str
) -> None:
    status, error = answers[case]  # type: ignore[misc]
    assert status == "denied"
    assert "inside the workspace" in error


def test_an_operators_program_still_gets_its_secret(answers: dict[str, object]) -> None:
    """The control: the same harness runs a program outside every mount of the workspace
    the agent writes (its directory is also bound into the workspace, read-only)."""
    assert answers["an operator's program"] == ["succeeded", ""]


def test_a_link_in_the_workspace_by_another_mount_path_is_run_by_its_real_path(
    answers: dict[str, object],
) -> None:
    """Sandboxed, the workspace is the one directory the agent writes: a link the checks
    read there may be re-pointed before the run, at whichever path it was named."""
    assert answers["link swappable, sandboxed"] is True


def test_host_state_is_masked_wherever_the_workspace_shows_it(tmp_path: Path) -> None:
    if not (probe := probe_bubblewrap()).ok:
        missing("sandbox", probe.reason)
    status, tail = in_mount_namespace(STATE_CHILD, str(tmp_path))
    assert status == "succeeded", tail
    assert "SECRET" not in tail
    assert "hostkit.db refused" in tail
    assert "bound/other.db refused" in tail
    assert "merged/other.db refused" in tail
    assert "merged2/other.db refused" in tail
    assert "/opt/data/other.db refused" in tail


@pytest.mark.parametrize("case", ["renamed away", "through a link placed on the way"])
def test_a_path_changed_under_the_check_is_placed_where_it_was(
    answers: dict[str, object], case: str
) -> None:
    """A name missing since it was resolved, or a directory on the way turned into a link
    out of the workspace, is placed by the last name reached without following a link:
    still inside the workspace's bind, never nowhere (where the secret would go)."""
    assert answers[case] is True


def test_an_overlay_elsewhere_whose_layers_name_no_place_here_is_not_the_agents(
    answers: dict[str, object],
) -> None:
    """Relative layers (Docker's overlay2 root) cannot be placed: only an overlay mounted
    in the workspace is then taken for the agent's, else a container's whole root file
    system would be, and no program there would ever get its secret."""
    assert answers["an overlay elsewhere, relative layers"] is False
