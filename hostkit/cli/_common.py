"""What every command shares: the stderr console, ``-c``, exit codes and the terminal approver."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import getpass
import json
import logging
import math
import os
import sys
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from hostkit.cli._approver import ConsoleApprover
from hostkit.cli._interrupt import CommandStop, SignalStop, signals_stop_the_command, stoppable
from hostkit.cli._render import command_line, print_pending, print_result
from hostkit.effects import ApprovalProvider
from hostkit.errors import ConfigError, HostkitError, InvalidValue, bounded
from hostkit.host import Agent, Host, HostConfig, default_config, load_agent
from hostkit.inspect import latest_session, printable, printable_json
from hostkit.types import PrincipalScope, TurnResult

__all__ = [
    "DEFAULT_CONFIG",
    "EXIT_ERROR",
    "EXIT_NEEDS_USER",
    "EXIT_NOT_COMPLETED",
    "EXIT_OK",
    "ConfigOption",
    "JsonOption",
    "Operator",
    "PythonAgent",
    "Reason",
    "chosen_session",
    "config_path",
    "console",
    "exit_code",
    "fail",
    "find_config",
    "iso_instant",
    "local_reason",
    "open_host",
    "operator_host",
    "print_json",
    "project_config",
    "python_agent",
    "report",
    "run_command",
    "stdin_is_a_terminal",
    "terminal_approver",
]

# The documented exit statuses (docs/cli.md): scripts branch on these.
# What every command reads when no -c is given (here, else in the nearest parent with one).
DEFAULT_CONFIG = "hostkit.toml"
EXIT_OK = 0
EXIT_NOT_COMPLETED = 1
EXIT_ERROR = 2
EXIT_NEEDS_USER = 3

# Diagnostics, prompts and results go to stderr; stdout carries only the answer text.
console = Console(stderr=True)

# readable=False: the loader checks the file itself, so every bad file is the same
# one-line ConfigError (click's own check prints a usage box instead).
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="hostkit.toml (default: the nearest hostkit.toml here or in a parent directory)",
        readable=False,
    ),
]


Reason = Annotated[
    str | None,
    typer.Option(
        help="audit reason (operator authority); optional on a database you own, "
        "where the audit records that a local operator acted"
    ),
]
Operator = Annotated[str, typer.Option(help="operator id for the audit")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON on stdout instead of a table")]


def config_path(path: Path | None) -> Path | None:
    """The ``-c`` file (the ``hostkit.toml`` in it when it is a project directory), else the
    project's ``hostkit.toml``, else None (the default config). Blocking (``stat``): call
    it off the event loop (``find_config``).

    The project's file is looked for as git looks for ``.git``: in the working
    directory (``./hostkit.toml``, returned as that relative path), then in
    each parent (returned absolute), so a command run from ``project/workspace``
    acts on the project, not on a second one started there. The look stops at
    the home directory (inclusive) when the working directory is inside it,
    else at the filesystem root. A file found in a parent that belongs to
    another user is refused (``ConfigError``), not used: it would choose the
    code that runs (tool modules), like a planted ``/tmp/hostkit.toml``.
    """
    if path is not None:
        # ``-c my-project`` is the project ``hostkit init my-project`` wrote (any other
        # directory is refused as one by the loader, naming it as given). Only a named
        # file is trusted whoever owns it: a file found in a named directory is checked.
        inside = path / DEFAULT_CONFIG
        if not (path.is_dir() and inside.is_file()):
            return path
        _refuse_foreign(inside, f"(found in {path})", f"-c {inside}")
        return inside
    default = Path(DEFAULT_CONFIG)
    if default.exists():
        return default
    try:
        here = Path.cwd()
    except OSError:  # the working directory was removed: there is no project around it
        return None
    for folder in _parents_to_search(here):
        found = folder / DEFAULT_CONFIG
        try:
            found.lstat()
        except OSError:  # not there (or not reachable): keep looking
            continue
        _refuse_foreign(found, f"(found above {here})", "-c FILE")
        return found
    return None


def _refuse_foreign(found: Path, where: str, named: str) -> None:
    """``ConfigError`` when ``found`` (or what it links to) belongs to another user.

    A configuration chooses the code that runs (tool modules): one the user
    did not name as a file, found where another user could plant it, is
    refused unless named (``named`` says how).
    """
    try:
        owners = [found.lstat().st_uid]
    except OSError:  # gone meanwhile: the loader says so, naming it
        return
    with contextlib.suppress(OSError):  # a link: whoever owns what it points to, too
        owners.append(found.stat().st_uid)
    uid = os.getuid() if hasattr(os, "getuid") else owners[0]
    foreign = [owner for owner in owners if owner != uid]
    if foreign:
        raise ConfigError(
            f"{found} {where} belongs to another user (uid {foreign[0]}); "
            f"not used: pass {named} to use it"
        )


def _parents_to_search(here: Path) -> list[Path]:
    """``here``'s parents, nearest first, up to the home directory if ``here`` is inside it."""
    try:
        home: Path | None = Path.home().resolve()  # cwd is a real path: compare like with like
    except (RuntimeError, KeyError, OSError):  # no home directory for this user (a container)
        home = None
    parents: list[Path] = []
    for folder in here.parents:
        if home is not None and here.is_relative_to(home) and not folder.is_relative_to(home):
            break
        parents.append(folder)
    return parents


