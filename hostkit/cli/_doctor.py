"""``hostkit doctor``: what would stop this project's Host, checked before it runs.

Each check is one line, ``ok``, ``warn`` or ``fail``, with a hint for the
last two; the exit status is 0 when nothing fails. It only reads: the
SQLite database is opened read-only (it answers while ``hostkit serve``
writes, or on a full disk), no paid API is called, and a secret's value is
never printed (only the name of the variable it is read from).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import anyio
from rich.console import Console
from rich.markup import escape

from hostkit._free_space import free_bytes_at
from hostkit.builtins.process import INSTALL_HINT, probe_bubblewrap
from hostkit.cli._common import ConfigOption, find_config, run_command
from hostkit.errors import ConfigError, StoreError
from hostkit.host import HostConfig, open_configured_store, resolve_config
from hostkit.inspect import one_line, printable
from hostkit.store import SCHEMA_VERSION, file_schema_version, upgrade_room

__all__ = ["doctor"]

Level = Literal["ok", "warn", "fail"]
_COLOURS = {"ok": "green", "warn": "yellow", "fail": "red"}
# A check's line, hint included: one line of a terminal's scrollback, never a dump.
_LINE_CHARS = 400
# Below this the database's next writes may fail (SQLITE_FULL): the WAL and a checkpoint
# need room beside the file.
_DISK_FAIL_BYTES = 64 * 1024 * 1024
# The SDKs' default key variables, when a provider names none.
_KEY_ENV = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY",)}


@dataclass(frozen=True, slots=True)
class Check:
    """One line of the report; ``hint`` says what to do about a warn or a fail."""

    name: str
    level: Level
    detail: str
    hint: str = ""


def doctor(config: ConfigOption = None) -> None:
    """Check this project: config, store and schema, disk, sandbox, providers, channels.

    One line each (ok / warn / fail, with a hint); exit 0 when nothing fails.
    Reads only, calls no model, prints no secret.
    """

    async def main() -> int:
        checks = await run_checks(config)
        out = Console()
        for check in checks:
            _print(out, check)
        return 1 if any(c.level == "fail" for c in checks) else 0

    run_command(main)


async def run_checks(config: Path | None) -> list[Check]:
    """Every check, in order; a configuration that does not load stops the rest."""
    loaded = await _config(config)
    if isinstance(loaded, Check):
        return [loaded]
    path, cfg = loaded
    found = Check("config", "ok", f"{path} parses") if path is not None else _no_file()
    store = await (_postgres(cfg) if cfg.store.url is not None else _sqlite(cfg))
    return [
        found,
        *store,
        await _sandbox(),
        *_providers(cfg),
        *_channels(cfg),
    ]


async def _config(config: Path | None) -> Check | tuple[Path | None, HostConfig]:
    try:
        path = await find_config(config)
        return path, await resolve_config(path)
    except ConfigError as exc:
        return Check("config", "fail", str(exc), "fix the file (hostkit init writes a starter)")


def _no_file() -> Check:
    return Check(
        "config", "warn", "no hostkit.toml here or above: the defaults", "hostkit init writes one"
    )


async def _sqlite(cfg: HostConfig) -> list[Check]:
    database = cfg.database_path
    disk = await _disk(database.parent, cfg)
    if not await anyio.Path(database).exists():
        return [
            Check(
                "store",
                "warn",
                f"no database at {database} yet",
                "the first command that writes creates it (hostkit run, hostkit serve)",
            ),
            disk,
        ]
    try:
        version = await anyio.to_thread.run_sync(file_schema_version, database)
    except StoreError as exc:
        return [Check("store", "fail", str(exc), "check the path and its permissions"), disk]
    size = await anyio.to_thread.run_sync(_size, database)
    if version is not None and version < SCHEMA_VERSION:
        return [await anyio.to_thread.run_sync(_upgrade, database, version), size, disk]
    return [_schema(str(database), version), size, disk]


def _size(database: Path) -> Check:
    """How much the database takes (its WAL included), and the migration backups beside it.

    A migration leaves a full copy of the old file (``NAME.vN.backup``): nothing
    deletes it, and each is as large as the database was (docs/store.md says when
    one may go).
    """
    held = sum(_bytes(database.with_name(database.name + end)) for end in ("", "-wal"))
    backups = sorted(database.parent.glob(f"{database.name}.v*.backup"))
    shown = f"database {_mib(held)} (WAL included)"
    if not backups:
        return Check("size", "ok", shown + ", no migration backups beside it")
    kept = sum(_bytes(each) for each in backups)
    names = ", ".join(each.name for each in backups[:3]) + (", ..." if len(backups) > 3 else "")
    return Check(
        "size",
        "ok",
        f"{shown}, {len(backups)} migration backup{'' if len(backups) == 1 else 's'} "
        f"{_mib(kept)} beside it ({names}): delete once the upgraded Host runs well",
    )


def _bytes(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def _schema(where: str, version: int | None) -> Check:
    if version == SCHEMA_VERSION:
        return Check("store", "ok", f"{where} reachable, schema v{version} (current)")
    if version is None or version < SCHEMA_VERSION:
        return Check(
            "store",
            "warn",
            f"{where} at schema v{version or 0}, this hostkit's is v{SCHEMA_VERSION}",
            "the next Host that opens it migrates it (a backup is taken first)",
        )
    return Check(
        "store",
        "fail",
        f"{where} at schema v{version}, newer than this hostkit's v{SCHEMA_VERSION}",
        "upgrade hostkit",
    )


def _upgrade(database: Path, version: int) -> Check:
    """An older schema: whether the free space beside the file holds the upgrade the next
    Host runs (its backup, then the migration), which refuses to start without it."""
    check = _schema(str(database), version)
    try:
        needed, free = upgrade_room(database, version), free_bytes_at(database.parent)
    except OSError as exc:
        return replace(check, detail=f"{check.detail}; cannot read the free space: {exc.strerror}")
    mib = 1024 * 1024
    detail = (
        f"{check.detail}; the upgrade needs about {-(-needed // mib)} MiB free beside the "
        f"database; {free // mib} MiB free"
    )
    if free < needed:
        return Check("store", "fail", detail, "free space beside the database, then open it")
    return replace(check, detail=detail)


async def _disk(folder: Path, cfg: HostConfig) -> Check:
    try:
        free = await anyio.to_thread.run_sync(free_bytes_at, folder)
    except OSError as exc:
        return Check("disk", "fail", f"cannot read the free space at {folder}: {exc.strerror}")
    reserve = cfg.host.artifact_reserve_mb * 1024 * 1024
    shown = f"{free / (1024 * 1024):.0f} MiB free at {folder}"
    if free < _DISK_FAIL_BYTES:
        return Check("disk", "fail", shown, "free space: the database's writes will fail")
    if free < reserve:
        return Check(
            "disk", "warn", shown, "below [host] artifact_reserve_mb: terminal output is refused"
        )
    return Check("disk", "ok", shown)


async def _postgres(cfg: HostConfig) -> list[Check]:
    """Open the server's store as a Host would: a Host's own checks (the schema, migrated
    when older; the clock, refused past ``max_clock_skew_s``) are the store's."""
    where = cfg.store_location
    try:
        store = await open_configured_store(cfg)
    except StoreError as exc:
        return [Check("store", "fail", str(exc), "check [store] url, the server and PG* vars")]
    try:
        skew = store.now() - time.time()
    finally:
        await store.aclose()
    # Opening brought its schema to this hostkit's (or refused a newer one).
    reached = Check("store", "ok", f"{where} reachable, schema current")
    clock = Check("clock", "ok", f"{skew:+.2f} s from the PostgreSQL server's clock")
    if abs(skew) > cfg.store.max_clock_skew_s / 2:
        clock = Check(
            "clock",
            "warn",
            f"{skew:+.2f} s from the PostgreSQL server's clock",
            f"sync this machine's clock (NTP): past {cfg.store.max_clock_skew_s:g} s the Host "
            "refuses to open",
        )
    return [reached, clock]


