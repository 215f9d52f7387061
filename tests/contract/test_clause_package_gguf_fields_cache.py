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
