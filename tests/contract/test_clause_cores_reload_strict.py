"""Clause: a reload applies every core it checked, or nothing.

``reload()`` checks each core's live revision strictly, then applies the
configuration, which reads the live revisions again. A move to a commit that
does not load between the two (another process's promotion) rejects the
reload: generation N keeps serving the checked-before revision, the core is
not silently left out of generation N+1. A move whose tools do not build is
recorded: it is applied, the core unavailable with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest

import hostkit.host._host as host_module
from hostkit.errors import TurnRejected
from hostkit.host import Host, HostConfig
from hostkit.store import CoreStore
from tests.contract.test_clause_config_apply_cores import config_for, manifest, move_ref
from tests.cores_support import commit, make_core
from tests.hosts import request

pytestmark = pytest.mark.anyio


async def test_a_ref_moved_to_a_broken_commit_after_the_check_rejects_the_reload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=manifest("first revision"))
    second = commit(path, {"agent.yaml": manifest("second revision")}, "second")
    broken = commit(path, {"agent.yaml": manifest("x", capabilites={})}, "broken")
    real_check = host_module.check_cores
    checked: list[Mapping[str, str | None]] = []

    async def check_then_move(
        config: HostConfig, live: Mapping[str, str | None], store: CoreStore
    ) -> None:
        await real_check(config, live, store)  # the checked revision (second) loads
        checked.append(dict(live))
        await anyio.to_thread.run_sync(move_ref, path, second, broken)

    monkeypatch.setattr(host_module, "check_cores", check_then_move)
    async with Host.open(config_for(tmp_path, path)) as host:
        move_ref(path, first, second)
        outcome = await host.reload()
        served = await host.turns.run(request(core_id="notes"))
        still = "notes" in host.config.agents
    assert checked == [{"notes": second}]
    assert outcome.rejected, outcome
    assert outcome.generation == 1
    assert outcome.reason is not None
    assert outcome.reason.startswith("core 'notes' is not available: ")
    assert "agent.yaml line" in outcome.reason
    assert still
    assert (served.outcome, served.generation, served.core_revision) == ("completed", 1, first)


async def test_a_promotion_recorded_elsewhere_whose_tools_cannot_be_built_is_applied_unavailable(
    tmp_path: Path,
) -> None:
    """Another process made live a revision naming a tool module it lacks. The move is
    recorded: rejecting the reload would leave this Host serving a revision the store no
    longer calls live, and reject every later reload. It is applied with the core
    unavailable (the build's reason); a later reload outside it still applies."""
    path, first = make_core(tmp_path, "notes", manifest=manifest("first revision"))
    missing = commit(path, {"agent.yaml": manifest("x", tools=["missing"])}, "missing")
    async with Host.open(config_for(tmp_path, path)) as host:
        move_ref(path, first, missing)
        outcome = await host.reload()
        with pytest.raises(TurnRejected) as refused:
            await host.turns.run(request(core_id="notes"))
        again = await host.reload()
    assert outcome.applied, outcome
    assert outcome.generation == 2
    assert "agents.notes.tool_modules: cannot import tool module " in refused.value.message
    assert not again.rejected, again
