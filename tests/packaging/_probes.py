"""What each extra promises, tried in a fresh environment holding only the wheel and that extra.

A probe raises ``AssertionError`` with the command and its output when the
feature does not work; it never looks at the checkout. The provider probes
talk to loopback wire servers the test runs (real HTTP, the real SDK).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio

from tests.packaging._venv import Venv
from tests.wire import WireServer
from tests.wire import anthropic_messages as wire_anthropic
from tests.wire import openai_chat as wire_openai
from tests.wire.scenario import Answer

__all__ = ["EXTRAS", "Probe", "ProbeSite", "check_installed"]

# Each command may first compile what it imports (a fresh environment has no bytecode).
COMMAND_DEADLINE_S = 120.0
# The demo starts llama.cpp's server and loads the model, on a CPU shared with other tests.
DEMO_DEADLINE_S = 240.0
API_KEY_ENV = "HOSTKIT_PACKAGING_KEY"
API_KEY = "sk-packaging-check"
ANSWER = "Installed from the wheel."
# A notebook that drives hostkit.notebook (its widgets render the approval prompt and the
# Markdown answer), on a scripted model: it needs the notebook extra and nothing else.
NOTEBOOK = "02-approvals.ipynb"


@dataclass(frozen=True, slots=True)
class ProbeSite:
    """What the probes share: the version to expect, the checkout's notebooks, the servers."""

    version: str
    notebooks: Path
    openai: WireServer
    anthropic: WireServer


Probe = Callable[[Venv, Path, ProbeSite], Awaitable[None]]


async def check_installed(venv: Venv, workdir: Path, site: ProbeSite) -> None:
    """``import hostkit`` finds the wheel's, and ``hostkit --version`` answers its version."""
    # Where ``import hostkit`` would come from, found without importing it (a second full
    # import of hostkit is two seconds of CPU per environment).
    code = (
        "import importlib.metadata as m, importlib.util as u; "
        "print(u.find_spec('hostkit').origin); print(m.version('hostkit'))"
    )
    found = await venv.run("python", "-c", code, cwd=workdir, deadline_s=COMMAND_DEADLINE_S)
    assert found.returncode == 0, found.explain()
    where, metadata = found.stdout.split()
    assert Path(where).is_relative_to(venv.root), f"hostkit is imported from {where}, not the wheel"
    assert metadata == site.version, found.explain()
    shown = await venv.run("hostkit", "--version", cwd=workdir, deadline_s=COMMAND_DEADLINE_S)
    first = shown.stdout.splitlines()[0] if shown.stdout else ""
    assert shown.returncode == 0, shown.explain()
    assert first == f"hostkit {site.version}", shown.explain()


async def _refuse_without_local(venv: Venv, workdir: Path) -> None:
    """Without the ``local`` extra, ``hostkit demo`` names the install in one line before any
    turn runs (the failure issue 19 was filed for)."""
    empty = workdir / "demo-without-local"
    await anyio.Path(empty).mkdir()
    ran = await venv.run("hostkit", "demo", cwd=empty, deadline_s=COMMAND_DEADLINE_S)
    assert ran.returncode == 2, ran.explain()
    assert ran.stdout == "", ran.explain()
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.explain()
    assert "'xllamacpp'" in lines[0], ran.explain()
    assert lines[0].endswith('pip install "hostkit[local]"'), ran.explain()


async def _local(venv: Venv, workdir: Path, site: ProbeSite) -> None:
    """``hostkit demo`` in an empty directory: all three turns, the embedded model's included."""
    ran = await venv.run("hostkit", "demo", cwd=workdir, deadline_s=DEMO_DEADLINE_S)
    assert ran.returncode == 0, ran.explain()
    assert "3. a real model: the embedded local model" in ran.stderr, ran.explain()
    assert ran.stderr.count("outcome: completed") == 3, ran.explain()
    assert (workdir / ".hostkit-demo" / "workspace" / "summary.md").is_file(), ran.explain()


