"""``hostkit core``: write a starter core, see its revisions, promote and roll back.

The Host owns which commit of a core is live (a ref in the core's
repository); these commands open the Host of ``-c`` like every other
command and go through ``host.cores``, so a promotion here runs the same
gates, records the same history and invalidates the same session approvals
as one from Python. A refused promotion exits 1 after printing each gate
(and the review token when one is needed); bad input exits 2 with one line.
"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import anyio
import typer
from rich.console import Console

from hostkit.cli._common import (
    EXIT_NOT_COMPLETED,
    EXIT_OK,
    ConfigOption,
    JsonOption,
    Operator,
    config_path,
    console,
    fail,
    open_host,
    print_json,
    project_config,
    required_reason,
    run_command,
)
from hostkit.cli._core_render import (
    diff_lines,
    gate_lines,
    history_table,
    print_lines,
    revisions_table,
    short_sha,
    status_table,
)
from hostkit.cli._render import command_line
from hostkit.cli._turn import Waiting
from hostkit.cores import DEPENDENCY_REVIEW_PREFIX, REVIEW_PREFIX
from hostkit.errors import HostkitError, InvalidValue, PromotionRefused
from hostkit.host import Host, resolve_config
from hostkit.inspect import one_line, printable
from hostkit.types import CoreEvent, GateOutcome, is_core_id

if TYPE_CHECKING:
    from hostkit.cores import CoreRegistry

__all__ = ["core", "cores_table"]

MAX_LIMIT = 500

core = typer.Typer(
    help="Agent Cores: write a starter, list revisions, diff, promote and roll back.",
    no_args_is_help=True,
)

CoreId = Annotated[str, typer.Argument(help="the core id (its \\[cores.<id>] table)")]
CoreReason = Annotated[
    str | None, typer.Option(help="why (required; recorded in the core's history)")
]


# Core ids listed in the refusal of an unknown one: enough to spot the right one.
_LISTED_CORES = 12


def _not_live(core_id: str) -> Callable[[str], bool]:
    """The start-up warning that ``core_id`` has no live revision: moot while promoting it."""
    return lambda line: line.startswith(f"core {core_id!r} has no live revision")


def _core_id(value: str) -> str:
    """``value`` if it is a core id; else the one-line error, before any Host opens."""
    if not is_core_id(value):
        raise fail(
            InvalidValue(
                f"{value[:64]!r} is not a core id (lower-case a-z, 0-9, '_', '-'; "
                "starting with a letter; at most 64)"
            )
        )
    return value


def _registry(host: Host, core_id: str) -> CoreRegistry:
    """The Host's cores, once ``core_id`` is one of them (else one line naming [cores])."""
    if core_id not in host.config.cores:
        raise InvalidValue(_no_core(core_id, sorted(host.config.cores)))
    return host.cores


async def _core_project(config: Path | None, core_id: str | None) -> Path | None:
    """The project's config once ``core_id`` is under its [cores]: a mistyped id is refused
    with the closest one before any Host opens (no warning about another core first)."""
    found = await project_config(config)
    if core_id is not None:
        declared = await resolve_config(found)
        if core_id not in declared.cores:
            raise InvalidValue(_no_core(core_id, sorted(declared.cores)))
    return found


def _no_core(core_id: str, known: list[str]) -> str:
    close = difflib.get_close_matches(core_id, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(known[:_LISTED_CORES]) + (", ..." if len(known) > _LISTED_CORES else "")
    todo = (
        ""
        if close or not is_core_id(core_id)
        else f"; a new core is served once hostkit.toml has its [cores.{core_id}] table "
        "(the one `hostkit core init` printed)"
    )
    return (
        f"no core {core_id!r} under [cores] in the configuration{hint} "
        f"(cores here: {listed or 'none'}){todo}"
    )


def _config_document(file: Path | None) -> dict[str, object]:
    """``file`` as TOML, or an empty document when it is absent or unreadable (the command
    that loads it properly says what is wrong with it)."""
    if file is None:
        return {}
    try:
        with file.open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}


def _agent_names(document: dict[str, object], file: Path) -> dict[str, Path | None]:
    """The agent and core names the configuration already has, each core's with its
    resolved ``path`` (None for an agent).

    Checked before ``core init`` writes: a core under a taken name would make the
    printed table break the configuration it is meant to join, unless it is the
    configured core's own path (its repository is missing: init makes it).
    """
    names: dict[str, Path | None] = {}
    for table in ("agents", "cores"):
        entries = document.get(table)
        if not isinstance(entries, dict):
            continue
        for name, entry in entries.items():
            where = entry.get("path") if table == "cores" and isinstance(entry, dict) else None
            names[str(name)] = (
                (file.parent / where).resolve() if isinstance(where, str) and where else None
            )
    return names


