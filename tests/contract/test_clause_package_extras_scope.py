"""Issue 19, "a missing optional dependency ... at configuration time": which configurations and
which commands the check refuses. Only providers an agent uses need their package (a configured
agent, a core's model, a Python agent's shorthand); the implicit ``assistant`` does not block a
Host whose agents are all Python ones; commands that run no turn open without the check.

In-process: a package is made missing with ``sys.modules[name] = None`` (monkeypatch puts the
real entry back), which makes ``find_spec`` answer None and an import raise. CLI commands run
through ``CliRunner`` (tests/contract/_cli_cores.py); the demo's and ``run``'s fresh-process
refusals are in test_clause_package_extras_cli.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import hostkit
from hostkit.builtins.process._sandbox import INSTALL_HINT
from hostkit.errors import MissingDependency
from hostkit.host import Host, default_config, parse_config
from tests.contract._cli_cores import CONFIG, CORE, invoke, live, make_project

LOOPBACK = "http://127.0.0.1:9/v1"
CLOUD_REFUSAL = (
    "error: provider 'cloud' (kind openai) needs the package 'openai', which is not "
    'installed: pip install "hostkit[openai]"'
)


def block(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def config(tmp_path: Path, providers: dict[str, Any], agents: dict[str, Any]) -> hostkit.HostConfig:
    return parse_config(
        {
            "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
            "providers": {"test": {"kind": "scripted"}, **providers},
            "agents": agents,
        },
        base_dir=tmp_path,
    )


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- A: the providers agents use --------------------------------------------------------


@pytest.mark.anyio
async def test_a_declared_provider_no_agent_uses_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block(monkeypatch, "xllamacpp", "anthropic")
    spare = config(
        tmp_path,
        {"spare": {"kind": "local"}, "later": {"kind": "anthropic", "base_url": LOOPBACK}},
        {"assistant": {"provider": "test"}},
    )
    async with Host.open(spare) as host:
        assert set(host.config.providers) == {"test", "spare", "later"}


@pytest.mark.anyio
async def test_a_provider_used_only_as_a_summarizer_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block(monkeypatch, "anthropic")
    summarized = config(
        tmp_path,
        {"notes": {"kind": "anthropic", "base_url": LOOPBACK}},
        {"assistant": {"provider": "test", "summarizer": "notes"}},
    )
    with pytest.raises(MissingDependency) as caught:
        await Host.open(summarized)
    assert caught.value.key == "providers.notes.kind"
    assert not (tmp_path / "hostkit.db").exists()


@pytest.mark.anyio
async def test_python_agents_without_a_config_open_without_the_implicit_assistant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The newcomer's case: only the openai extra, the README's Python agent, no hostkit.toml.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    block(monkeypatch, "xllamacpp", "gguf")
    janitor = hostkit.Agent("janitor", model="openai:gpt-4o-mini")
    async with Host.open(agents=[janitor]) as host:
        assert set(host.config.agents) == {"janitor"}
        assert {p.kind for p in host.config.providers.values()} == {"openai"}
    # Its shorthand is still held to its own package.
    block(monkeypatch, "openai")
    with pytest.raises(MissingDependency, match=r'hostkit\[openai\]"$'):
        await Host.open(agents=[janitor])


@pytest.mark.anyio
async def test_the_implicit_assistant_alone_still_needs_the_local_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    block(monkeypatch, "xllamacpp")
    with pytest.raises(MissingDependency) as caught:
        await Host.open()
    assert str(caught.value) == (
        "provider 'local' (kind local) needs the package 'xllamacpp', which is not "
        'installed: pip install "hostkit[local]"'
    )
    assert not (tmp_path / "hostkit.db").exists()
    # `hostkit run "hi"` with no config: the same one line, exit status 2.
    # (In a worker thread: the command runs its own event loop, as it does alone.)
    code, out, err = await anyio.to_thread.run_sync(invoke, "run", "hi")
    assert (code, out, lines(err)) == (2, "", [f"error: {caught.value}"])


def test_default_config_without_the_assistant_has_no_agent_and_no_provider(
    tmp_path: Path,
) -> None:
    bare = default_config(base_dir=tmp_path, environ={}, assistant=False)
    assert (bare.agents, bare.providers) == ({}, {})
    assert bare.database_path == default_config(base_dir=tmp_path, environ={}).database_path


def test_a_python_agent_run_from_the_cli_is_not_blocked_by_the_implicit_assistant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "janitor.py").write_text(
        "import hostkit\n"
        "janitor = hostkit.Agent('janitor', model=hostkit.ScriptedModel(['swept']))\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    block(monkeypatch, "xllamacpp")
    code, _, err = invoke("run", "--agent", "janitor:janitor", "sweep")
    assert code == 0, err
    # The answer streams to the process's own stdout; the result goes to stderr.
    assert "outcome: completed" in lines(err)
    assert (tmp_path / "hostkit.db").is_file()  # the default configuration's database


# -- B: commands that run no turn open without the check ------------------------------


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The starter core on provider ``p``, and an agent on an openai provider whose package is
    missing (the project worked before the package went)."""
    make_project(tmp_path)
    (tmp_path / "hostkit.toml").write_text(
        CONFIG + '\n[providers.cloud]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        '\n[agents.helper]\nprovider = "cloud"\n'
    )
    monkeypatch.chdir(tmp_path)
    block(monkeypatch, "openai")
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        ("sessions",),
        ("approvals", "list"),
        ("inbox", "list"),
        ("effects", "runs"),
        ("core", "status"),
        ("core", "log", CORE),
        ("core", "diff", CORE),
    ],
)
def test_listings_open_while_a_used_provider_package_is_missing(
    project: Path, command: tuple[str, ...]
) -> None:
    code, _, err = invoke(*command, project=project)
    assert code == 0, err
    assert "needs the package" not in err


