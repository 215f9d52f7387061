"""Whether a path lies in a directory tree under any name a mount gives it.

A bind mount shows a directory at a second path: the workspace, or a
directory inside it, mounted at ``/mnt/alias`` is the agent's to write there
too, though no prefix of ``/mnt/alias/fmt`` names the workspace. So a path is
placed where the kernel placed it: the mount it is on (``mnt_id`` of a
descriptor, from ``/proc/self/fdinfo``) and the path inside that mount's file
system (the mount's root joined with what follows its mount point, from
``/proc/self/mountinfo``). Two paths on one file system are then compared by
those inside paths, whatever mount points lead to them.

The tree is a set of regions, each a directory of one file system: the root's
own, that of every mount whose mount point lies in the tree (a directory of
the operator's bound into the workspace, a tmpfs mounted in it: shown
elsewhere too, each is the agent's there as well), and every overlay mount
with a layer in those (its merged view is written through the workspace).
A path is placed by walking it from ``/`` one name at a time without
following a link: a name missing or turned into a link since it was resolved
is placed where the walk stopped, so a program renamed away during the check
is still placed in its directory, never nowhere. Worker-thread code:
everything here blocks on ``/proc``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = ["MountTable", "MountedTree", "mount_table"]

MOUNTINFO = "/proc/self/mountinfo"
# mountinfo escapes these four in its paths as backslash and three octal digits.
_ESCAPE = re.compile(r"\\([0-7]{3})")
# overlayfs joins lower layers with ':' and escapes one inside a path as '\:'.
_LAYER_SEPARATOR = re.compile(r"(?<!\\):")
_LAYER_OPTIONS = ("lowerdir", "lowerdir+", "upperdir", "datadir+")


@dataclass(frozen=True, slots=True)
class _Mount:
    device: str  # major:minor of the file system
    root: PurePosixPath  # the directory of that file system the mount shows
    point: PurePosixPath  # where it shows it
    parent: int  # the mount its mount point is on
    writable: bool  # mounted read-write
    # An overlay's lower, upper and data directories, as its mount named them: real
    # paths (resolved when read), or None for one that names no place here (relative,
    # or gone).
    layers: tuple[Path | None, ...] = ()

    def inside(self, path: PurePosixPath) -> PurePosixPath | None:
        """Where ``path`` (a path at or under the mount point) is in the file system."""
        if not path.is_relative_to(self.point):
            return None
        return self.root / path.relative_to(self.point)


# A process's mounts by id, as ``mount_table`` read them.
MountTable = Mapping[int, _Mount]


@dataclass(frozen=True, slots=True)
class _Region:
    """A directory of one file system that lies in the tree, and the name it has there."""

    device: str
    directory: PurePosixPath
    named: Path
    writable: bool  # the agent writes it through the tree

    def shows(self, device: str, inside: PurePosixPath) -> Path | None:
        if device != self.device or not inside.is_relative_to(self.directory):
            return None
        return self.named / inside.relative_to(self.directory)


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def _layers(fstype: str, options: str) -> tuple[Path | None, ...]:
    """An overlay's layer directories from its super options, each resolved to its real
    path: mountinfo shows them as typed at mount time (through links, with ``..``, or
    relative to a working directory nobody knows now: None)."""
    if fstype != "overlay":
        return ()
    found: list[Path | None] = []
    for option in options.split(","):  # a ',' inside a path is escaped as \054
        key, _, value = option.partition("=")
        if key not in _LAYER_OPTIONS:
            continue
        # mountinfo's own escapes first: overlay's backslash before a ':' shows there as \134.
        for layer in _LAYER_SEPARATOR.split(_unescape(value)):
            name = layer.replace("\\:", ":")
            found.append(Path(os.path.realpath(name)) if name.startswith("/") else None)
    return tuple(found)


def mount_table() -> MountTable:
    """This process's mounts by id, read now; empty when ``/proc`` does not say. Several
    trees checked together share one (``MountedTree(..., table=)``)."""
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as lines:
            table: dict[int, _Mount] = {}
            for line in lines:
                fields = line.rstrip("\n").split(" ")
                if len(fields) < 6 or not (fields[0].isdigit() and fields[1].isdigit()):
                    continue
                # After the optional fields and "-": the type, the source, the super options.
                tail = fields[fields.index("-", 6) + 1 :] if "-" in fields[6:] else []
                table[int(fields[0])] = _Mount(
                    fields[2],
                    PurePosixPath(_unescape(fields[3])),
                    PurePosixPath(_unescape(fields[4])),
                    int(fields[1]),
                    "ro" not in fields[5].split(","),
                    _layers(tail[0], tail[2]) if len(tail) >= 3 else (),
                )
            return table
    except OSError:
        return {}


def _fd_mount_id(fd: int) -> int | None:
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key == "mnt_id":
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def _reach(path: PurePosixPath) -> tuple[PurePosixPath, int | None]:
    """The longest prefix of the absolute ``path`` reached from ``/`` one name at a time
    without following a link (a link itself is reached, not its target), and the id of
    the mount it is on (None if unknown)."""
    reached = PurePosixPath("/")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in path.parts[1:]:
            if name == "..":
                break
            try:
                step = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                break
            os.close(fd)
            fd, reached = step, reached / name
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                break
        return reached, _fd_mount_id(fd)
    finally:
        os.close(fd)


class MountedTree:
    """A directory (a real path) and everything under it, by any path a mount shows it at.

    The mount table is read once, when this is built: a check of several paths
    sees one table. Where ``/proc`` does not place a path, only its name is
    compared.
    """

    def __init__(self, root: Path, *, table: MountTable | None = None) -> None:
        self.root = root
        self._table = mount_table() if table is None else table
        self._regions: list[_Region] = []
        places = self._placements(PurePosixPath(root))
        if not places:
            return
        self._regions.append(_Region(*places[0], root, writable=True))
        for mount in self._table.values():
            point = Path(mount.point)
            if point != root and point.is_relative_to(root):
                self._regions.append(_Region(mount.device, mount.root, point, mount.writable))
        for mount in self._table.values():
            named = self._layer_in_tree(mount)
            if named is not None:
                self._regions.append(_Region(mount.device, mount.root, named, writable=True))

    def _layer_in_tree(self, mount: _Mount) -> Path | None:
        """Where the first of an overlay's layers the agent writes lies in the tree:
        writing a layer changes what the overlay shows, wherever it is mounted. A layer
        that names no place here (relative, as Docker's overlay2 names its root's) is
        taken to lie in the tree only for an overlay mounted in it: counting every such
        overlay would make a container's whole root file system the agent's."""
        point = Path(mount.point)
        in_tree = point == self.root or point.is_relative_to(self.root)
        for layer in mount.layers:
            if layer is None:
                if in_tree:
                    return self.root
                continue
            named = self._located(layer, True)
            if named is not None:
                return named
        return None

    def _placements(self, path: PurePosixPath) -> list[tuple[str, PurePosixPath]]:
        """Each file system and path inside it where ``path`` is: on the mount it is
        reached on (``_reach``), then on each mount out to ``/`` that holds the
        mount point of the one before (a mount whose point lies in the tree brings
        what it shows into it)."""
        if not self._table:
            return []
        reached, mount_id = _reach(path)
        mount = None if mount_id is None else self._table.get(mount_id)
        named = reached
        found: list[tuple[str, PurePosixPath]] = []
        for _ in range(len(self._table)):
            inside = None if mount is None else mount.inside(named)
            if mount is None or inside is None:
                break
            found.append((mount.device, inside / path.relative_to(named)))
            named, mount = mount.point, self._table.get(mount.parent)
        return found

    def holds(self, path: Path) -> bool:
        """Whether the real path ``path`` is the root or lies under it, by any name under
        which the agent writes it (a read-only bind of a system directory into the
        workspace does not make that directory the agent's)."""
        return self._located(path, True) is not None

    def _located(self, path: Path, writable: bool) -> Path | None:
        shown = self._shown(path, writable=writable, first=True)
        return shown[0] if shown else None

    def shown_at(self, path: Path) -> list[Path]:
        """Every path under the root (as named) at which the real path ``path`` shows,
        read-only or not: its own place in the tree, each mount in the tree that shows
        it (a directory of the Host's bound into the workspace), and each overlay in
        the tree with a layer that holds it."""
        found = self._shown(path, writable=False, first=False)
        for mount in self._table.values():
            point = Path(mount.point)
            if point == self.root or not point.is_relative_to(self.root):
                continue
            for layer in mount.layers:
                # A layer that names no place here may hold it: the whole overlay is masked.
                shown = (
                    point
                    if layer is None
                    else point / path.relative_to(layer)
                    if path.is_relative_to(layer)
                    else None
                )
                if shown is not None and shown not in found:
                    found.append(shown)
        return found

    def _shown(self, path: Path, *, writable: bool, first: bool) -> list[Path]:
        found: list[Path] = []
        if path == self.root or path.is_relative_to(self.root):
            found.append(path)
        for device, inside in self._placements(PurePosixPath(path)):
            if first and found:
                break
            for region in self._regions:
                shown = None if writable and not region.writable else region.shows(device, inside)
                if shown is not None and shown not in found:
                    found.append(shown)
        return found