def _model_for(document: dict[str, object], file: Path | None, model: str | None) -> str:
    """The provider the new core's agent.yaml names: ``model``, else ``local``, else the
    configuration's only provider; ``InvalidValue`` when its providers cannot serve it.

    Checked before the core is written and committed: promotion would refuse it,
    leaving a fix to edit and commit in the core's repository.
    """
    providers = document.get("providers")
    names = sorted(str(name) for name in providers) if isinstance(providers, dict) else []
    if model is None:
        if not names or "local" in names:
            return "local"
        if len(names) == 1:
            return names[0]
        raise InvalidValue(
            f"[providers] in {file} has no 'local' and several providers ({', '.join(names)}): "
            "choose one with --model; nothing was written"
        )
    if not names or model in names:
        return model
    close = difflib.get_close_matches(model, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise InvalidValue(
        f"--model {model!r} is not a provider under [providers] in {file}{hint} "
        f"(providers there: {', '.join(names)}); nothing was written"
    )


def cores_table(core_id: str, path: str) -> str:
    """The ``[cores.<id>]`` table serving the core at ``path`` (a JSON string is a TOML one)."""
    return f"[cores.{core_id}]\npath = {json.dumps(path, ensure_ascii=False)}\n"


@core.command("init")
def init(
    path: Annotated[Path, typer.Argument(help="an empty (or new) directory for the core")],
    core_id: Annotated[
        str | None, typer.Option("--id", help="the core id (default: the directory's name)")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="the provider under \\[providers] the core's agent.yaml names "
            "(default: local, or the configuration's only provider)"
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Write a starter core (agent.yaml, agent/ with one tool, its test) and commit it.

    Prints the \\[cores.<id>] table to add to hostkit.toml; nothing is live until
    `hostkit core promote <id>` runs its tests and moves the Host-owned ref.
    """
    chosen = _core_id(core_id if core_id is not None else path.name)
    try:
        file = config_path(config)
    except HostkitError as exc:
        raise fail(exc) from None
    document = _config_document(file)
    taken = _agent_names(document, file) if file is not None else {}
    configured = chosen in taken and taken[chosen] == path.resolve()
    if chosen in taken and not configured:
        raise fail(
            InvalidValue(
                f"{file} already configures an agent named {chosen!r} ([agents.{chosen}] or "
                f"[cores.{chosen}]): choose another --id; nothing was written"
            )
        )
    from hostkit.cores import init_core  # dulwich loads for the commands that need it

    try:
        sha = init_core(path, chosen, model=_model_for(document, file, model))
    except HostkitError as exc:
        raise fail(exc) from None
    if configured:
        console.print(
            f"wrote the core {chosen} at {path} (commit {short_sha(sha)}), where {file} "
            "configures it",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    else:
        base = (file.parent if file is not None else Path.cwd()).resolve()
        # Without a project there is no hostkit.toml to add the table to: make one first.
        where = "hostkit.toml" if file is not None else "a project's hostkit.toml"
        console.print(
            f"wrote the core {chosen} at {path} (commit {short_sha(sha)}); "
            f"add this table to {where}:",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
        table = cores_table(chosen, os.path.relpath(path.resolve(), base))
        print_lines(Console(), table.splitlines())
        if file is None:
            console.print(
                "no hostkit.toml here or in a parent directory: `hostkit init` makes a "
                "project (with a starter core of its own) to add it to",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    promote = command_line("core", "promote", chosen, reason="first revision", config=config)
    console.print(f"then: {promote}", highlight=False, markup=False, soft_wrap=True)


@core.command("status")
def status(
    core_id: Annotated[str | None, typer.Argument(help="one core (default: every core)")] = None,
    json_: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Each configured core: its live commit, its repository's HEAD, and whether they differ."""
    chosen = _core_id(core_id) if core_id is not None else None

    async def main() -> int:
        async with open_host(await _core_project(config, chosen), check_providers=False) as host:
            ids = [chosen] if chosen is not None else sorted(host.config.cores)
            statuses = [await _registry(host, one).status(one) for one in ids]
        if json_:
            print_json(statuses)
        elif not statuses:
            console.print(
                "no cores configured ([cores.<id>] in hostkit.toml)", highlight=False, markup=False
            )
        else:
            out = Console()
            out.print(status_table(statuses, width=out.width))
            for one in statuses:
                if one.problem is not None:  # why its row has no HEAD, in full
                    line = printable(f"{one.core_id}: {one.problem}")
                    console.print(line, highlight=False, markup=False)
        return EXIT_OK

    run_command(main)


@core.command("log")
def log(
    core_id: CoreId,
    limit: Annotated[int, typer.Option(min=1, max=MAX_LIMIT, help="at most this many")] = 20,
    json_: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Commits from HEAD (* marks the live one), then every promotion with its gates."""
    chosen = _core_id(core_id)

    async def main() -> int:
        async with open_host(await _core_project(config, chosen), check_providers=False) as host:
            cores = _registry(host, chosen)
            # One past the page says whether it was cut (the registry allows 1000).
            revisions = await cores.log(chosen, limit=limit + 1)
            history = await cores.history(chosen, limit=limit + 1)
        listed = (("revisions", revisions), ("history", history))
        truncated = [name for name, rows in listed if len(rows) > limit]
        revisions, history = revisions[:limit], history[:limit]
        if json_:
            print_json(
                {
                    "core_id": chosen,
                    "revisions": revisions,
                    "history": history,
                    "truncated": truncated,
                }
            )
            return EXIT_OK
        out = Console()
        out.print(revisions_table(revisions, width=out.width))
        if "revisions" in truncated:
            console.print(f"(the {limit} newest commits; --limit shows more)", highlight=False)
        if history:
            out.print(f"promotions of {chosen}, newest first:", highlight=False, markup=False)
            out.print(history_table(history, width=out.width))
            if "history" in truncated:
                console.print(f"(the {limit} newest; --limit shows more)", highlight=False)
        else:
            out.print(f"{chosen} was never promoted", highlight=False, markup=False)
        return EXIT_OK

    run_command(main)


@core.command("diff")
def diff(
    core_id: CoreId,
    base: Annotated[str | None, typer.Option(help="from this revision (default: live)")] = None,
    target: Annotated[str, typer.Option(help="to this revision")] = "HEAD",
    json_: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """What promoting TARGET would change: files, patch, dependencies, the MCP security diff.

    When the MCP declarations change, it prints the review token that
    `hostkit core promote --review` needs for exactly this change.
    """
    chosen = _core_id(core_id)

    async def main() -> int:
        async with open_host(await _core_project(config, chosen), check_providers=False) as host:
            found = await _registry(host, chosen).diff(chosen, base=base, target=target)
        if json_:
            print_json(found)
        else:
            print_lines(Console(), diff_lines(found, config=config))
        return EXIT_OK

    run_command(main)


@core.command("promote")
def promote(
    core_id: CoreId,
    revision: Annotated[str, typer.Argument(help="the commit to make live")] = "HEAD",
    reason: CoreReason = None,
    review: Annotated[
        str | None,
        typer.Option(help="the mcp-review:<sha256> token `hostkit core diff` printed"),
    ] = None,
    reviewed_deps: Annotated[
        str | None,
        typer.Option(
            "--reviewed-deps",
            help="the deps-review:<sha256> token `hostkit core diff` printed",
        ),
    ] = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Run the gates on REV (default HEAD) and, if all pass, make it the live revision.

    Exit status 0 promoted; 1 refused (each gate is printed, and the review
    tokens when the MCP declarations or the dependencies changed); 2 bad input.
    """
    chosen, why = _core_id(core_id), required_reason(reason, "say why this revision is promoted")
    _review_option(review, "--review", REVIEW_PREFIX)
    _review_option(reviewed_deps, "--reviewed-deps", DEPENDENCY_REVIEW_PREFIX)

    async def main() -> int:
        async with open_host(
            await _core_project(config, chosen), check_providers=False, moot=_not_live(chosen)
        ) as host:
            # The gates may take minutes (the core's own tests run last): a sign of life,
            # and after Ctrl-C a line saying where to look, not a silent terminal.
            waiting = Waiting(console)
            waiting.start(f"running the gates of {revision} (the core's own tests last)")
            try:
                event = await _registry(host, chosen).promote(
                    chosen,
                    revision,
                    actor=operator,
                    reason=why,
                    review=review,
                    reviewed_dependencies=reviewed_deps,
                )
            except PromotionRefused as refused:
                waiting.stop()
                return _refused(
                    chosen, revision, refused, json_=json_, promotion=True, config=config
                )
            except anyio.get_cancelled_exc_class():
                waiting.stop()
                status = command_line("core", "status", config=config)
                console.print(
                    f"\ninterrupted: `{status}` shows which revision of {chosen} is live",
                    highlight=False,
                    markup=False,
                    soft_wrap=True,
                )
                raise
            finally:
                waiting.stop()
        _moved(event, json_=json_)
        return EXIT_OK

    run_command(main)


@core.command("rollback")
def rollback(
    core_id: CoreId,
    to: Annotated[
        str | None, typer.Option(help="a revision promoted before (default: the previous one)")
    ] = None,
    reason: CoreReason = None,
    json_: JsonOption = False,
    operator: Operator = "cli",
    config: ConfigOption = None,
) -> None:
    """Move the live revision back (to the one before the current, or to --to)."""
    chosen, why = _core_id(core_id), required_reason(reason, "say why this revision is rolled back")

    async def main() -> int:
        async with open_host(await _core_project(config, chosen), check_providers=False) as host:
            try:
                event = await _registry(host, chosen).rollback(
                    chosen, actor=operator, reason=why, to=to
                )
            except PromotionRefused as refused:
                return _refused(
                    chosen,
                    to or "the previous revision",
                    refused,
                    json_=json_,
                    promotion=False,
                    config=config,
                )
        _moved(event, json_=json_)
        return EXIT_OK

    run_command(main)


def _review_option(value: str | None, option: str, prefix: str) -> None:
    """A review token as `hostkit core diff` prints it, or a one-line error (exit status 2).

    Anything else could never pass its gate; it is most often the next option taken
    as this one's value (``--reviewed-deps --config FILE``).
    """
    if value is not None and not value.startswith(prefix):
        shown = one_line(value, 40)
        raise fail(
            InvalidValue(
                f"{option} takes the {prefix}<sha256> token `hostkit core diff` printed "
                f"(got {shown!r})"
            )
        )


def _moved(event: CoreEvent, *, json_: bool) -> None:
    if json_:
        print_json(event)
        return
    out = Console()
    print_lines(out, gate_lines(event.gates))
    verb = "promoted" if event.action == "promote" else "rolled back"
    # Short commit ids (what --to and REV take back); --json has the full ones.
    lines = [
        f"{verb} {event.core_id} to {short_sha(event.revision)} "
        f"(was {short_sha(event.previous) if event.previous else 'not live'}); "
        "new turns run it"
    ]
    if event.action == "rollback" and event.previous:
        # A rollback goes to the revision live before the newest move: run again, it
        # undoes this one instead of going further back.
        lines.append(f"a rollback without --to now returns to {short_sha(event.previous)}")
    print_lines(out, lines)


def _refused(
    core_id: str,
    revision: str,
    refused: PromotionRefused,
    *,
    json_: bool,
    promotion: bool,
    config: Path | None = None,
) -> int:
    """Each gate on stdout, the refusal on stderr (one line) and the tokens to pass back."""
    failed = [
        gate.gate for gate in refused.gates if isinstance(gate, GateOutcome) and not gate.passed
    ]
    if json_:
        print_json(
            {
                "core_id": core_id,
                "revision": revision,
                "refused": refused.message,
                "gates": refused.gates,
                "review": refused.review,
                "dependency_review": refused.dependency_review,
            }
        )
        fail(refused)  # the refusal as every error's one line; the exit status is ours
    else:
        lines = gate_lines(refused.gates)
        ran = {gate.gate for gate in refused.gates if isinstance(gate, GateOutcome)}
        if promotion and "tests" not in ran:
            lines.append("skipped tests: the core's own tests run once the other gates pass")
        print_lines(Console(), lines)
        # The gates' details are printed just above: the error line names them only.
        action = "promote" if promotion else "rollback"
        gates = f"the {' and '.join(failed)} gate{'s' if len(failed) > 1 else ''} failed"
        fail(
            PromotionRefused(f"{action} of core {core_id!r} refused: {gates} (see above)")
            if failed
            else refused
        )
    diff_command = command_line("core", "diff", core_id, "--target", revision, config=config)
    for gate, token, option, what in (
        ("mcp_review", refused.review, "--review", "the security diff"),
        ("dependencies", refused.dependency_review, "--reviewed-deps", "the dependency changes"),
    ):
        if token is not None and gate in failed:
            console.print(
                f"review {what} ({diff_command}), then pass: {shlex.join([option, token])}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    return EXIT_NOT_COMPLETED