def test_promote_runs_without_the_provider_and_run_still_refuses(project: Path) -> None:
    code, out, err = invoke("core", "promote", CORE, "--reason", "first", project=project)
    assert code == 0, err
    assert live(project / "cores" / CORE) is not None
    assert f"promoted {CORE}" in out
    # E: promoting the core that has no live revision is not told to promote it.
    assert "has no live revision" not in err
    # A turn needs its provider: still the one line, exit status 2.
    code, out, err = invoke("run", "hi", "--agent", CORE, project=project)
    assert (code, out, lines(err)) == (2, "", [CLOUD_REFUSAL])


def test_a_core_whose_model_package_is_missing_is_refused_once_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The core names the provider; no configured agent does: composed, it is checked.
    make_project(tmp_path)
    (tmp_path / "hostkit.toml").write_text(
        CONFIG.replace(
            'kind = "scripted"', 'kind = "openai"\nbase_url = "http://127.0.0.1:9/v1"'
        ).replace('script = [ { reply = "Hello from the core." } ]\n', "")
    )
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke("core", "promote", CORE, "--reason", "first", project=tmp_path)
    assert code == 0, err
    block(monkeypatch, "openai")
    code, out, err = invoke("sessions", project=tmp_path)
    assert code == 0, err
    code, out, err = invoke("run", "hi", project=tmp_path)
    assert (code, out, lines(err)) == (
        2,
        "",
        [CLOUD_REFUSAL.replace("'cloud'", "'p'")],
    )


# -- D, F: what a pip user is told ----------------------------------------------------


def test_the_bubblewrap_hint_names_the_package_manager_not_the_makefile() -> None:
    assert "make install" not in INSTALL_HINT
    assert "apt-get install bubblewrap" in INSTALL_HINT


def test_init_says_when_the_starter_needs_the_local_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = invoke("init")
    assert code == 0, err
    assert "note:" not in err  # everything is installed here
    block(monkeypatch, "xllamacpp")
    code, _, err = invoke("init", "--force")
    assert code == 0, err
    notes = [line for line in lines(err) if line.startswith("note:")]
    assert notes == [
        "note: provider 'local' (kind local) needs the package 'xllamacpp', which is not "
        'installed: pip install "hostkit[local]"'
    ]
    assert (tmp_path / "hostkit.toml").is_file()