def enclosing_project(folder: Path) -> Path | None:
    """The ``hostkit.toml`` of a project ``folder`` is inside (in one of its parents, where
    a command run there would find it), or None."""
    for parent in _parents_to_search(folder):
        candidate = parent / DEFAULT_CONFIG
        if candidate.is_file():
            return candidate
    return None


async def find_config(path: Path | None) -> Path | None:
    """``config_path`` from a command's async body: the look for hostkit.toml is off the loop."""
    return await anyio.to_thread.run_sync(config_path, path)


def fail(error: HostkitError) -> typer.Exit:
    """Print a typed error's bounded message on one line; every error exits with status 2.

    A message may quote what a core's author or a config file wrote (a key, a path):
    control characters are shown escaped, never sent to the terminal.
    """
    message = printable(" ".join(error.message.split()))
    console.print(f"[bold red]error[/]: {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_ERROR)


MAX_REASON_CHARS = 500


def required_reason(value: str | None, why: str) -> str:
    """The audited ``--reason`` a command requires: given, not blank, bounded.

    Declared optional to click, so a missing one is this one line (exit
    status 2), not click's usage box.
    """
    if value is None or not value.strip():
        raise fail(InvalidValue(f"--reason is required: {why}"))
    if len(value) > MAX_REASON_CHARS:
        raise fail(InvalidValue(f"--reason is at most {MAX_REASON_CHARS} characters"))
    return value


def python_agent(reference: str | None) -> tuple[Agent, ...]:
    """The Agent ``--agent module:attribute`` names (the working directory is importable)."""
    if reference is None or ":" not in reference:
        return ()
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return (load_agent(reference),)
    except HostkitError as exc:
        raise fail(exc) from None


# ``--agent module:attribute`` on the approval commands: a Python agent's paused turn
# continues only in a Host that has the agent.
PythonAgent = Annotated[
    str | None,
    typer.Option("--agent", help="module:attribute of the hostkit.Agent whose call paused"),
]


@contextlib.asynccontextmanager
async def open_host(
    config: HostConfig | Path | None,
    *,
    approver: ApprovalProvider | None = None,
    agents: Sequence[Agent] = (),
    check_providers: bool = True,
    moot: Callable[[str], bool] | None = None,
    print_warnings: bool = True,
    require_channels: bool = False,
    stop: SignalStop | None = None,
    reads_only: bool = False,
) -> AsyncIterator[Host]:
    """``Host.open`` for a command: each start-up warning is one line on stderr first.

    The Host also logs each of them; with no logging configured (a plain
    command) Python would print those records too, so they are held while the
    Host opens and only the others are printed, as Python would have.

    ``check_providers=False`` for a command that runs no turn (a listing, a
    core's review or promotion): a provider's missing package does not lock
    the operator out. ``moot`` picks warnings the command itself answers (a
    promotion of the core that has no live revision): not printed.
    ``print_warnings=False`` under configured logging (``hostkit serve``):
    the records the Host logged are the warnings, one each, in its format.
    ``require_channels`` for the one command that delivers (``serve``): the
    others send nothing, so an unset channel secret does not stop them (a
    turn's answer for a channel waits in the outbox for ``hostkit serve``).
    Ctrl-C, SIGTERM and SIGHUP each cancel the command and limit the store's
    waits for other processes' locks, from the start of the Host's opening (a
    migration or a recovery waiting for another process's lock) to the end of
    its close; a second one exits at once (``signals_stop_the_command``). One
    that stops the opening says so in one line. A command that receives its
    signals itself (``serve``, which drains) passes the ``stop`` it hands a
    first one to while the Host opens: the opening ends the same way.
    ``reads_only``: ``Host.open``'s, for a command that only reads.
    """
    with signals_stop_the_command(stop) as stop, _held_startup_records() as held:
        async with _opened_unless_stopped(
            Host.open(
                config,
                approver=approver,
                agents=agents,
                check_providers=check_providers,
                require_channels=require_channels,
                reads_only=reads_only,
            ),
            stop,
        ) as host:
            held.let_go(set(host.warnings))
            given = config if isinstance(config, Path) and config != Path(DEFAULT_CONFIG) else None
            for line in host.warnings if print_warnings else ():
                if moot is not None and moot(line):
                    continue
                if given is not None:
                    line = naming_config(line, host.config.cores, given)
                console.print(
                    f"[bold yellow]warning[/]: {escape(printable(line))}",
                    highlight=False,
                    soft_wrap=True,
                )
            yield host


@contextlib.asynccontextmanager
async def _opened_unless_stopped(
    opening: contextlib.AbstractAsyncContextManager[Host], stop: SignalStop | None
) -> AsyncIterator[Host]:
    """``async with opening``; a stop signal while it opened (whatever the opening then
    raised: the cancellation, or the lock wait it cut short) is one line, then the
    command's cancellation (``run_command`` exits with the signal's status). What the
    block raises is the command's own to tell."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            host = await stack.enter_async_context(opening)
        except (Exception, asyncio.CancelledError):
            if stop is None or stop.signal is None:
                raise
            console.print(
                "\ninterrupted while the Host was opening (its database busy or being "
                f"upgraded): {stop.unopened}",
                highlight=False,
                soft_wrap=True,
            )
            raise asyncio.CancelledError from None
        yield host


def naming_config(line: str, cores: Iterable[str], config: Path) -> str:
    """A warning whose hint promotes a core, with the hint naming ``-c`` as given.

    The Host words the hint for the project's own directory; pasted
    elsewhere, without ``-c``, it would act on another (or no) project.
    """
    for core_id in cores:
        plain = command_line("core", "promote", core_id, reason="...")
        if plain in line:
            named = command_line("core", "promote", core_id, reason="...", config=config)
            line = line.replace(plain, named)
    return line


# Distinct warning texts a command prints at most (a runaway loop stays bounded), and
# the characters of each.
_MAX_WARNINGS = 200
_MAX_WARNING_CHARS = 2_000


class CommandWarnings(logging.Handler):
    """hostkit's warnings on a command's stderr as ``warning: <message>``, each text once.

    A command may build an agent's tools more than once (a turn, then an
    approval's continuation): the same warning is news the first time only.
    Messages are escaped (they may quote a config file or a server).
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._seen: set[str] = set()
        # While a Host opens, hostkit's records are held (``_HeldRecords``) and shown after.
        self.holding = 0

    def emit(self, record: logging.LogRecord) -> None:
        if not (self.holding and record.name.startswith("hostkit")):
            self.show(record)

    def show(self, record: logging.LogRecord) -> None:
        """Print ``record`` now, unless its text was printed already."""
        try:
            text = bounded(printable(record.getMessage()), _MAX_WARNING_CHARS)
            if record.exc_info and record.exc_info[1] is not None:
                # The traceback is for a log file; here, what was raised.
                text += f" ({type(record.exc_info[1]).__name__})"
        except Exception:  # a malformed logging call must not fail the code that logged
            self.handleError(record)
            return
        with self.lock or contextlib.nullcontext():
            if text in self._seen or len(self._seen) >= _MAX_WARNINGS:
                return
            self._seen.add(text)
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"{record.levelname.lower()}: {text}\n")
            sys.stderr.flush()


_WARNINGS = CommandWarnings()


def command_warnings() -> None:
    """Print hostkit's warnings as ``warning: ...`` lines, unless logging is configured
    (an embedding program's own handlers; ``hostkit serve`` routes them while serving)."""
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(_WARNINGS)


class _HeldRecords(logging.Handler):
    """hostkit's records logged while the Host opens, printed later unless shown otherwise."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self._logger = logger

    def emit(self, record: logging.LogRecord) -> None:
        # Progress (a wait on another process's lock) is news now, not after the open.
        if getattr(record, "hostkit_progress", False):
            _WARNINGS.show(record)
            return
        self.records.append(record)

    def let_go(self, shown: set[str]) -> None:
        """Stop holding; print the held records (as Python would) except those in ``shown``."""
        if self in self._logger.handlers:
            self._logger.removeHandler(self)
            _WARNINGS.holding -= 1
        held, self.records = self.records, []
        for record in held:
            if record.getMessage() not in shown:
                _WARNINGS.show(record)


def _configured(logger: logging.Logger) -> bool:
    """Whether a handler other than ``command_warnings``' own would get ``logger``'s records."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(handler is not _WARNINGS for handler in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False


@contextlib.contextmanager
def _held_startup_records() -> Iterator[_HeldRecords]:
    logger = logging.getLogger("hostkit")
    held = _HeldRecords(logger)
    # Configured logging (``hostkit serve``, an embedding program) gets every record as is.
    if not _configured(logger):
        logger.addHandler(held)
        _WARNINGS.holding += 1
    try:
        yield held
    finally:
        held.let_go(set())


