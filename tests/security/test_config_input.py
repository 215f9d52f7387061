"""A hostkit.toml that cannot be a configuration: one clear line, exit 2, never a hang.

Each case runs the real CLI in a subprocess under a deadline: a file that is
not UTF-8, nested past what the parser can take (arrays and inline tables),
a directory, a FIFO with no writer, a character device, a file the user
cannot read, and one over the size bound. Each must end with status 2 and a
single ``error:`` line that names the file, with no traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import pytest

from hostkit.errors import ConfigError
from hostkit.host import load_config
from hostkit.host._config import MAX_CONFIG_BYTES
from tests.cli import run_cli_async

pytestmark = pytest.mark.anyio

DEADLINE_S = 60.0
# Root reads any file: without these two capabilities, file modes apply to it too.
DROP_DAC = [
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
]


def not_utf8(path: Path) -> None:
    path.write_bytes(b'[host]\ndatabase = "caf\xe9.db"\n')


def nested_arrays(path: Path) -> None:
    path.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")


def nested_tables(path: Path) -> None:
    path.write_text("a = " + "{b = " * 30_000 + "1" + "}" * 30_000 + "\n")


def nested_values(path: Path) -> None:
    """Within the parser's reach, but deeper than any configuration needs."""
    deep = "[" * 200 + "]" * 200
    step = f'{{ tool = "x", arguments = {{ a = {deep} }} }}'
    path.write_text(f'[providers.p]\nkind = "scripted"\nscript = [{step}]\n')


def directory(path: Path) -> None:
    path.mkdir()


def fifo(path: Path) -> None:
    os.mkfifo(path)


def huge(path: Path) -> None:
    path.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 10))


def huge_integer(path: Path) -> None:
    """Valid TOML, but longer than Python converts an integer (4,300 digits)."""
    path.write_text("[host.limits]\nprocesses = " + "9" * 5_000 + "\n")


def unreadable(path: Path) -> None:
    path.write_text('[host]\ndatabase = "x.db"\n')
    path.chmod(0)


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "not_utf8": (not_utf8, "is not UTF-8 text"),
    "nested_arrays": (nested_arrays, "nested too deeply"),
    "nested_tables": (nested_tables, "nested too deeply"),
    "nested_values": (nested_values, "nested more than 64 levels deep"),
    "directory": (directory, "is a directory"),
    "fifo": (fifo, "is not a regular file"),
    "huge": (huge, "the limit is"),
    "huge_integer": (huge_integer, "has a value that cannot be read"),
    "unreadable": (unreadable, "cannot be opened: Permission denied"),
}


async def cli(*args: str, cwd: Path, prefix: Sequence[str] = ()) -> tuple[int, str]:
    env = {**os.environ, "COLUMNS": "80"}
    with anyio.fail_after(DEADLINE_S):
        if prefix:  # another user's command: a process of its own
            result = await anyio.run_process(
                [*prefix, sys.executable, "-m", "hostkit", *args],
                cwd=cwd,
                check=False,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        else:
            result = await run_cli_async(*args, cwd=cwd, env=env)
    return result.returncode, result.stderr.decode(errors="replace")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_bad_config_file_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    make, expected = CASES[case]
    path = tmp_path / "hostkit.toml"
    make(path)
    prefix: Sequence[str] = ()
    if case == "unreadable" and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: every file is readable")
        prefix = DROP_DAC
    # Found as ./hostkit.toml, then named with -c: each message names the file as given.
    for args, shown in (
        (["run", "hi"], "hostkit.toml"),
        (["run", "hi", "-c", str(path)], str(path)),
    ):
        code, err = await cli(*args, cwd=tmp_path, prefix=prefix)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2, err
        assert len(lines) == 1, err
        assert lines[0].startswith(f"error: {shown} ")
        assert expected in lines[0]
        assert "Traceback" not in err


async def test_a_character_device_is_refused_unread() -> None:
    with pytest.raises(ConfigError, match="/dev/zero is not a regular file"):
        await anyio.to_thread.run_sync(load_config, "/dev/zero")


@pytest.mark.parametrize(
    "case", ["not_utf8", "nested_arrays", "nested_values", "fifo", "huge", "huge_integer"]
)
async def test_load_config_maps_each_case_to_a_config_error(tmp_path: Path, case: str) -> None:
    make, expected = CASES[case]
    path = tmp_path / "hostkit.toml"
    make(path)
    with anyio.fail_after(DEADLINE_S), pytest.raises(ConfigError) as caught:
        await anyio.to_thread.run_sync(load_config, path)
    assert expected in caught.value.message
    assert str(path) in caught.value.message
    assert len(caught.value.message) < 600


async def test_a_valid_config_still_loads_and_remembers_its_source(tmp_path: Path) -> None:
    path = tmp_path / "hostkit.toml"
    path.write_text('[host]\ndatabase = "state.db"\n')
    config = await anyio.to_thread.run_sync(load_config, path)
    assert config.source == path.resolve()
    assert path.resolve() in config.state_paths()


async def test_a_directory_without_a_project_file_says_how_to_make_it_one(
    tmp_path: Path,
) -> None:
    """`-c DIR` reads DIR/hostkit.toml; a directory without one is not "not a file": it is
    a project not made yet, and the line says how."""
    folder = tmp_path / "empty project"
    folder.mkdir()
    with pytest.raises(ConfigError) as caught:
        await anyio.to_thread.run_sync(load_config, folder)
    message = caught.value.message
    assert message.startswith(f"{folder} is a directory with no hostkit.toml in it")
    assert f"`hostkit init '{folder}'`" in message
