"""``hostkit --version`` and ``hostkit extras``: what is installed, and the command for the rest.

Both read package metadata only: no Host is opened and no extra's package is
imported (``find_spec``), so they answer in a fresh environment before
anything is configured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hostkit._extras import EXTRAS, install_command, missing_packages
from hostkit._version import __version__
from hostkit.cli._common import JsonOption, print_json

__all__ = ["ExtraStatus", "VersionOption", "extra_statuses", "extras", "show_version"]


@dataclass(frozen=True, slots=True)
class ExtraStatus:
    """One extra: whether all its packages are installed, which are not, how to add them."""

    extra: str
    installed: bool
    missing: tuple[str, ...]
    install: str


def extra_statuses() -> list[ExtraStatus]:
    """Every feature extra, in name order."""
    statuses = []
    for extra in sorted(EXTRAS):
        missing = missing_packages(extra)
        statuses.append(ExtraStatus(extra, not missing, missing, install_command(extra)))
    return statuses


def show_version(value: bool) -> None:
    """``--version``: ``hostkit X.Y.Z`` on stdout, then exit (eager: before any command)."""
    if value:
        typer.echo(f"hostkit {__version__}")
        raise typer.Exit()


VersionOption = Annotated[
    bool,
    typer.Option(
        "--version", callback=show_version, is_eager=True, help="print hostkit's version and exit"
    ),
]


def extras(json_: JsonOption = False) -> None:
    """Show each optional extra: installed or not, its missing packages, the command to add them.

    A configured feature whose extra is missing is refused when the Host opens,
    with the same command (docs/install.md).
    """
    statuses = extra_statuses()
    if json_:
        print_json(statuses)
        return
    table = Table()
    table.add_column("extra", no_wrap=True)
    table.add_column("installed", no_wrap=True)
    table.add_column("missing", overflow="fold")
    # The command is copied as is: never cut or folded (the brackets are not markup).
    table.add_column("install with", no_wrap=True)
    for status in statuses:
        table.add_row(
            Text(status.extra),
            Text("yes" if status.installed else "no"),
            Text("\n".join(status.missing)),
            Text("" if status.installed else status.install),
        )
    Console().print(table)
