"""Clause: promotion moves the Host-owned ref only after gates; every attempt is recorded.

"promotion moves a Host-owned ref only after gates — tests of the core pass,
dependency changes flagged for manual review". Each gate is shown passing
and failing on a real Git repository and a real store: a failing gate
raises ``PromotionRefused`` with the gates, records a ``refused`` event and
leaves the ref where it was. The test gate is a real pytest child in a fresh
materialization with an allowlisted environment, killed with its process
group at the core's ``limits.test_timeout_s``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import psutil
import pytest

from hostkit.cores import DEPENDENCY_REVIEW_PREFIX, CoreRegistry, LoadedCore
from hostkit.cores._gates import MAX_SLOT_SOURCE_BYTES
from hostkit.cores._registry import MAX_REQUIREMENT_FILES
from hostkit.errors import ConfigError, PromotionRefused
from hostkit.store import RuntimeStore
from tests.cores_support import commit, core_registry, live_of, make_core

pytestmark = pytest.mark.anyio

MANIFEST = {"id": "notes", "model": "test", "instructions": "Take notes."}
TOOLS = "VALUE = 2\n"
# The core's own test: imports its revision's package the way the Host does, and
# checks what the gate promised (fresh materialization, allowlisted environment).
PASSING_TEST = """\
import importlib
import os
from pathlib import Path


def test_the_package_imports_from_a_fresh_materialization():
    (package,) = [p.name for p in Path.cwd().iterdir() if p.name.startswith("hkcore_notes_")]
    assert importlib.import_module(package + ".tools").VALUE == 2
    assert ".gates" in Path.cwd().parts
    assert "HK_PROMOTION_SECRET" not in os.environ
"""
FAILING_TEST = """\
def test_the_word_count():
    assert 1 + 1 == 3, "word count is wrong"
"""
HANGING_TEST = """\
import subprocess
import time


def test_hangs():
    subprocess.Popen(["sleep", "119.25"])
    time.sleep(120)
