"""How ``hostkit core`` shows revisions, promotions, gates and diffs on a terminal.

Everything here comes from a core's repository (commit messages, author
names, file paths, patch lines) or from gate output (a test run's tail):
text the core's author wrote. Every line is passed through ``printable``
and drawn as ``Text``, so none of it can repaint the terminal or be read as
Rich markup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from hostkit.cli._clock import TIME_CHARS, shown_time
from hostkit.cli._render import Column, command_line, fit_table
from hostkit.cores import CoreDiff, CoreStatus, RevisionInfo
from hostkit.freeze import thaw
from hostkit.inspect import one_line, printable
from hostkit.types import CoreEvent, GateOutcome

__all__ = [
    "diff_lines",
    "gate_lines",
    "gates_cell",
    "history_table",
    "print_lines",
    "revisions_table",
    "short_sha",
    "stamp",
    "status_state",
    "status_table",
]

SHORT_SHA = 12
# A failed gate's detail (a test run's tail): enough lines to see why.
DETAIL_LINES = 20
DETAIL_CHARS = 300
SUMMARY_CHARS = 200


def short_sha(sha: str | None) -> str:
    """The first 12 hex digits (what ``--to`` and ``[REV]`` accept back), or ``-``."""
    return sha[:SHORT_SHA] if sha else "-"


def stamp(at: float) -> str:
    """Seconds since the epoch as ``2026-12-01 13:48Z`` (``shown_time``)."""
    return shown_time(at)


def status_state(status: CoreStatus) -> str:
    """One phrase: whether what a turn runs is what the repository's HEAD holds."""
    if status.problem is not None:
        return "repository unreadable"
    if status.head is None:
        return "no commits"
    if status.live is None:
        return "no live revision: promote one"
    if status.live == status.head:
        return "HEAD is live"
    return "HEAD not promoted"


def status_table(statuses: Sequence[CoreStatus], *, width: int) -> Table:
    """One row per configured core: its live and HEAD commits and where it lives."""
    columns = (
        Column("core", whole=True),
        Column("live", whole=True),
        Column("head", whole=True, drop=3),
        Column("state", cap=30),
        Column("ref", cap=40, drop=1),
        Column("path", flexible=True, drop=2),
    )
    rows = [
        (
            status.core_id,
            short_sha(status.live),
            short_sha(status.head),
            status_state(status),
            one_line(status.ref, 200),
            one_line(str(status.path), 1_000),
        )
        for status in statuses
    ]
    return fit_table(columns, rows, width)


def revisions_table(revisions: Sequence[RevisionInfo], *, width: int) -> Table:
    """Commits from HEAD, newest first; ``*`` marks the live one."""
    columns = (
        Column("", cap=1),
        Column("revision", whole=True),
        Column("date (UTC)", cap=TIME_CHARS, drop=2),
        Column("author", cap=24, drop=1),
        Column("summary", flexible=True),
    )
    rows = [
        (
            "*" if revision.live else "",
            short_sha(revision.sha),
            stamp(revision.at),
            one_line(revision.author, 200),
            one_line(revision.summary, SUMMARY_CHARS),
        )
        for revision in revisions
    ]
    return fit_table(columns, rows, width)


def gates_cell(gates: Sequence[GateOutcome]) -> str:
    """``all 4 passed``, or which gates failed (``failed: tests``); the details are in --json."""
    failed = [gate.gate for gate in gates if not gate.passed]
    if failed:
        return "failed: " + ", ".join(failed)
    if len(gates) == 1:  # a rollback runs the manifest gate only
        return f"{gates[0].gate} passed"
    return f"all {len(gates)} passed" if gates else "no gates"


def history_table(events: Sequence[CoreEvent], *, width: int) -> Table:
    """Every promotion, rollback and refusal, newest first, with each gate's verdict."""
    columns = (
        Column("date (UTC)", cap=TIME_CHARS, drop=3),
        Column("action", cap=8),
        Column("revision", whole=True),
        Column("from", whole=True, drop=4),
        Column("gates", cap=40),
        Column("actor", cap=16, drop=1),
        Column("reason", flexible=True, drop=2),
    )
    rows = [
        (
            stamp(event.at),
            event.action,
            short_sha(event.revision),
            short_sha(event.previous),
            gates_cell(event.gates),
            one_line(event.actor, 200),
            one_line(event.reason or "", 200),
        )
        for event in events
    ]
    return fit_table(columns, rows, width)


def gate_lines(gates: Iterable[object]) -> list[str]:
    """``passed  tests: 2 passed`` per gate; a failed gate's detail follows, a few lines."""
    lines: list[str] = []
    for gate in gates:
        if not isinstance(gate, GateOutcome):
            continue
        verdict = "passed" if gate.passed else "FAILED"
        detail = gate.detail.strip()
        first = one_line(detail, DETAIL_CHARS) if gate.passed else ""
        lines.append(f"{verdict:<7} {gate.gate}" + (f": {first}" if first else ""))
        if not gate.passed and detail:
            tail = detail.splitlines()[-DETAIL_LINES:]
            lines.extend("        " + one_line(line, DETAIL_CHARS) for line in tail)
    return lines


def _json_lines(value: Mapping[str, Any]) -> list[str]:
    text = json.dumps(thaw(value), indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return [printable(line) for line in text.splitlines()]


def diff_lines(diff: CoreDiff, *, config: Path | None = None) -> list[str]:
    """The whole report: files, dependency changes, the security diff, the token, the patch.

    ``config`` (the ``-c`` given) is named in the promote command it prints.
    """
    base = short_sha(diff.base) if diff.base else "(no live revision)"
    lines = [f"core {diff.core_id}: {base} -> {short_sha(diff.target)}"]
    marks = {"added": "A", "modified": "M", "deleted": "D"}
    if diff.base == diff.target:
        lines.append(f"nothing to promote: {short_sha(diff.target)} is the live revision")
    lines.append(f"files changed: {len(diff.files)}")
    lines.extend(f"  {marks.get(f.change, '?')} {one_line(f.path, 500)}" for f in diff.files)
    if diff.dependency_changes:
        lines.append("dependency changes (promote needs --reviewed-deps with the token below):")
        lines.extend(f"  {one_line(change, 500)}" for change in diff.dependency_changes)
    if diff.security_diff:
        lines.append("security diff (MCP declarations; values of env and secrets never shown):")
        lines.extend(f"  {line}" for line in _json_lines(diff.security_diff))
    if diff.review:
        lines.append(f"review token: {diff.review}")
    if diff.dependency_review:
        lines.append(f"dependency review token: {diff.dependency_review}")
    if diff.review or diff.dependency_review:
        # What this diff asks of a promotion, all of it: pasted, it passes those gates.
        reviewed = [
            *(["--review", diff.review] if diff.review else []),
            *(["--reviewed-deps", diff.dependency_review] if diff.dependency_review else []),
        ]
        promote = command_line(
            "core", "promote", diff.core_id, short_sha(diff.target), *reviewed, config=config
        )
        lines.append(f'  promote with: {promote} --reason "..."')
    if diff.patch:
        lines.append("")
        lines.extend(printable(line) for line in diff.patch.splitlines())
    return lines


def print_lines(out: Console, lines: Iterable[str]) -> None:
    """Each line as plain text, never wrapped or read as markup."""
    for line in lines:
        out.print(Text(line), soft_wrap=True, highlight=False)
