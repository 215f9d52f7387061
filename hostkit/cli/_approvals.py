"""``hostkit approvals list | approve | deny | resume | revoke``: approvals from the terminal.

Every subcommand acts with an audited operator scope (``--reason``, optional
only on a database the local user owns, as for ``hostkit sessions``).
``approve`` and ``deny`` print the stored call as a terminal prompt shows it
(on stderr), record the first answer and run the continuation turn, whose
answer is streamed; run again with the same answer after an
interruption, they finish the job. ``resume`` runs (or reports) the
continuation of an answered approval. ``revoke`` ends a session's "approve for
session" answers in every Host process on the database (a running daemon
included): each is asked again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console

from hostkit.cli._common import (
    ConfigOption,
    JsonOption,
    Operator,
    PythonAgent,
    Reason,
    console,
    fail,
    operator_host,
    print_json,
    python_agent,
    report,
    run_command,
    terminal_approver,
)
from hostkit.cli._interrupt import interrupted_answer
from hostkit.cli._render import approval_hints, approvals_table, resume_hints
from hostkit.cli._turn import stream_answer, stream_resume
from hostkit.effects import ApprovalDecision
from hostkit.errors import InvalidValue
from hostkit.host import Host
from hostkit.inspect import approval_rows
from hostkit.types import PrincipalScope

__all__ = ["approvals"]

MAX_LIST = 200  # the Host's own bound on one approvals page

approvals = typer.Typer(
    help=(
        "Approvals that paused a turn: list, approve, deny or resume; revoke a session's "
        '"approve for session" answers (operator authority; audited).'
    ),
    no_args_is_help=True,
)

ApprovalId = Annotated[str, typer.Argument(help="the approval id (apr_...)")]
SessionId = Annotated[str, typer.Argument(help="the session id (ses_...; see hostkit sessions)")]


@approvals.command("list")
def list_approvals(
    reason: Reason = None,
    all_: Annotated[bool, typer.Option("--all", help="every status, not only open ones")] = False,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIST)] = 50,
    before: Annotated[
        int | None,
        typer.Option(min=1, help="only approvals older than this (the next page; listed)"),
    ] = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """List approvals, newest first: pending or answered, not yet run; --all: every status."""

    async def main() -> None:
        async with operator_host(config, operator, reason, reads_only=True) as (host, scope):
            # Open: pending, or answered and not run yet (its hint says: resume), selected
            # by the store, so no number of closed ones can push an open one off the page.
            rows = await approval_rows(
                host, scope, status=None if all_ else "open", limit=limit, before=before
            )
            if json_:
                print_json(rows)
                return
            if not rows.approvals:
                console.print("no pending approvals" if not all_ else "no approvals")
                return
            out = Console()
            out.print(approvals_table(rows.approvals, width=out.width))
            for hint in approval_hints(rows.approvals):
                out.print(hint, highlight=False, markup=False, soft_wrap=True)
            for hint in resume_hints(rows.approvals, config=config, agents=host.config.agents):
                out.print(hint, highlight=False, markup=False, soft_wrap=True)
            if rows.next_before is not None:
                console.print(
                    f"(the {limit} newest; --before {rows.next_before} shows older ones)",
                    highlight=False,
                )

    run_command(main)


@approvals.command()
def approve(
    approval_id: ApprovalId,
    reason: Reason = None,
    session: Annotated[
        bool,
        typer.Option(
            "--session", help="also approve this effect for the rest of the continuation turn"
        ),
    ] = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
    agent: PythonAgent = None,
) -> None:
    """Approve the paused call and run it in a continuation turn."""
    decision: ApprovalDecision = "approve_session" if session else "approve_once"
    _answer(approval_id, decision, reason, operator, config, agent)


@approvals.command()
def deny(
    approval_id: ApprovalId,
    reason: Reason = None,
    operator: Operator = "cli",
    config: ConfigOption = None,
    agent: PythonAgent = None,
) -> None:
    """Deny the paused call; a continuation turn tells the agent it was denied."""
    _answer(approval_id, "deny", reason, operator, config, agent)


@approvals.command()
def resume(
    approval_id: ApprovalId,
    reason: Reason = None,
    operator: Operator = "cli",
    config: ConfigOption = None,
    agent: PythonAgent = None,
) -> None:
    """Run the continuation of an answered approval whose answer never ran (or show it).

    Never runs a call twice: a continuation that already claimed it is reported,
    and one that stopped after claiming it left the approval indeterminate.
    """
    agents = python_agent(agent)

    async def main() -> int:
        async with operator_host(
            config,
            operator,
            reason,
            approver=terminal_approver(),
            agents=agents,
            check_providers=True,  # the continuation is a turn
        ) as (
            host,
            scope,
        ):
            try:
                result = await stream_resume(host, approval_id, by=scope, progress=console)
            except anyio.get_cancelled_exc_class():
                await _say_interrupted(host, approval_id, scope, config, agent)
                raise
            return report(result, database=host.config.store_location, config=config, agent=agent)

    run_command(main)


@approvals.command()
def revoke(
    session_id: SessionId,
    reason: Reason = None,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """End every "approve for session" answer in a session, in every Host process.

    A running daemon or notebook on the same database stops using them before
    its next call: each such call is asked again.
    """
    if not session_id.strip():
        raise fail(InvalidValue("revoke needs a session id (ses_...)"))

    async def main() -> None:
        async with operator_host(config, operator, reason) as (host, scope):
            await host.approvals.revoke(scope, session_id, reason=reason or "revoked by operator")
        console.print(
            f"revoked: session approvals of {session_id} end in every Host process "
            "(each such call is asked again)",
            highlight=False,
            markup=False,
        )

    run_command(main)


def _answer(
    approval_id: str,
    decision: ApprovalDecision,
    reason: str | None,
    operator: str,
    config: Path | None,
    agent: str | None = None,
) -> None:
    agents = python_agent(agent)

    async def main() -> int:
        # The continuation may ask again: on a terminal, it is asked here.
        async with operator_host(
            config,
            operator,
            reason,
            approver=terminal_approver(),
            agents=agents,
            check_providers=True,  # the continuation is a turn
        ) as (
            host,
            scope,
        ):
            try:
                # The call as a prompt shows it, on stderr with the rest of what is said
                # about the turn: stdout stays the continuation's answer.
                result = await stream_answer(
                    host, approval_id, decision, by=scope, progress=console, shown_on=console
                )
            except anyio.get_cancelled_exc_class():
                await _say_interrupted(host, approval_id, scope, config, agent)
                raise
            return report(result, database=host.config.store_location, config=config, agent=agent)

    run_command(main)


async def _say_interrupted(
    host: Host, approval_id: str, scope: PrincipalScope, config: Path | None, agent: str | None
) -> None:
    """Ctrl-C: say where the approval was left rather than leave the terminal silent."""
    said = await interrupted_answer(host, approval_id, by=scope, config=config, agent=agent)
    console.print("\n" + said, highlight=False, markup=False, soft_wrap=True)
