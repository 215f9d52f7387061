"""``terminal.run``, ``terminal.status`` and ``terminal.stop`` through the effect pipeline.

Every child is a real process started by the tools; secrets are handed to the
tool's ``invoke`` in a ``ToolContext`` the way the runtime binds them.
"""

from __future__ import annotations

import dataclasses
import json
import stat
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.files import WorkspaceScope
from hostkit.builtins.process import (
    DEFAULT_ENV_ALLOWLIST,
    UNSANDBOXED,
    ProcessSupervisor,
    TerminalRuns,
)
from hostkit.builtins.process._terminal_checks import program_refusal, redact
from hostkit.effects import (
    AuthoredTool,
    EffectPolicy,
    EffectRuntime,
    ToolContext,
    ToolOutcome,
    Toolset,
)
from hostkit.errors import UserError
from hostkit.types import EffectRequest, EffectResult, TurnExecutionContext
from tests.contract.test_context_basic import context_for
from tests.support import facts

pytestmark = pytest.mark.anyio

KEY = b"terminal-test-artifact-key-32byt"
NAMES = ("terminal.run", "terminal.status", "terminal.stop")
PY = sys.executable
# The programs the operator lists for each secret these tests bind: this interpreter.
POLICY = dataclasses.replace(UNSANDBOXED, secret_programs={"API_TOKEN": (PY,), "TLS_KEY": (PY,)})
SECRET = "s3cr3t-Value-9f2c"
SLEEP = "import time; time.sleep(60)"


class Tools:
    def __init__(self, tools: list[AuthoredTool], workspace: Path) -> None:
        self.tools = tools
        self.workspace = workspace

    async def toolset(self, context: TurnExecutionContext) -> Toolset:
        return Toolset(
            tuple((t, "builtin") for t in self.tools), EffectPolicy(allow=("*",)), self.workspace
        )


class Session:
    """One turn's view of the terminal tools: a context, a catalog and ``call``."""

    def __init__(self, runtime: EffectRuntime, context: TurnExecutionContext, catalog: Any) -> None:
        self.runtime = runtime
        self.context = context
        self.catalog = catalog

    async def call(self, effect: str, **arguments: Any) -> EffectResult:
        ref = self.catalog.resolve(effect.replace(".", "_"))
        assert ref is not None
        return await self.runtime.execute(EffectRequest("c1", ref, arguments), self.context)


@dataclasses.dataclass
class Terminal:
    runs: TerminalRuns
    supervisor: ProcessSupervisor
    runtime: EffectRuntime
    authority: AuthorityResolver
    workspace: Path
    artifacts: Path

    async def session(
        self, conversation: str = "c", principal: str = "user", *, grants: tuple[str, ...] = ()
    ) -> Session:
        scope = await self.authority.for_conversation(facts(conversation, principal))
        context = dataclasses.replace(
            context_for(scope), capability_snapshot={"effects": NAMES, "secrets": grants}
        )
        return Session(self.runtime, context, await self.runtime.prepare_catalog(context))

    def tool(self, name: str) -> AuthoredTool:
        return next(t for t in self.runs.tools(sandbox=POLICY) if t.name == name)

    async def invoke(
        self, bound: Mapping[str, str], expire_at: float | None = None, **arguments: Any
    ) -> ToolOutcome:
        """Call ``terminal.run`` as the runtime does after binding ``bound`` secrets."""
        tool = self.tool("terminal.run")
        context = ToolContext("turn", "sess", "core", "owner", self.workspace, bound, expire_at)
        arguments.setdefault("secrets", tuple(bound))
        outcome = await tool.invoke(context, tool.validate(arguments))
        assert isinstance(outcome, ToolOutcome)
        return outcome


@pytest.fixture
async def terminal(authority: AuthorityResolver, tmp_path: Path) -> AsyncIterator[Terminal]:
    """The tools on a real supervisor, short grace times, two background runs per session."""
    workspace = tmp_path / "ws"
    await anyio.Path(workspace / "sub").mkdir(parents=True)
    async with (
        ProcessSupervisor() as supervisor,
        TerminalRuns(
            supervisor=supervisor,
            workspace=WorkspaceScope(workspace),
            artifact_root=tmp_path / "artifacts",
            artifact_key=KEY,
            grace_s=0.2,
            confirm_s=3.0,
            max_background=2,
        ) as runs,
    ):
        runtime = EffectRuntime(toolsets=Tools(runs.tools(sandbox=POLICY), workspace))
        yield Terminal(runs, supervisor, runtime, authority, workspace, tmp_path / "artifacts")


