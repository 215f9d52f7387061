"""The ``hostkit`` command line: init, run, sessions, context, budget, approvals, effects,
memory, mcp, inbox, delivery, core, model, serve, demo."""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from typer.core import TyperGroup, TyperOption

from hostkit._stdio import survive_readers_leaving
from hostkit.cli._approvals import approvals
from hostkit.cli._common import (
    EXIT_ERROR,
    ConfigOption,
    JsonOption,
    Operator,
    Reason,
    chosen_session,
    command_warnings,
    console,
    default_project_note,
    fail,
    find_config,
    naming_config,
    open_host,
    operator_host,
    print_json,
    python_agent,
    report,
    run_command,
    stdin_is_a_terminal,
    terminal_approver,
)
from hostkit.cli._core import core
from hostkit.cli._delivery import delivery
from hostkit.cli._demo import check_demo_extras, demo_approver, run_demo
from hostkit.cli._doctor import doctor
from hostkit.cli._effects import effects
from hostkit.cli._extras import VersionOption, extras
from hostkit.cli._inbox import inbox
from hostkit.cli._init import init
from hostkit.cli._inspect import budget_report, context_report
from hostkit.cli._interrupt import interrupted_turn
from hostkit.cli._mcp import mcp
from hostkit.cli._memory import memory
from hostkit.cli._model import model
from hostkit.cli._render import command_line
from hostkit.cli._serve import serve
from hostkit.cli._sessions import sessions
from hostkit.cli._turn import attach_files, stream_turn
from hostkit.errors import HostkitError, InvalidValue, TurnRejected, bounded
from hostkit.host import resolve_config, unknown_agent
from hostkit.inspect import budget_view, context_view
from hostkit.types import (
    MAX_INPUT_CHARS,
    FreshSession,
    ResumeSession,
    SessionSelector,
    is_text,
    new_id,
)

__all__ = ["app", "main"]

# How admission refuses a --session this conversation cannot resume (missing, or not its).
_SESSION_UNAVAILABLE = "the requested session is not available"
# What ``hostkit run -`` reads at most: a turn's whole input, four UTF-8 bytes a character.
_STDIN_BYTES = 4 * MAX_INPUT_CHARS

# Words a newcomer types for a command that has another name here, and what to type.
_SYNONYMS = {
    "inspect": "`hostkit context` (a turn's context) or `hostkit budget` (a session's tokens)",
    "events": "`hostkit context` (a turn's decisions) or `hostkit sessions` (recent turns)",
    "turns": "`hostkit sessions` (recent turns and their outcomes)",
    "history": "`hostkit sessions`, or `hostkit core log CORE` (a core's revisions)",
    "status": "`hostkit sessions`, `hostkit core status` or `hostkit inbox counts`",
    "chat": "`hostkit run MESSAGE` (one turn; the next run continues the conversation)",
    "ask": "`hostkit run MESSAGE`",
    "start": "`hostkit serve` (the daemon) or `hostkit run MESSAGE` (one turn)",
    "daemon": "`hostkit serve`",
    "promote": '`hostkit core promote CORE --reason "..."`',
}


def _flags_show_no_type() -> None:
    """Help lists a flag without a type: typer shows ``--json <bool>``, which reads as an
    option that takes a value (and ``--json true`` is then a usage error)."""
    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag and self.metavar is None else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_show_no_type()


