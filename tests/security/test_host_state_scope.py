"""WorkspaceScope refuses the Host's own state by identity, in a workspace that overlaps it.

The scope is given ``protected`` paths (what ``HostConfig.state_paths()``
returns) and the workspace is their very directory. Every spelling that
reaches them — plain, ``..``, a relative or absolute symlink, a hard link, a
name SQLite has not created yet — is refused with ``host_state``, and nothing
is written.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from hostkit.builtins.files import WorkspaceError, WorkspaceEscape, WorkspaceScope

pytestmark = pytest.mark.anyio

STATE = b"SQLite format 3\x00 another owner's messages"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A workspace holding a database, its WAL, an artifact root and a config."""
    (tmp_path / "hostkit.db").write_bytes(STATE)
    (tmp_path / "hostkit.db-wal").write_bytes(STATE)
    (tmp_path / "arts" / "ses_1").mkdir(parents=True)
    (tmp_path / "arts" / "ses_1" / "stdout").write_bytes(STATE)
    (tmp_path / "hostkit.toml").write_text("[host]\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "notes.md").write_text("mine\n")
    (tmp_path / "link-db").symlink_to("hostkit.db")
    (tmp_path / "link-wal").symlink_to(tmp_path / "hostkit.db-wal")
    (tmp_path / "sub" / "link-arts").symlink_to("../arts")
    return tmp_path


def scope_of(root: Path) -> WorkspaceScope:
    db = root / "hostkit.db"
    protected = [db, *(Path(f"{db}{s}") for s in ("-wal", "-shm", "-journal"))]
    return WorkspaceScope(root, protected=[*protected, root / "arts", root / "hostkit.toml"])


READS = [
    "hostkit.db",
    "hostkit.db-wal",
    "./hostkit.db",
    "sub/../hostkit.db-wal",
    "link-db",
    "link-wal",
    "arts/ses_1/stdout",
    "sub/link-arts/ses_1/stdout",
    "sub/../arts/ses_1/stdout",
    "hostkit.toml",
]


@pytest.mark.parametrize("path", READS)
async def test_reads_of_host_state_are_refused_by_identity(root: Path, path: str) -> None:
    with pytest.raises(WorkspaceEscape) as caught:
        await scope_of(root).read(path)
    assert caught.value.reason == "host_state"
    assert "Host's own state" in caught.value.message
    assert str(root) not in caught.value.message


async def test_absolute_paths_to_host_state_are_refused_before_any_io(root: Path) -> None:
    with pytest.raises(WorkspaceEscape) as caught:
        await scope_of(root).read(str(root / "hostkit.db"))
    assert caught.value.reason == "absolute"


@pytest.mark.parametrize("path", ["arts", "sub/link-arts", "arts/ses_1"])
async def test_listing_inside_the_artifact_root_is_refused(root: Path, path: str) -> None:
    with pytest.raises(WorkspaceEscape, match="Host's own state"):
        await scope_of(root).list(path)


async def test_listing_hides_host_state_and_counts_only_what_it_shows(root: Path) -> None:
    await anyio.Path(root / "hostkit.db.v3.backup").write_bytes(STATE)
    listing = await scope_of(root).list(".")
    names = [entry.name for entry in listing.entries]
    assert names == ["link-db", "link-wal", "notes.md", "sub"]
    assert listing.total == 4
    assert not listing.truncated


@pytest.mark.parametrize(
    "name",
    [
        "hostkit.db-journal",
        "hostkit.db-shm",
        "hostkit.db.v9.backup",
        "hostkit.toml.new",
        # On a case-insensitive file system (vfat, a casefold ext4 directory, macOS) these
        # are the same files: refused on any file system, as the instructions name is.
        "HOSTKIT.DB-journal",
        "Hostkit.db.v9.backup",
        # Fullwidth letters: the same name once normalized (NFKC).
        "".join(chr(ord(c) + 0xFEE0) for c in "HOSTKIT") + ".db-journal",
    ],
)
async def test_state_names_not_yet_created_cannot_be_planted(root: Path, name: str) -> None:
    # A forged hot journal would be replayed into the database when SQLite next opens it.
    with pytest.raises(WorkspaceEscape, match="Host's own state"):
        await scope_of(root).write(name, "forged")
    assert not await anyio.Path(root / name).exists()


@pytest.mark.parametrize("path", ["hostkit.db", "hostkit.db-wal", "arts/ses_1/stdout"])
async def test_writes_and_edits_of_host_state_change_nothing(root: Path, path: str) -> None:
    scope = scope_of(root)
    with pytest.raises(WorkspaceEscape):
        await scope.write(path, "PWNED")
    with pytest.raises(WorkspaceEscape):
        await scope.edit(path, "SQLite", "PWNED")
    assert await anyio.Path(root / path).read_bytes() == STATE


async def test_a_hard_link_to_the_database_is_the_database(root: Path) -> None:
    """Refused by inode even when hard-linked reads are allowed for ordinary files."""
    os.link(root / "hostkit.db", root / "sub" / "copy.db")
    scope = WorkspaceScope(
        root, protected=[root / "hostkit.db", root / "arts"], allow_hardlinked_reads=True
    )
    with pytest.raises(WorkspaceEscape) as caught:
        await scope.read("sub/copy.db")
    assert caught.value.reason == "host_state"
    assert "copy.db" not in [e.name for e in (await scope.list("sub")).entries]
    with pytest.raises(WorkspaceError):
        await scope.write("sub/copy.db", "PWNED")
    assert await anyio.Path(root / "hostkit.db").read_bytes() == STATE


async def test_a_recreated_wal_is_still_refused(root: Path) -> None:
    """Identities are taken per operation: a WAL replaced by a new inode is still state."""
    scope = scope_of(root)
    with pytest.raises(WorkspaceEscape):
        await scope.read("hostkit.db-wal")
    await anyio.Path(root / "hostkit.db-wal").unlink()
    await anyio.Path(root / "hostkit.db-wal").write_bytes(STATE)
    os.link(root / "hostkit.db-wal", root / "sub" / "wal-copy")
    for path in ("hostkit.db-wal", "sub/wal-copy"):
        with pytest.raises(WorkspaceEscape):
            await scope.read(path)


async def test_a_workspace_inside_the_artifact_root_is_refused_whole(root: Path) -> None:
    scope = WorkspaceScope(root / "arts", protected=[root / "arts"])
    with pytest.raises(WorkspaceEscape, match="Host's own state"):
        await scope.read("ses_1/stdout")


async def test_ordinary_files_still_work_beside_host_state(root: Path) -> None:
    scope = scope_of(root)
    assert (await scope.read("notes.md")).text == "mine\n"
    await scope.write("sub/hostkit.db", "a different file with the same name\n")
    assert (await scope.read("sub/hostkit.db")).text.startswith("a different file")
    await scope.edit("notes.md", "mine", "still mine")
    assert (await scope.read("notes.md")).text == "still mine\n"