def output(result: EffectResult) -> dict[str, Any]:
    """The tool's output as the model sees it (after the status line when not succeeded)."""
    text = result.views.model
    if result.status != "succeeded":
        text = text.partition("\n")[2]
    return json.loads(text)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --- foreground runs ------------------------------------------------------------------


async def test_a_foreground_run_returns_its_exit_code_and_tails(terminal: Terminal) -> None:
    session = await terminal.session()
    code = "import os, sys; print(os.getcwd()); print('oops', file=sys.stderr)"
    result = await session.call("terminal.run", argv=[PY, "-c", code], cwd="sub")
    assert (result.status, result.started) == ("succeeded", True)
    out = output(result)
    assert (out["status"], out["exit_code"]) == ("exited", 0)
    real = await anyio.Path(terminal.workspace / "sub").resolve()
    assert out["stdout"]["tail"] == f"{real}\n"
    assert out["stderr"] == {
        "total_bytes": 5,
        "total_chars": 5,
        "truncated": False,
        "artifact": out["stderr"]["artifact"],
        "tail": "oops\n",
    }
    assert out["stderr"]["artifact"].endswith(":stderr")


async def test_a_program_is_found_on_the_allowlisted_path(terminal: Terminal) -> None:
    session = await terminal.session()
    result = await session.call("terminal.run", argv=["echo", "hi there"])
    assert result.status == "succeeded"
    assert output(result)["stdout"]["tail"] == "hi there\n"
    missing = await session.call("terminal.run", argv=["no-such-program-hostkit"])
    assert (missing.status, missing.error) == (
        "denied",
        "program 'no-such-program-hostkit' was not found",
    )


async def test_a_non_zero_exit_is_failed_with_its_output(terminal: Terminal) -> None:
    session = await terminal.session()
    code = "import sys; print('partial'); sys.exit(3)"
    result = await session.call("terminal.run", argv=[PY, "-c", code])
    assert (result.status, result.started, result.error) == ("failed", True, "exited with code 3")
    out = output(result)
    assert (out["exit_code"], out["stdout"]["tail"]) == (3, "partial\n")


async def test_big_output_keeps_a_12000_character_tail_and_the_totals(terminal: Terminal) -> None:
    code = "import sys; sys.stdout.write('x' * 49_999 + 'E')"
    outcome = await terminal.invoke({}, argv=[PY, "-c", code])
    stdout = outcome.output["stdout"]
    assert len(stdout["tail"]) == 12_000
    assert stdout["tail"].endswith("xE")
    assert (stdout["total_bytes"], stdout["total_chars"], stdout["truncated"]) == (
        50_000,
        50_000,
        True,
    )
    # Through the pipeline the model view is bounded, and metadata comes before the tails.
    result = await (await terminal.session()).call("terminal.run", argv=[PY, "-c", code])
    assert result.status == "succeeded"
    assert len(result.views.model) < 8_100
    assert result.views.model.startswith('{"status": "exited", "exit_code": 0')
    assert '"total_chars": 50000' in result.views.model


async def test_artifacts_are_private_and_opaque_and_never_shown(terminal: Terminal) -> None:
    session = await terminal.session()
    code = "import sys; print('kept in full'); print('and this', file=sys.stderr)"
    result = await session.call("terminal.run", argv=[PY, "-c", code])
    assert result.status == "succeeded"
    [directory] = [p async for p in anyio.Path(terminal.artifacts).iterdir()]
    assert len(directory.name) == 32
    assert int(directory.name, 16) >= 0
    files = sorted([p async for p in directory.iterdir()])
    assert [p.suffix for p in files] == [".stderr", ".stdout"]
    assert stat.S_IMODE((await directory.stat()).st_mode) == 0o700
    for path in files:
        assert stat.S_IMODE((await path.stat()).st_mode) == 0o600
        assert session.context.session_id not in str(path)
    assert await files[1].read_text() == "kept in full\n"
    views = json.dumps(dataclasses.asdict(result.views), default=str)
    assert directory.name not in views
    assert str(terminal.artifacts) not in views
    assert output(result)["stdout"]["artifact"] == files[1].name.replace(".stdout", ":stdout")


