"""A starter Agent Core: what ``hostkit core init`` and ``hostkit init`` write.

The starter is the smallest core that shows every part a real one has: an
``agent.yaml`` that grants its one tool and nothing else, an ``agent/``
package with one authored tool that keeps per-session state with
compare-and-set, that tool's own tests (the promotion test gate runs them,
under the core's own ``pytest.ini``), and a Git repository with one
commit. ``hostkit core promote`` accepts it as written. Blocking (files
and dulwich): async callers run it in a thread.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from dulwich.repo import Repo

from hostkit.cores._manifest import load_manifest
from hostkit.errors import ConfigError, InvalidValue
from hostkit.types import is_core_id, is_text

__all__ = ["STARTER_AUTHOR", "STARTER_TOOL", "init_core", "starter_files"]

# The one tool the starter grants (a tool-name capability rule, not a builtin).
STARTER_TOOL = "notes.word_count"
# The first commit's author when neither the environment nor git config names one.
STARTER_AUTHOR = b"hostkit <hostkit@localhost>"
_MAX_MODEL_CHARS = 200

_MANIFEST = """\
# An Agent Core (docs/cores.md). The Host runs the revision it made live,
# never this working tree: commit a change, then `hostkit core promote
# {core_id}` runs tests/ and makes it live. The ref refs/hostkit/live only
# mirrors that revision for Git tools: moving it by hand changes nothing.
id: {core_id_json}
description: The starter core written by hostkit.
# A provider under [providers] in the Host's hostkit.toml (credentials stay there).
model: {model_json}
instructions: |
  You are a helpful assistant. Answer briefly.
  To count the words of a text, call {tool}.
# Effect rules, each allow | ask | deny; anything not granted is denied.
capabilities:
  {tool}: allow
# Modules inside agent/ whose @tool functions the agent gets.
tools: [tools]
limits:
  max_steps: 8
  test_timeout_s: 120
"""

_PACKAGE = '''\
"""The {core_id} core\'s code: slots and authored tools.

The Host imports a revision of this directory under a name of its own
(``hkcore_<id>_<commit>``): import between its modules relatively
(``from .tools import word_count``), never as ``agent``.
"""
'''

_TOOLS = '''\
"""The starter\'s authored tool: count words, and how often this session asked.

``ctx.state`` is this session\'s state of the core. A get and a set are two
steps, not one transaction: the set passes the version it read
(``expected=``), so a concurrent writer makes it fail instead of being lost.
"""

from __future__ import annotations

from typing import Any

from hostkit.effects import ToolContext, tool
from hostkit.errors import StateConflict

CALLS = "word_count.calls"
MAX_ATTEMPTS = 5


@tool("{tool}")
async def word_count(ctx: ToolContext, text: str) -> dict[str, Any]:
    """Count the words in a text (runs of characters between whitespace).

    Args:
        text: the text whose words to count
    """
    words = len(text.split())
    for _ in range(MAX_ATTEMPTS):
        entry = await ctx.state.entry(CALLS)
        calls = (entry.value if entry is not None else 0) + 1
        try:
            await ctx.state.set(CALLS, calls, expected=entry.version if entry is not None else None)
        except StateConflict:
            continue
        return {{"words": words, "calls": calls}}
    return {{"words": words, "calls": None}}
'''

_CONFTEST = '''\
"""Finds this core\'s agent package wherever the tests run.

In your working tree it is ``agent/``. The promotion test gate runs these
tests in the revision the Host materialized (cwd and PYTHONPATH = that
directory), where the package is ``hkcore_<id>_<commit>/`` instead.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def package_name() -> str:
    """The single ``hkcore_*`` package beside agent.yaml, else ``agent``."""
    found = sorted(path.name for path in ROOT.glob("hkcore_*") if path.is_dir())
    if len(found) == 1:
        return found[0]
    if not found and (ROOT / "agent").is_dir():
        return "agent"
    raise RuntimeError(f"expected agent/ or one hkcore_* package in {{ROOT}}, found {{found}}")


@pytest.fixture(scope="session")
def agent_package() -> ModuleType:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(package_name())
'''

_TEST_TOOLS = '''\
"""The starter tool\'s own tests: `hostkit core promote` runs them before a revision goes live."""

from __future__ import annotations

import asyncio
import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from hostkit.errors import StateConflict
from hostkit.types import StateEntry


# ``set``'s default, as the real ``ctx.state``'s: write whatever is current.
ANY_VERSION: Any = object()


@dataclass
class MemoryState:
    """``ctx.state`` for a test: get, entry and set with the same versions and compare-and-set."""

    entries: dict[str, StateEntry] = field(default_factory=dict)

    async def get(self, key: str) -> Any:
        entry = self.entries.get(key)
        return None if entry is None else entry.value

    async def entry(self, key: str) -> StateEntry | None:
        return self.entries.get(key)

    async def set(self, key: str, value: Any, *, expected: int | None = ANY_VERSION) -> int:
        current = self.entries.get(key)
        actual = None if current is None else current.version
        if expected is not ANY_VERSION and expected != actual:
            raise StateConflict(key, expected=expected, actual=actual)
        version = (actual or 0) + 1
        self.entries[key] = StateEntry("{core_id}", "session", key, value, version)
        return version


@dataclass
class Context:
    state: MemoryState = field(default_factory=MemoryState)


def tools(package: ModuleType) -> ModuleType:
    return importlib.import_module(f"{{package.__name__}}.tools")


def test_word_count_counts_words_and_calls(agent_package: ModuleType) -> None:
    word_count = tools(agent_package).word_count
    ctx = Context()
    assert asyncio.run(word_count.fn(ctx, "one two  three\\nfour")) == {{"words": 4, "calls": 1}}
    assert asyncio.run(word_count.fn(ctx, "")) == {{"words": 0, "calls": 2}}


def test_word_count_is_the_tool_agent_yaml_grants(agent_package: ModuleType) -> None:
    word_count = tools(agent_package).word_count
    assert word_count.name == "{tool}"
    assert word_count.validate({{"text": "hi"}}) == {{"text": "hi"}}
'''

# Its own pytest configuration: pytest stops looking for one here, so the
# settings of a project the core sits in (addopts, filterwarnings) do not apply.
_PYTEST_INI = """\
[pytest]
testpaths = tests
"""

_GITIGNORE = """\
__pycache__/
*.pyc
.pytest_cache/
"""


def starter_files(core_id: str, *, model: str = "local") -> dict[str, str]:
    """The starter's files (path relative to the core -> text); checks ``core_id`` and ``model``."""
    if not is_core_id(core_id):
        raise InvalidValue(
            f"{core_id[:64]!r} is not a core id (lower-case a-z, 0-9, '_', '-'; "
            "starting with a letter; at most 64)"
        )
    if not 0 < len(model) <= _MAX_MODEL_CHARS or not model.isprintable():
        raise InvalidValue(
            f"model must name a provider under [providers] (1 to {_MAX_MODEL_CHARS} printable "
            "characters)"
        )
    values = {
        "core_id": core_id,
        "core_id_json": json.dumps(core_id),
        "model_json": json.dumps(model),
        "tool": STARTER_TOOL,
    }
    return {
        "agent.yaml": _MANIFEST.format(**values),
        "agent/__init__.py": _PACKAGE.format(**values),
        "agent/tools.py": _TOOLS.format(**values),
        "tests/conftest.py": _CONFTEST.format(**values),
        "tests/test_tools.py": _TEST_TOOLS.format(**values),
        "pytest.ini": _PYTEST_INI,
        ".gitignore": _GITIGNORE,
    }


def init_core(path: Path, core_id: str, *, model: str = "local") -> str:
    """Write the starter core into ``path`` (created; must be empty) and commit it; its sha.

    Refuses a path that is a file or a non-empty directory (``ConfigError``
    naming it): nothing there is overwritten. The Host-owned ref is not set:
    the first ``hostkit core promote`` runs the gates and sets it.
    """
    if not is_text(str(path), limit=4_096):
        # Undecodable bytes in a name: git could not record it, and half a core would stay.
        raise ConfigError("the core's path is not valid text (undecodable bytes)")
    files = starter_files(core_id, model=model)
    # What the Host will load: a starter that fails its own schema is a hostkit bug.
    load_manifest(files["agent.yaml"].encode(), source="agent.yaml")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{path} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        held = (
            "; it holds a core already (agent.yaml): to serve it, add its [cores.<id>] table "
            "with this path to hostkit.toml (docs/cores.md)"
            if (path / "agent.yaml").is_file()
            else ""
        )
        raise ConfigError(f"{path} is not empty: a new core needs an empty directory{held}")
    try:
        for name, text in files.items():
            target = path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        return _first_commit(path, sorted(files))
    except OSError as exc:
        raise ConfigError(f"cannot write the core at {path}: {exc.strerror}") from None


def _first_commit(path: Path, names: list[str]) -> str:
    # Imported here: porcelain is a tenth of a second of every hostkit process's start,
    # and only `hostkit init` / `hostkit core init` write a first commit.
    from dulwich import porcelain

    # Absolute: dulwich reads a relative path against the repository, not the cwd.
    root = path.absolute()
    with porcelain.init(str(root)) as repo:
        porcelain.add(repo, paths=[str(root / name) for name in names])
        author = _identity(repo, os.environ)
        sha = porcelain.commit(
            repo, message=b"A starter core written by hostkit", author=author, committer=author
        )
    return sha.decode("ascii")


def _identity(repo: Repo, environ: Mapping[str, str]) -> bytes:
    """Who commits: GIT_AUTHOR_NAME/EMAIL, else git config user.name/email, else hostkit."""
    config = repo.get_config_stack()
    name = environ.get("GIT_AUTHOR_NAME")
    email = environ.get("GIT_AUTHOR_EMAIL")
    try:
        name = name or config.get(("user",), "name").decode("utf-8", "replace")
        email = email or config.get(("user",), "email").decode("utf-8", "replace")
    except KeyError:
        pass
    if not name or not email:
        return STARTER_AUTHOR
    return f"{name} <{email.strip('<>')}>".encode()
