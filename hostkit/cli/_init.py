"""``hostkit init``: a starter project (hostkit.toml, workspace/, the core cores/assistant).

Where it writes: a path naming an existing directory, or ending in ``/``, is
the project directory (``hostkit.toml`` goes inside it); any other path is the
configuration file itself. Directories that do not exist yet are created, and
init says which. A failed init removes what it created and nothing else: a
file, core or directory that was there before stays as it was, and an
existing ``hostkit.toml`` is replaced only by a complete new one (--force).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.markup import escape

from hostkit.cli._common import DEFAULT_CONFIG, console, enclosing_project, fail
from hostkit.cli._render import command_line
from hostkit.errors import HostkitError, InvalidValue, MissingDependency, bounded
from hostkit.host import DEFAULT_CORE_REF, check_provider_extras, load_config

__all__ = ["STARTER", "init"]

STARTER = """\
# hostkit configuration. Relative paths are relative to this file.
# The Host's own state (database, its WAL, artifacts, this file) stays beside it,
# outside the agents' workspace: files.* refuse it even if a workspace overlaps it.
[host]
database = "hostkit.db"
workspace = "workspace"   # what the agents' file and terminal tools may touch
synchronous = "FULL"   # FULL: durable on power loss; NORMAL: faster, may lose the last commits

# The embedded local model (llama.cpp + SmolLM2-135M): no network, good for plumbing checks.
[providers.local]
kind = "local"
context_window = 2048
max_output_tokens = 128

# An OpenAI-compatible server (OpenAI, vLLM, llama.cpp server, Ollama):
# [providers.openai]
# kind = "openai"
# base_url = "http://127.0.0.1:8000/v1"
# model = "gpt-4o-mini"
# api_key_env = "OPENAI_API_KEY"

# The starter Agent Core (docs/cores.md): agent.yaml + agent/ in a Git repository.
# Turns run the commit the Host made live, never the working tree: nothing runs
# until `hostkit core promote assistant --reason "..."` passes its gates.
[cores.assistant]
path = "cores/assistant"

# An agent defined here instead of in a core: the shipped example note tools.
# The embedded local model is too small to call tools: it answers without them.
# Point `provider` at a model that calls tools (like the OpenAI-compatible one
# above) to see the note tools used.
[agents.notes]
provider = "local"
instructions = "You answer from the shipped notes. Answer briefly."
tool_modules = ["hostkit.examples.tools"]

[agents.notes.policy]
allow = ["notes.*"]
deny = []
"""

# The workspace directory the starter configuration names (created by init).
STARTER_WORKSPACE = "workspace"
# The starter core's id and directory ([cores.assistant] above).
STARTER_CORE = "assistant"
STARTER_CORE_PATH = Path("cores") / STARTER_CORE

InitPath = Annotated[
    str,
    typer.Argument(
        help="the file to write (a name with a suffix: staging.toml), or a project "
        "directory to write hostkit.toml in (an existing one, a path ending in '/', or a "
        "new name without a suffix); missing directories are created"
    ),
]


@dataclass
class _Written:
    """What this invocation created, so a failure removes exactly that."""

    directories: list[Path] = field(default_factory=list)
    # Directories that were there, empty, and that init filled (a core into cores/assistant/).
    filled: list[Path] = field(default_factory=list)

    def will_create(self, path: Path) -> Path | None:
        """Note the outermost of ``path`` and its parents that is missing (before creating it)."""
        top = _outermost_missing(path)
        if top is not None:
            self.directories.append(top)
        elif path.is_dir() and not any(path.iterdir()):
            self.filled.append(path)
        return top

    def undo(self) -> None:
        for directory in reversed(self.filled):
            for entry in list(directory.iterdir()):
                _remove(entry)
        for directory in reversed(self.directories):
            _remove(directory)


def init(
    path: InitPath = DEFAULT_CONFIG,
    force: Annotated[
        bool, typer.Option(help="overwrite an existing file, or init inside another project")
    ] = False,
) -> None:
    """Write a starter hostkit.toml, the agents' workspace and a starter core beside it.

    `hostkit init my-project` (a new name without a suffix, a path ending in /,
    or an existing directory) writes my-project/hostkit.toml; a directory that
    does not exist yet is created, and init says so. The core (cores/assistant:
    agent.yaml, agent/ with one tool and its test, one commit) is written only
    where none is: --force rewrites the file and keeps an existing core. A
    failed init removes what it created, and only that.
    """
    if not path:
        raise fail(InvalidValue("init needs a path; leave it out for ./hostkit.toml"))
    file = _config_file(path)
    if file.is_dir():
        raise fail(InvalidValue(f"{file} is a directory; init writes hostkit.toml inside it"))
    if (file.exists() or file.is_symlink()) and not force:
        raise fail(InvalidValue(f"{file} exists; use --force to overwrite it"))
    project = file.parent
    enclosing = None if force else enclosing_project(project.resolve())
    if enclosing is not None:
        raise fail(
            InvalidValue(
                f"{project.resolve()} is inside the project of {enclosing}: commands run there "
                "would act on a new project instead, which may sit in that one's agent "
                "workspace; init elsewhere, or pass --force to do it anyway"
            )
        )
    from hostkit.cores import init_core  # dulwich loads for the commands that need it

    workspace = project / STARTER_WORKSPACE
    starter_core = project / STARTER_CORE_PATH
    written = _Written()
    try:
        try:
            created = written.will_create(project)
            project.mkdir(parents=True, exist_ok=True)
            kept = (starter_core / "agent.yaml").is_file()
            if not kept:
                written.will_create(starter_core)
                init_core(starter_core, STARTER_CORE)
            written.will_create(workspace)
            workspace.mkdir(exist_ok=True)  # an existing file there fails (FileExistsError)
            _write_whole(file, STARTER)
        except BaseException:
            written.undo()
            raise
    except HostkitError as exc:
        raise fail(exc) from None
    except OSError as exc:
        where = bounded(exc.filename if exc.filename is not None else file, 300)
        raise fail(
            InvalidValue(f"cannot write {where}: {exc.strerror or exc}; init left nothing behind")
        ) from None
    _print_written(file, workspace, starter_core, kept=kept, created=created)
    _note_missing_extras(file)
    config = None if file == Path(DEFAULT_CONFIG) else file
    promote = command_line("core", "promote", STARTER_CORE, reason="first revision", config=config)
    hello = command_line("run", config=config) + ' "hello"'  # quoted as one types a message
    if kept and anyio.run(_head_is_live, starter_core):
        status = command_line("core", "status", config=config)
        step = f"{hello} (the kept core's HEAD was promoted before: `{status}` shows it)"
    else:
        step = f"{promote}, then {hello}"
    console.print(f"next: {step}", highlight=False, markup=False, soft_wrap=True)


async def _head_is_live(core: Path) -> bool:
    """Whether a kept core's ``HEAD`` is what its live-revision ref mirrors: promoted already.

    Only a hint for the next step printed (the store decides what runs); a
    repository that cannot be read is "not promoted", and the promote line says the rest.
    """
    from hostkit.cores import CoreRepository

    try:
        repository = await CoreRepository.open(core)
        head = await repository.head()
        return head is not None and head == await repository.live(DEFAULT_CORE_REF)
    except HostkitError:
        return False


def _config_file(argument: str) -> Path:
    """The file ``argument`` names: inside it when it is a directory, ends with a separator,
    or is a new name without a suffix (``init my-project`` means a project, not a file
    named ``my-project``).

    ``Path`` drops a trailing slash, so it is read from the argument as typed.
    """
    path = Path(argument)
    separators = (os.sep, os.altsep) if os.altsep else (os.sep,)
    new_name = not (path.exists() or path.is_symlink()) and not path.suffix
    if argument.endswith(separators) or path.is_dir() or new_name:
        return path / DEFAULT_CONFIG
    return path


def _outermost_missing(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist (None: ``path`` exists)."""
    top = None
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        top = candidate
    return top


def _write_whole(file: Path, text: str) -> None:
    """``file`` holds ``text`` or is untouched: written beside it, then renamed over it."""
    temporary = file.with_name(f".{file.name}.{secrets.token_hex(8)}.tmp")
    # O_EXCL: never through a link someone left at that name; 0o666 less the umask, as a
    # plain write would create it.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temporary, flags, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, file)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _print_written(
    file: Path, workspace: Path, starter_core: Path, *, kept: bool, created: Path | None
) -> None:
    if created is not None:
        console.print(
            f"created the directory {created}/ (it did not exist)",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    core_note = "kept the core" if kept else "wrote the starter core"
    console.print(
        f"wrote {file} and the workspace {workspace}/; {core_note} {starter_core}/",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def _note_missing_extras(path: Path) -> None:
    """One line when the written configuration's providers need an extra that is missing.

    init still succeeds (the file is what the user asked for); ``run`` would
    refuse it with the same line, so it is said now, with the fix.
    """
    try:
        check_provider_extras(load_config(path))
    except MissingDependency as exc:
        console.print(
            f"[bold yellow]note[/]: {escape(exc.message)}",
            highlight=False,
            soft_wrap=True,
        )