async def test_a_stream_that_printed_nothing_keeps_no_file(terminal: Terminal) -> None:
    """An empty file would only wait for retention: the result says there is none."""
    session = await terminal.session()
    result = await session.call("terminal.run", argv=[PY, "-c", "print('out only')"])
    assert result.status == "succeeded"
    out = output(result)
    assert out["stderr"]["artifact"] is None
    assert out["stdout"]["artifact"].endswith(":stdout")
    files = [p.name for p in terminal.artifacts.rglob("spawn_*")]
    assert files == [out["stdout"]["artifact"].replace(":stdout", ".stdout")]


async def test_a_deadline_ends_the_run_as_timed_out(terminal: Terminal) -> None:
    session = await terminal.session()
    began = time.monotonic()
    result = await session.call("terminal.run", argv=[PY, "-c", SLEEP], deadline_s=0.5)
    assert (result.status, result.started) == ("timed_out", True)
    assert output(result)["status"] == "timed_out"
    assert time.monotonic() - began < 10


# --- environment and secrets ----------------------------------------------------------

ENV_SCRIPT = "import json, os; print(json.dumps(dict(os.environ)))"


async def test_the_environment_is_an_allowlist_plus_the_bound_secrets(
    terminal: Terminal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTKIT_TEST_NOT_ALLOWLISTED", "leaky")
    monkeypatch.setenv("TZ", "UTC")
    session = await terminal.session()
    result = await session.call("terminal.run", argv=[PY, "-c", ENV_SCRIPT])
    env = json.loads(output(result)["stdout"]["tail"])
    assert "HOSTKIT_TEST_NOT_ALLOWLISTED" not in env
    assert env["TZ"] == "UTC"
    assert set(env) <= set(DEFAULT_ENV_ALLOWLIST)

    await anyio.Path(terminal.workspace / "env.py").write_text(ENV_SCRIPT)
    outcome = await terminal.invoke({"API_TOKEN": SECRET}, argv=[PY, "env.py"])
    assert outcome.status == "succeeded"
    assert SECRET not in json.dumps(outcome.output)
    env = json.loads(outcome.output["stdout"]["tail"])
    assert env["API_TOKEN"] == "[redacted:API_TOKEN]"  # present in the child, redacted here
    assert "HOSTKIT_TEST_NOT_ALLOWLISTED" not in env


async def test_secrets_must_be_the_ones_bound_for_the_call(terminal: Terminal) -> None:
    outcome = await terminal.invoke({}, argv=[PY, "env.py"], secrets=("API_TOKEN",))
    assert (outcome.status, outcome.error) == (
        "denied",
        "the requested secrets were not bound for this call",
    )


async def test_an_expired_secret_binding_is_refused_and_a_live_one_clamps_the_deadline(
    terminal: Terminal, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    script = terminal.workspace / "touch.py"
    await anyio.Path(script).write_text(f"open({str(marker)!r}, 'w').close()")
    expired = await terminal.invoke({"API_TOKEN": SECRET}, time.time() - 1, argv=[PY, "touch.py"])
    assert (expired.status, expired.error) == ("denied", "the secret binding has expired")
    assert not await anyio.Path(marker).exists()

    await anyio.Path(terminal.workspace / "sleep.py").write_text(SLEEP)
    began = time.monotonic()
    clamped = await terminal.invoke(
        {"API_TOKEN": SECRET}, time.time() + 0.5, argv=[PY, "sleep.py"], deadline_s=60
    )
    assert clamped.status == "timed_out"
    assert time.monotonic() - began < 10


async def test_a_secret_cut_at_the_start_of_a_tail_is_redacted(terminal: Terminal) -> None:
    # stdout's 12,000-character tail starts with the secret's last six characters.
    code = (
        "import sys\n"
        f"sys.stdout.write('a' * 20_000 + {SECRET!r} + 'b' * 11_994)\n"
        f"sys.stderr.write('token is ' + {SECRET!r})\n"
    )
    await anyio.Path(terminal.workspace / "leak.py").write_text(code)
    outcome = await terminal.invoke({"API_TOKEN": SECRET}, argv=[PY, "leak.py"])
    stdout, stderr = outcome.output["stdout"], outcome.output["stderr"]
    assert stdout["truncated"]
    assert stdout["tail"] == "[redacted:API_TOKEN]" + "b" * 11_994
    assert stderr["tail"] == "token is [redacted:API_TOKEN]"


def test_redaction_replaces_whole_values_and_a_cut_leading_suffix() -> None:
    secrets = {"A": "abcdefgh", "B": "abcdefghijkl"}
    assert redact("x abcdefghijkl y abcdefgh", secrets, cut=False) == (
        "x [redacted:B] y [redacted:A]"
    )
    assert redact("ijkl rest", secrets, cut=True) == "[redacted:B] rest"
    assert redact("efgh rest", secrets, cut=True) == "[redacted:A] rest"
    assert redact("efgh rest", secrets, cut=False) == "efgh rest"  # an uncut stream
    assert redact("fgh rest", secrets, cut=True) == "fgh rest"  # shorter than four characters
    assert redact("anything", {}, cut=True) == "anything"


# --- refusals before anything starts --------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "status", "error"),
    [
        ({"argv": []}, "denied", "argv must name a program"),
        ({"argv": [PY, "-c", "pass\0"]}, "denied", "argv items must not contain NUL bytes"),
        ({"argv": ["./run.sh"]}, "denied", "argv[0] must be a program on PATH or an absolute"),
        ({"cwd": "/tmp"}, "denied", "absolute paths are refused"),
        ({"cwd": "sub/../.."}, "denied", "'..' leads above the workspace"),
        ({"cwd": "a\0b"}, "denied", "path contains a NUL byte"),
        ({"deadline_s": 0}, "invalid", "deadline_s"),
        ({"deadline_s": 601}, "invalid", "deadline_s"),
        ({"secrets": ["API_TOKEN"], "background": True}, "denied", "foreground runs only"),
        ({"secrets": ["LD_PRELOAD"]}, "denied", "LD_PRELOAD cannot be bound as a secret"),
        ({"secrets": ["PATH"]}, "denied", "PATH cannot be bound as a secret"),
    ],
)
async def test_refusals_happen_before_anything_is_spawned(
    terminal: Terminal, tmp_path: Path, arguments: dict[str, Any], status: str, error: str
) -> None:
    marker = tmp_path / "marker"
    arguments = {"argv": [PY, "-c", f"open({str(marker)!r}, 'w')"], **arguments}
    grants = ("secret.bind:API_TOKEN", "secret.bind:LD_PRELOAD", "secret.bind:PATH")
    session = await terminal.session(grants=grants)
    result = await session.call("terminal.run", **arguments)
    assert (result.status, result.started) == (status, False)
    assert error in (result.error or "")
    assert not await anyio.Path(marker).exists()


async def test_the_preflight_itself_refuses_deadlines_out_of_range(terminal: Terminal) -> None:
    check = terminal.tool("terminal.run").preflight
    assert check is not None
    base = {"argv": ("true",), "cwd": ".", "background": False, "secrets": ()}
    check({**base, "deadline_s": 1.0})
    for deadline in (0.0, -1.0, 600.5):
        with pytest.raises(UserError, match="deadline_s"):
            check({**base, "deadline_s": deadline})


async def test_a_working_directory_linked_out_of_the_workspace_is_refused(
    terminal: Terminal, tmp_path: Path
) -> None:
    await anyio.Path(terminal.workspace / "out").symlink_to(tmp_path)
    session = await terminal.session()
    result = await session.call("terminal.run", argv=[PY, "-c", "print(1)"], cwd="out")
    assert result.status == "denied"
    assert "outside the workspace" in (result.error or "")
    missing = await session.call("terminal.run", argv=[PY, "-c", "print(1)"], cwd="nope")
    assert missing.status == "denied"


@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "-c", "echo $API_TOKEN"],
        ["/bin/sh", "script.sh"],
        ["env", "python3", "x.py"],
        ["sudo", "true"],
        ["xargs"],
        ["timeout", "5", "x"],
        ["python3", "-c", "print(1)"],
        ["python3.11", "-Ic", "print(1)"],
        ["python", "-W", "ignore", "-c", "print(1)"],
        ["perl", "-e", "print 1"],
        ["ruby", "-e", "p 1"],
        ["node", "--eval=1"],
        # They run another program through an option, a language or a workspace file.
        ["find", ".", "-exec", "sh", "-c", "echo $API_TOKEN", ";"],
        ["awk", 'BEGIN { system(ENVIRON["X"]) }'],
        ["sed", "-n", "1e sh", "x"],
        ["git", "-c", "alias.x=!sh", "x"],
        ["make", "-f", "Makefile"],
        ["tar", "--to-command=sh", "-xf", "a.tar"],
    ],
)
async def test_secrets_never_go_to_execution_control_targets(
    terminal: Terminal, argv: list[str]
) -> None:
    session = await terminal.session(grants=("secret.bind:API_TOKEN",))
    result = await session.call("terminal.run", argv=argv, secrets=["API_TOKEN"])
    assert (result.status, result.started) == ("denied", False)
    assert "secrets are never passed to" in (result.error or "")


