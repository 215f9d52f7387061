"""The GGUF tokenizer fields are read once per file and user, then served from a cache.

Reading SmolLM2's header with ``gguf`` costs seconds of CPU at every
local-model start; the fields are derived data of one file, so they are kept
keyed by the file's identity. The cache may only ever save time: a changed
file, a damaged or foreign entry, or a cache that cannot be written all fall
back to reading the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hostkit.adapters._gguf_fields import FIELDS_SUBDIR, cached_fields


class Reader:
    """Counts reads; answers with fields derived from the file's content."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self, path: Path) -> dict[str, Any]:
        self.reads += 1
        text = path.read_text()
        return {"tokenizer.ggml.tokens": text.split(), "tokenizer.ggml.add_bos_token": True}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_text("hello world")
    return path


def entries(cache: Path) -> list[Path]:
    return sorted((cache / FIELDS_SUBDIR).glob("*.json"))


def test_a_second_read_of_the_same_file_comes_from_the_cache(model: Path, tmp_path: Path) -> None:
    cache, read = tmp_path / "cache", Reader()
    first = cached_fields(model, read, cache_dir=cache)
    second = cached_fields(model, read, cache_dir=cache)
    assert (
        first
        == second
        == {"tokenizer.ggml.tokens": ["hello", "world"], "tokenizer.ggml.add_bos_token": True}
    )
    assert read.reads == 1
    assert len(entries(cache)) == 1
    assert not list((cache / FIELDS_SUBDIR).glob(".partial-*"))


def test_a_changed_file_is_read_again(model: Path, tmp_path: Path) -> None:
    cache, read = tmp_path / "cache", Reader()
    cached_fields(model, read, cache_dir=cache)
    model.write_text("other words here")
    os.utime(model, ns=(1, 1))  # a different modification time, whatever the clock did
    assert cached_fields(model, read, cache_dir=cache)["tokenizer.ggml.tokens"] == [
        "other",
        "words",
        "here",
    ]
    assert read.reads == 2


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b"[]",
        json.dumps({"identity": [1, "/elsewhere.gguf", 1, 1, 1, 1], "fields": {"x": 1}}).encode(),
        json.dumps({"fields": {"tokenizer.ggml.tokens": ["forged"]}}).encode(),
    ],
    ids=["not-json", "not-an-object", "another-file", "no-identity"],
)
def test_a_damaged_or_foreign_entry_is_ignored_and_replaced(
    model: Path, tmp_path: Path, damage: bytes
) -> None:
    cache, read = tmp_path / "cache", Reader()
    cached_fields(model, read, cache_dir=cache)
    (entry,) = entries(cache)
    entry.write_bytes(damage)
    assert cached_fields(model, read, cache_dir=cache)["tokenizer.ggml.tokens"] == [
        "hello",
        "world",
    ]
    assert read.reads == 2
    # Rewritten: the next read is served again.
    assert cached_fields(model, read, cache_dir=cache)["tokenizer.ggml.tokens"] == [
        "hello",
        "world",
    ]
    assert read.reads == 2


def test_an_unwritable_cache_only_costs_the_read(model: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory would be")
    read = Reader()
    for _ in range(2):
        assert cached_fields(model, read, cache_dir=blocker)["tokenizer.ggml.tokens"] == [
            "hello",
            "world",
        ]
    assert read.reads == 2


def test_a_missing_file_is_the_readers_error_not_the_caches(tmp_path: Path) -> None:
    def read(path: Path) -> dict[str, Any]:
        raise FileNotFoundError(path)

    with pytest.raises(FileNotFoundError):
        cached_fields(tmp_path / "absent.gguf", read, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_the_fields_folder_is_created_private(model: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cached_fields(model, Reader(), cache_dir=cache)
    assert (cache / FIELDS_SUBDIR).stat().st_mode & 0o777 == 0o700


def _forge(entry: Path, place: Path) -> Path:
    """A copy of ``entry`` for the same file whose fields are an attacker's."""
    data = json.loads(entry.read_text())
    data["fields"]["tokenizer.ggml.tokens"] = ["forged"]
    place.parent.mkdir(parents=True, exist_ok=True)
    place.write_text(json.dumps(data))
    return place


def _folder_writable(entry: Path, attacker: Path) -> None:
    _forge(entry, entry)
    entry.parent.chmod(0o777)


def _folder_symlink(entry: Path, attacker: Path) -> None:
    _forge(entry, attacker / entry.name)
    folder = entry.parent
    for old in folder.iterdir():
        old.unlink()
    folder.rmdir()
    folder.symlink_to(attacker)


def _entry_symlink(entry: Path, attacker: Path) -> None:
    forged = _forge(entry, attacker / entry.name)
    entry.unlink()
    entry.symlink_to(forged)


def _entry_writable(entry: Path, attacker: Path) -> None:
    _forge(entry, entry)
    entry.chmod(0o666)


def _entry_foreign(entry: Path, attacker: Path) -> None:
    _forge(entry, entry)
    os.chown(entry, 65534, 65534)


@pytest.mark.parametrize(
    "plant",
    [
        _folder_writable,
        _folder_symlink,
        _entry_symlink,
        _entry_writable,
        pytest.param(
            _entry_foreign,
            marks=pytest.mark.skipif(
                os.geteuid() != 0, reason="giving a file to another uid (os.chown) needs root"
            ),
        ),
    ],
    ids=["folder-writable", "folder-symlink", "entry-symlink", "entry-writable", "entry-foreign"],
)
def test_an_untrusted_entry_is_never_served(
    model: Path, tmp_path: Path, plant: Callable[[Path, Path], None]
) -> None:
    cache, read = tmp_path / "cache", Reader()
    cached_fields(model, read, cache_dir=cache)
    (entry,) = entries(cache)
    plant(entry, tmp_path / "attacker")

    # Not an error either: the cache only saves time, so the file is read again.
    assert cached_fields(model, read, cache_dir=cache)["tokenizer.ggml.tokens"] == [
        "hello",
        "world",
    ]
    assert read.reads == 2