class _Commands(TyperGroup):
    """hostkit's commands: an unknown one that is another tool's word for one of ours says
    which (click itself suggests only close spellings)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except typer.TyperException as exc:  # click's "No such command", typer's own copy
            meant = _SYNONYMS.get(args[0].lower()) if args else None
            if meant is not None:
                exc.message = f"No such command {args[0][:64]!r}: try {meant}."
            raise


app = typer.Typer(
    cls=_Commands,
    help="hostkit: an agent Host with durable turns, explicit authority and bounded context.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(approvals, name="approvals")
app.add_typer(effects, name="effects")
app.add_typer(sessions, name="sessions")
app.add_typer(memory, name="memory")
app.add_typer(mcp, name="mcp")
app.add_typer(inbox, name="inbox")
app.add_typer(delivery, name="delivery")
app.add_typer(core, name="core")
app.add_typer(model, name="model")
app.command()(init)
app.command()(serve)
app.command()(extras)
app.command()(doctor)


@app.callback()
def _options(version: VersionOption = False) -> None:
    """Options of ``hostkit`` itself: ``--version`` is eager and exits before any command."""


def _message_from_stdin() -> str:
    """``hostkit run -``: the message read from stdin, bounded (one argument of a command
    line holds at most 128 KiB, less than a turn's input may be). A trailing newline
    (``echo``'s) is not part of it."""
    data = sys.stdin.buffer.read(_STDIN_BYTES + 1)
    if len(data) > _STDIN_BYTES:
        raise fail(InvalidValue(f"the message on stdin is over {MAX_INPUT_CHARS} characters"))
    try:
        text = data.decode("utf-8").removesuffix("\n")
    except UnicodeDecodeError:
        raise fail(InvalidValue("the message on stdin is not UTF-8 text")) from None
    if not text.strip():
        raise fail(InvalidValue("the message on stdin is empty"))
    return text


@app.command()
def run(
    message: Annotated[
        str, typer.Argument(help="what to ask the agent; - reads it from stdin (UTF-8)")
    ],
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            "-a",
            help="a configured agent, or module:attribute naming a hostkit.Agent in Python",
        ),
    ] = "assistant",
    session: Annotated[str | None, typer.Option(help="resume this session id")] = None,
    new: Annotated[bool, typer.Option("--new", help="start a fresh session")] = False,
    conversation: Annotated[
        str | None,
        typer.Option(
            help="conversation key (default: terminal, or terminal/AGENT for another agent)"
        ),
    ] = None,
    attach: Annotated[
        list[str] | None,
        typer.Option(
            "--attach",
            metavar="FILE",
            help="attach a file (repeatable): .png .jpg .gif .webp .pdf .txt .md .log .csv",
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Run one turn and stream the answer.

    On a terminal, effects the policy marks `ask` are asked there; otherwise
    the turn pauses (exit status 3) and `hostkit approvals` answers it. A file
    that is missing, too large or of an unknown type, or an attachment the
    agent's provider does not accept, is a one-line error (exit status 2).
    """
    if message == "-":
        message = _message_from_stdin()
    if new and session is not None:
        # Contradictory flags: the usual one-line error, exit status 2, before anything runs.
        raise fail(InvalidValue("choose one of --new (a fresh session) and --session (resume one)"))
    if session is not None and (not session.strip() or session in ("fresh", "bound")):
        # Not "no session": a script whose variable came out empty must not talk elsewhere;
        # nor a selector word, which is no session's id.
        raise fail(
            InvalidValue(
                "--session needs a session id (ses_...); use --new for a fresh session, "
                "or leave it out to continue this conversation's session"
            )
        )
    # Blank names are the script's mistake, said in the command's own words.
    if not agent.strip():
        raise fail(
            InvalidValue(
                "--agent needs an agent's name ([agents.<name>] or [cores.<name>]) or "
                "module:attribute; leave it out for assistant"
            )
        )
    if conversation is not None and not conversation.strip():
        raise fail(
            InvalidValue(
                "--conversation needs a key; leave it out for this agent's terminal conversation"
            )
        )
    selector: SessionSelector = (
        FreshSession() if new else ResumeSession(session) if session is not None else "bound"
    )
    reference, python_agents = agent, python_agent(agent)
    if python_agents:
        agent = python_agents[0].name
    if conversation is None:
        # Each agent its own conversation: --agent notes must not continue (and relabel)
        # the assistant's session, whose history is about something else.
        conversation = "terminal" if agent == "assistant" else f"terminal/{agent}"

    # The refusal of a turn for a core with no live revision says how to promote it: the
    # start-up warning saying the same is left out.
    unpromoted = f"core {agent!r} has no live revision"

    async def main() -> int:
        found = await find_config(config)
        declared = await resolve_config(found, assistant=not python_agents)
        known = sorted({*declared.agents, *declared.cores, *(a.name for a in python_agents)})
        if agent not in known:
            # Refused before the Host opens: a mistyped name creates no database or workspace.
            reason = await _python_agent_hint(unknown_agent(agent, known), agent)
            raise fail(TurnRejected(reason))
        note = await default_project_note(found)
        async with open_host(
            found,
            approver=terminal_approver(config, agent=reference if python_agents else None),
            agents=python_agents,
            moot=lambda line: line.startswith(unpromoted),
        ) as host:
            if note is not None:
                console.print(note, highlight=False, markup=False, soft_wrap=True)
            attachments = await attach_files(host, conversation, attach or ())
            request_id = new_id("req")
            try:
                result = await stream_turn(
                    host,
                    message,
                    agent=agent,
                    conversation=conversation,
                    session=selector,
                    progress=console,
                    attachments=attachments,
                    request_id=request_id,
                )
            except TurnRejected as exc:
                reason = await _python_agent_hint(exc.reason, agent)
                if session is not None and reason == _SESSION_UNAVAILABLE:
                    # The same words for a session that is not there and one that is
                    # another agent's (nothing told apart): what a user most often meant.
                    listing = command_line("sessions", config=config)
                    reason += (
                        "; check the id (it may be mistyped), or, for a session of another "
                        f"agent, pass that agent's --agent (`{listing}` lists each session "
                        "with its agent)"
                    )
                if config is not None:
                    # Its hint, pasted, must act on this project: it names -c as given.
                    reason = naming_config(reason, host.config.cores, config)
                if reason == exc.reason:
                    raise
                raise fail(TurnRejected(reason)) from None
            except anyio.get_cancelled_exc_class():
                # Ctrl-C: an admitted turn's terminal record is written as it unwinds (or,
                # the store busy, is not); say which, and where to read it, rather than
                # leave the terminal silent. One interrupted while it was being admitted
                # may not exist at all: looked up.
                said = await interrupted_turn(host, conversation, request_id, config=config)
                console.print("\n" + said, highlight=False, markup=False, soft_wrap=True)
                raise
            return report(
                result,
                database=host.config.store_location,
                config=config,
                agent=reference if python_agents else None,
            )

    run_command(main)


async def _python_agent_hint(reason: str, agent: str) -> str:
    """An unknown agent named like a Python file here: how ``--agent`` loads the Agent in it
    (``module:attribute``); a newcomer who wrote ``janitor.py`` types ``--agent janitor``."""
    module = Path(f"{agent}.py")
    if not (
        reason.startswith(f"no agent named {agent!r}")
        and agent.isidentifier()
        and await anyio.Path(module).is_file()
    ):
        return reason
    return (
        f"{reason}; an Agent defined in {module} runs with --agent {agent}:NAME "
        "(NAME: the variable that holds it)"
    )


SessionArgument = Annotated[
    str | None, typer.Argument(help="the session (default: the most recently active)")
]


@app.command()
def context(
    session_id: SessionArgument = None,
    reason: Reason = None,
    turn: Annotated[str | None, typer.Option(help="this turn instead of the latest")] = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Show a turn's context decisions: layers, budgets, pruning, compaction.

    Only what the decisions recorded (token counts, never message content);
    operator authority, the reason is audited.
    """

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, scope):
            # A turn names its own session; the latest session is only the default.
            chosen = (
                session_id if turn is not None else await chosen_session(host, scope, session_id)
            )
            view = await context_view(host, scope, session_id=chosen, turn_id=turn)
            if json_:
                print_json(view)
            else:
                Console().print(context_report(view))

    run_command(main)


@app.command()
def budget(
    session_id: SessionArgument = None,
    reason: Reason = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Show a session's token usage per turn and step, calibration and cost.

    Operator authority; the reason is audited.
    """

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, scope):
            view = await budget_view(host, scope, await chosen_session(host, scope, session_id))
            if json_:
                print_json(view)
            else:
                out = Console()
                out.print(budget_report(view, width=out.width))

    run_command(main)


@app.command()
def demo(
    directory: Annotated[Path, typer.Option(help="where the demo database lives")] = Path(
        ".hostkit-demo"
    ),
) -> None:
    """A scripted multi-step turn, an approval before a file write, then a real model turn."""
    try:
        # Before the directory exists: a refused demo leaves nothing behind.
        check_demo_extras(dict(os.environ))
    except HostkitError as exc:
        raise fail(exc) from None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(
            InvalidValue(
                f"--directory {bounded(str(directory), 200)}: cannot create it: "
                f"{exc.strerror or exc}"
            )
        ) from None
    approver = demo_approver(console, terminal=stdin_is_a_terminal())
    run_command(partial(run_demo, directory.resolve(), console, approver=approver))


def main() -> None:
    # Done already when started as ``hostkit`` (hostkit._launch); here for a direct caller.
    survive_readers_leaving()
    # Bytes the locale cannot decode arrive as lone surrogates, which no store, file
    # name or message can take: one clear line for all of them, before any command runs.
    for position, argument in enumerate(sys.argv[1:], start=1):
        if argument and not is_text(argument, limit=len(argument)):
            fail(InvalidValue(f"argument {position} is not valid text (undecodable bytes)"))
            raise SystemExit(EXIT_ERROR)
    command_warnings()
    app()