def report(
    result: TurnResult, *, database: str, config: Path | None, agent: str | None = None
) -> int:
    """Print a turn's result (and how to answer its pending approval); its exit status.

    ``agent``: the ``module:attribute`` of the Python agent that ran, if one did.
    """
    print_result(console, result, database=database)
    if result.outcome == "needs_user" and result.pending_approval:
        print_pending(console, result.pending_approval, config=config, agent=agent)
    return exit_code(result)


async def default_project_note(found: Path | None) -> str | None:
    """What to tell a user whose turn starts a new default project here (no ``hostkit.toml``
    here or above, no database yet), to print once the Host opened it: the files it
    created must not come as a surprise. None when a project exists."""
    if found is not None:
        return None
    default = default_config(base_dir=Path(await anyio.Path.cwd()))
    if default.store.url is not None or await anyio.Path(default.database_path).exists():
        return None
    return (
        "note: no hostkit.toml here or in a parent directory: using the defaults, with "
        f"state in {default.database_path} and the agents' workspace in "
        f"{default.resolve(default.host.workspace)}/ (`hostkit init` writes a project instead)"
    )


async def project_config(
    config: Path | None, *, nothing: str = "nothing to read here"
) -> Path | None:
    """``find_config``, refusing where there is no project to act on.

    With no ``hostkit.toml`` here or above and no database at the default path, a
    command that reads or changes a project's state is refused
    (``InvalidValue``) and nothing is created: one run from the wrong
    directory used to leave a stray database and workspace behind.
    """
    found = await find_config(config)
    if found is None:
        default = default_config(base_dir=Path(await anyio.Path.cwd()))
        if default.store.url is None and not await anyio.Path(default.database_path).exists():
            raise InvalidValue(
                f"no hostkit.toml in this directory or above it and no database at "
                f"{default.database_path}: {nothing} (cd to the project, or pass -c FILE)"
            )
    return found


@contextlib.asynccontextmanager
async def operator_host(
    config: Path | None,
    operator: str,
    reason: str | None,
    *,
    approver: ConsoleApprover | None = None,
    agents: Sequence[Agent] = (),
    check_providers: bool = False,
    reads_only: bool = False,
) -> AsyncIterator[tuple[Host, PrincipalScope]]:
    """The Host of ``-c`` and an audited operator scope (every operator command starts so).

    Without ``--reason`` the scope is issued only to the local user who owns
    the database file, and the audit says exactly that. Most operator
    commands list or requeue and run no turn: the providers' packages are
    checked only for those that do (``check_providers=True``: an approval's
    continuation). Where there is no project, refused (``project_config``).
    ``reads_only`` for a view (a listing, a count): it must work while another
    process holds the write lock or the disk is full, so the Host opens
    ``reads_only`` and the audit of the scope is written when it can be at once,
    else one warning line says the read was not audited.
    """
    async with open_host(
        await project_config(config),
        approver=approver,
        agents=agents,
        check_providers=check_providers,
        reads_only=reads_only,
    ) as host:
        if reason is None:
            if host.config.store.url is not None:
                raise InvalidValue(
                    f"--reason is required: the store is {host.config.store_location}, "
                    "a shared PostgreSQL database no local user owns"
                )
            reason = await local_reason(host.config.database_path)
        yield host, await host.operator(operator, reason=reason, audit_best_effort=reads_only)


