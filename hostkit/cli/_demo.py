"""``hostkit demo``: a multi-step turn, an approval before a file write, then a real model.

Everything runs on embedded SQLite in the demo directory; the agents'
workspace is its ``workspace/`` subdirectory, so the database, its WAL and
the artifacts are outside it.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import anyio
from rich.console import Console
from rich.markup import escape

from hostkit._extras import require_extra
from hostkit.cli._approver import PROMPT, ConsoleApprover, render_request
from hostkit.cli._common import open_host
from hostkit.cli._model import prefetch_model
from hostkit.cli._render import print_result
from hostkit.cli._turn import stream_turn
from hostkit.effects import ApprovalDecision, ApprovalProvider, ApprovalRequest
from hostkit.host import HostConfig, parse_config
from hostkit.types import FreshSession, TurnResult

__all__ = [
    "DEMO_WORKSPACE",
    "NoTerminalApprover",
    "check_demo_extras",
    "demo_approver",
    "demo_config",
    "run_demo",
]

DEMO_QUESTION = "What does hostkit record for every turn? Check the welcome note."
WRITER_QUESTION = "Write a short summary of what hostkit records to summary.md."
LOCAL_QUESTION = "In one short sentence: what is a database?"
SUMMARY_FILE = "summary.md"
DEMO_WORKSPACE = "workspace"
SUMMARY = (
    "# What hostkit records\n\n"
    "Every turn is admitted, pinned to one configuration generation, recorded in SQLite,\n"
    "and ends with exactly one terminal record: completed, needs_user, failed, cancelled,\n"
    "lost or indeterminate.\n"
)
WRITER_REPLY = f"I asked to write {SUMMARY_FILE}; your answer decided whether I did."
NO_TERMINAL = "(no terminal: the demo approves once)"
# Left in the demo directory for the operator commands (sessions, context, budget).
INSPECT_CONFIG = """\
# Written by `hostkit demo`: the demo's database, for `hostkit sessions -c <this folder>`
# (and `context`, `budget`). The demo's own agents are built in; they are not here.
[host]
database = "hostkit.db"
workspace = "workspace"
"""


class NoTerminalApprover:
    """The demo's approver without a terminal (CI, a pipe): the same prompt, then approve once.

    The demo must never hang waiting for a keyboard that is not there.
    """

    def __init__(self, console: Console) -> None:
        self._console = console

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        render_request(self._console, request)
        self._console.print(f"{PROMPT}{NO_TERMINAL}", markup=False, highlight=False)
        return "approve_once"


def demo_approver(console: Console, *, terminal: bool) -> ApprovalProvider:
    """Ask on the terminal when there is one; otherwise approve once, visibly."""
    return ConsoleApprover(console=console) if terminal else NoTerminalApprover(console)


def demo_config(directory: Path, *, environ: dict[str, str]) -> dict[str, object]:
    """Three agents: one with the example note tools, one that must ask to write, a real model.

    The real model is the embedded llama.cpp SmolLM2 (no network), or the
    OpenAI-compatible server named by ``OPENAI_BASE_URL`` when it is set.
    The writer's file lands in the demo's workspace directory; ``files.write``
    replaces the file, so the demo can run again and again.
    """
    real: dict[str, object]
    if environ.get("OPENAI_BASE_URL"):
        real = {
            "kind": "openai",
            "base_url": environ["OPENAI_BASE_URL"],
            "model": environ.get("OPENAI_MODEL", "gpt-4o-mini"),
            "api_key_env": "OPENAI_API_KEY",
        }
    else:
        real = {"kind": "local", "context_window": 2048, "max_output_tokens": 96}
    return {
        "host": {
            "database": str(directory / "hostkit.db"),
            "workspace": str(directory / DEMO_WORKSPACE),
        },
        "providers": {
            "scripted": {
                "kind": "scripted",
                "script": [
                    {"tool": "notes.list"},
                    {"tool": "notes.read", "arguments": {"name": "welcome.md"}},
                    {
                        "reply": "Every turn is admitted, pinned to one configuration "
                        "generation, recorded in SQLite, and ends with exactly one terminal "
                        "record: completed, needs_user, failed, cancelled, lost or indeterminate."
                    },
                ],
            },
            "writer": {
                "kind": "scripted",
                "script": [
                    {
                        "tool": "files.write",
                        "arguments": {"path": SUMMARY_FILE, "content": SUMMARY},
                    },
                    {"reply": WRITER_REPLY},
                ],
            },
            "real": real,
        },
        "agents": {
            "notes": {
                "provider": "scripted",
                "tool_modules": ["hostkit.examples.tools"],
                "policy": {"allow": ["notes.*"]},
            },
            "writer": {
                "provider": "writer",
                "builtins": ["files.write"],
                "memory": False,
                "policy": {"allow": ["notes.*"], "ask": ["files.write"]},
            },
            "assistant": {
                "provider": "real",
                "memory": False,
                "instructions": "You are a concise assistant. Answer in one sentence.",
            },
        },
    }


def check_demo_extras(environ: dict[str, str]) -> None:
    """``MissingDependency`` if the demo's third turn needs the ``local`` extra and it is missing.

    Run before the demo creates anything: the refusal names the demo's own
    turn (not its internal provider name) and the one alternative, a server
    ``OPENAI_BASE_URL`` names. Blocking ``find_spec`` lookups: call it
    before the event loop runs.
    """
    if environ.get("OPENAI_BASE_URL"):
        return
    require_extra(
        "local",
        feature="hostkit demo's third turn, the embedded model "
        "(unless OPENAI_BASE_URL names an OpenAI-compatible server),",
    )


async def run_demo(
    directory: Path, console: Console, *, approver: ApprovalProvider | None = None
) -> int:
    """Run the three demo steps; 0 when every turn completed."""
    config = parse_config(demo_config(directory, environ=dict(os.environ)), base_dir=directory)
    ours = await _keep_inspect_config(directory)
    try:
        return await _steps(config, directory, console, approver=approver, ours=ours)
    except anyio.get_cancelled_exc_class():
        # Ctrl-C: say so, and where what ran so far is, rather than leave it silent.
        where = f"; {_sessions_command(directory)} shows what it recorded" if ours else ""
        console.print(f"\ninterrupted: the demo stopped{where}", highlight=False, soft_wrap=True)
        raise


async def _steps(
    config: HostConfig,
    directory: Path,
    console: Console,
    *,
    approver: ApprovalProvider | None,
    ours: bool,
) -> int:
    async with open_host(config, approver=approver) as host:
        database = str(config.database_path)
        console.rule("1. a scripted agent reads a shipped note with an authored tool")
        console.print(f"[bold]you[/]: {DEMO_QUESTION}", highlight=False)
        # Each run starts its own sessions: a second demo reads as the first did.
        first = await stream_turn(
            host, DEMO_QUESTION, agent="notes", conversation="demo-notes", session=FreshSession()
        )
        print_result(console, first, database=database)

        console.rule("2. an agent asks before it writes a file (policy: ask files.write)")
        # The demo's own workspace: an earlier run's file goes, so this run asks to
        # create it as the first did, and "not written" means there is none.
        await anyio.Path(config.workspace_of("writer") / SUMMARY_FILE).unlink(missing_ok=True)
        console.print(f"[bold]you[/]: {WRITER_QUESTION}", highlight=False)
        written = await stream_turn(
            host,
            WRITER_QUESTION,
            agent="writer",
            conversation="demo-writer",
            session=FreshSession(),
        )
        print_result(console, written, database=database)
        await _show_written(console, config.workspace_of("writer"), written)

        real = config.providers["real"]
        label = (
            f"OpenAI-compatible server at {real.base_url}"
            if real.kind == "openai"
            else ("the embedded local model (llama.cpp, SmolLM2-135M, on this machine)")
        )
        console.rule(f"3. a real model: {label}")
        if real.kind == "local":
            await prefetch_model()
        console.print(f"[bold]you[/]: {LOCAL_QUESTION}", highlight=False)
        second = await stream_turn(
            host,
            LOCAL_QUESTION,
            agent="assistant",
            conversation="demo-real",
            session=FreshSession(),
        )
        print_result(console, second, database=database)
    _print_next(console, directory, ours=ours)
    ok = all(turn.outcome == "completed" for turn in (first, written, second))
    return 0 if ok else 1


async def _keep_inspect_config(directory: Path) -> bool:
    """Leave ``hostkit.toml`` in the demo directory, so the operator commands read the
    demo's database with ``-c DIR`` wherever they run; False when a file the demo did
    not write is there (it is left as it is, and never pointed at)."""
    file = anyio.Path(directory / "hostkit.toml")
    try:
        async with await file.open("x") as out:  # O_EXCL: never through a planted link
            await out.write(INSPECT_CONFIG)
    except FileExistsError:
        try:
            return await file.is_file() and await file.read_text() == INSPECT_CONFIG
        except (OSError, UnicodeDecodeError):
            return False
    return True


def _sessions_command(directory: Path) -> str:
    """The command that lists what the demo in ``directory`` recorded."""
    return shlex.join(["hostkit", "sessions", "-c", str(directory)])


def _print_next(console: Console, directory: Path, *, ours: bool) -> None:
    """Where to look at what the demo recorded, and how to start a project of one's own."""
    if ours:
        look = _sessions_command(directory)
        where = f"{look} lists what the demo recorded (hostkit context SESSION_ID -c ... shows one)"
    else:
        where = (
            f"{directory / 'hostkit.toml'} was not written by the demo, so no command here "
            f"reads what it recorded in {directory / 'hostkit.db'}"
        )
    console.print(
        f"next: {where}; hostkit init my-project starts your own",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


async def _show_written(console: Console, workspace: Path, result: TurnResult) -> None:
    """Whether this run wrote the file (a file left by an earlier run does not count)."""
    statuses = [effect.status for effect in result.effects if effect.effect == "files.write"]
    path = anyio.Path(workspace / SUMMARY_FILE)
    if statuses == ["succeeded"] and await path.exists():
        size = (await path.stat()).st_size
        console.print(
            f"[bold]file[/]: {SUMMARY_FILE} ({size} bytes) in the demo workspace "
            f"{escape(str(workspace))}",
            highlight=False,
        )
    else:
        shown = ", ".join(statuses) or "not called"
        console.print(f"[bold]file[/]: {SUMMARY_FILE} was not written ({shown})", highlight=False)
