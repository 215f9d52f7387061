"""hostkit as a user gets it: the sdist and the wheel, installed outside the checkout.

``python -m build`` makes both from this checkout; their file lists are
checked; then the wheel is installed with each extra into a fresh virtual
environment outside the checkout (uv, from its cache), where ``hostkit
--version`` and the extra's own feature must work: the demo's three turns
with the embedded model, a notebook under nbval, a turn through each vendor
adapter against a loopback server, a console trace; and where the ``local``
extra is not installed, the demo must refuse its embedded model in one line
naming the install, before any turn.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import anyio
import pytest

from hostkit.builtins.process import probe_bubblewrap
from tests.packaging._build import (
    SDIST_TOP_LEVEL,
    Distributions,
    build_distributions,
    package_files,
    read_sdist,
    read_version,
    read_wheel,
)
from tests.packaging._probes import EXTRAS, ProbeSite, check_installed
from tests.packaging._venv import create_venv
from tests.parts import missing
from tests.wire import serve_wire

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CHECKOUT = Path(__file__).resolve().parents[2]
# Read at run time from the package's own tree: the demo's tool module and note (also
# `hostkit init`'s starter), the children the Host starts from source, the type marker.
RUNTIME_DATA = (
    "hostkit/py.typed",
    "hostkit/_version.py",
    "hostkit/examples/tools.py",
    "hostkit/examples/notes/welcome.md",
    "hostkit/host/_tool_child.py",
    "hostkit/adapters/_llama_child.py",
)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def dists(tmp_path_factory: pytest.TempPathFactory) -> Distributions:
    # Built once for the module, outside the checkout.
    return await build_distributions(CHECKOUT, tmp_path_factory.mktemp("dist"))


async def test_the_wheel_holds_the_package_and_its_data_and_nothing_else(
    dists: Distributions,
) -> None:
    files = await anyio.to_thread.run_sync(read_wheel, dists.wheel)
    expected = await anyio.to_thread.run_sync(package_files, CHECKOUT)
    version = read_version(CHECKOUT)
    info = f"hostkit-{version}.dist-info"
    print("wheel", f"{dists.wheel.name}: {len(files)} files, {dists.wheel.stat().st_size} bytes")
    assert dists.wheel.name == f"hostkit-{version}-py3-none-any.whl"
    packaged = {name for name in files if not name.startswith(f"{info}/")}
    missing, unexpected = sorted(expected - packaged), sorted(packaged - expected)
    assert packaged == expected, f"missing: {missing[:20]}, unexpected: {unexpected[:20]}"
    assert set(RUNTIME_DATA) <= packaged
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in files)
    metadata = files[f"{info}/METADATA"].decode()
    assert f"\nVersion: {version}\n" in metadata
    for extra in EXTRAS:
        assert f"\nProvides-Extra: {extra}\n" in metadata
    assert "hostkit = hostkit._launch:main" in files[f"{info}/entry_points.txt"].decode()
    # The license travels with the package (pyproject: Apache-2.0).
    assert files[f"{info}/licenses/LICENSE"] == (CHECKOUT / "LICENSE").read_bytes()


async def test_the_sdist_holds_what_builds_and_documents_hostkit_and_no_tests(
    dists: Distributions,
) -> None:
    files = await anyio.to_thread.run_sync(read_sdist, dists.sdist)
    expected = await anyio.to_thread.run_sync(package_files, CHECKOUT)
    print("sdist", f"{dists.sdist.name}: {len(files)} files, {dists.sdist.stat().st_size} bytes")
    assert {name.split("/")[0] for name in files} <= SDIST_TOP_LEVEL
    assert expected <= set(files), f"missing: {sorted(expected - set(files))[:20]}"
    notebooks = {path.name for path in (CHECKOUT / "notebooks").glob("*.ipynb")}
    assert {f"notebooks/{name}" for name in notebooks} <= set(files)
    assert "notebooks/sanitize.cfg" in files
    assert "LICENSE" in files
    docs = {f"docs/{path.name}" for path in (CHECKOUT / "docs").glob("*.md")}
    assert docs <= {name for name in files if name.startswith("docs/")}
    for forbidden in ("tests/", "bench/", ".venv", ".hostkit", "__pycache__", ".ipynb_checkpoints"):
        assert not any(forbidden in name for name in files), forbidden
    assert f"\nVersion: {read_version(CHECKOUT)}\n" in files["PKG-INFO"].decode()


async def test_the_wheel_works_with_each_extra_in_a_fresh_environment(
    dists: Distributions,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    sandbox = await anyio.to_thread.run_sync(probe_bubblewrap)
    if not sandbox.ok:
        missing(
            "sandbox", f"`hostkit demo` discovers its tool module in bubblewrap: {sandbox.reason}"
        )
    root = tmp_path_factory.mktemp("extras")
    assert not root.resolve().is_relative_to(CHECKOUT)
    failures: list[str] = []
    timings: dict[str, dict[str, float]] = {}

    async with serve_wire() as openai, serve_wire() as anthropic:
        site = ProbeSite(read_version(CHECKOUT), CHECKOUT / "notebooks", openai, anthropic)

        async def check(extra: str) -> None:
            # Every step is tried and timed, so one run reports all that is wrong.
            clock, spent = time.monotonic(), timings.setdefault(extra, {})
            try:
                venv = await create_venv(root / f"venv-{extra}", checkout=CHECKOUT)
                await venv.install([f"{dists.wheel}[{extra}]"])
            except (AssertionError, TimeoutError) as exc:
                failures.append(f"[{extra}] install: {type(exc).__name__}: {exc}")
                return
            spent["install"] = round(time.monotonic() - clock, 1)
            workdir = root / f"run-{extra}"
            await anyio.Path(workdir).mkdir()
            for step, probe in (("version", check_installed), ("feature", EXTRAS[extra])):
                clock = time.monotonic()
                try:
                    await probe(venv, workdir, site)
                except (AssertionError, TimeoutError) as exc:
                    failures.append(f"[{extra}] {step}: {type(exc).__name__}: {exc}")
                spent[step] = round(time.monotonic() - clock, 1)

        async with anyio.create_task_group() as tasks:
            # The demo's environment first: it is the longest chain.
            for extra in EXTRAS:
                tasks.start_soon(check, extra)

    print("seconds per extra:", timings)
    if failures:
        pytest.fail("\n\n".join([*failures, f"seconds per extra: {timings}"]), pytrace=False)
    await anyio.to_thread.run_sync(shutil.rmtree, root)