async def local_reason(database: Path) -> str:
    """The audited reason of a local operator acting on a database file they own.

    Anyone else must say why (``InvalidValue`` naming ``--reason``): a shared
    or system database is not "their own".
    """
    try:
        owner = (await anyio.Path(database).stat()).st_uid
    except OSError as exc:
        raise InvalidValue(f"--reason is required: cannot check who owns {database}") from exc
    uid = os.getuid()
    if owner != uid:
        raise InvalidValue(
            f"--reason is required: {database} belongs to another user (uid {owner})"
        )
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = "without a user name"
    return f"local operator {user} (uid {uid}) on their own database"


async def chosen_session(host: Host, scope: PrincipalScope, session_id: str | None) -> str:
    """``session_id``, or the session with the most recent activity."""
    if session_id is not None:
        return session_id
    latest = await latest_session(host, scope)
    if latest is None:
        raise InvalidValue("there are no sessions yet: run a turn first (hostkit run ...)")
    return latest


def print_json(value: object) -> None:
    """``value`` (dataclasses, mappings, sequences, scalars) as JSON on stdout.

    Readable text stays as it is (``ensure_ascii=False``), but every character
    that is not printable (C1 controls such as CSI, bidi overrides, line
    separators) is written as a JSON ``\\u`` escape (``printable_json``, as the
    ``--log-format json`` lines are): a ``--json`` read in a terminal cannot
    repaint it, and a parser still gets the exact value back.
    """
    text = printable_json(json.dumps(_plain(value), indent=2, ensure_ascii=False))
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _plain(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _instant(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        # A mapping's keys are data (an approval's view, a tool's arguments): never read.
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _instant(name: str, value: object) -> Any:
    """A record field's JSON value; an instant (``at``, ``*_at``, ``*_until``, ``since``) kept
    as wall-clock seconds is written as the store writes the others (``iso_instant``), so
    every time in one ``--json`` reads the same way."""
    named = name in ("at", "since") or name.endswith(("_at", "_until"))
    if not named or isinstance(value, bool) or not isinstance(value, int | float):
        return _plain(value)
    return iso_instant(value)


def iso_instant(seconds: float | None) -> str | float | None:
    """Wall-clock ``seconds`` as ISO-8601 UTC with milliseconds (``…T15:05:02.123Z``), the
    form the store records instants in; a value no date can hold is kept as it is."""
    if seconds is None or not math.isfinite(seconds) or not 0 <= seconds < 253_402_300_800:
        return seconds  # up to the year 9999
    moment = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


def run_command(main: Callable[[], Awaitable[int | None]]) -> NoReturn:
    """Run a command's async body and exit with its status (typed errors: message, 2).

    A task group that failed with one typed error (nested groups of one
    included) is that error: the same one line, not a traceback of the group.
    A reader of the output that left early (``| head``) is no error here: the
    entry point's streams send the rest nowhere (hostkit._stdio).

    A command that holds a Host and was stopped by a signal (``open_host``) exits
    128 + its number: 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP (after which the
    terminal is gone, and a write to it fails: that is the same stop).
    """
    command = CommandStop()
    try:
        code = anyio.run(stoppable, main, command)
    except (KeyboardInterrupt, asyncio.CancelledError, OSError):
        if command.signal is None:
            raise
        raise typer.Exit(command.status) from None
    except HostkitError as exc:
        raise fail(exc) from None
    except BaseExceptionGroup as group:
        single = _single_error(group)
        if single is None:
            raise
        raise fail(single) from None
    raise typer.Exit(code or EXIT_OK)


def _single_error(group: BaseExceptionGroup[BaseException]) -> HostkitError | None:
    """The one HostkitError ``group`` holds through groups of one, else None."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return inner if isinstance(inner, HostkitError) else None


def exit_code(result: TurnResult) -> int:
    """0 completed, 3 waiting for an approval (needs_user), 1 any other outcome."""
    if result.outcome == "completed":
        return EXIT_OK
    if result.outcome == "needs_user":
        return EXIT_NEEDS_USER
    return EXIT_NOT_COMPLETED


def stdin_is_a_terminal() -> bool:
    stdin = sys.stdin
    try:
        return stdin is not None and stdin.isatty()
    except (OSError, ValueError):  # closed or detached stdin
        return False


def terminal_approver(
    config: Path | None = None, *, agent: str | None = None
) -> ConsoleApprover | None:
    """Ask on the terminal when there is one; otherwise None, so ``ask`` pauses the turn.

    ``config`` (the ``--config`` given, if any) and ``agent`` (a Python agent's
    ``module:attribute``: its continuation needs it) are named in the commands it prints.
    """
    if not stdin_is_a_terminal():
        return None
    return ConsoleApprover(console=console, config=config, agent=agent)