async def _notebook(venv: Venv, workdir: Path, site: ProbeSite) -> None:
    """A notebook under nbval on this environment's own ``python3`` kernel.

    The extra is checked on its own first: nbval brings ipykernel and IPython,
    which would otherwise stand in for packages the extra failed to install.
    """
    extras = await venv.run(
        "hostkit", "extras", "--json", cwd=workdir, deadline_s=COMMAND_DEADLINE_S
    )
    assert extras.returncode == 0, extras.explain()
    (row,) = [row for row in json.loads(extras.stdout) if row["extra"] == "notebook"]
    assert row["installed"], extras.explain()
    assert not row["missing"], extras.explain()
    imported = await venv.run(
        "python", "-c", "import hostkit.notebook", cwd=workdir, deadline_s=COMMAND_DEADLINE_S
    )
    assert imported.returncode == 0, imported.explain()
    await venv.install(["pytest", "nbval"])
    for name in (NOTEBOOK, "sanitize.cfg"):
        await anyio.to_thread.run_sync(shutil.copyfile, site.notebooks / name, workdir / name)
    # No user-level kernel spec or IPython profile may stand in for this environment's.
    jupyter = {
        "JUPYTER_DATA_DIR": str(workdir / ".jupyter-data"),
        "JUPYTER_CONFIG_DIR": str(workdir / ".jupyter-config"),
        "IPYTHONDIR": str(workdir / ".ipython"),
    }
    spec = (
        "from jupyter_client.kernelspec import KernelSpecManager as M, shutil; "
        "print(shutil.which(M().get_kernel_spec('python3').argv[0]))"
    )
    kernel = await venv.run(
        "python", "-c", spec, cwd=workdir, env=jupyter, deadline_s=COMMAND_DEADLINE_S
    )
    assert kernel.returncode == 0, kernel.explain()
    assert Path(kernel.stdout.strip()).parent == venv.root / "bin", kernel.explain()
    ran = await venv.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
        "--nbval-sanitize-with", "sanitize.cfg", "--nbval-kernel-name", "python3", NOTEBOOK,
        cwd=workdir, env=jupyter, deadline_s=DEMO_DEADLINE_S,
    )  # fmt: skip
    assert ran.returncode == 0, ran.explain()
    assert " passed" in ran.stdout, ran.explain()
    assert " failed" not in ran.stdout, ran.explain()


async def _provider_turn(
    venv: Venv, workdir: Path, *, kind: str, wire: WireServer, base_url: str, reply_path: str
) -> None:
    """``hostkit run`` through the ``kind`` adapter against a loopback server."""
    answer = Answer(deltas=("Installed ", "from the wheel."))
    encoder = wire_openai if kind == "openai" else wire_anthropic
    wire.script(encoder.answer_reply(answer, stream=True))
    config = (
        f'[host]\ndatabase = "state/hostkit.db"\n\n[providers.api]\nkind = "{kind}"\n'
        f'base_url = "{base_url}"\nmodel = "packaging-check"\napi_key_env = "{API_KEY_ENV}"\n\n'
        '[agents.assistant]\nprovider = "api"\n'
    )
    await anyio.Path(workdir / "hostkit.toml").write_text(config)
    ran = await venv.run(
        "hostkit", "run", "hello", cwd=workdir, env={API_KEY_ENV: API_KEY},
        deadline_s=COMMAND_DEADLINE_S,
    )  # fmt: skip
    assert ran.returncode == 0, ran.explain()
    assert ANSWER in ran.stdout, ran.explain()
    assert [seen.path for seen in wire.requests] == [reply_path], ran.explain()
    assert API_KEY in " ".join(wire.requests[0].headers.values()), "the key was not sent"


async def _openai(venv: Venv, workdir: Path, site: ProbeSite) -> None:
    url = f"{site.openai.base_url}/v1"
    await _provider_turn(
        venv, workdir, kind="openai", wire=site.openai, base_url=url,
        reply_path="/v1/chat/completions",
    )  # fmt: skip


async def _anthropic(venv: Venv, workdir: Path, site: ProbeSite) -> None:
    await _provider_turn(
        venv, workdir, kind="anthropic", wire=site.anthropic, base_url=site.anthropic.base_url,
        reply_path="/v1/messages",
    )  # fmt: skip


async def _otel(venv: Venv, workdir: Path, site: ProbeSite) -> None:
    """A scripted turn traced to the console: the agent span arrives on stderr. This
    environment lacks the ``local`` extra, so the demo must refuse in one line."""
    config = (
        '[host]\ndatabase = "state/hostkit.db"\n\n[host.telemetry]\ntraces = "console"\n\n'
        f'[providers.scripted]\nkind = "scripted"\nscript = [{{ reply = "{ANSWER}" }}]\n\n'
        '[agents.assistant]\nprovider = "scripted"\n'
    )
    await anyio.Path(workdir / "hostkit.toml").write_text(config)
    ran = await venv.run("hostkit", "run", "hello", cwd=workdir, deadline_s=COMMAND_DEADLINE_S)
    assert ran.returncode == 0, ran.explain()
    assert ANSWER in ran.stdout, ran.explain()
    assert '"name": "invoke_agent assistant"' in ran.stderr, ran.explain()
    assert '"service.name": "hostkit"' in ran.stderr, ran.explain()
    await _refuse_without_local(venv, workdir)


EXTRAS: dict[str, Probe] = {
    "local": _local,
    "notebook": _notebook,
    "openai": _openai,
    "anthropic": _anthropic,
    "otel": _otel,
}
