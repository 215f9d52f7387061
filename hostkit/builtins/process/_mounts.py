"""Whether a path lies in a directory tree under any name a mount gives it.

A bind mount shows a directory at a second path: the workspace, or a
directory inside it, mounted at ``/mnt/alias`` is the agent's to write there
too, though no prefix of ``/mnt/alias/fmt`` names the workspace. So a path is
placed where the kernel placed it: the mount it is on (``mnt_id`` of a
descriptor, from ``/proc/self/fdinfo``) and the path inside that mount's file
system (the mount's root joined with what follows its mount point, from
``/proc/self/mountinfo``). Two paths on one file system are then compared by
those inside paths, whatever mount points lead to them; a path on a mount
whose mount point lies in the tree (a file system mounted inside a bind
of it) lies there too. Worker-thread code: everything here blocks on ``/proc``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["MountedTree"]

MOUNTINFO = "/proc/self/mountinfo"
# mountinfo escapes these four in its paths as backslash and three octal digits.
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class _Mount:
    device: str  # major:minor of the file system
    root: PurePosixPath  # the directory of that file system the mount shows
    point: PurePosixPath  # where it shows it
    parent: int  # the mount its mount point is on

    def inside(self, path: PurePosixPath) -> PurePosixPath | None:
        """Where ``path`` (a path at or under the mount point) is in the file system."""
        if not path.is_relative_to(self.point):
            return None
        return self.root / path.relative_to(self.point)


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def _mounts() -> dict[int, _Mount]:
    """This process's mounts by id; empty when ``/proc`` does not say."""
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as lines:
            table: dict[int, _Mount] = {}
            for line in lines:
                fields = line.split(" ")
                if len(fields) < 5 or not (fields[0].isdigit() and fields[1].isdigit()):
                    continue
                table[int(fields[0])] = _Mount(
                    fields[2],
                    PurePosixPath(_unescape(fields[3])),
                    PurePosixPath(_unescape(fields[4])),
                    int(fields[1]),
                )
            return table
    except OSError:
        return {}


def _mount_id(path: str) -> int | None:
    """The id of the mount ``path`` is on (a final link is not followed); None if unknown."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key == "mnt_id":
                    return int(value)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return None


class MountedTree:
    """A directory (a real path) and everything under it, by any path a mount shows it at.

    The mount table is read once, when this is built: a check of several paths
    sees one table. Where ``/proc`` does not place a path, only its name is
    compared.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._table = _mounts()
        mount = self._mount_of(root)
        inside = None if mount is None else mount.inside(PurePosixPath(root))
        self._placed = None if mount is None or inside is None else (mount.device, inside)

    def _mount_of(self, path: Path) -> _Mount | None:
        found = _mount_id(str(path))
        return None if found is None else self._table.get(found)

    def holds(self, path: Path) -> bool:
        """Whether the real path ``path`` is the root or lies under it, by any mount."""
        return self.located(path) is not None

    def located(self, path: Path) -> Path | None:
        """The path under the root (as named) at which the real path ``path`` shows, when
        it is the root or lies under it by any mount; None otherwise."""
        if path == self.root or path.is_relative_to(self.root):
            return path
        if self._placed is None:
            return None
        device, tree = self._placed
        named = PurePosixPath(path)
        mount = self._mount_of(path)
        # From the path's own mount out through the mounts its mount point is on:
        # a mount whose mount point lies in the tree brings what it shows into it.
        for _ in range(len(self._table)):
            if mount is None:
                return None
            inside = mount.inside(named)
            if inside is None:
                return None
            if mount.device == device and inside.is_relative_to(tree):
                rest = PurePosixPath(path).relative_to(named)
                return self.root / inside.relative_to(tree) / rest
            named, mount = mount.point, self._table.get(mount.parent)
        return None

    def shown_at(self, path: Path) -> list[Path]:
        """Every path under the root (as named) at which the real path ``path`` shows:
        its own place in the tree (``located``), and each mount whose mount point
        lies in the tree and whose file system directory holds it (a directory of
        the Host's bound into the workspace)."""
        found: list[Path] = []
        place = self.located(path)
        if place is not None:
            found.append(place)
        mount = self._mount_of(path)
        inside = None if mount is None else mount.inside(PurePosixPath(path))
        if mount is None or inside is None:
            return found
        for other in self._table.values():
            point = Path(other.point)
            if point == self.root or not point.is_relative_to(self.root):
                continue
            if other.device == mount.device and inside.is_relative_to(other.root):
                shown = point / inside.relative_to(other.root)
                if shown not in found:
                    found.append(shown)
        return found