@pytest.mark.parametrize(
    "argv",
    [
        # Wrappers: each runs the command after it, with the secret in its environment.
        ["prlimit", "--cpu=1", "sh"],
        ["setarch", "x86_64", "sh"],
        ["linux64", "sh"],
        ["capsh", "--", "-c", "sh"],
        ["ssh-agent", "sh"],
        ["dbus-run-session", "sh"],
        ["systemd-run", "--pty", "sh"],
        ["run-parts", "dir"],
        ["sg", "users", "sh"],
        ["newgrp", "users"],
        ["socat", "-", "EXEC:sh"],
        ["unbuffer", "sh"],
        ["fakeroot", "sh"],
        ["bwrap", "--dev-bind", "/", "/", "sh"],
        ["ip", "netns", "exec", "x", "sh"],
        ["/usr/lib/node_modules/npm/bin/npx-cli.js", "cowsay"],
        # Their own languages or a workspace file run anything.
        ["sqlite3", ":memory:", ".shell sh"],
        ["npm", "exec", "--", "sh"],
        ["yarn", "run", "x"],
        ["pnpm", "dlx", "x"],
        ["uv", "run", "sh"],
        ["cargo", "run"],
        ["gcc", "-wrapper", "sh,-c", "x.c"],
        ["wget", "--use-askpass=sh", "u"],
    ],
)
def test_secrets_never_go_to_wrappers_and_runners(argv: list[str]) -> None:
    """The name check's family beyond shells: whatever else runs another program."""
    refusal = program_refusal(argv[0], argv)
    assert refusal is not None
    assert "runs other programs" in refusal


