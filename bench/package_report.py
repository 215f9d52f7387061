"""The distribution as it ships: build the sdist and the wheel, print their file lists and sizes.

What it does: ``python -m build --installer uv`` of this checkout into a
temporary directory (the sdist, then the wheel built from it, exactly as
tests/packaging builds them), then prints, for each file, its compressed and
uncompressed size and every member with its size, largest first with
``--largest``, or in archive order. The figures the release note quotes (file
count, archive size) are the summary lines. ``--keep DIR`` writes the two
archives there instead of discarding them.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--largest", type=int, default=0, help="list only the N largest files")
    parser.add_argument("--keep", type=Path, help="copy the sdist and the wheel into this folder")
    return parser.parse_args()


def build(outdir: Path) -> tuple[Path, Path]:
    """The sdist and the wheel of this checkout, built into ``outdir``."""
    argv = [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(outdir)]
    done = subprocess.run([*argv, str(CHECKOUT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"python -m build failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return next(outdir.glob("hostkit-*.tar.gz")), next(outdir.glob("hostkit-*.whl"))


def wheel_members(wheel: Path) -> list[tuple[str, int]]:
    with zipfile.ZipFile(wheel) as archive:
        return [(info.filename, info.file_size) for info in archive.infolist() if not info.is_dir()]


def sdist_members(sdist: Path) -> list[tuple[str, int]]:
    with tarfile.open(sdist) as archive:
        return [(member.name, member.size) for member in archive.getmembers() if member.isfile()]


def report(path: Path, members: list[tuple[str, int]], *, largest: int) -> None:
    unpacked = sum(size for _, size in members)
    print(
        f"{path.name}: {len(members)} files, {path.stat().st_size:,} bytes ({unpacked:,} unpacked)"
    )
    shown = sorted(members, key=lambda item: -item[1])[:largest] if largest else members
    for name, size in shown:
        print(f"  {size:>10,}  {name}")


def main(options: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="hostkit-dist-") as tmp:
        sdist, wheel = build(Path(tmp))
        report(wheel, wheel_members(wheel), largest=options.largest)
        report(sdist, sdist_members(sdist), largest=options.largest)
        if options.keep is not None:
            options.keep.mkdir(parents=True, exist_ok=True)
            for archive in (sdist, wheel):
                shutil.copy2(archive, options.keep / archive.name)


if __name__ == "__main__":
    main(parse_args())
