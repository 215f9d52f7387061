"""One source for the version: hostkit/_version.py, read by the build backend and the package."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import hostkit
from tests.packaging._build import read_version

CHECKOUT = Path(__file__).resolve().parents[2]


def test_the_version_is_written_once_and_the_metadata_agrees() -> None:
    pyproject = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["hatch"]["version"]["path"] == "hostkit/_version.py"
    assert hostkit.__version__ == read_version(CHECKOUT)
    # The installed distribution's metadata (make install re-runs when _version.py changes).
    assert importlib.metadata.version("hostkit") == hostkit.__version__


def test_the_package_is_typed() -> None:
    marker = CHECKOUT / "hostkit" / "py.typed"
    assert marker.is_file()
    assert Path(hostkit.__file__).parent / "py.typed" == marker
