"""Clause: a setting the Host reads only when it opens is never half applied by a reload.

Where the state is (``[store] url``, ``[host] database``/``synchronous``, the
artifact root, the cores' directory) is read once, at open: a reload (or
``apply_config``) that moves it is rejected whole, naming it, and generation N
keeps serving. The other open-time settings (the artifact reserve, the approval
and admission waits, the session lease, telemetry, the PostgreSQL pool, the
backup directory) wait for the next open: the reload applies, the generation
keeps the values the Host opened with (``host.config`` says them), and the
outcome marks them "(when the Host reopens)", so one edit meant for the next
restart blocks no other reload. The rest of ``[host]`` (``workspace``,
``limits``) is read by each generation and applies.

Real Hosts on real files; nothing is faked.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from hostkit.errors import ConfigError
from hostkit.host import Host, HostConfig, StoreSection, load_config
from tests.contract._config_apply import write_config
from tests.hosts import request

pytestmark = pytest.mark.anyio

# Each setting that says where the state is, with a line that changes it (in [host] or as
# its own table): a reload changing one is rejected.
SPLIT_STATE = {
    "host.database": ("host", 'database = "other.db"'),
    "host.synchronous": ("host", 'synchronous = "NORMAL"'),
    "host.artifacts": ("host", 'artifacts = "moved-artifacts"'),
    "host.cores_dir": ("host", 'cores_dir = "moved-cores"'),
    "store.url": ("table", '[store]\nurl = "postgresql://db.invalid/hostkit"'),
}
# The other open-time settings, with the value the Host opened with: they wait for it.
WAITING = {
    "host.artifact_reserve_mb": ("host", "artifact_reserve_mb = 0"),
    "host.artifact_retention_s": ("host", "artifact_retention_s = 0"),
    "host.approval_timeout_s": ("host", "approval_timeout_s = 5"),
    "host.session_lease_ttl_s": ("host", "session_lease_ttl_s = 5"),
    "host.admission_timeout_s": ("host", "admission_timeout_s = 5"),
    "host.telemetry": ("table", '[host.telemetry]\ntraces = "console"'),
    "store.backup_dir": ("table", '[store]\nbackup_dir = "elsewhere"'),
}
# PostgreSQL's pool: a SQLite Host reads none of it, so changing it applies at once.
POSTGRES_ONLY = {
    "store.pool_size": ("table", "[store]\npool_size = 2"),
    "store.connect_timeout_s": ("table", "[store]\nconnect_timeout_s = 1"),
    "store.statement_timeout_s": ("table", "[store]\nstatement_timeout_s = 1"),
    "store.max_clock_skew_s": ("table", "[store]\nmax_clock_skew_s = 1"),
}
OPEN_ONLY = {**SPLIT_STATE, **WAITING, **POSTGRES_ONLY}
# What each generation reads again: these apply.
LIVE = {
    "host.workspace": ("host", 'workspace = "ws2"'),
    "host.limits": ("table", "[host.limits]\nprocesses = 64"),
}


def test_every_host_and_store_setting_is_classified() -> None:
    """A new [host] or [store] setting must be listed here as open-only or live."""
    host_section = HostConfig.model_fields["host"].annotation
    assert host_section is not None
    settings = {f"host.{name}" for name in host_section.model_fields}
    settings |= {f"store.{name}" for name in StoreSection.model_fields}
    assert settings == set(OPEN_ONLY) | set(LIVE)


def edited(path: Path, where: str, line: str) -> str:
    """The file with ``line`` in its [host] table (replacing the key there) or appended."""
    text = path.read_text()
    if where != "host":
        return f"{text}\n{line}\n"
    lines = text.splitlines()
    at = lines.index("[host]") + 1
    key = line.split(" = ")[0]
    lines = [kept for kept in lines if not kept.startswith(f"{key} = ")]
    lines.insert(at, line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("key", sorted(SPLIT_STATE))
async def test_a_reload_moving_the_state_is_rejected_and_n_keeps_serving(
    tmp_path: Path, key: str
) -> None:
    path = write_config(tmp_path, reply="still here", times=3)
    async with Host.open(path) as host:
        path.write_text(edited(path, *OPEN_ONLY[key]))
        outcome = await host.reload()
        served = await host.turns.run(request())
        # apply_config (a notebook, an embedder) refuses it the same way, naming the key.
        changed = await anyio.to_thread.run_sync(load_config, path)
        with pytest.raises(ConfigError, match="takes effect when the Host is reopened") as caught:
            await host.apply_config(changed)
        assert host.generation == 1
    assert outcome.rejected
    assert outcome.generation == 1
    assert outcome.reason is not None
    assert outcome.reason.startswith(f"{key} changed: read only when the Host opens")
    assert "takes effect when the Host is reopened" in outcome.reason
    assert caught.value.key == key
    assert (served.generation, served.text) == (1, "still here")


def _setting(config: HostConfig, key: str) -> object:
    table, name = key.split(".")
    return getattr(getattr(config, table), name)


@pytest.mark.parametrize("key", sorted(WAITING))
async def test_another_open_time_change_waits_for_the_next_open_and_blocks_nothing(
    tmp_path: Path, key: str
) -> None:
    path = write_config(tmp_path, reply="x", times=3)
    async with Host.open(path) as host:
        opened = _setting(host.config, key)
        path.write_text(edited(path, *WAITING[key]))
        outcome = await host.reload()
        assert outcome.applied, outcome
        assert f"{key} (when the Host reopens)" in outcome.changes
        # The generation runs with the value the Host opened with, and says so.
        kept = _setting(host.config, key)
        assert kept == opened or (key == "store.backup_dir" and kept == str(tmp_path / opened))
        assert _setting(host.declared_config, key) != opened
        assert (await host.reload()).changes == ()  # nothing new: no generation again
        # A later edit (here: an agent's) still applies; the waiting one waits on.
        path.write_text(path.read_text().replace("the first revision", "the second revision"))
        later = await host.reload()
        served = await host.turns.run(request())
    assert later.applied, later
    assert later.changes == ("agents.assistant",)
    assert served.generation == later.generation == 3
    async with Host.open(path) as reopened:
        assert _setting(reopened.config, key) != opened  # taken at the next open


@pytest.mark.parametrize("key", sorted(POSTGRES_ONLY))
async def test_postgres_pool_settings_change_nothing_on_sqlite(tmp_path: Path, key: str) -> None:
    path = write_config(tmp_path, reply="x")
    async with Host.open(path) as host:
        path.write_text(edited(path, *POSTGRES_ONLY[key]))
        outcome = await host.reload()
    assert outcome.applied, outcome
    assert outcome.changes == (key,)


@pytest.mark.parametrize("key", sorted(LIVE))
async def test_a_reload_changing_a_live_host_setting_applies(tmp_path: Path, key: str) -> None:
    path = write_config(tmp_path, reply="x")
    async with Host.open(path) as host:
        path.write_text(edited(path, *LIVE[key]))
        outcome = await host.reload()
    assert outcome.applied, outcome
    assert key in outcome.changes


async def test_several_moves_of_the_state_are_named_together(tmp_path: Path) -> None:
    path = write_config(tmp_path, reply="x")
    async with Host.open(path) as host:
        text = edited(path, "host", 'artifacts = "a2"\ncores_dir = "c2"\napproval_timeout_s = 5')
        path.write_text(text)
        outcome = await host.reload()
    assert outcome.reason is not None
    assert outcome.reason.startswith("host.artifacts, host.cores_dir changed")


def _artifact_config(artifacts: str) -> str:
    """Agent ``assistant`` reads the (old) artifact root's file through its workspace."""
    read = '{ tool = "files.read", arguments = { path = ".hostkit-artifacts/out.log" } }'
    return f"""
[host]
artifacts = {json.dumps(artifacts)}

[providers.p]
kind = "scripted"
script = [{read}, {{ reply = "done" }}, {read}, {{ reply = "done" }}]

[agents.assistant]
provider = "p"
memory = false
workspace = "."
builtins = ["files.read"]
"""


async def test_moving_the_artifact_root_never_opens_the_old_one_to_the_agents(
    tmp_path: Path,
) -> None:
    """Applied, files.* would protect the new root while terminal output still went to the
    old one, which the agent could then read."""
    path = tmp_path / "hostkit.toml"
    path.write_text(_artifact_config(".hostkit-artifacts"))
    async with Host.open(path) as host:
        output = tmp_path / ".hostkit-artifacts" / "out.log"
        output.parent.mkdir(exist_ok=True)
        output.write_text("ANOTHER SESSION'S TERMINAL OUTPUT")
        first = await host.turns.run(request(conversation="c1"))
        path.write_text(_artifact_config("moved-artifacts"))
        outcome = await host.reload()
        second = await host.turns.run(request(conversation="c2"))
        results = await host.store.read(
            lambda c: c.execute("SELECT content FROM messages WHERE role = 'tool'").fetchall()
        )
    assert outcome.rejected
    assert (first.outcome, second.outcome) == ("completed", "completed")
    assert second.generation == 1
    assert len(results) == 2
    for (content,) in results:
        assert "is the Host's own state" in content
        assert "TERMINAL OUTPUT" not in content
