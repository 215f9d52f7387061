"""The Git ref as a mirror of the store's live revision: healed, never believed.

The store records which revision of a core is live (``CoreStore.live_revision``):
only a gated promotion or a rollback writes it. The ref in the core's repository
(``refs/hostkit/live``) is written after each move so that ``git log`` and other
tools see it, but the repository is the author's: ``git update-ref``, a symbolic
ref or a symlinked ref file may point it anywhere. Whatever it says, the
promoted revision runs; a ref that differs is reported and rewritten.
"""

from __future__ import annotations

import logging

from hostkit.cores._loaded import CoreLocation
from hostkit.cores._repository import CoreRepository
from hostkit.errors import HostkitError, bounded

__all__ = ["heal_mirror", "mirror_live"]

_log = logging.getLogger("hostkit.cores")


async def mirror_live(location: CoreLocation, revision: str) -> bool:
    """Point the core's ref at ``revision`` (after a recorded move); True when it changed.

    A failure (a held lock, an unwritable repository) is logged, not raised:
    the move is already recorded, and the next open heals the mirror.
    """
    try:
        repository = await CoreRepository.open(location.path)
        return await repository.mirror_ref(location.ref, revision)
    except (HostkitError, OSError) as exc:
        _log.warning(
            "core %r: the ref %s could not be pointed at %s: %s",
            location.core_id,
            location.ref,
            revision[:12],
            bounded(str(exc), 300),
        )
        return False


async def heal_mirror(location: CoreLocation, revision: str) -> str | None:
    """The warning (also logged) when the ref does not name ``revision``; the ref is rewritten.

    None when the ref already mirrors the promoted revision.
    """
    try:
        repository = await CoreRepository.open(location.path)
        seen = await repository.live(location.ref)
        changed = await repository.mirror_ref(location.ref, revision)
    except (HostkitError, OSError) as exc:
        warning = (
            f"core {location.core_id!r}: the ref {location.ref} cannot be checked "
            f"({bounded(str(exc), 200)}); the promoted revision {revision[:12]} runs"
        )
        _log.warning("%s", warning)
        return warning
    if not changed:
        return None
    shown = seen[:12] if seen is not None else "nothing"
    warning = (
        f"core {location.core_id!r}: the ref {location.ref} was moved outside hostkit "
        f"(to {shown}); the promoted revision {revision[:12]} runs, and the ref names it again"
    )
    _log.warning("%s", warning)
    return warning