def test_programs_that_run_only_themselves_may_receive_secrets() -> None:
    for argv in (
        ["python3", "tool.py", "--flag"],
        ["curl", "-s", "u"],
        ["/usr/bin/node", "a.js"],
        ["/usr/bin/ssh-keygen", "-y"],
        ["/usr/bin/python3.11", "-m", "tool"],
        ["/usr/bin/ldd", "x"],
    ):
        assert program_refusal(argv[0], argv) is None
        assert program_refusal(argv[0], argv, in_workspace=True) is not None


@pytest.mark.parametrize(
    "argv",
    [
        # The real paths short names lead to (Debian's alternatives): vi -> vim.basic.
        ["/usr/bin/vim.basic", "-Es", "-c", "call writefile([$API_TOKEN], 'x')"],
        ["/usr/bin/tclsh8.6"],
        ["/usr/bin/emacs-nox", "--batch"],
        ["/usr/bin/ksh93", "-c", "true"],
        ["/usr/bin/lua5.4", "x.lua"],
        ["/usr/bin/perl5.36-x86_64-linux-gnu", "-e", "print 1"],
        ["/usr/bin/view", "x"],
        # The dynamic loader runs any program it is given.
        ["/usr/bin/ld.so", "/bin/sh", "-c", "true"],
        ["/lib64/ld-linux-x86-64.so.2", "/bin/sh"],
        ["/lib/ld-musl-x86_64.so.1", "/bin/sh"],
    ],
)
def test_a_version_flavour_or_loader_of_a_refused_program_is_refused(argv: list[str]) -> None:
    assert program_refusal(argv[0], argv) is not None
    assert program_refusal(argv[0], argv, in_workspace=False) is not None


