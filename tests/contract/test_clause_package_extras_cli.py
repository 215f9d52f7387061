"""Issue 19, "every extra is self-sufficient", in real processes: the CLI refuses a configured
feature whose package is missing with one line and exit status 2 before any turn, ``--version``
(in-process) and ``hostkit extras`` answer, and no module outside the extras' own imports an extra.

A package is made missing in the child with ``sys.modules[name] = None`` before hostkit is
imported: ``find_spec`` then answers None and an import raises, as if it were not installed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

import hostkit
from hostkit._extras import EXTRAS
from hostkit.cli import app
from hostkit.store import RuntimeStore

# The child: block the modules, then run the CLI as the `hostkit` script would.
BLOCKED_CLI = """
import sys
sys.modules.update(dict.fromkeys({blocked!r}))
sys.argv = ["hostkit", *{args!r}]
from hostkit.cli import main
main()
"""

# The child: block every extra, import every hostkit module, report the ones that failed.
IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys
sys.modules.update(dict.fromkeys({blocked!r}))
import hostkit
failed = {{}}
def record(name):
    failed[name] = repr(sys.exc_info()[1])[:200]
for info in pkgutil.walk_packages(hostkit.__path__, "hostkit.", onerror=record):
    if info.name == "hostkit.__main__":
        continue
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed[info.name] = repr(exc)[:200]
print(json.dumps(failed))
"""

# Modules that are an extra's own feature: each is expected to need its extra (and
# hostkit.notebook, which says so with MissingDependency). hostkit.telemetry._observer
# imports only the OpenTelemetry API, which mcp brings to every install.
EXTRA_MODULES = {
    "hostkit.adapters.openai_chat",
    "hostkit.adapters.anthropic_messages",
    # The PostgreSQL adapter (hostkit[postgres]); RuntimeStore.open_postgres imports it.
    "hostkit.store._pg",
    "hostkit.store._pg_connection",
    "hostkit.store._pg_listen",
    "hostkit.store._pg_migrate",
}


async def python(code: str, *, cwd: Path) -> tuple[int, str, str]:
    result = await anyio.run_process(
        [sys.executable, "-c", code],
        cwd=cwd,
        check=False,
        stdin=subprocess.DEVNULL,
        # No OPENAI_BASE_URL: the demo's real model is the embedded local one.
        env={**os.environ, "COLUMNS": "200", "OPENAI_BASE_URL": ""},
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def hostkit_without(blocked: list[str], *args: str, cwd: Path) -> tuple[int, str, str]:
    return await python(BLOCKED_CLI.format(blocked=blocked, args=list(args)), cwd=cwd)


def count_turns(database: Path) -> int:
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT count(*) FROM turns").fetchone()[0])


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.anyio
async def test_hostkit_demo_without_openai_is_one_line_naming_the_local_extra(
    tmp_path: Path,
) -> None:
    # The reported bug: hostkit[local] without openai failed the embedded model's turn.
    code, out, err = await hostkit_without(["openai"], "demo", cwd=tmp_path)
    assert code == 2, err
    assert error_lines(err) == [
        "error: hostkit demo's third turn, the embedded model (unless OPENAI_BASE_URL names an "
        "OpenAI-compatible server), needs the package 'openai', which is not installed: "
        'pip install "hostkit[local]"'
    ]
    assert out == ""  # not even the first scripted turn ran
    # Refused before the demo creates anything (its directory included).
    assert not await anyio.Path(tmp_path / ".hostkit-demo").exists()


@pytest.mark.anyio
async def test_hostkit_run_with_an_openai_provider_without_openai_admits_nothing(
    tmp_path: Path,
) -> None:
    await anyio.Path(tmp_path / "hostkit.toml").write_text(
        '[providers.cloud]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n\n'
        '[agents.assistant]\nprovider = "cloud"\n'
    )
    # A database that already exists (the Host ran before the package went missing).
    async with await RuntimeStore.open(tmp_path / "hostkit.db"):
        pass
    code, _, err = await hostkit_without(["openai"], "run", "hello", cwd=tmp_path)
    assert code == 2, err
    assert error_lines(err) == [
        "error: provider 'cloud' (kind openai) needs the package 'openai', which is not "
        'installed: pip install "hostkit[openai]"'
    ]
    assert await anyio.to_thread.run_sync(count_turns, tmp_path / "hostkit.db") == 0


def test_hostkit_version_prints_the_package_version_first() -> None:
    # In-process (the option's wiring); tests/packaging runs the installed script itself.
    result = CliRunner().invoke(app, ["--version", "extras"])
    assert result.exit_code == 0, result.output
    assert result.output == f"hostkit {hostkit.__version__}\n"  # eager: no command ran


@pytest.mark.anyio
async def test_hostkit_extras_reports_what_is_missing_and_the_command(tmp_path: Path) -> None:
    code, out, err = await hostkit_without(["xllamacpp", "gguf"], "extras", "--json", cwd=tmp_path)
    assert code == 0, err
    statuses = {row["extra"]: row for row in json.loads(out)}
    assert set(statuses) == set(EXTRAS)
    assert statuses["local"] == {
        "extra": "local",
        "installed": False,
        "missing": ["xllamacpp", "gguf"],
        "install": 'pip install "hostkit[local]"',
    }
    assert all(
        row["installed"] and not row["missing"] for e, row in statuses.items() if e != "local"
    )


@pytest.mark.anyio
async def test_no_module_but_the_extras_own_imports_an_extra(tmp_path: Path) -> None:
    # Every extra's modules, as a base install lacks them; opentelemetry-api is not among
    # them: mcp (a core dependency) brings it, so only the otel SDK and exporter are missing.
    modules = {package.module for packages in EXTRAS.values() for package in packages}
    blocked = sorted((modules - {"opentelemetry.trace"}) | {"IPython"})
    code, out, err = await python(IMPORT_EVERYTHING.format(blocked=blocked), cwd=tmp_path)
    assert code == 0, err
    failed = json.loads(out)
    notebook = {name for name in failed if name.split(".")[:2] == ["hostkit", "notebook"]}
    assert "hostkit.notebook" in notebook
    assert all("MissingDependency" in failed[name] for name in notebook), failed
    assert set(failed) - notebook == EXTRA_MODULES, failed
