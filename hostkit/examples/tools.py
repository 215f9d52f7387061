"""Read-only note tools over the notes shipped in ``hostkit/examples/notes``."""

from __future__ import annotations

from pathlib import Path

import anyio

from hostkit.effects import ToolContext, tool

NOTES = Path(__file__).with_name("notes")
MAX_NOTE_CHARS = 20_000


@tool("notes.list")
async def list_notes(ctx: ToolContext) -> list[str]:
    """List the note files available to read."""
    return sorted([path.name async for path in anyio.Path(NOTES).glob("*.md")])


@tool("notes.read")
async def read_note(ctx: ToolContext, name: str) -> str:
    """Read one note by file name (as returned by notes.list)."""
    root = await anyio.Path(NOTES).resolve()
    target = await (root / name).resolve()
    if target.parent != root or target.suffix != ".md":
        raise ValueError("only notes listed by notes.list can be read")
    text = await target.read_text(encoding="utf-8")
    return text[:MAX_NOTE_CHARS]