@pytest.mark.parametrize("name", ["fmt", "curl", "python3"])
async def test_a_program_inside_the_workspace_never_receives_secrets(
    terminal: Terminal, name: str
) -> None:
    # A run without secrets can copy a shell into the workspace under any name; its name
    # then says nothing of what it is (a hard link or a copy is not a symlink).
    planted = terminal.workspace / "bin" / name
    await anyio.Path(planted.parent).mkdir(exist_ok=True)
    await anyio.Path(planted).write_bytes(await anyio.Path("/bin/sh").read_bytes())
    await anyio.Path(planted).chmod(0o755)
    outcome = await terminal.invoke(
        {"API_TOKEN": SECRET}, argv=[str(planted), "-c", 'printf %s "$API_TOKEN" | rev']
    )
    assert (outcome.status, outcome.output) == ("denied", None)
    assert "inside the workspace" in (outcome.error or "")


async def test_a_link_to_a_shell_is_judged_by_its_target(terminal: Terminal) -> None:
    link = terminal.workspace / "harmless"
    await anyio.Path(link).symlink_to("/bin/sh")
    outcome = await terminal.invoke({"API_TOKEN": SECRET}, argv=[str(link), "-c", "true"])
    assert outcome.status == "denied"
    assert "secrets are never passed to" in (outcome.error or "")


# --- background runs ------------------------------------------------------------------


async def start(session: Session, code: str = SLEEP) -> tuple[str, int]:
    result = await session.call("terminal.run", argv=[PY, "-c", code], background=True)
    assert result.status == "succeeded", result.error
    out = output(result)
    assert out["status"] == "running"
    return out["run_id"], out["pid"]


async def test_a_background_run_reports_status_and_stops_with_cleanup_confirmed(
    terminal: Terminal,
) -> None:
    session = await terminal.session()
    run_id, pid = await start(session)
    running = await session.call("terminal.status", run_id=run_id)
    assert (running.status, output(running)["status"], output(running)["pid"]) == (
        "succeeded",
        "running",
        pid,
    )
    stops: list[EffectResult] = []

    async def stop() -> None:
        stops.append(await session.call("terminal.stop", run_id=run_id))

    async with anyio.create_task_group() as group:  # a second stop joins the first
        group.start_soon(stop)
        group.start_soon(stop)
    assert [r.status for r in stops] == ["cancelled", "cancelled"]
    assert output(stops[0])["status"] == "cancelled"
    assert gone(pid)
    final = await session.call("terminal.status", run_id=run_id)
    assert (final.status, output(final)["run_id"]) == ("cancelled", run_id)
    again = await session.call("terminal.stop", run_id=run_id)
    assert again.status == "cancelled"


async def test_a_finished_background_run_reports_its_outcome(terminal: Terminal) -> None:
    session = await terminal.session()
    run_id, _ = await start(session, "print('done')")
    with anyio.fail_after(10):
        while True:
            result = await session.call("terminal.status", run_id=run_id)
            if result.status != "succeeded" or output(result)["status"] != "running":
                break
            await anyio.sleep(0.02)
    out = output(result)
    assert (result.status, out["status"], out["exit_code"]) == ("succeeded", "exited", 0)
    assert out["stdout"]["tail"] == "done\n"
    # Its silent stderr kept no file: the status names none.
    assert (out["stdout"]["artifact"] is None, out["stderr"]["artifact"]) == (False, None)
    stopped = await session.call("terminal.stop", run_id=run_id)
    assert (stopped.status, output(stopped)["exit_code"]) == ("succeeded", 0)


async def test_another_session_or_owner_cannot_see_a_run(terminal: Terminal) -> None:
    session = await terminal.session()
    run_id, _ = await start(session)
    other_session = await terminal.session("other")
    other_owner = await terminal.session("c", "someone-else")
    missing = await session.call("terminal.status", run_id="run_0123456789abcdef")
    assert missing.status == "not_found"
    for other in (other_session, other_owner):
        for effect in ("terminal.status", "terminal.stop"):
            result = await other.call(effect, run_id=run_id)
            assert (result.status, result.error) == ("not_found", missing.error)
    still = await session.call("terminal.status", run_id=run_id)
    assert output(still)["status"] == "running"


