"""The ``hostkit`` command's entry point: the CLI, with Ctrl-C answered while it loads.

Loading the CLI imports most of hostkit (close to a second on a slow
machine). A Ctrl-C in that time must read like one anywhere else in the
command (one line, status 130), not as a traceback from inside an import.
``import hostkit`` itself loads nothing heavy (its names load on use), so
this module runs before any of it.
"""

from __future__ import annotations

import sys

__all__ = ["main"]

INTERRUPTED_STATUS = 130


def main() -> None:
    try:
        from hostkit.cli import main as cli
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted while hostkit was starting: nothing was done\n")
        raise SystemExit(INTERRUPTED_STATUS) from None
    cli()
