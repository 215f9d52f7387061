"""Build the sdist and the wheel from a checkout, and read back what they hold.

``python -m build`` builds the sdist first and the wheel from the unpacked
sdist, so a file the sdist forgets fails the wheel's checks too. The build
backend runs isolated, installed by uv from its cache (``--installer uv``):
a few seconds, and no build tool in the dev environment to drift from CI's.
"""

from __future__ import annotations

import re
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import anyio

__all__ = [
    "SDIST_TOP_LEVEL",
    "Distributions",
    "build_distributions",
    "package_files",
    "read_sdist",
    "read_version",
    "read_wheel",
]

BUILD_DEADLINE_S = 120.0
# What an sdist holds at its top level: what builds the wheel, what a reader of the source
# needs (docs, the notebooks), and what the backend always writes (PKG-INFO, .gitignore).
SDIST_TOP_LEVEL = frozenset(
    {
        "hostkit",
        "docs",
        "notebooks",
        "README.md",
        "LICENSE",
        "pyproject.toml",
        "PKG-INFO",
        ".gitignore",
    }
)
_VERSION = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Distributions:
    """The two files ``python -m build`` wrote."""

    sdist: Path
    wheel: Path


def read_version(checkout: Path) -> str:
    """The version as written in its one source, ``hostkit/_version.py``."""
    found = _VERSION.search((checkout / "hostkit" / "_version.py").read_text(encoding="utf-8"))
    if found is None:
        raise AssertionError('hostkit/_version.py has no __version__ = "..." line')
    return found.group(1)


async def build_distributions(checkout: Path, outdir: Path) -> Distributions:
    """Build the sdist and the wheel of ``checkout`` into ``outdir``; raise with build's output."""
    argv = [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(outdir)]
    with anyio.fail_after(BUILD_DEADLINE_S):
        done = await anyio.run_process([*argv, str(checkout)], cwd=outdir, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
        raise AssertionError(f"python -m build failed ({done.returncode}):\n{output}")
    sdists = sorted([Path(path) async for path in anyio.Path(outdir).glob("hostkit-*.tar.gz")])
    wheels = sorted([Path(path) async for path in anyio.Path(outdir).glob("hostkit-*.whl")])
    assert len(sdists) == 1, f"expected one sdist, found {sdists}"
    assert len(wheels) == 1, f"expected one pure-Python wheel, found {wheels}"
    return Distributions(sdist=sdists[0], wheel=wheels[0])


def read_wheel(wheel: Path) -> dict[str, bytes]:
    """Blocking (worker thread): every file in the wheel, by its path inside it."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}


def read_sdist(sdist: Path) -> dict[str, bytes]:
    """Blocking (worker thread): every file in the sdist, by its path below the top folder."""
    files: dict[str, bytes] = {}
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            extracted = archive.extractfile(member)
            assert extracted is not None, member.name
            files[str(PurePosixPath(*PurePosixPath(member.name).parts[1:]))] = extracted.read()
    return files


def package_files(checkout: Path) -> set[str]:
    """Blocking (worker thread): the files of the checkout's ``hostkit/`` package a wheel must
    carry, sources and data alike (not bytecode caches, which the build must leave out)."""
    root = checkout / "hostkit"
    return {
        path.relative_to(checkout).as_posix()
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
