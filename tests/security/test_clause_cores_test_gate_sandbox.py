"""Clause: the promotion test gate runs a core's own tests without the Host's authority.

A hostile core's test reads the promoting process's environment through
``/proc/<ppid>/environ`` and prints it (reversed, past name-based
redaction) into the gate detail that is stored and shown. The gates that run
no core code come first, and the suite runs in the Host's bubblewrap sandbox
(own PID namespace, no network, revision read-only), so the secret never
reaches the store; without a usable sandbox the gate fails closed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostkit.builtins.process import SandboxUnavailable
from hostkit.cores import CoreRegistry
from hostkit.errors import PromotionRefused
from hostkit.host import Host
from hostkit.store import RuntimeStore
from tests.cores_support import commit, core_host_config, core_registry, live_of, make_core

pytestmark = pytest.mark.anyio

SECRET = "hk-gate-secret-0123456789"
SPY = """\
import os
import socket
from pathlib import Path

HOST = {host}


def test_spy():
    try:
        environ = open(f"/proc/{{HOST}}/environ", "rb").read().split(b"\\0")
        print("HOST readable", [e[::-1] for e in environ if e.startswith(b"HK_GATE")])
    except OSError:
        print("HOST invisible")
    print("ENV", os.environ.get("HK_GATE_SECRET", "")[::-1])
    with socket.socket() as s:
        s.settimeout(1)
        try:
            s.connect(("1.1.1.1", 53))
            print("NETWORK open")
        except OSError:
            print("NETWORK closed")
    try:
        (Path.cwd() / "tests" / "planted.py").write_text("x")
        print("REVISION writable")
    except OSError:
        print("REVISION read-only")
    assert False, "show the output"
"""
MANIFEST = {"id": "notes", "model": "test", "memory": False}


async def test_a_spying_suite_sees_no_host_environment_network_or_writable_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HK_GATE_SECRET", SECRET)
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    commit(path, {"tests/test_spy.py": SPY.format(host=os.getpid())}, "a spying test")
    async with Host.open(core_host_config(tmp_path, {"notes": path})) as host:
        with pytest.raises(PromotionRefused) as refused:
            await host.cores.promote("notes", actor="ops")
        event, _made_live = await host.cores.history("notes")  # make_core recorded a move
    tests = {gate.gate: gate for gate in refused.value.gates}["tests"]
    assert "show the output" in tests.detail  # the suite ran, and its output was kept
    assert "HOST invisible" in tests.detail  # its own PID namespace: no Host in /proc
    assert "NETWORK closed" in tests.detail
    assert "REVISION read-only" in tests.detail
    assert SECRET[::-1] not in tests.detail
    assert SECRET[::-1] not in str(event.gates)
    assert live_of(path) == first


async def test_the_review_gates_refuse_before_any_core_code_runs(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    marker = tmp_path / "ran"
    commit(
        path,
        {
            "requirements.txt": "requests>=2\n",
            "tests/test_it.py": f"def test_it():\n    open({str(marker)!r}, 'w')\n",
        },
        "a new dependency and a test",
    )
    with pytest.raises(PromotionRefused) as refused:
        await core_registry(tmp_path, store, {"notes": path}, sandbox=None).promote(
            "notes", actor="ops"
        )
    assert [(gate.gate, gate.passed) for gate in refused.value.gates] == [
        ("manifest", True),
        ("dependencies", False),
        ("mcp_review", True),
    ]
    assert str(refused.value).startswith("promote of core 'notes' refused: dependencies:")
    assert not marker.exists()
    assert live_of(path) == first


async def _no_bubblewrap(argv: object, root: Path) -> list[str]:
    raise SandboxUnavailable("bubblewrap is not installed")


@pytest.mark.parametrize("sandbox", [None, _no_bubblewrap])
async def test_without_a_sandbox_the_tests_gate_fails_closed(
    tmp_path: Path, store: RuntimeStore, sandbox: object
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    marker = tmp_path / "ran"
    commit(path, {"tests/test_it.py": f"def test_it():\n    open({str(marker)!r}, 'w')\n"}, "t")
    registry: CoreRegistry = core_registry(tmp_path, store, {"notes": path}, sandbox=sandbox)  # type: ignore[arg-type]
    with pytest.raises(PromotionRefused) as refused:
        await registry.promote("notes", actor="ops")
    tests = {gate.gate: gate for gate in refused.value.gates}["tests"]
    assert not tests.passed
    assert tests.detail.startswith("the tests cannot run sandboxed: ")
    assert not marker.exists()
    assert live_of(path) == first


async def test_sandbox_none_runs_the_suite_unsandboxed_and_says_so(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, _ = make_core(tmp_path, "notes", manifest={**MANIFEST, "sandbox": "none"}, live=False)
    marker = tmp_path / "ran"
    commit(path, {"tests/test_it.py": f"def test_it():\n    open({str(marker)!r}, 'w')\n"}, "t")
    registry = core_registry(tmp_path, store, {"notes": path}, sandbox=_no_bubblewrap)
    event = await registry.promote("notes", actor="ops")
    tests = {gate.gate: gate for gate in event.gates}["tests"]
    assert tests.passed
    assert tests.detail.startswith("UNSANDBOXED (sandbox: none; bubblewrap is not installed)")
    assert marker.exists()
