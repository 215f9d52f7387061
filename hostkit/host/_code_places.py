"""Where code the Host runs in its own process lives, judged against writable workspaces.

An agent that can write files (``files.write``, ``files.edit``, ``terminal.run``,
a stdio MCP server) can rewrite anything in its workspace. A module the Host
imports from there, or a directory of its import path there, would let that
agent change the code the Host runs as the operator: an authored tool module
at its next discovery, a Python agent's own module at the next ``hostkit run
--agent``. So each such place must lie outside every writable workspace,
compared by identity (device and inode), not by spelling.

A regular file with more than one link is refused as well: another of its
names may lie in a writable workspace, and writing that name rewrites this
file. Host state (an Agent Core's revision, which ``files.*`` refuse and
sandboxes hide), hostkit's own install and the interpreter's (a package
manager may hard-link them from its cache) are exempt.
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType

from hostkit.errors import ConfigError, bounded

__all__ = ["import_path_places", "judge_places", "module_places"]

# hostkit's own package directory and the interpreter's install locations: their files may
# be hard links into an installer's cache (uv's default on Linux). A sandboxed run cannot
# link one into its workspace (a link never crosses the sandbox's mounts), and an
# unsandboxed one could rewrite the install itself.
_INSTALLS = (
    Path(__file__).resolve().parents[1],
    *{
        Path(path)
        for name, path in sysconfig.get_paths().items()
        if name.endswith(("stdlib", "lib"))
    },
)


def module_places(module: ModuleType | None) -> list[Path]:
    """The file ``module`` was imported from and its package's directories (none known:
    empty). A script run as ``__main__`` has no spec: its ``__file__`` is used."""
    if module is None:
        return []
    spec = getattr(module, "__spec__", None)
    if spec is None:
        given = getattr(module, "__file__", None)
        return [Path(given)] if isinstance(given, str) and given else []
    places = [Path(spec.origin)] if spec.has_location and spec.origin else []
    return [*places, *(Path(entry) for entry in spec.submodule_search_locations or ())]


def import_path_places() -> list[tuple[Path, str]]:
    """Each entry of the Host's import path (the working directory for ``""``): a module
    the Host imports later comes from one of them."""
    return [
        (Path(entry or os.curdir), "import path entry")
        for entry in sys.path
        if isinstance(entry, str)
    ]


def judge_places(
    places: Iterable[tuple[Path, str]],
    writable: Mapping[Path, str],
    protected: Sequence[Path],
    *,
    key: str,
    advice: str,
) -> None:
    """Blocking (resolves links): ``ConfigError`` at ``key`` when one of ``places`` (a path
    and what it is) lies in a workspace an agent writes to, or is a regular file with
    more than one link; unless it is in Host state (``protected``), or (for links)
    hostkit's own install or the interpreter's. ``advice`` ends the message: what to
    do instead. Nothing is judged when no workspace is writable."""
    workspaces = {identity: agent for path, agent in writable.items() if (identity := _id(path))}
    if not workspaces:
        return
    state = {identity for path in protected if (identity := _id(path))}
    installs = {identity for path in _INSTALLS if (identity := _id(path))}
    for place, what in places:
        real = Path(os.path.realpath(place))
        within = [identity for p in (real, *real.parents) if (identity := _id(p))]
        if state.intersection(within):
            continue
        # The directories its path as given runs through count too: a link there (an
        # import path entry ``ws/lib`` -> ``/srv/code``) is the agent's to point elsewhere.
        given = Path(os.path.abspath(place))
        passes = [*within, *(identity for p in given.parents if (identity := _id(p)))]
        agent = next((workspaces[i] for i in passes if i in workspaces), None)
        if agent is not None:
            shown = real if any(i in workspaces for i in within) else given
            raise ConfigError(
                bounded(
                    f"the {what} {bounded(str(shown), 160)} is inside the workspace of agent "
                    f"{bounded(agent, 64)!r}, which can write there: an agent could rewrite "
                    f"code the Host runs; {advice}",
                    600,
                ),
                key=key,
            )
        links = _links(real)
        if links > 1 and installs.isdisjoint(within):
            raise ConfigError(
                bounded(
                    f"the {what} {bounded(str(real), 160)} is a file with {links} hard links: "
                    "another of them may be inside a workspace an agent can write to, and "
                    "writing it rewrites code the Host runs; make it a file of its own "
                    "(copy it over itself, or reinstall its package without hard links, "
                    "e.g. uv's --link-mode=copy)",
                    600,
                ),
                key=key,
            )


def _links(path: Path) -> int:
    """How many names a regular file has (1 for anything else, or a file that is gone)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return 1
    return info.st_nlink if stat.S_ISREG(info.st_mode) else 1


def _id(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino
