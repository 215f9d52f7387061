"""Each package exports exactly its interface; helpers stay private."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hostkit

SEAMS = [
    "hostkit.types",
    "hostkit.store",
    "hostkit.authority",
    "hostkit.providers",
    "hostkit.context",
    "hostkit.effects",
    "hostkit.turns",
    "hostkit.host",
    "hostkit.daemon",
    "hostkit.inspect",
    "hostkit.testing",
    "hostkit.cli",
]
PACKAGES = ["hostkit", *SEAMS]


@pytest.mark.parametrize("name", PACKAGES)
def test_package_all_names_exist_and_are_public(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names missing {attr}"
        assert not attr.startswith("_") or attr == "__version__", f"{name} exports private {attr}"


@pytest.mark.parametrize("name", PACKAGES)
def test_package_public_namespace_is_its_all(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_") and not isinstance(value, type(importlib))
    }
    assert public <= set(module.__all__), f"{name} leaks {sorted(public - set(module.__all__))}"


def test_helper_modules_are_private() -> None:
    for package in SEAMS:
        module = importlib.import_module(package)
        for info in pkgutil.iter_modules(module.__path__):
            assert info.name.startswith("_"), f"{package}.{info.name} should be a private module"


def test_version_is_exposed() -> None:
    assert hostkit.__version__.count(".") == 2


def test_top_level_exports_the_whole_error_tree() -> None:
    import hostkit.errors

    tree = {
        name
        for name, value in vars(hostkit.errors).items()
        if isinstance(value, type) and issubclass(value, hostkit.errors.HostkitError)
    }
    assert "TurnInProgress" in tree
    assert tree <= set(hostkit.__all__), f"missing: {sorted(tree - set(hostkit.__all__))}"
    for name in tree:
        assert getattr(hostkit, name) is getattr(hostkit.errors, name)


def test_top_level_exports_what_embedders_implement_or_pass() -> None:
    expected = {
        "Host",
        "HostConfig",
        "TurnRequest",
        "TurnResult",
        "ConversationFacts",
        "tool",
        "ToolContext",
        "ApprovalProvider",
        "ApprovalRequest",
        "ModelProvider",
        "ScriptedModel",
        "RuntimeCapabilities",
        "ToolSource",
        "ProviderSource",
    }
    assert expected <= set(hostkit.__all__)
    assert hostkit.ScriptedModel is importlib.import_module("hostkit.testing").ScriptedModel


@pytest.mark.parametrize(
    "internal",
    ["AuthorityResolver", "OperatorIssuer", "RuntimeStore", "PrincipalScope", "TurnExecution"],
)
def test_top_level_does_not_export_what_the_host_builds_itself(internal: str) -> None:
    assert internal not in hostkit.__all__
    assert not hasattr(hostkit, internal)


@pytest.mark.parametrize("name", [*PACKAGES, "hostkit.builtins"])
def test_package_all_is_sorted(name: str) -> None:
    """``__all__`` in ruff's isort-style order (RUF022): constants, classes, then functions."""
    exported = list(importlib.import_module(name).__all__)

    def kind(attr: str) -> int:
        if attr.isupper() or (attr.upper() == attr and "_" in attr):
            return 0
        return 1 if attr[:1].isupper() else 2

    assert exported == sorted(exported, key=lambda attr: (kind(attr), attr)), name


_SQL = re.compile(
    r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX))\b"
)


def test_no_sql_outside_the_store() -> None:
    """All SQL lives in ``hostkit.store`` (import-linter forbids the drivers elsewhere)."""
    root = Path(hostkit.__file__).parent
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        if path.relative_to(root).parts[0] != "store"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _SQL.search(line)
    ]
    assert offenders == []
    # The pattern does find SQL where it lives.
    store = (root / "store" / "_turn_rows.py").read_text(encoding="utf-8")
    assert _SQL.search(store)


def test_importing_hostkit_loads_no_seam_until_a_name_is_used() -> None:
    """``import hostkit`` is quick (names load on use), so the command line's entry point
    runs before the heavy imports and can answer a Ctrl-C there."""
    probe = (
        "import sys, hostkit\n"
        "heavy = ('hostkit.host', 'hostkit.store', 'pydantic')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "hostkit.Host\n"
        "print('hostkit.host' in sys.modules, hostkit.store.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.splitlines() == ["[]", "True hostkit.store"]


# What a process needs only when it serves, fetches, sends or reads a core's Git
# repository; each line: what is imported, and what must not be loaded by it.
LAZY_STACKS = [
    ("hostkit.cli", ("uvicorn", "starlette", "httpx", "httpcore", "dulwich", "yaml")),
    ("hostkit.host", ("uvicorn", "starlette", "httpx", "httpcore", "dulwich", "yaml")),
    # The tool-module discovery child imports the authoring API for every ``hostkit run``.
    ("hostkit.effects", ("hostkit.store", "hostkit.providers", "sqlite3", "aiosqlite")),
]


@pytest.mark.parametrize(("module", "unloaded"), LAZY_STACKS)
def test_a_command_line_loads_no_stack_it_does_not_use(
    module: str, unloaded: tuple[str, ...]
) -> None:
    """Every CLI process paid for uvicorn, Starlette, httpx, dulwich and PyYAML (a third
    of its start) though only serve, a channel, a fetch or a core uses them; each loads
    with its first use, and each name that loads it still works."""
    probe = f"import sys, {module}\nprint(sorted(m for m in {unloaded!r} if m in sys.modules))\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


# Each package that loads names on first use (hostkit._lazy), and one of those names.
LAZY_NAMES = [
    ("hostkit.host", "HostDaemon"),
    ("hostkit.channels", "ingress_app"),
    ("hostkit.delivery", "SlackChannel"),
    ("hostkit.builtins.web", "web_tools"),
    ("hostkit.cores", "CoreRegistry"),
    ("hostkit.effects", "ApprovalRuntime"),
]


@pytest.mark.parametrize(("package", "name"), LAZY_NAMES)
def test_a_name_loaded_on_first_use_is_the_module_s_own(package: str, name: str) -> None:
    module = importlib.import_module(package)
    value = getattr(module, name)
    assert value.__module__.startswith(package)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'Nope'"):
        _ = module.Nope


def test_a_package_lists_its_names_before_they_load() -> None:
    """``dir()`` (and with it ``help()`` and a notebook's tab completion) showed only the
    names a package had loaded: ``hostkit.effects.ApprovalL<Tab>`` completed nothing."""
    packages = [package for package, _ in LAZY_NAMES]
    probe = (
        "import importlib, json, sys\n"
        f"for name in {packages!r}:\n"
        "    package = importlib.import_module(name)\n"
        "    missing = sorted(set(package.__all__) - set(dir(package)))\n"
        "    print(json.dumps([name, missing]))\n"
        "print(json.dumps([m for m in ('uvicorn', 'httpx', 'dulwich') if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    *listed, loaded = (json.loads(line) for line in done.stdout.splitlines())
    assert listed == [[name, []] for name in packages]
    assert loaded == []  # listing the names loads none of them


# A signal sent from inside the CLI's imports (when ``hostkit.host`` is first looked for),
# not after a delay: on a loaded machine a timer fired before ``hostkit._launch`` itself
# was imported, a moment no program can answer, and the test failed for no fault of it.
SIGNAL_WHILE_LOADING = (
    "import os, signal, sys\n"
    "class _Trip:\n"
    "    def __init__(self, signum):\n"
    "        self.signum = signum\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'hostkit.host' and self in sys.meta_path:\n"
    "            sys.meta_path.remove(self)\n"
    "            os.kill(os.getpid(), self.signum)\n"
    "        return None\n"
    "def signal_while_loading(signum):\n"
    "    sys.meta_path.insert(0, _Trip(signum))\n"
)


def test_ctrl_c_while_the_command_loads_is_one_line_and_status_130() -> None:
    """SIGINT while ``hostkit`` still imports its CLI: no traceback from inside an import."""
    probe = (
        f"{SIGNAL_WHILE_LOADING}"
        "signal_while_loading(signal.SIGINT)\n"
        "from hostkit._launch import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "sessions"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "\ninterrupted while hostkit was starting: nothing was done\n"


def test_ctrl_c_after_the_imports_while_the_commands_are_built_is_one_line_too() -> None:
    """Past the imports typer still builds the command tree (type hints, options): a
    SIGINT there ended in a traceback through typer."""
    probe = (
        "import hostkit.cli\n"
        "def building():\n"
        "    raise KeyboardInterrupt\n"
        "hostkit.cli.main = building\n"
        "from hostkit._launch import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "sessions"], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stderr) == (130, "\ninterrupted\n")


def test_every_lazily_loaded_name_is_exported_and_every_export_loads() -> None:
    """The top level's name -> module table and ``__all__`` name the same things."""
    lazy = set(hostkit._EXPORTS)
    assert lazy | {"__version__", "load_ipython_extension"} == set(hostkit.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Hots'"):
        _ = hostkit.Hots  # type: ignore[attr-defined]
    assert not hasattr(hostkit, "store.x")  # not a name: no import is tried
    assert "typing" not in dir(hostkit)
    assert set(hostkit.__all__) <= set(dir(hostkit))


def test_looking_for_main_on_the_package_does_not_run_the_command_line() -> None:
    """``hostkit.__main__`` runs the CLI when imported: an attribute lookup must not."""
    probe = "import hostkit\nprint(hasattr(hostkit, '__main__'))\nprint('after')\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.splitlines() == ["False", "after"]


def test_a_sighup_while_serve_loads_is_no_reason_to_exit(tmp_path: Path) -> None:
    """``systemctl reload`` right after start sends SIGHUP while ``hostkit serve`` still
    imports: there is nothing to reload yet, and the process must not die of it. (Here it
    goes on to refuse a missing configuration, its own answer, with exit status 2.)"""
    probe = (
        f"{SIGNAL_WHILE_LOADING}"
        "signal_while_loading(signal.SIGHUP)\n"
        "sys.argv = ['hostkit', 'serve', '-c', 'missing.toml']\n"
        "from hostkit._launch import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "no configuration file at missing.toml" in done.stderr
