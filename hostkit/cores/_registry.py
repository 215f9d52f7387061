"""CoreRegistry: the Host-owned revision lifecycle of its Agent Cores.

The Host, not the core's author, decides which commit runs: the store
records the live revision, and only ``promote`` (after the gates) and
``rollback`` change it, each with a compare-and-swap in one transaction with
its history row (``CoreStore.move_live``), so two promoters (two processes)
cannot both win and a crash leaves no move unrecorded. The ref in the core's
repository (``refs/hostkit/live`` by default) is then pointed at the new
revision as a mirror for Git tools; nothing reads it to decide what runs.
Every attempt is recorded, refused ones included; a move then calls the
Host's ``on_moved`` hook (new generation, that core's session approvals
dropped).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from hostkit.cores._changes import (
    REQUIREMENTS,
    TOO_LARGE,
    dependency_changes,
    included_requirements,
    manifest_secrets,
    unified_patch,
)
from hostkit.cores._gates import (
    check_dependencies,
    check_manifest,
    check_mcp_review,
    check_tests,
    check_tools,
)
from hostkit.cores._loaded import MANIFEST_FILE, CoreLocation, LoadedCore
from hostkit.cores._manifest import CoreManifest, load_manifest
from hostkit.cores._mirror import mirror_live
from hostkit.cores._repository import MAX_READ_BYTES, CoreRepository, FileTooLarge
from hostkit.cores._review import dependency_review_token, review_token
from hostkit.cores._revisions import (
    ChangeKind,
    CoreDiff,
    CoreStatus,
    FileChange,
    RevisionInfo,
)
from hostkit.cores._security_diff import mcp_security_diff
from hostkit.cores._test_gate import TestSandbox
from hostkit.errors import (
    ConfigError,
    InvalidValue,
    NotFoundOrUnauthorized,
    PromotionRefused,
    StaleClaim,
    TurnRejected,
    bounded,
)
from hostkit.store import RuntimeStore
from hostkit.types import CoreEvent, GateOutcome, is_core_id

__all__ = ["CoreRegistry"]

RACE_LOST = "the live revision changed during promotion"
_MAX_LIMIT = 1_000
# The most requirements files the dependency gate reads at one revision (includes too).
MAX_REQUIREMENT_FILES = 16
# The bytes of changed files one diff reads for its patch (MAX_PATCH_CHARS is what it shows).
MAX_PATCH_READ_BYTES = 16 * 1024 * 1024


class CoreRegistry:
    """Status, log, diff, promote, rollback and history of the Host's configured cores.

    ``locations`` maps each core id to its repository and Host-owned ref.
    ``validate`` is the Host's check that a loaded candidate compiles against
    its configuration (provider exists, ...); ``build_tools`` builds the tools of a
    candidate whose manifest names ``tools:`` modules as its generation would (the
    last gate, ``tools``: a collision refuses the promotion instead of making the
    core unavailable once live; ``TurnRejected`` from it, the Host closing under
    the gate, refuses the move with nothing recorded); ``on_moved(core_id, sha)`` runs
    after every recorded move. An unknown core id raises
    ``NotFoundOrUnauthorized("core")``; a revision that does not resolve,
    ``InvalidValue``. ``sandbox`` launches the test gate's pytest inside the
    Host's process sandbox (the Host passes bubblewrap's); None, or one
    that cannot run here, fails the test gate closed unless the candidate
    says ``sandbox: none``.
    """

    def __init__(
        self,
        store: RuntimeStore,
        locations: Mapping[str, CoreLocation],
        *,
        cores_root: Path,
        validate: Callable[[LoadedCore], Awaitable[None]] | None = None,
        build_tools: Callable[[LoadedCore], Awaitable[None]] | None = None,
        on_moved: Callable[[str, str], Awaitable[None]] | None = None,
        closing: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.time,
        sandbox: TestSandbox | None = None,
    ) -> None:
        self._store = store
        self._locations = dict(locations)
        self._cores_root = cores_root
        self._validate = validate
        self._build_tools = build_tools
        self._on_moved = on_moved
        self._closing = closing
        self._clock = clock
        self._sandbox = sandbox

    @property
    def core_ids(self) -> tuple[str, ...]:
        """The configured cores, sorted."""
        return tuple(sorted(self._locations))

    async def status(self, core_id: str) -> CoreStatus:
        """Where ``core_id`` lives, its live commit (the store's; None: never promoted) and HEAD."""
        core_id = _core_id(core_id)
        location = self._location(core_id)
        live = await self._live(core_id)
        try:
            head = await (await CoreRepository.open(location.path)).head()
        except ConfigError as exc:
            return CoreStatus(core_id, location.path, location.ref, live, None, exc.message)
        return CoreStatus(core_id, location.path, location.ref, live, head)

    async def log(self, core_id: str, *, limit: int = 50) -> tuple[RevisionInfo, ...]:
        """Commits from HEAD, newest first, the live one marked; () for an empty repository."""
        core_id = _core_id(core_id)
        _check_limit(limit)
        _location, repo = await self._open(core_id)
        head = await repo.head()
        if head is None:
            return ()
        live = await self._live(core_id)
        return tuple(
            RevisionInfo(
                sha=commit.sha,
                summary=commit.summary,
                author=commit.author,
                at=commit.at,
                live=commit.sha == live,
            )
            for commit in await repo.log(head, limit=limit)
        )

    async def diff(
        self, core_id: str, *, base: str | None = None, target: str = "HEAD"
    ) -> CoreDiff:
        """What promoting ``target`` over ``base`` (None: the live revision) would change."""
        core_id = _core_id(core_id)
        _location, repo = await self._open(core_id)
        base_sha = await self._live(core_id) if base is None else await _resolve(repo, base)
        target_sha = await _resolve(repo, target)
        # A broken manifest diffs as "nothing declared"; promotion refuses it anyway.
        base_manifest = await _manifest_at(repo, base_sha, tolerant=True)
        target_manifest = await _manifest_at(repo, target_sha, tolerant=True)
        paths = await repo.changed(base_sha, target_sha)
        contents: list[tuple[str, bytes | None, bytes | None]] = []
        files: list[FileChange] = []
        # What the patch reads in all: past it (or past one file's bound) a file is
        # listed and said to differ, not held whole for a patch cut at MAX_PATCH_CHARS.
        budget = [MAX_PATCH_READ_BYTES]
        for path in paths:
            before = None if base_sha is None else await _patch_side(repo, base_sha, path, budget)
            after = await _patch_side(repo, target_sha, path, budget)
            change: ChangeKind = (
                "added" if before is None else "deleted" if after is None else "modified"
            )
            files.append(FileChange(path, change))
            contents.append((path, before, after))
        security = (
            mcp_security_diff(base_manifest, target_manifest) if target_manifest is not None else {}
        )
        dependencies = (
            await _dependencies(repo, base_sha, base_manifest, target_sha, target_manifest)
            if target_manifest is not None
            else ()
        )
        return CoreDiff(
            core_id=core_id,
            base=base_sha,
            target=target_sha,
            files=tuple(files),
            patch=unified_patch(
                contents,
                secrets=manifest_secrets(base_manifest, target_manifest),
                manifest=MANIFEST_FILE,
            ),
            security_diff=security,
            review=review_token(core_id, base_sha, target_sha, security) if security else None,
            dependency_changes=dependencies,
            dependency_review=(
                dependency_review_token(core_id, base_sha, target_sha, dependencies)
                if dependencies
                else None
            ),
        )

    async def promote(
        self,
        core_id: str,
        revision: str = "HEAD",
        *,
        actor: str,
        reason: str | None = None,
        review: str | None = None,
        reviewed_dependencies: str | None = None,
    ) -> CoreEvent:
        """Run the gates on ``revision``, then make it the live revision.

        The move is recorded in the store (a compare-and-swap on the live
        revision, with its history row), then mirrored to the core's ref and
        applied. Returns the recorded ``promote`` event. A failing gate, a
        missing or stale review token (``review`` for MCP declarations,
        ``reviewed_dependencies`` for dependencies), or another move meanwhile
        records a ``refused`` event and raises ``PromotionRefused`` (``gates``,
        and ``review``/``dependency_review``: the tokens this change needs);
        nothing moves. A Host that closes under the gates raises ``TurnRejected``
        and records nothing.
        """
        core_id = _core_id(core_id)
        location, repo = await self._open(core_id)
        target = await _resolve(repo, revision)
        live = await self._live(core_id)
        if target == live:
            # Most often an edit not committed yet: the repository's files do not count.
            raise InvalidValue(
                f"{target[:12]} is already the live revision of core {core_id!r}; "
                "commit your change first (only committed files are promoted)"
            )
        manifest, loaded = await check_manifest(
            location, target, cores_root=self._cores_root, validate=self._validate
        )
        gates: list[GateOutcome] = [manifest]
        security: dict[str, Any] = {}
        token: str | None = None
        dependency_token: str | None = None
        if loaded is not None:
            live_manifest = await _manifest_at(repo, live, tolerant=True)
            changes = await _dependencies(repo, live, live_manifest, target, loaded.manifest)
            if changes:
                dependency_token = dependency_review_token(core_id, live, target, changes)
            gates.append(
                check_dependencies(
                    changes, token=dependency_token or "", review=reviewed_dependencies, actor=actor
                )
            )
            security = mcp_security_diff(live_manifest, loaded.manifest)
            token = review_token(core_id, live, target, security) if security else None
            gates.append(check_mcp_review(security, token=token or "", review=review))
            # The core's own code runs last, and only for a candidate nothing else refused.
            if all(gate.passed for gate in gates):
                gates.append(
                    await check_tests(
                        location, loaded, cores_root=self._cores_root, sandbox=self._sandbox
                    )
                )
            # Building them runs the tools' modules too (discovered in a child process).
            build = self._build_tools
            if build is not None and loaded.manifest.tools and all(g.passed for g in gates):
                gates.append(await check_tools(loaded, build))
        event = CoreEvent(
            core_id=core_id,
            action="promote",
            revision=target,
            previous=live,
            gates=tuple(gates),
            actor=actor,
            at=self._clock(),
            reason=reason,
            security_diff=security,
        )
        return await self._move(location, event, review=token, dependency_review=dependency_token)

    async def rollback(
        self, core_id: str, *, actor: str, reason: str, to: str | None = None
    ) -> CoreEvent:
        """Move the live revision back: to the one live before the current one, or to ``to``.

        ``to`` must have been live before (a recorded promotion or rollback);
        only the manifest and tools gates run (the revision passed its gates once,
        but its tools must still build here).
        """
        core_id = _core_id(core_id)
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidValue("a rollback needs a reason")
        location, repo = await self._open(core_id)
        # Refused promotions are not read: however many came since, the moves decide.
        newest = await self._store.cores.history(core_id, limit=1, moves_only=True)
        # The newest move made the live revision; without ``to``, its ``previous`` is the target.
        if not newest:
            raise InvalidValue(f"core {core_id!r} has no live revision to roll back")
        live = newest[0].revision
        if to is None:
            target = newest[0].previous
            if target is None:
                raise InvalidValue(f"core {core_id!r} has no earlier live revision to roll back to")
        else:
            target = await _resolve(repo, to)
            if target == live:
                raise InvalidValue(
                    f"{target[:12]} is already the live revision of core {core_id!r}"
                )
            if not await self._store.cores.was_live(core_id, target):
                raise InvalidValue(f"{target[:12]} was never live for core {core_id!r}")
        manifest, loaded = await check_manifest(
            location, target, cores_root=self._cores_root, validate=self._validate
        )
        gates = [manifest]
        # Its tools may have built then and not now (a module's dependency gone): a move
        # recorded is applied leniently, so it is refused here rather than served broken.
        build = self._build_tools
        if build is not None and loaded is not None and loaded.manifest.tools and manifest.passed:
            gates.append(await check_tools(loaded, build))
        event = CoreEvent(
            core_id=core_id,
            action="rollback",
            revision=target,
            previous=live,
            gates=tuple(gates),
            actor=actor,
            at=self._clock(),
            reason=reason,
        )
        return await self._move(location, event)

    async def history(self, core_id: str, *, limit: int = 100) -> tuple[CoreEvent, ...]:
        """Recorded moves and refused promotions of ``core_id``, newest first."""
        core_id = _core_id(core_id)
        _check_limit(limit)
        self._location(core_id)
        return await self._store.cores.history(core_id, limit=limit)

    async def _move(
        self,
        location: CoreLocation,
        event: CoreEvent,
        *,
        review: str | None = None,
        dependency_review: str | None = None,
    ) -> CoreEvent:
        """Refuse (recorded) on a failed gate; else record the move, mirror the ref, notify.

        Shielded from cancellation once the gates passed: a move is recorded,
        mirrored and applied whole, or refused; a closing Host refuses it.
        """
        with anyio.CancelScope(shield=True):
            if event.passed:
                if self._closing is not None and self._closing():
                    raise TurnRejected(f"the Host is closing: core {event.core_id!r} did not move")
                try:
                    recorded = await self._store.cores.move_live(event)
                except StaleClaim:
                    event = replace(
                        event, gates=(*event.gates, GateOutcome("live_ref", False, RACE_LOST))
                    )
                else:
                    await mirror_live(location, event.revision)
                    if self._on_moved is not None:
                        await self._on_moved(event.core_id, event.revision)
                    return recorded
        refused = await self._store.cores.record_event(replace(event, action="refused"))
        failed = [gate for gate in refused.gates if not gate.passed]
        why = "; ".join(f"{gate.gate}: {gate.detail.splitlines()[0]}" for gate in failed)
        raise PromotionRefused(
            bounded(f"{event.action} of core {event.core_id!r} refused: {why}", 1_000),
            gates=refused.gates,
            review=review,
            dependency_review=dependency_review,
        )

    async def _live(self, core_id: str) -> str | None:
        return await self._store.cores.live_revision(core_id)

    def _location(self, core_id: str) -> CoreLocation:
        location = self._locations.get(core_id) if is_core_id(core_id) else None
        if location is None:
            raise NotFoundOrUnauthorized("core")
        return location

    async def _open(self, core_id: str) -> tuple[CoreLocation, CoreRepository]:
        location = self._location(core_id)
        return location, await CoreRepository.open(location.path)


def _core_id(value: object) -> str:
    """A core id argument as a plain ``str``, checked before it is hashed or quoted; any
    other value names no core (``NotFoundOrUnauthorized``, as for an unknown one)."""
    if not is_core_id(value):
        raise NotFoundOrUnauthorized("core")
    return str.__str__(value)


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= _MAX_LIMIT:
        raise InvalidValue(f"limit must be an integer from 1 to {_MAX_LIMIT}")


async def _resolve(repo: CoreRepository, revision: str) -> str:
    """A full sha for a revision name; any failure is one bounded ``InvalidValue``."""
    if not isinstance(revision, str) or not 0 < len(revision) <= 256:
        raise InvalidValue("a revision is a commit id, a unique prefix, HEAD, a branch or a tag")
    try:
        return await repo.resolve(revision)
    except ConfigError as exc:
        raise InvalidValue(bounded(str(exc), 300)) from None


async def _manifest_at(
    repo: CoreRepository, sha: str | None, *, tolerant: bool = False
) -> CoreManifest | None:
    """The manifest at ``sha`` (None: no revision; with ``tolerant``, also a broken one).

    A broken live manifest compares as "nothing declared", so every MCP server
    and dependency of the candidate needs review: the safe direction.
    """
    if sha is None:
        return None
    data = await repo.read(sha, MANIFEST_FILE)
    try:
        if data is None:
            raise ConfigError(f"{MANIFEST_FILE} is missing at {sha[:12]}")
        return await anyio.to_thread.run_sync(
            lambda: load_manifest(data, source=f"{MANIFEST_FILE} at {sha[:12]}")
        )
    except ConfigError:
        if tolerant:
            return None
        raise


async def _patch_side(repo: CoreRepository, sha: str, path: str, budget: list[int]) -> bytes | None:
    """``path`` at ``sha`` for the patch within what is left of ``budget`` (bytes), or
    ``TOO_LARGE`` past it; None when there is no such file."""
    try:
        data = await repo.read(sha, path, max_bytes=min(MAX_READ_BYTES, budget[0]))
    except FileTooLarge:
        return TOO_LARGE
    budget[0] -= 0 if data is None else len(data)
    return data


async def _dependencies(
    repo: CoreRepository,
    base: str | None,
    base_manifest: CoreManifest | None,
    target: str,
    target_manifest: CoreManifest,
) -> tuple[str, ...]:
    before = {} if base is None else (await _requirement_files(repo, base))[0]
    after, uncompared = await _requirement_files(repo, target)
    # What could not be compared counts as changed: the gate fails closed.
    return (*uncompared, *dependency_changes(base_manifest, before, target_manifest, after))


async def _requirement_files(
    repo: CoreRepository, revision: str
) -> tuple[dict[str, bytes | None], tuple[str, ...]]:
    """``requirements.txt`` at ``revision`` and every file it includes, transitively, and
    one line per file that could not be compared: past ``MAX_REQUIREMENT_FILES``, or
    one that cannot be read (too large, outside the core)."""
    files: dict[str, bytes | None] = {}
    uncompared: list[str] = []
    pending = [REQUIREMENTS]
    while pending:
        path = pending.pop(0)
        if path in files:
            continue
        if len(files) >= MAX_REQUIREMENT_FILES:
            uncompared.append(
                f"{bounded(path, 200)}: not compared (more than {MAX_REQUIREMENT_FILES} "
                "requirements files)"
            )
            break
        try:
            data = await repo.read(revision, path)
        except ConfigError as exc:
            uncompared.append(f"{bounded(path, 200)}: not compared ({bounded(str(exc), 200)})")
            continue
        files[path] = data
        if data is not None:
            pending.extend(included_requirements(path, data))
    return files, tuple(uncompared)