"""


async def _refused(
    registry: CoreRegistry, revision: str = "HEAD", **options: object
) -> PromotionRefused:
    with pytest.raises(PromotionRefused) as refused:
        await registry.promote("notes", revision, actor="ops", reason="test", **options)  # type: ignore[arg-type]
    return refused.value


async def test_passing_tests_promote_and_record_every_gate(
    tmp_path: Path, store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HK_PROMOTION_SECRET", "do-not-pass-me")
    path, sha = make_core(
        tmp_path,
        "notes",
        manifest=MANIFEST,
        files={"agent/tools.py": TOOLS, "tests/test_tools.py": PASSING_TEST},
        live=False,
    )
    moved: list[tuple[str, str]] = []

    async def on_moved(core_id: str, revision: str) -> None:
        moved.append((core_id, revision))

    registry = core_registry(tmp_path, store, {"notes": path}, on_moved=on_moved)
    event = await registry.promote("notes", actor="ops", reason="first")
    assert event.action == "promote"
    assert event.revision == sha
    assert event.previous is None
    assert [(gate.gate, gate.passed) for gate in event.gates] == [
        ("manifest", True),
        ("dependencies", True),
        ("mcp_review", True),
        ("tests", True),
    ]
    assert "1 passed" in event.gates[3].detail
    assert live_of(path) == sha
    assert moved == [("notes", sha)]
    assert (await registry.history("notes"))[0] == event
    # The fresh materialization is gone; the one turns import from stays.
    assert not [p async for p in anyio.Path(tmp_path / "cores-state" / ".gates").iterdir()]
    assert await anyio.Path(tmp_path / "cores-state" / "notes" / sha).is_dir()


async def test_a_core_without_tests_passes_the_test_gate(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, _ = make_core(tmp_path, "notes", manifest=MANIFEST, live=False)
    event = await core_registry(tmp_path, store, {"notes": path}).promote("notes", actor="ops")
    assert event.gates[3].gate == "tests"
    assert event.gates[3].passed
    assert event.gates[3].detail == "no tests"


async def test_failing_tests_refuse_record_and_leave_the_ref(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    broken = commit(path, {"tests/test_tools.py": FAILING_TEST}, "a failing test")
    registry = core_registry(tmp_path, store, {"notes": path})
    refused = await _refused(registry)
    tests = {gate.gate: gate for gate in refused.gates}["tests"]
    assert not tests.passed
    assert "word count is wrong" in tests.detail
    assert "tests:" in str(refused)
    assert refused.review is None
    assert live_of(path) == first
    event, _made_live = await registry.history("notes")
    assert event.action == "refused"
    assert event.revision == broken
    assert event.previous == first
    assert event.gates == refused.gates


async def test_a_hanging_suite_is_killed_with_its_process_group(
    tmp_path: Path, store: RuntimeStore
) -> None:
    manifest = {**MANIFEST, "limits": {"test_timeout_s": 4}}
    path, first = make_core(tmp_path, "notes", manifest=manifest)
    commit(path, {"tests/test_hang.py": HANGING_TEST}, "a hanging test")
    refused = await _refused(core_registry(tmp_path, store, {"notes": path}))
    tests = {gate.gate: gate for gate in refused.gates}["tests"]
    assert tests.detail.startswith("timed out after 4 s")
    # The suite's child (in the sandbox's PID namespace) is gone with it.
    assert not [
        process
        for process in psutil.process_iter(["cmdline", "status"])
        if process.info["cmdline"] == ["sleep", "119.25"]
        and process.info["status"] != psutil.STATUS_ZOMBIE
    ]
    assert live_of(path) == first


async def test_a_manifest_that_does_not_load_stops_at_the_first_gate(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    commit(path, {"agent.yaml": "id: notes\nmodel: test\nbogus: 1\n"}, "typo")
    refused = await _refused(core_registry(tmp_path, store, {"notes": path}))
    (manifest,) = refused.gates
    assert manifest.gate == "manifest"
    assert not manifest.passed
    assert "line 3" in manifest.detail
    assert "bogus" in manifest.detail
    assert live_of(path) == first


async def test_the_hosts_validation_is_part_of_the_manifest_gate(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, _ = make_core(tmp_path, "notes", manifest=MANIFEST, live=False)
    seen: list[str] = []

    async def validate(loaded: LoadedCore) -> None:
        seen.append(loaded.revision)
        raise ConfigError("no provider named 'test' under [providers]", key="model")

    registry = core_registry(tmp_path, store, {"notes": path}, validate=validate)
    refused = await _refused(registry)
    assert [(gate.gate, gate.passed) for gate in refused.gates] == [("manifest", False)]
    assert "no provider named 'test'" in refused.gates[0].detail
    assert len(seen) == 1
    assert live_of(path) is None


@pytest.mark.parametrize(
    "change",
    [
        {"agent.yaml": "id: notes\nmodel: test\ndependencies: ['requests>=2']\n"},
        {"requirements.txt": "requests>=2  # http\n"},
    ],
)
async def test_a_dependency_change_needs_the_reviewed_flag(
    tmp_path: Path, store: RuntimeStore, change: dict[str, str]
) -> None:
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    changed = commit(path, change, "add requests")
    registry = core_registry(tmp_path, store, {"notes": path})
    diff = await registry.diff("notes")
    assert len(diff.dependency_changes) == 1
    assert "added: requests>=2" in diff.dependency_changes[0]
    assert diff.dependency_review is not None
    assert diff.dependency_review.startswith(DEPENDENCY_REVIEW_PREFIX)
    refused = await _refused(registry)
    deps = {gate.gate: gate for gate in refused.gates}["dependencies"]
    assert not deps.passed
    assert f"--reviewed-deps {diff.dependency_review}" in deps.detail
    assert refused.dependency_review == diff.dependency_review
    assert live_of(path) == first
    event = await registry.promote(
        "notes", actor="ops", reviewed_dependencies=diff.dependency_review
    )
    deps = {gate.gate: gate for gate in event.gates}["dependencies"]
    assert deps.passed
    assert deps.detail.startswith("flagged, reviewed by ops")
    assert live_of(path) == changed
    history = [event.action for event in await registry.history("notes")]
    assert history == ["promote", "refused", "promote"]


async def test_a_dependency_review_binds_the_commit_it_was_given_for(
    tmp_path: Path, store: RuntimeStore
) -> None:
    """A token reviewed for one candidate does not pass another: a commit landing on HEAD
    after the diff (another dependency) is refused until its own change is reviewed."""
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST)
    commit(path, {"requirements.txt": "requests>=2\n"}, "add requests")
    registry = core_registry(tmp_path, store, {"notes": path})
    reviewed = (await registry.diff("notes")).dependency_review
    assert reviewed is not None
    sneaked = commit(path, {"requirements.txt": "requests>=2\nreqeusts\n"}, "and a typo")
    with pytest.raises(PromotionRefused) as caught:
        await registry.promote("notes", actor="ops", reviewed_dependencies=reviewed)
    deps = {gate.gate: gate for gate in caught.value.gates}["dependencies"]
    assert not deps.passed
    assert "stale (it reviews another change)" in deps.detail
    assert caught.value.dependency_review not in (None, reviewed)
    assert live_of(path) == first
    # A token of the same shape for nothing reviewed passes nothing either.
    with pytest.raises(PromotionRefused):
        await registry.promote(
            "notes", actor="ops", reviewed_dependencies=DEPENDENCY_REVIEW_PREFIX + "0" * 64
        )
    assert live_of(path) == first
    event = await registry.promote(
        "notes", actor="ops", reviewed_dependencies=caught.value.dependency_review
    )
    assert event.revision == sneaked
    assert live_of(path) == sneaked


@pytest.mark.parametrize(
    "include",
    [
        "-r requirements/base.txt",
        "-rrequirements/base.txt",
        "--requirement=requirements/base.txt",
        "-c requirements/base.txt",
        "--constraint requirements/base.txt",
    ],
)
async def test_a_change_in_an_included_requirements_file_needs_the_reviewed_flag(
    tmp_path: Path, store: RuntimeStore, include: str
) -> None:
    """requirements.txt may only include the file that changes: the gate follows the
    includes (relative to the including file, transitively) and compares each."""
    path, first = make_core(
        tmp_path,
        "notes",
        manifest=MANIFEST,
        files={
            "requirements.txt": f"{include}\n",
            "requirements/base.txt": "-r more.txt\nrequests>=2\n",
            "requirements/more.txt": "httpx\n",
        },
    )
    commit(
        path,
        {
            "requirements/base.txt": "-r more.txt\nrequests>=2\n--extra-index-url https://x.example\n",
            "requirements/more.txt": "httpx\nreqeusts\n",
        },
        "typosquat",
    )
    registry = core_registry(tmp_path, store, {"notes": path})
    diff = await registry.diff("notes")
    assert diff.dependency_changes == (
        "requirements/base.txt added: --extra-index-url https://x.example",
        "requirements/more.txt added: reqeusts",
    )
    refused = await _refused(registry)
    deps = {gate.gate: gate for gate in refused.gates}["dependencies"]
    assert not deps.passed
    assert live_of(path) == first


@pytest.mark.parametrize("past", ["the file count", "the size of one file"])
async def test_an_included_requirements_file_past_a_bound_is_not_compared_and_needs_review(
    tmp_path: Path, store: RuntimeStore, past: str
) -> None:
    """A file the gate cannot compare (past MAX_REQUIREMENT_FILES in the include chain,
    or too large to read) counts as changed: the gate fails closed, it does not read the
    file as missing on both sides."""
    if past == "the file count":
        chain = {f"r{n}.txt": f"-r r{n + 1}.txt\n" for n in range(MAX_REQUIREMENT_FILES)}
        files = {"requirements.txt": "-r r0.txt\n", **chain, "last.txt": "httpx\n"}
        last = f"r{MAX_REQUIREMENT_FILES - 1}.txt"
        files[last] = "-r last.txt\n"
        hidden, said = "last.txt", f"more than {MAX_REQUIREMENT_FILES} requirements files"
    else:
        files = {"requirements.txt": "-r big.txt\n", "big.txt": "# pad\n" * 800_000}
        hidden, said = "big.txt", "larger than"
    path, first = make_core(tmp_path, "notes", manifest=MANIFEST, files=files)
    commit(path, {hidden: files[hidden] + "evil-package==6.6.6\n"}, "sneaked")
    registry = core_registry(tmp_path, store, {"notes": path})
    diff = await registry.diff("notes")
    assert [c for c in diff.dependency_changes if "not compared" in c] != []
    assert said in " ".join(diff.dependency_changes)
    if hidden == "big.txt":  # listed, said to differ, not read whole into the patch
        assert "File big.txt differs (too large to show" in diff.patch
    refused = await _refused(registry)
    deps = {gate.gate: gate for gate in refused.gates}["dependencies"]
    assert not deps.passed
    assert live_of(path) == first


SLOTS = "async def on_input(ctx, text):\n    return text.strip()\n\nfinish = on_input\n"


@pytest.mark.parametrize(
    ("slots", "files", "said"),
    [
        ({"input": "slotz:on_input"}, {"agent/slots.py": SLOTS}, "agent/slotz.py does not exist"),
        ({"input": "slots:on_inpt"}, {"agent/slots.py": SLOTS}, "defines no 'on_inpt'"),
        ({"output": "pkg.deep:on_input"}, {"agent/slots.py": SLOTS}, "does not exist"),
        ({"bootstrap": "broken:boot"}, {"agent/broken.py": "def boot(ctx:\n"}, "does not parse"),
        # Parsing costs many times a file's size in memory: a huge module is not parsed.
        (
            {"input": "slots:on_input"},
            {"agent/slots.py": SLOTS + "a=1\n" * (MAX_SLOT_SOURCE_BYTES // 4 + 1)},
            f"a slot module may hold {MAX_SLOT_SOURCE_BYTES}",
        ),
    ],
    ids=["module", "function", "package", "syntax", "oversized"],
)
async def test_a_slot_the_revision_does_not_define_is_refused_by_the_manifest_gate(
    tmp_path: Path, store: RuntimeStore, slots: dict[str, str], files: dict[str, str], said: str
) -> None:
    """A typo in ``slots:`` used to pass every gate and fail every turn once live. The
    manifest gate reads the source (no core code runs) and names the key."""
    path, _ = make_core(tmp_path, "notes", manifest={**MANIFEST, "slots": slots}, files=files)
    before = live_of(path)
    broken = commit(path, {"agent.yaml": f"id: notes\nmodel: test\nslots: {slots}\n"}, "typo")
    refused = await _refused(core_registry(tmp_path, store, {"notes": path}), broken)
    assert [(gate.gate, gate.passed) for gate in refused.gates] == [("manifest", False)]
    assert "slots." in refused.gates[0].detail
    assert said in refused.gates[0].detail
    assert live_of(path) == before


@pytest.mark.parametrize(
    ("tools", "files", "said"),
    [
        (["notes"], {}, "'notes': agent/notes.py does not exist"),
        (["pkg.deep"], {"agent/pkg/__init__.py": ""}, "agent/pkg/deep.py does not exist"),
        (["broken"], {"agent/broken.py": "def write(ctx:\n"}, "does not parse (line 1)"),
    ],
    ids=["module", "package", "syntax"],
)
async def test_a_tool_module_the_revision_does_not_hold_is_refused_by_the_manifest_gate(
    tmp_path: Path, store: RuntimeStore, tools: list[str], files: dict[str, str], said: str
) -> None:
    """A typo in ``tools:`` used to pass every gate and make the core unavailable once
    live (every turn refused). Read as source, like a slot: no core code runs."""
    path, _ = make_core(tmp_path, "notes", manifest=MANIFEST, files=files)
    before = live_of(path)
    broken = commit(path, {"agent.yaml": f"id: notes\nmodel: test\ntools: {tools}\n"}, "typo")
    refused = await _refused(core_registry(tmp_path, store, {"notes": path}), broken)
    assert [(gate.gate, gate.passed) for gate in refused.gates] == [("manifest", False)]
    assert "agent.yaml line 3: tools: " in refused.gates[0].detail
    assert said in refused.gates[0].detail
    assert live_of(path) == before


async def test_slots_defined_as_functions_or_names_pass_the_manifest_gate(
    tmp_path: Path, store: RuntimeStore
) -> None:
    manifest = {**MANIFEST, "slots": {"input": "slots:on_input", "output": "pkg.mod:finish"}}
    path, sha = make_core(
        tmp_path,
        "notes",
        manifest=manifest,
        files={"agent/slots.py": SLOTS, "agent/pkg/__init__.py": "", "agent/pkg/mod.py": SLOTS},
        live=False,
    )
    event = await core_registry(tmp_path, store, {"notes": path}).promote("notes", actor="ops")
    assert (event.revision, event.gates[0].passed) == (sha, True)


@pytest.mark.parametrize(
    "source",
    [
        "try:\n    from fast import on_input\nexcept ImportError:\n    def on_input(ctx, t):\n"
        "        return t\n",
        "import sys\nif sys.version_info >= (3, 11):\n"
        "    def on_input(ctx, t):\n        return t\n",
        "on_input, other = (lambda ctx, t: t), None\n",
        "from os.path import *\n",
        "def __getattr__(name):\n    return lambda ctx, t: t\n",
    ],
    ids=["try", "if", "tuple", "star-import", "module-getattr"],
)
async def test_a_slot_bound_in_ways_source_reading_allows_passes_the_manifest_gate(
    tmp_path: Path, store: RuntimeStore, source: str
) -> None:
    manifest = {**MANIFEST, "slots": {"input": "slots:on_input"}}
    path, sha = make_core(
        tmp_path, "notes", manifest=manifest, files={"agent/slots.py": source}, live=False
    )
    event = await core_registry(tmp_path, store, {"notes": path}).promote("notes", actor="ops")
    assert (event.revision, event.gates[0].passed) == (sha, True)
