"""The ``hostkit`` command's entry point: the CLI, with Ctrl-C answered while it loads.

Loading the CLI imports most of hostkit (close to a second on a slow
machine). A Ctrl-C in that time must read like one anywhere else in the
command (one line, status 130), not as a traceback from inside an import.
``import hostkit`` itself loads nothing heavy (its names load on use), so
this module runs before any of it.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from hostkit._hangup import remember_start
from hostkit._stdio import survive_readers_leaving

__all__ = ["main"]

INTERRUPTED_STATUS = 130


def main() -> None:
    # First: everything below may print, and some of it keeps the stream it found.
    survive_readers_leaving()
    if _command(sys.argv[1:]) == "serve":
        # Before the ignore below: it would hide nohup's, and a SIGHUP would then
        # seem to be a reload even once the terminal closed (hostkit._hangup).
        remember_start()
        # A reload asked for while the daemon is not there yet has nothing to reload (the
        # configuration is being read anyway); unhandled, SIGHUP would end the process.
        # ``serve`` handles it itself once it runs (``systemctl reload`` just after start).
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        from hostkit.cli import main as cli
    except KeyboardInterrupt:
        sys.stderr.write("\ninterrupted while hostkit was starting: nothing was done\n")
        raise SystemExit(INTERRUPTED_STATUS) from None
    try:
        cli()
    except KeyboardInterrupt:
        # Past the imports, typer still builds the command tree before a command runs (and
        # handles its own Ctrl-C): one escaping here is that, or a command that had none.
        sys.stderr.write("\ninterrupted\n")
        raise SystemExit(INTERRUPTED_STATUS) from None


def _command(arguments: Sequence[str]) -> str | None:
    """The command named on the command line (its first word that is no option)."""
    return next((word for word in arguments if not word.startswith("-")), None)