async def _sandbox() -> Check:
    probe = await anyio.to_thread.run_sync(probe_bubblewrap)
    if probe.ok:
        return Check("sandbox", "ok", f"bubblewrap works ({probe.bwrap}): terminal.run is isolated")
    return Check("sandbox", "warn", f"terminal.run cannot run here: {probe.reason}", INSTALL_HINT)


def _providers(cfg: HostConfig) -> Iterable[Check]:
    for name, provider in cfg.providers.items():
        label = f"provider {name}"
        if provider.kind == "scripted":
            yield Check(label, "ok", "scripted: needs no key")
        elif provider.kind == "local":
            path = provider.model_path
            if path is None:
                yield Check(label, "ok", "local: the default model (cached, or fetched once)")
            elif cfg.resolve(path).is_file():
                yield Check(label, "ok", f"local: {cfg.resolve(path)}")
            else:
                yield Check(
                    label, "fail", f"local: no model file at {cfg.resolve(path)}", "fix model_path"
                )
        else:
            names = (provider.api_key_env,) if provider.api_key_env else _KEY_ENV[provider.kind]
            present = [n for n in names if os.environ.get(n)]
            if present:
                yield Check(label, "ok", f"{provider.kind}: key in ${present[0]}")
            else:
                # A local OpenAI-compatible server may need no key.
                level: Level = "warn" if provider.base_url else "fail"
                yield Check(
                    label, level, f"{provider.kind}: ${names[0]} is not set", f"export {names[0]}"
                )


def _channels(cfg: HostConfig) -> Iterable[Check]:
    for name, channel in cfg.channels.items():
        wanted = [n for n in (channel.secret_env, channel.token_env) if n]
        missing = [n for n in wanted if not os.environ.get(n)]
        label = f"channel {name}"
        if missing:
            shown = ", ".join(f"${n}" for n in missing)
            yield Check(label, "fail", f"{shown} not set", "export it before hostkit serve")
        else:
            yield Check(label, "ok", "secrets set" if wanted else "needs no secret")


def _print(out: Console, check: Check) -> None:
    text = f"{check.name}: {check.detail}" + (f" (hint: {check.hint})" if check.hint else "")
    line = escape(one_line(printable(text), _LINE_CHARS))
    colour = _COLOURS[check.level]
    out.print(f"[{colour}]{check.level:<4}[/] {line}", highlight=False, soft_wrap=True)
