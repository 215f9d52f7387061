"""Clause: a hostile core repository cannot exhaust the Host's memory or crash a read.

An object's size is read from its header before it is inflated: a loose
object of ~80 KB that inflates to 80 MiB, or a packed one past the limit, is
refused with a ``ConfigError`` naming the file while memory stays flat; a
damaged object is a ``ConfigError`` too, never a raw ``zlib.error``.
"""

from __future__ import annotations

import hashlib
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo

from hostkit.cores import CoreRepository
from hostkit.errors import ConfigError
from tests.cores_support import IDENTITY, commit, make_core

pytestmark = pytest.mark.anyio

BOMB = 80 * 1024 * 1024


def _loose_bomb(repo_path: Path) -> bytes:
    """A loose blob of BOMB spaces, written compressed without ever holding it whole."""
    header = b"blob %d\x00" % BOMB
    digest, packer = hashlib.sha1(header), zlib.compressobj(1)
    chunk = b" " * (1 << 20)
    parts = [packer.compress(header)]
    for _ in range(BOMB >> 20):
        digest.update(chunk)
        parts.append(packer.compress(chunk))
    parts.append(packer.flush())
    sha = digest.hexdigest()
    (repo_path / ".git" / "objects" / sha[:2]).mkdir(exist_ok=True)
    (repo_path / ".git" / "objects" / sha[:2] / sha[2:]).write_bytes(b"".join(parts))
    return sha.encode()


def _commit_tree(repo_path: Path, entries: dict[bytes, bytes], parent: str) -> str:
    with Repo(str(repo_path)) as repo:
        tree = Tree()
        for name, sha in entries.items():
            tree.add(name, 0o100644, sha)
        repo.object_store.add_object(tree)
        made = Commit()
        made.tree, made.parents = tree.id, [parent.encode()]
        made.author = made.committer = IDENTITY
        made.author_time = made.commit_time = int(time.time())
        made.author_timezone = made.commit_timezone = 0
        made.message = b"bomb"
        repo.object_store.add_object(made)
        return made.id.decode()


async def test_a_loose_object_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    path, first = make_core(tmp_path, "notes", manifest={"id": "notes", "model": "test"})
    bomb = _commit_tree(path, {b"agent.yaml": _loose_bomb(path)}, first)
    repository = await CoreRepository.open(path)
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as read:
            await repository.read(bomb, "agent.yaml")
        with pytest.raises(ConfigError) as extract:
            await repository.extract(bomb, tmp_path / "out")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(read.value) == f"agent.yaml is larger than {4 * 1024 * 1024} bytes"
    assert "too large" in str(extract.value) or "larger than" in str(extract.value)
    assert peak < 8 * 1024 * 1024  # nothing near the 80 MiB it inflates to


async def test_a_packed_object_past_the_limit_is_refused_and_small_ones_read(
    tmp_path: Path,
) -> None:
    path, first = make_core(tmp_path, "notes", manifest={"id": "notes", "model": "test"})
    big = Blob.from_string(b"#" * (5 * 1024 * 1024))
    with Repo(str(path)) as repo:
        repo.object_store.add_object(big)
    small = Blob.from_string(b"hi")
    second = _commit_tree(path, {b"agent.yaml": big.id, b"small.md": small.id}, first)
    with Repo(str(path)) as repo:
        repo.object_store.add_object(small)
        repo.object_store.pack_loose_objects()
        assert not list(repo.object_store._iter_loose_objects())
    repository = await CoreRepository.open(path)
    with pytest.raises(ConfigError, match=r"agent\.yaml is larger than"):
        await repository.read(second, "agent.yaml")
    assert await repository.read(second, "small.md") == b"hi"
    assert (await repository.log(second))[0].sha == second


async def test_a_damaged_object_is_a_config_error(tmp_path: Path) -> None:
    path, _ = make_core(tmp_path, "notes", manifest={"id": "notes", "model": "test"})
    second = commit(path, {"notes.md": "some notes\n"}, "notes")
    with Repo(str(path)) as repo:
        tree = repo[repo[second.encode()].tree]
        blob_id = tree[b"notes.md"][1].decode()
    loose = path / ".git" / "objects" / blob_id[:2] / blob_id[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob 11\x00some notes\n")[:12] + b"garbage")
    repository = await CoreRepository.open(path)
    with pytest.raises(ConfigError, match="cannot be read"):
        await repository.read(second, "notes.md")
