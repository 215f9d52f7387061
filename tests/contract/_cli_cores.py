"""A project for the `hostkit core` command tests: a hostkit.toml serving the starter core.

The core is the real starter (``init_core``) on a scripted provider. Tests
that are not about the test gate commit a revision without ``tests/``, so
their promotions do not start a pytest child each (the gate then passes
with "no tests"); the starter's own tests run where the gate is the point.
Commands run in-process (``CliRunner``) from plain (sync) tests: each runs
its own event loop, as it does alone, and the blocking-call check watches it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from dulwich import porcelain
from dulwich.repo import Repo
from typer.testing import CliRunner

from hostkit.cli import app
from hostkit.cores import init_core

CORE = "assistant"
LIVE_REF = b"refs/hostkit/live"
AUTHOR = b"Core Author <author@example.org>"

CONFIG = """\
[host]
database = "hostkit.db"

[providers.p]
kind = "scripted"
script = [ { reply = "Hello from the core." } ]

[cores.assistant]
path = "cores/assistant"
"""


def invoke(*args: str, project: Path | None = None) -> tuple[int, str, str]:
    """``hostkit ARGS [-c PROJECT/hostkit.toml]`` in this process: exit code, stdout, stderr."""
    argv = [*args, "--config", str(project / "hostkit.toml")] if project else list(args)
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a crash is a failure, not an exit status
    return result.exit_code, result.stdout, result.stderr


def make_project(root: Path, *, tests: bool = False) -> Path:
    """``root`` with hostkit.toml and the starter core (model ``p``); its core directory.

    ``tests=False`` adds a second commit that removes ``tests/`` (see above).
    """
    (root / "hostkit.toml").write_text(CONFIG)
    core = root / "cores" / CORE
    init_core(core, CORE, model="p")
    if not tests:
        commit(core, {}, "no tests here", remove=("tests/conftest.py", "tests/test_tools.py"))
    return core


def commit(
    core: Path, files: Mapping[str, str], message: str, *, remove: Sequence[str] = ()
) -> str:
    """Write ``files``, delete ``remove``, commit all of it; the new HEAD sha."""
    for name, text in files.items():
        (core / name).parent.mkdir(parents=True, exist_ok=True)
        (core / name).write_text(text)
    with Repo(str(core)) as repo:
        if remove:
            porcelain.remove(repo, paths=[str(core / name) for name in remove])
        if files:
            porcelain.add(repo, paths=[str(core / name) for name in files])
        sha = porcelain.commit(repo, message=message.encode(), author=AUTHOR, committer=AUTHOR)
    return sha.decode()


def live(core: Path) -> str | None:
    """The commit the Host-owned ref names (None: not live)."""
    with Repo(str(core)) as repo:
        value = repo.refs.read_ref(LIVE_REF)
    return value.decode() if value is not None else None


def head(core: Path) -> str:
    with Repo(str(core)) as repo:
        return repo.head().decode()


def manifest(core: Path) -> str:
    return (core / "agent.yaml").read_text()