async def test_background_runs_are_limited_per_session(terminal: Terminal) -> None:
    session = await terminal.session()
    first, _ = await start(session)
    await start(session)
    refused = await session.call("terminal.run", argv=[PY, "-c", SLEEP], background=True)
    assert (refused.status, refused.error) == ("denied", "at most 2 background runs per session")
    await start(await terminal.session("other"))  # the limit is per session
    assert (await session.call("terminal.stop", run_id=first)).status == "cancelled"
    await start(session)


async def test_the_limit_is_the_sessions_whoever_starts_the_runs(terminal: Terminal) -> None:
    """A group conversation is one session: alice's and bob's runs share its limit (each
    still sees and stops only their own)."""
    alice = await terminal.session("group", "alice")
    bob = await terminal.session("group", "bob")
    assert alice.context.session_id == bob.context.session_id
    await start(alice)
    bobs, _ = await start(bob)
    for who in (alice, bob):
        refused = await who.call("terminal.run", argv=[PY, "-c", SLEEP], background=True)
        assert (refused.status, refused.error) == (
            "denied",
            "at most 2 background runs per session",
        )
    assert (await alice.call("terminal.stop", run_id=bobs)).status == "not_found"
    assert (await bob.call("terminal.stop", run_id=bobs)).status == "cancelled"
    await start(alice)


async def test_concurrent_starts_cannot_exceed_the_limit(terminal: Terminal) -> None:
    session = await terminal.session()
    results: list[EffectResult] = []

    async def run() -> None:
        arguments = {"argv": [PY, "-c", SLEEP], "background": True}
        results.append(await session.call("terminal.run", **arguments))

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(run)
    assert sorted(r.status for r in results) == ["denied", "denied", "succeeded", "succeeded"]


async def test_a_run_after_the_supervisor_closed_fails_without_a_process(
    terminal: Terminal,
) -> None:
    session = await terminal.session()
    await terminal.supervisor.aclose()
    foreground = await session.call("terminal.run", argv=[PY, "-c", "pass"])
    assert (foreground.status, foreground.started) == ("failed", True)
    assert "supervisor is closed" in (foreground.error or "")
    background = await session.call("terminal.run", argv=[PY, "-c", "pass"], background=True)
    assert background.status == "failed"
    assert "supervisor is closed" in (background.error or "")
    run_id = output(background)["run_id"]
    status = await session.call("terminal.status", run_id=run_id)
    assert (status.status, status.error) == ("failed", background.error)


async def test_closing_the_registry_ends_background_runs_and_refuses_new_ones(
    terminal: Terminal,
) -> None:
    session = await terminal.session()
    run_id, pid = await start(session)
    await terminal.runs.aclose()
    assert gone(pid)
    assert (await session.call("terminal.status", run_id=run_id)).status == "cancelled"
    refused = await session.call("terminal.run", argv=[PY, "-c", "pass"])
    assert (refused.status, refused.error) == ("denied", "the Host is shutting down")
    await terminal.runs.aclose()  # idempotent


# --- secrets split across chunks, lines and streams; artifacts on every end path ---------


async def test_a_secret_written_in_two_chunks_is_redacted(terminal: Terminal) -> None:
    code = (
        "import sys, time\n"
        f"sys.stdout.write({SECRET[:7]!r}); sys.stdout.flush(); time.sleep(0.2)\n"
        f"sys.stdout.write({SECRET[7:]!r} + ' done')\n"
    )
    await anyio.Path(terminal.workspace / "chunks.py").write_text(code)
    outcome = await terminal.invoke({"API_TOKEN": SECRET}, argv=[PY, "chunks.py"])
    assert outcome.output["stdout"]["tail"] == "[redacted:API_TOKEN] done"


async def test_a_secret_split_between_stderr_and_stdout_is_redacted(terminal: Terminal) -> None:
    code = (
        "import sys\n"
        f"sys.stderr.write('key: ' + {SECRET[:8]!r}); sys.stderr.flush()\n"
        f"sys.stdout.write({SECRET[8:]!r} + ' end')\n"
    )
    await anyio.Path(terminal.workspace / "split.py").write_text(code)
    outcome = await terminal.invoke({"API_TOKEN": SECRET}, argv=[PY, "split.py"])
    assert outcome.output["stderr"]["tail"] == "key: [redacted:API_TOKEN]"
    assert outcome.output["stdout"]["tail"] == "[redacted:API_TOKEN] end"


