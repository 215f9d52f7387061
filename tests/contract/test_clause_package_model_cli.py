"""Issue 19: ``hostkit model pull | path`` as a user runs them (real subprocesses, no network).

The cache is the test's own (``HOSTKIT_MODEL_CACHE``). A file under the
pinned name and of the pinned size counts as verified (its sha256 was
checked when it was fetched), so ``pull`` must not fetch it again; a sparse
file of that size stands in for the 98 MB GGUF.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from hostkit.adapters._model_source import CACHE_ENV, SMOLLM2
from tests.cli import run_cli_async

pytestmark = pytest.mark.anyio


async def hostkit_model(*args: str, cache: Path) -> tuple[int, str, str]:
    result = await run_cli_async(
        "model", *args, env={**os.environ, "COLUMNS": "200", CACHE_ENV: str(cache)}
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def cache_the_model(cache: Path, *, size: int | None = SMOLLM2.member_bytes) -> Path:
    """A stand-in for the pinned GGUF in ``cache``, as a fetch leaves it (a private folder)."""
    cached = cache / SMOLLM2.cache_subdir / SMOLLM2.file_name
    await anyio.Path(cached.parent).mkdir(mode=0o700, parents=True, exist_ok=True)
    async with await anyio.open_file(cached, "wb") as out:
        await out.write(b"GGUF")
        await out.truncate(size)
    return cached


async def test_pull_with_the_model_cached_prints_path_and_size(tmp_path: Path) -> None:
    cached = await cache_the_model(tmp_path)

    code, out, err = await hostkit_model("pull", cache=tmp_path)

    assert code == 0, err
    assert out.strip() == str(cached)
    assert f"{SMOLLM2.member_bytes} bytes" in err
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
    expected = tmp_path / SMOLLM2.cache_subdir / SMOLLM2.file_name

    async def path() -> str:
        code, out, err = await hostkit_model("path", cache=tmp_path)
        assert code == 0, err
        assert out.strip() == str(expected)
        return err

    await cache_the_model(tmp_path, size=1000)  # a truncated copy is not served
    assert "not fetched yet: `hostkit model pull`" in await path()
    assert (await anyio.Path(expected).stat()).st_size == 1000, "path fetches nothing"

    await cache_the_model(tmp_path)
    assert "from the cache" in await path()
