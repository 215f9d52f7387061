"""Commit throughput of hostkit's RuntimeStore against plain aiosqlite.

What is measured: committed single-row INSERT transactions per second on a
WAL-mode SQLite file, with ``synchronous=FULL`` (a commit is durable when it
returns) and ``synchronous=NORMAL`` (durable against a process crash only).

Why: aiosqlite runs every statement as one hop to its worker thread, so a
transaction of BEGIN, INSERT, COMMIT pays three thread round trips.
``RuntimeStore.write(fn)`` ships the whole transaction to the thread in one
hop; ``RuntimeStore.transaction()`` is statement-at-a-time like aiosqlite. With
many concurrent writers, ``write(fn)`` also groups the queued transactions into
one COMMIT (one fsync), each in its own savepoint, whereas the ordinary
aiosqlite fix for one connection is a lock around each transaction.

Rows: sequential (one writer awaiting each commit) and concurrent (50 writer
tasks, total committed rows/s). Each figure uses a fresh database file, is
preceded by a warm-up, and is checked against the row count afterwards.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sqlite3
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import aiosqlite
import anyio

from hostkit.store import RuntimeStore, Synchronous

CREATE = "CREATE TABLE bench (id INTEGER PRIMARY KEY, payload TEXT)"
INSERT = "INSERT INTO bench (payload) VALUES (?)"
PAYLOAD = "x" * 100
WRITERS = 50
SYNCS: tuple[Synchronous, ...] = ("FULL", "NORMAL")
Write = Callable[[], Awaitable[None]]


async def _timed(write: Write, count: int, warmup: int, writers: int) -> float:
    """Run ``warmup`` then ``count`` transactions over ``writers`` tasks; return rows/s."""

    async def worker(n: int) -> None:
        for _ in range(n):
            await write()

    async def spread(total: int) -> None:
        base, extra = divmod(total, writers)
        async with anyio.create_task_group() as tg:
            for i in range(writers):
                tg.start_soon(worker, base + (i < extra))

    await spread(warmup)
    start = time.perf_counter()
    await spread(count)
    return count / (time.perf_counter() - start)


def _check(label: str, rows: object, expected: int) -> None:
    if rows != expected:
        raise RuntimeError(f"{label}: {rows} rows committed, expected {expected}")


def _insert(conn: sqlite3.Connection) -> None:
    conn.execute(INSERT, (PAYLOAD,))


async def bench_hostkit(
    root: Path, *, sync: Synchronous, mode: str, count: int, warmup: int, writers: int
) -> float:
    async with await RuntimeStore.open(root / f"hostkit-{mode}.db", synchronous=sync) as store:
        await store.write(lambda c: c.execute(CREATE))

        async def via_write() -> None:
            await store.write(_insert)

        async def via_transaction() -> None:
            async with store.transaction() as tx:
                await tx.execute(INSERT, (PAYLOAD,))

        write = via_write if mode == "write" else via_transaction
        rate = await _timed(write, count, warmup, writers)
        rows = await store.read(lambda c: c.execute("SELECT count(*) FROM bench").fetchone()[0])
    _check(f"hostkit {mode}", rows, count + warmup)
    return rate


async def bench_peer(
    root: Path, *, sync: Synchronous, count: int, warmup: int, writers: int
) -> float:
    async with aiosqlite.connect(root / "peer.db", isolation_level=None) as db:
        await db.execute("PRAGMA journal_mode = WAL")
        await db.execute(f"PRAGMA synchronous = {sync}")
        await db.execute(CREATE)
        lock = anyio.Lock()

        async def write() -> None:
            async with lock:
                await db.execute("BEGIN IMMEDIATE")
                await db.execute(INSERT, (PAYLOAD,))
                await db.commit()

        rate = await _timed(write, count, warmup, writers)
        async with db.execute("SELECT count(*) FROM bench") as cursor:
            found = await cursor.fetchone()
    _check("aiosqlite", found[0] if found else None, count + warmup)
    return rate


async def measure(runner: Callable[[Path], Awaitable[float]], parent: str | None) -> float:
    with tempfile.TemporaryDirectory(prefix="hostkit-bench-", dir=parent) as tmp:
        return await runner(Path(tmp))


async def row(
    mode: str, sync: Synchronous, count: int, warmup: int, writers: int, parent: str | None
) -> str:
    """One table row: each figure on its own fresh database file."""
    hk = partial(bench_hostkit, sync=sync, count=count, warmup=warmup, writers=writers)
    write = await measure(partial(hk, mode="write"), parent)
    tx = await measure(partial(hk, mode="tx"), parent) if writers == 1 else None
    peer = partial(bench_peer, sync=sync, count=count, warmup=warmup, writers=writers)
    base = await measure(peer, parent)
    return (
        f"{mode:<11}{sync:<7}{_cell(write)}{_cell(tx)}{_cell(base)}"
        f"{_ratio(write, base):>11}{_ratio(tx, base)}"
    )


def _cell(value: float | None) -> str:
    return f"{value:>12,.0f}" if value is not None else f"{'-':>12}"


def _ratio(num: float | None, den: float) -> str:
    return f"{num / den:>9.2f}x" if num is not None else f"{'-':>10}"


async def main(args: argparse.Namespace) -> None:
    seq_n, conc_n = (300, 300) if args.quick else (args.sequential, args.concurrent)
    warmup = 30 if args.quick else 200
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}" for name in ("aiosqlite", "anyio")
    )
    where = args.dir or tempfile.gettempdir()
    print(f"SQLite {sqlite3.sqlite_version}, {versions}; WAL; databases under {where}")
    print(f"sequential: {seq_n} tx, concurrent: {conc_n} tx over {WRITERS} tasks; warm-up {warmup}")
    print("figures are committed single-row transactions per second\n")
    header = (
        f"{'mode':<11}{'sync':<7}{'write(fn)':>12}{'transaction':>12}{'aiosqlite':>12}"
        f"{'write/peer':>11}{'tx/peer':>10}"
    )
    print(header)
    print("-" * len(header))
    for mode, count, writers in (("sequential", seq_n, 1), ("concurrent", conc_n, WRITERS)):
        for sync in SYNCS:
            print(await row(mode, sync, count, max(warmup, writers), writers, args.dir))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="RuntimeStore vs aiosqlite commit rates")
    parser.add_argument("--quick", action="store_true", help="300 transactions per figure")
    parser.add_argument("--sequential", type=int, default=2000, help="sequential transactions")
    parser.add_argument("--concurrent", type=int, default=5000, help="concurrent transactions")
    parser.add_argument("--dir", default=None, help="parent directory for the temporary databases")
    return parser.parse_args()


if __name__ == "__main__":
    options = parse_args()
    anyio.run(main, options)