async def test_halves_of_a_secret_on_both_streams_each_followed_by_more_are_redacted(
    terminal: Terminal,
) -> None:
    """Neither half sits at a tail's edge: each is a fragment of 8+ characters."""
    code = (
        "import os, sys\n"
        "s = os.environ['API_TOKEN']\n"
        "sys.stdout.write('A' * 50 + s[:8] + '\\n' + 'B' * 20); sys.stdout.flush()\n"
        "sys.stderr.write('C' * 20 + s[8:] + '\\nD')\n"
    )
    await anyio.Path(terminal.workspace / "halves.py").write_text(code)
    outcome = await terminal.invoke({"API_TOKEN": SECRET}, argv=[PY, "halves.py"])
    assert outcome.output["stdout"]["tail"] == "A" * 50 + "[redacted:API_TOKEN]\n" + "B" * 20
    assert outcome.output["stderr"]["tail"] == "C" * 20 + "[redacted:API_TOKEN]\nD"


PEM = (
    "-----BEGIN TEST KEY-----\nMIIBOgIBAAJBAKj34GkxFhD9\n0Zk4xQ7w2LrR1mYtVbN8aPeA\n"
    "-----END TEST KEY-----"
)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
async def test_a_multi_line_secret_is_redacted_whole_and_line_by_line(
    terminal: Terminal, newline: str
) -> None:
    code = (
        "import sys\n"
        f"key = {PEM!r}.replace('\\n', {newline!r})\n"
        "sys.stdout.write(key + '\\n')\n"
        f"sys.stderr.write('second line: ' + {PEM.splitlines()[2]!r} + '\\n')\n"
    )
    await anyio.Path(terminal.workspace / "pem.py").write_text(code)
    outcome = await terminal.invoke({"TLS_KEY": PEM}, argv=[PY, "pem.py"])
    shown = json.dumps(outcome.output)
    for line in PEM.splitlines():
        assert line not in shown
    assert "[redacted:TLS_KEY]" in outcome.output["stdout"]["tail"]


async def wait_spawned(terminal: Terminal) -> None:
    with anyio.fail_after(20):
        while True:
            if terminal.supervisor.owners():
                return
            await anyio.sleep(0.02)


async def bound_artifacts(terminal: Terminal) -> list[str]:
    root = anyio.Path(terminal.artifacts)
    if not await root.exists():
        return []
    return [p.name async for d in root.iterdir() if await d.is_dir() async for p in d.iterdir()]


async def test_a_cancelled_secret_bound_run_leaves_no_artifacts(terminal: Terminal) -> None:
    await anyio.Path(terminal.workspace / "sleep.py").write_text(
        f"import time; print({SECRET!r}, flush=True); time.sleep(60)"
    )
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: terminal.invoke({"API_TOKEN": SECRET}, argv=[PY, "sleep.py"]))
        await wait_spawned(terminal)
        group.cancel_scope.cancel()
    assert await bound_artifacts(terminal) == []


async def test_a_secret_bound_run_ended_by_host_close_leaves_no_artifacts(
    terminal: Terminal,
) -> None:
    await anyio.Path(terminal.workspace / "sleep.py").write_text(
        f"import time; print({SECRET!r}, flush=True); time.sleep(60)"
    )
    outcomes: list[ToolOutcome] = []

    async def run() -> None:
        outcomes.append(await terminal.invoke({"API_TOKEN": SECRET}, argv=[PY, "sleep.py"]))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await wait_spawned(terminal)
        await terminal.supervisor.aclose()
    assert outcomes[0].status == "cancelled"
    assert outcomes[0].output["stdout"]["artifact"] is None
    assert await bound_artifacts(terminal) == []


@pytest.mark.parametrize("deadline", [1e308, 10**400, -(10**400), "inf", "nan"])
async def test_out_of_range_deadlines_are_invalid_not_overflow(
    terminal: Terminal, deadline: Any
) -> None:
    session = await terminal.session()
    result = await session.call("terminal.run", argv=["true"], deadline_s=deadline)
    assert result.status == "invalid"
    assert "deadline_s" in (result.error or "")
    assert terminal.supervisor.owners() == ()
