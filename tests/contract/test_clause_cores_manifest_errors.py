"""Clause: every agent.yaml problem is a ConfigError naming the file, the line and the key.

Refused before validation: bad YAML, aliases (an alias bomb never expands),
oversize documents; then the schema (unknown field, bad capability rule or
approval, both instructions forms); then, when a revision is loaded and
compiled, an id that is not the core's and a model that is not a provider.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostkit.cores import MAX_MANIFEST_BYTES, CoreLocation, load_core, load_manifest
from hostkit.errors import ConfigError
from hostkit.host import compile_core, compose_cores
from hostkit.store import RuntimeStore
from tests.cores_support import core_host_config, make_core

pytestmark = pytest.mark.anyio

ALIAS_BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
        for i in range(9)
    ]
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("id: a\nmodel: m\nmodel: [\n", "agent.yaml line 4: not valid YAML"),
        (
            "id: a\nmodel: m\n\nbogus: 1\n",
            "agent.yaml line 4: unknown key 'bogus'",
        ),
        (
            "id: a\nmodel: m\ncapabilities:\n  fs.read: allow\n  fs.wrte: ask\n",
            "agent.yaml line 5: capabilities.fs.wrte: unknown capability 'fs.wrte'",
        ),
        (
            "id: a\nmodel: m\ncapabilities:\n  fs.read: always\n",
            "agent.yaml line 4: capabilities.fs.read: Input should be 'allow', 'ask' or 'deny'",
        ),
        (
            "id: a\nmodel: m\ninstructions: hi\ninstructions_file: prompt.md\n",
            "agent.yaml line 4: instructions_file: give 'instructions' or 'instructions_file'",
        ),
        ("id: a\nmodel: m\nlimits:\n  max_steps: 0\n", "agent.yaml line 4: limits.max_steps:"),
        ("id: a\nmodel: m\nid: b\n", "agent.yaml line 3: id: duplicate key 'id'"),
        ("id: !!python/object:os.system x\n", "agent.yaml line 1: id: tag 'python/object"),
        # A tag on a mapping was ignored and the node read as plain data; !!binary as text.
        (
            "id: a\nmodel: m\nlimits: !!python/object/apply:os.system {args: [id]}\n",
            "agent.yaml line 3: limits: tag 'python/object/apply:os.system' is not plain data",
        ),
        ("id: a\nmodel: !!binary bG9jYWw=\n", "agent.yaml line 2: model: tag 'binary'"),
        ("id: a\nmodel: m\ntools: !!set {x: null}\n", "agent.yaml line 3: tools: tag 'set'"),
        ("- id\n- model\n", "agent.yaml line 1: agent.yaml must be a mapping"),
        (ALIAS_BOMB, "agent.yaml line 2: aliases (*name) are not allowed"),
        # Under 1 KB, yet deep enough to exhaust the interpreter's stack while composing.
        (
            "id: a\nmodel: m\ndescription: " + "[" * 400 + "]" * 400 + "\n",
            "agent.yaml line 3: nested more than 32 levels deep",
        ),
        # The reader refuses these characters before any node is read.
        ("id: a\nmodel: m\ndescription: x\x00y\n", "agent.yaml line 3: not valid YAML"),
        ("id: a\nmodel: m\n\ndescription: \x07\n", "agent.yaml line 4: not valid YAML"),
        # Past Python's integer digit limit: a value out of range, not a ValueError.
        ("id: a\nmodel: m\nlimits:\n  max_steps: " + "9" * 5000 + "\n", "agent.yaml line 4:"),
    ],
    ids=[
        "bad-yaml",
        "unknown-field",
        "bad-rule",
        "bad-approval",
        "both-instructions",
        "out-of-bounds",
        "duplicate-key",
        "python-tag",
        "python-tag-on-a-mapping",
        "binary-tag",
        "set-tag",
        "not-a-mapping",
        "alias-bomb",
        "deep-nesting",
        "nul",
        "control-character",
        "huge-integer",
    ],
)
def test_a_bad_manifest_names_the_line_and_the_key(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_manifest(text.encode(), source="agent.yaml")
    assert caught.value.message.startswith(expected), caught.value.message
    assert len(caught.value.message) <= 500


def test_an_oversize_or_non_utf8_manifest_is_refused_unparsed() -> None:
    big = b"id: a\nmodel: m\ndescription: " + b"x" * MAX_MANIFEST_BYTES + b"\n"
    with pytest.raises(ConfigError, match=f"larger than {MAX_MANIFEST_BYTES} bytes"):
        load_manifest(big, source="agent.yaml")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_manifest(b"id: \xff\n", source="agent.yaml")


async def test_an_id_that_is_not_the_cores_names_the_id_line(tmp_path: Path) -> None:
    path, sha = make_core(tmp_path, "notes", manifest="model: test\n\nid: other\n")
    with pytest.raises(ConfigError) as caught:
        await load_core(
            CoreLocation("notes", path, "refs/hostkit/live"), sha, cores_root=tmp_path / "cores"
        )
    assert caught.value.message.startswith(f"notes@{sha[:12]}:agent.yaml line 3: id: 'other'")


async def test_an_instructions_file_outside_the_core_is_refused(tmp_path: Path) -> None:
    path, sha = make_core(
        tmp_path, "notes", manifest={"model": "test", "instructions_file": "../secret.txt"}
    )
    with pytest.raises(ConfigError, match=r"line 3: instructions_file: .*not a relative path"):
        await load_core(
            CoreLocation("notes", path, "refs/hostkit/live"), sha, cores_root=tmp_path / "cores"
        )


async def test_an_unknown_provider_names_the_model_line(
    tmp_path: Path, store: RuntimeStore
) -> None:
    path, sha = make_core(
        tmp_path, "notes", manifest="id: notes\ndescription: x\nmodel: gpt-nonexistent\n"
    )
    config = core_host_config(tmp_path, {"notes": path})
    loaded = await load_core(
        CoreLocation("notes", path, "refs/hostkit/live"), sha, cores_root=config.cores_root
    )
    with pytest.raises(ConfigError) as caught:
        compile_core(config, loaded)
    assert caught.value.message.startswith(
        f"notes@{sha[:12]}:agent.yaml line 3: model: 'gpt-nonexistent' is not a provider"
    )
    # Composing is strict on request (a reload); otherwise the core is unavailable, with why.
    with pytest.raises(ConfigError, match="line 3: model"):
        await compose_cores(config, store.cores, strict=True)
    composed, cores, warnings = await compose_cores(config, store.cores)
    assert "notes" not in composed.agents
    assert not cores
    assert warnings == (f"core 'notes' is not available: {caught.value.message}",)


async def test_a_core_library_that_cannot_be_imported_is_a_broken_install_not_one_core(
    tmp_path: Path, store: RuntimeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyYAML and dulwich load with the first core: one missing must fail the way a
    missing dependency did when every command imported them, not pass for a core whose
    revision "cannot be read" while the Host serves on without it."""
    path, _ = make_core(tmp_path, "notes", manifest={"model": "test"})
    config = core_host_config(tmp_path, {"notes": path})

    async def unimportable(*args: object, **kwargs: object) -> None:
        raise ModuleNotFoundError("No module named 'yaml'", name="yaml")

    monkeypatch.setattr("hostkit.host._cores.live_core", unimportable)
    with pytest.raises(ModuleNotFoundError, match="yaml"):
        await compose_cores(config, store.cores)
