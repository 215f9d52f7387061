"""Fresh virtual environments outside the checkout, made and filled by uv.

Everything run in one sees what a user's shell would: the environment's own
``bin`` first on PATH, no PYTHONPATH, no VIRTUAL_ENV, no directory of the
checkout on PATH, and a working directory outside the checkout; so the
``hostkit`` it imports can only be the installed wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
from uv import find_uv_bin

__all__ = ["Ran", "Venv", "create_venv"]

INSTALL_DEADLINE_S = 180.0
# Variables a user's shell has that a run may need: where home and temp are, where the model
# cache is (the one `make install` filled: the GGUF is fetched once per machine, not per
# run), proxies and certificates, an index uv is configured to use.
_PASSED = (
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "HOSTKIT_MODEL_CACHE",
    "XDG_CACHE_HOME",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "UV_CACHE_DIR",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "PIP_INDEX_URL",
)
_QUIET = {"NO_COLOR": "1", "UV_NO_PROGRESS": "1", "UV_PYTHON_DOWNLOADS": "never"}


@dataclass(frozen=True, slots=True)
class Ran:
    """A finished command: its exit status and decoded output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def explain(self, limit: int = 2500) -> str:
        """The command and the tail of its output, for an assertion message."""
        tail = (self.stdout + "\n--- stderr ---\n" + self.stderr)[-limit:]
        return f"$ {' '.join(self.argv)}  (exit {self.returncode})\n{tail}"


def _clean_path(checkout: Path, first: Path) -> str:
    """PATH with ``first`` in front and no directory inside the checkout (its .venv/bin)."""
    kept = [
        entry
        for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)
        if entry and not Path(entry).resolve().is_relative_to(checkout)
    ]
    return os.pathsep.join([str(first), *kept])


@dataclass(frozen=True, slots=True)
class Venv:
    """One fresh environment at ``root``; ``checkout`` is what it must not see."""

    root: Path
    checkout: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def environ(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A user's shell in this environment, plus ``extra``."""
        env = {name: os.environ[name] for name in _PASSED if name in os.environ}
        env.update(_QUIET, PATH=_clean_path(self.checkout, self.root / "bin"), COLUMNS="200")
        env.update(extra or {})
        return env

    async def run(
        self,
        *argv: str,
        cwd: Path,
        deadline_s: float,
        env: Mapping[str, str] | None = None,
    ) -> Ran:
        """Run ``argv`` (a name found on this environment's PATH) without a terminal on stdin."""
        assert not cwd.is_relative_to(self.checkout), f"{cwd} is inside the checkout"
        with anyio.fail_after(deadline_s):
            done = await anyio.run_process(
                list(argv), cwd=cwd, env=self.environ(env), check=False, stdin=subprocess.DEVNULL
            )
        return Ran(tuple(argv), done.returncode, done.stdout.decode(), done.stderr.decode())

    async def install(self, requirements: Sequence[str]) -> None:
        """``uv pip install`` into this environment; raise with uv's output when it fails.

        From uv's cache alone first (half a second, no index requests); only when the
        cache lacks something (a new machine, a new pin) does uv ask the index.
        """
        argv = [find_uv_bin(), "pip", "install", "--quiet", "--python", str(self.python)]
        try:
            await _uv([*argv, "--offline", *requirements], cwd=self.root.parent)
        except AssertionError:
            await _uv([*argv, *requirements], cwd=self.root.parent)


async def create_venv(root: Path, *, checkout: Path) -> Venv:
    """A new virtual environment at ``root`` on this test run's Python version."""
    argv = [find_uv_bin(), "venv", "--quiet", "--python", sys.executable, str(root)]
    await _uv(argv, cwd=root.parent)
    return Venv(root=root, checkout=checkout)


async def _uv(argv: Sequence[str], *, cwd: Path) -> None:
    """uv with the caller's index and cache settings, but no environment of its own active."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"VIRTUAL_ENV", "PYTHONPATH", "CONDA_PREFIX", "PYTHONHOME"}
    }
    env.update(_QUIET)
    with anyio.fail_after(INSTALL_DEADLINE_S):
        done = await anyio.run_process(
            list(argv), cwd=cwd, env=env, check=False, stdin=subprocess.DEVNULL
        )
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
        raise AssertionError(f"{' '.join(argv[:3])} failed ({done.returncode}):\n{output}")
