"""ChannelInbox on SQLite against persist-queue's SQLiteAckQueue and huey's SqliteStorage.

What is measured, in one run, every database a fresh WAL-mode file in its own
temporary directory, every commit durable when it returns (``synchronous=FULL``):

- hostkit: ``RuntimeStore.open(path, synchronous="FULL")`` and
  ``ChannelInbox.on_store(store)``;
- persist-queue: ``SQLiteAckQueue(path, multithreading=True)`` (auto-commit:
  one transaction per ``put``/``get``/``ack``); it has no option for it, so a
  subclass runs ``PRAGMA synchronous=FULL`` on each connection it opens;
- huey: ``SqliteStorage(filename=..., fsync=True)``, which is huey's own switch
  for ``PRAGMA synchronous=2`` (FULL).

Each side's setting is read back from its connections and printed.

Accept: ``--producers`` concurrent producers each put their share of ``--count``
messages of the same content (four channel instances, a 256-character payload, each
conversation four messages in a row: the inbox claims a conversation's messages one
at a time in order, the peers keep no such order): hostkit from that many tasks
calling ``ChannelInbox.accept`` (the group-commit writer batches what arrives
together into one COMMIT); the peers, being synchronous libraries, from that many
threads calling ``put`` / ``enqueue``, as their users would. Claim+complete: the
same number of consumers drain the queue: hostkit tasks
``claim_batch(--claim-batch)`` and ``complete`` each claim; persist-queue threads
``get`` + ``ack``; huey threads ``dequeue`` (which deletes the task at once: huey
has no completion step, so it writes once per message where the other two write
twice). persist-queue keeps acked rows, as hostkit keeps completed ones (its dedup
tombstones), but its ``get`` scans past them from the first id, so its claim rate
falls as acked rows accumulate. A round measures all three in turn after an untimed
warm-up each; the figures are medians over ``--repeats`` rounds, and every row is
counted afterwards.

Latency: a producer accepts at a steady ``--rate`` while one worker claims as
soon as it can (polling every ``--poll-ms`` when nothing is due, completing
in the background); p50/p99 of the time from ``accept`` returning to ``claim``
returning that message.

Burn-down: ``--messages`` (default 100,000) accepted in batches of 500
(``accept_batch``, four concurrent batch writers), then claimed and completed by
the consumers, in a child process that runs only this, so its peak RSS
(``getrusage`` max RSS, which includes SQLite's page cache) is the hostkit part
alone; the RSS after opening the store is printed beside it.

Why: an inbox must make every inbound durable before the transport is
acknowledged, so its throughput is bounded by commits; group commit shares one
fsync among every producer waiting at the same moment, where a lock-per-call
queue pays one fsync each. The goal is at least 3x persist-queue on both
figures. No figure is asserted; ``--profile`` prints where hostkit's time goes.

``--postgres`` measures something else, in place of all the above: hostkit's
accept and claim+complete on SQLite and on PostgreSQL with 1, 2 and 4 worker
processes sharing one database (``--processes``), each process with
``--scale-tasks`` producer tasks and as many consumer tasks, the processes
splitting ``--scale-count`` messages. PostgreSQL is a throwaway cluster with
durable settings started for the run, or ``--postgres-url``; bench/_scaleout.py
says how processes are started and timed.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.metadata
import io
import json
import pickle
import pstats
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import psutil
from _scaleout import (
    ADAPTERS,
    Adapter,
    Gate,
    PostgresServer,
    Target,
    WorkerPool,
    load_line,
    machine_facts,
    median_cpu,
    parse_counts,
    percentile,
    print_cpu_table,
    print_pg_work,
    print_seq_scans,
    print_table,
    stats_per,
)
from huey.storage import SqliteStorage
from persistqueue import SQLiteAckQueue
from persistqueue.exceptions import Empty

from hostkit.inbox import ChannelInbox
from hostkit.store import MAX_CLAIM_BATCH, RuntimeStore
from hostkit.types import MAX_BATCH, ClaimedInbound, InboundEnvelope, InboundResult, new_id

CHANNELS = ("bench.a", "bench.b", "bench.c", "bench.d")
PAYLOAD = "m" * 256
RESULT = InboundResult("ignored", detail="bench")
GOAL = 3.0
BATCH_WRITERS = 4
FULL = 2  # PRAGMA synchronous value of FULL
DURABILITY = (
    "durability: every side WAL + synchronous=FULL, read back from its connections:\n"
    "  hostkit: RuntimeStore.open(path, synchronous='FULL') -> {hostkit}\n"
    "  persist-queue: SQLiteAckQueue(multithreading=True), PRAGMA synchronous=FULL on each"
    " connection (subclass) -> {pq}\n"
    "  huey: SqliteStorage(fsync=True) -> {huey}"
)


def conversation(i: int) -> str:
    """Message ``i``'s conversation: four messages of each channel instance in a row (a
    person's burst), which the inbox claims one at a time in order; the peer queues,
    which keep no order per conversation, carry the same key."""
    return f"conversation-{i // (4 * len(CHANNELS))}"


def envelope(run: str, i: int) -> InboundEnvelope:
    return InboundEnvelope(
        channel_instance_id=CHANNELS[i % len(CHANNELS)],
        platform_event_key=f"{run}-{i}",
        conversation_key=conversation(i),
        principal_key=f"user-{i % 64}",
        authenticated_by="bench",
        received_at=time.time(),
        payload=PAYLOAD,
    )


def message(run: str, i: int) -> dict[str, Any]:
    """What a peer queue carries: the same fields and payload as the envelope."""
    return {
        "channel": CHANNELS[i % len(CHANNELS)],
        "event_key": f"{run}-{i}",
        "conversation": conversation(i),
        "principal": f"user-{i % 64}",
        "received_at": time.time(),
        "payload": PAYLOAD,
    }


def _shares(total: int, parts: int) -> list[range]:
    base, extra = divmod(total, parts)
    out, start = [], 0
    for i in range(parts):
        size = base + (i < extra)
        out.append(range(start, start + size))
        start += size
    return out


def _check(label: str, found: object, expected: object) -> None:
    if found != expected:
        raise RuntimeError(f"{label}: found {found!r}, expected {expected!r}")


# -- hostkit -----------------------------------------------------------------------------


async def open_inbox(path: Path) -> tuple[RuntimeStore, ChannelInbox]:
    store = await RuntimeStore.open(path, synchronous="FULL")
    return store, ChannelInbox.on_store(store)


async def writer_synchronous(store: RuntimeStore) -> int:
    """PRAGMA synchronous as the writer connection (the one that commits) has it."""
    value: int = await store.write(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
    return value


async def hk_accept(inbox: ChannelInbox, run: str, count: int, producers: int) -> float:
    """``count`` single accepts from ``producers`` tasks; accepted/s."""

    async def produce(share: range) -> None:
        for i in share:
            receipt = await inbox.accept(envelope(run, i))
            if receipt.disposition != "accepted":
                raise RuntimeError(f"hostkit accept: {receipt}")

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for share in _shares(count, producers):
            tg.start_soon(produce, share)
    return count / (time.perf_counter() - started)


async def hk_drain(inbox: ChannelInbox, count: int, consumers: int, batch: int) -> float:
    """Claim and complete everything due with ``consumers`` tasks; (claim+complete)/s."""
    started = time.perf_counter()
    done = await hk_drain_due(inbox, consumers, batch)
    elapsed = time.perf_counter() - started
    _check("hostkit claimed+completed", done, count)
    return count / elapsed


async def hk_drain_due(inbox: ChannelInbox, consumers: int, batch: int) -> int:
    """Claim and complete until a claim finds nothing due; how many this call completed."""
    done = 0

    async def consume() -> None:
        nonlocal done
        while claimed := await inbox.claim_batch(batch):
            for item in claimed:
                decision = await inbox.complete(item, RESULT)
                if decision.disposition != "completed":
                    raise RuntimeError(f"hostkit complete: {decision}")
            done += len(claimed)

    async with anyio.create_task_group() as tg:
        for _ in range(consumers):
            tg.start_soon(consume)
    return done


async def hk_completed(inbox: ChannelInbox) -> tuple[int, int]:
    """(completed rows, rows in any other state) over every channel instance."""
    counts = await inbox.counts()
    other = sum(c.ready + c.claimed + c.dead_lettered for c in counts)
    return sum(c.completed for c in counts), other


async def hostkit_round(root: Path, count: int, workers: int, batch: int) -> tuple[float, float]:
    store, inbox = await open_inbox(root / "hostkit.db")
    async with store:
        _check("hostkit synchronous", await writer_synchronous(store), FULL)
        warmup = workers * 4
        await hk_accept(inbox, "warm", warmup, workers)
        await hk_drain(inbox, warmup, workers, batch)
        accept = await hk_accept(inbox, "timed", count, workers)
        drain = await hk_drain(inbox, count, workers, batch)
        _check("hostkit rows (completed, other)", await hk_completed(inbox), (count + warmup, 0))
    return accept, drain


# -- persist-queue -----------------------------------------------------------------------


class DurableAckQueue(SQLiteAckQueue):  # type: ignore[misc]
    """SQLiteAckQueue whose every connection commits with synchronous=FULL."""

    def _new_db_connection(
        self, path: str, multithreading: bool, timeout: float
    ) -> sqlite3.Connection:
        conn: sqlite3.Connection = super()._new_db_connection(path, multithreading, timeout)
        conn.execute("PRAGMA synchronous=FULL")
        return conn


def _threaded(count: int, threads: int, work: Callable[[range], None]) -> float:
    """Run ``work`` over shares of ``count`` in ``threads`` threads started together; seconds."""
    errors: list[BaseException] = []
    gate = threading.Barrier(threads + 1)

    def run(share: range) -> None:
        gate.wait()
        try:
            work(share)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=run, args=(share,)) for share in _shares(count, threads)]
    for thread in pool:
        thread.start()
    gate.wait()
    started = time.perf_counter()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed


def pq_open(root: Path) -> DurableAckQueue:
    return DurableAckQueue(str(root / "persist-queue"), multithreading=True)


def pq_synchronous(queue: DurableAckQueue) -> int:
    values = {
        conn.execute("PRAGMA synchronous").fetchone()[0] for conn in (queue._putter, queue._getter)
    }
    return values.pop() if len(values) == 1 else -1


def pq_put(queue: DurableAckQueue, run: str, count: int, threads: int) -> float:
    def work(share: range) -> None:
        for i in share:
            queue.put(message(run, i))

    return count / _threaded(count, threads, work)


def pq_drain(queue: DurableAckQueue, count: int, threads: int) -> float:
    done = [0] * threads
    slots = iter(range(threads))

    def work(_: range) -> None:
        slot = next(slots)
        while True:
            try:
                item = queue.get(block=False, raw=True)
            except Empty:
                return
            queue.ack(id=item["pqid"])
            done[slot] += 1

    elapsed = _threaded(threads, threads, work)
    _check("persist-queue got+acked", sum(done), count)
    return count / elapsed


def pq_round(root: Path, count: int, threads: int) -> tuple[float, float]:
    queue = pq_open(root)
    try:
        _check("persist-queue synchronous", pq_synchronous(queue), FULL)
        warmup = threads * 4
        pq_put(queue, "warm", warmup, threads)
        pq_drain(queue, warmup, threads)
        put = pq_put(queue, "timed", count, threads)
        drain = pq_drain(queue, count, threads)
        _check("persist-queue acked", queue.acked_count(), count + warmup)
        _check("persist-queue ready", queue.ready_count(), 0)
    finally:
        queue.close()
    return put, drain


# -- huey --------------------------------------------------------------------------------


def huey_open(root: Path) -> SqliteStorage:
    return SqliteStorage(name="bench", filename=str(root / "huey.db"), fsync=True)


def huey_synchronous(storage: SqliteStorage) -> int:
    value: int = storage.conn.execute("PRAGMA synchronous").fetchone()[0]
    return value


def huey_enqueue(storage: SqliteStorage, run: str, count: int, threads: int) -> float:
    def work(share: range) -> None:
        for i in share:
            # What Huey.enqueue does: serialize the message, hand the bytes to the storage.
            storage.enqueue(pickle.dumps(message(run, i), pickle.HIGHEST_PROTOCOL))

    return count / _threaded(count, threads, work)


def huey_drain(storage: SqliteStorage, count: int, threads: int) -> float:
    done = [0] * threads
    slots = iter(range(threads))

    def work(_: range) -> None:
        slot = next(slots)
        while (data := storage.dequeue()) is not None:
            pickle.loads(data)
            done[slot] += 1

    elapsed = _threaded(threads, threads, work)
    _check("huey dequeued", sum(done), count)
    return count / elapsed


def huey_round(root: Path, count: int, threads: int) -> tuple[float, float]:
    storage = huey_open(root)
    try:
        _check("huey synchronous", huey_synchronous(storage), FULL)
        warmup = threads * 4
        huey_enqueue(storage, "warm", warmup, threads)
        huey_drain(storage, warmup, threads)
        put = huey_enqueue(storage, "timed", count, threads)
        drain = huey_drain(storage, count, threads)
        _check("huey left in queue", storage.queue_size(), 0)
    finally:
        storage.close()
    return put, drain


# -- latency -----------------------------------------------------------------------------


async def hk_latency(root: Path, count: int, rate: float, poll_s: float) -> list[float]:
    """Seconds from ``accept`` returning to ``claim`` returning, per message."""
    accepted: dict[str, float] = {}
    claimed_at: dict[str, float] = {}
    store, inbox = await open_inbox(root / "latency.db")

    async def produce() -> None:
        interval = 1.0 / rate
        due = time.perf_counter()
        for i in range(count):
            receipt = await inbox.accept(envelope("latency", i))
            accepted[receipt.inbound_id] = time.perf_counter()
            due += interval
            await anyio.sleep(max(0.0, due - time.perf_counter()))

    async def complete(item: ClaimedInbound) -> None:
        await inbox.complete(item, RESULT)

    async def work() -> None:
        async with anyio.create_task_group() as tg:
            while len(claimed_at) < count:
                claimed = await inbox.claim_batch(MAX_CLAIM_BATCH)
                now = time.perf_counter()
                for item in claimed:
                    claimed_at[item.inbound_id] = now
                    tg.start_soon(complete, item)
                if not claimed:
                    await anyio.sleep(poll_s)

    async with store:
        _check("hostkit synchronous", await writer_synchronous(store), FULL)
        with anyio.fail_after(count / rate + 60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(produce)
                tg.start_soon(work)
        _check("latency rows (completed, other)", await hk_completed(inbox), (count, 0))
    # A claim that ran in the same group commit as the accept may return before the
    # producer task resumed: its latency is 0 (counted apart by the caller).
    return [claimed_at[key] - accepted[key] for key in accepted]


# -- burn-down (child process) -----------------------------------------------------------


def _rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


async def burn_down(root: Path, messages: int, consumers: int, batch: int) -> dict[str, float]:
    store, inbox = await open_inbox(root / "burn-down.db")
    async with store:
        _check("hostkit synchronous", await writer_synchronous(store), FULL)
        rss_open = _rss_mb()
        batches = [range(s, min(s + MAX_BATCH, messages)) for s in range(0, messages, MAX_BATCH)]
        pending = iter(batches)

        async def writer() -> None:
            for chunk in pending:
                receipts = await inbox.accept_batch([envelope("burn", i) for i in chunk])
                if any(r.disposition != "accepted" for r in receipts):
                    raise RuntimeError("burn-down: a duplicate in a fresh database")

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(BATCH_WRITERS):
                tg.start_soon(writer)
        accepted = time.perf_counter()
        await hk_drain(inbox, messages, consumers, batch)
        finished = time.perf_counter()
        _check("burn-down rows (completed, other)", await hk_completed(inbox), (messages, 0))
    return {
        "accept_s": accepted - started,
        "drain_s": finished - accepted,
        "rss_open_mb": rss_open,
        "rss_end_mb": _rss_mb(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_burn_down_child(args: argparse.Namespace, parent: str | None) -> dict[str, float]:
    argv = [sys.executable, __file__, "--burn-down-child", "--messages", str(args.messages)]
    argv += ["--consumers", str(args.producers), "--claim-batch", str(args.claim_batch)]
    if parent:
        argv += ["--dir", parent]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"burn-down child failed:\n{done.stderr[-4000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


# -- report ------------------------------------------------------------------------------


def _fresh(parent: str | None) -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="hostkit-inbox-bench-", dir=parent)


def _profiled(fn: Callable[[], Any], profile: cProfile.Profile | None) -> Any:
    if profile is None:
        return fn()
    profile.enable()
    try:
        return fn()
    finally:
        profile.disable()


def measure_rounds(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    """``--repeats`` rounds of hostkit, persist-queue and huey in turn, fresh files each."""
    figures: dict[str, list[tuple[float, float]]] = {"hostkit": [], "persist-queue": [], "huey": []}
    profile = cProfile.Profile() if args.profile else None
    for _ in range(args.repeats):
        with _fresh(args.dir) as tmp:
            figures["hostkit"].append(
                _profiled(
                    lambda tmp=tmp: anyio.run(
                        hostkit_round, Path(tmp), args.count, args.producers, args.claim_batch
                    ),
                    profile,
                )
            )
        with _fresh(args.dir) as tmp:
            figures["persist-queue"].append(pq_round(Path(tmp), args.count, args.producers))
        with _fresh(args.dir) as tmp:
            figures["huey"].append(huey_round(Path(tmp), args.count, args.producers))
    if profile is not None:
        out = io.StringIO()
        stats = pstats.Stats(profile, stream=out).sort_stats("tottime")
        stats.print_stats(30)
        stats.sort_stats("cumulative").print_stats(40)
        print(out.getvalue())
    return figures


def durability_line(parent: str | None) -> str:
    async def hostkit_sync(root: Path) -> int:
        store, _ = await open_inbox(root / "probe.db")
        async with store:
            return await writer_synchronous(store)

    with _fresh(parent) as tmp:
        hk = anyio.run(hostkit_sync, Path(tmp))
        queue = pq_open(Path(tmp))
        pq = pq_synchronous(queue)
        queue.close()
        storage = huey_open(Path(tmp))
        huey = huey_synchronous(storage)
        storage.close()
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return DURABILITY.format(
        hostkit=names.get(hk, hk), pq=names.get(pq, pq), huey=names.get(huey, huey)
    )


def _row(label: str, hk: float, pq: float, huey: float) -> str:
    return f"{label:<22}{hk:>12,.0f}{pq:>15,.0f}{huey:>12,.0f}{hk / pq:>10.2f}x{hk / huey:>11.2f}x"


def _spread(values: list[float]) -> str:
    return f"{min(values):,.0f}-{max(values):,.0f}"


def report_throughput(figures: dict[str, list[tuple[float, float]]]) -> None:
    medians = {
        name: (statistics.median(a for a, _ in runs), statistics.median(d for _, d in runs))
        for name, runs in figures.items()
    }
    header = (
        f"{'msgs/s (median)':<22}{'hostkit':>12}{'persist-queue':>15}{'huey':>12}"
        f"{'hk/pq':>11}{'hk/huey':>12}"
    )
    print(header)
    print("-" * len(header))
    hk, pq, huey = medians["hostkit"], medians["persist-queue"], medians["huey"]
    print(_row("accept", hk[0], pq[0], huey[0]))
    print(_row("claim+complete", hk[1], pq[1], huey[1]))
    for name, runs in figures.items():
        accept = _spread([a for a, _ in runs])
        drain = _spread([d for _, d in runs])
        print(f"  {name} range over rounds: accept {accept}, claim+complete {drain}")
    for label, index in (("accept", 0), ("claim+complete", 1)):
        ratio = hk[index] / pq[index]
        verdict = "met" if ratio >= GOAL else "NOT met"
        print(f"goal >= {GOAL:.0f}x persist-queue, {label}: {ratio:.2f}x, {verdict}")


def main(args: argparse.Namespace) -> None:
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}"
        for name in ("aiosqlite", "anyio", "persist-queue", "huey")
    )
    where = args.dir or tempfile.gettempdir()
    print(f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, {versions}")
    print(f"databases under {where}; {psutil.cpu_count()} CPUs")
    print(durability_line(args.dir))
    print(
        f"\nthroughput: {args.count} messages per figure, {args.producers} producers and "
        f"{args.producers} consumers (hostkit: tasks, claim_batch({args.claim_batch}); peers: "
        f"threads), {args.repeats} rounds hostkit/persist-queue/huey in turn, warm-up "
        f"{args.producers * 4} each"
    )
    print("writes per message: hostkit and persist-queue 3 (accept/put, claim/get,")
    print("complete/ack), huey 2 (enqueue, dequeue deletes it: no completion step)")
    print("persist-queue keeps acked rows and its get scans past them from the first id (no")
    print("index on status), so its claim rate falls as acked rows accumulate; hostkit keeps")
    print("completed rows too (dedup tombstones) and claims from a partial index of due rows\n")
    report_throughput(measure_rounds(args))

    with _fresh(args.dir) as tmp:
        samples = anyio.run(
            hk_latency, Path(tmp), args.latency_messages, args.rate, args.poll_ms / 1000
        )
    shared = sum(1 for s in samples if s < 0)
    samples = [max(0.0, s) for s in samples]
    print(
        f"\naccept->claim latency, hostkit ({args.latency_messages} messages at "
        f"{args.rate:g}/s, one worker polling every {args.poll_ms:g} ms when idle): "
        f"p50 {percentile(samples, 0.5) * 1000:.2f} ms, "
        f"p99 {percentile(samples, 0.99) * 1000:.2f} ms; {shared} claimed in the same group "
        "commit as their accept (counted as 0)"
    )

    burn = run_burn_down_child(args, args.dir)
    total = burn["accept_s"] + burn["drain_s"]
    print(
        f"\nburn-down, hostkit, {args.messages:,} messages (child process: accept_batch of "
        f"{MAX_BATCH} by {BATCH_WRITERS} tasks, then {args.producers} consumers "
        f"claim_batch({args.claim_batch}) + complete):"
    )
    print(
        f"  accept {burn['accept_s']:.1f} s ({args.messages / burn['accept_s']:,.0f} msgs/s), "
        f"claim+complete {burn['drain_s']:.1f} s ({args.messages / burn['drain_s']:,.0f} msgs/s), "
        f"total {total:.1f} s ({args.messages / total:,.0f} msgs/s)"
    )
    print(
        f"  memory (process RSS incl. SQLite page cache): {burn['rss_open_mb']:.0f} MB after "
        f"opening the store, peak {burn['peak_rss_mb']:.0f} MB, "
        f"{burn['rss_end_mb']:.0f} MB at the end"
    )


# -- SQLite and PostgreSQL across worker processes (--postgres) --------------------------

# Phases of a worker process: warm-up accept, warm-up drain, accept, claim+complete.
SCALE_PHASES = 4
TIMED = {"accept": 2, "claim+complete": 3}


@dataclass(frozen=True, slots=True)
class ScaleJob:
    """What one worker process of a figure does: accept its share, then drain with the rest."""

    target: Target
    warmup: int
    share: int
    tasks: int
    claim_batch: int


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """What one worker process reports: messages it claimed+completed, CPU seconds spent."""

    completed: int
    accept_cpu_s: float
    drain_cpu_s: float


async def scale_worker(job: ScaleJob, index: int, gate: Gate) -> ScaleResult:
    """One process: its own store on the shared database, ``tasks`` producers, then as
    many consumers; CPU time is the process's (every thread) over each timed phase."""
    async with job.target.open() as store:
        inbox = ChannelInbox.on_store(store)
        if job.target.adapter == "sqlite":
            _check("hostkit synchronous", await writer_synchronous(store), FULL)
        cpu = [0.0, 0.0]
        done = 0
        for run, count in (("warm", job.warmup), ("timed", job.share)):
            await gate.wait()
            started = time.process_time()
            await hk_accept(inbox, f"{run}-p{index}", count, job.tasks)
            cpu[0] = time.process_time() - started
            await gate.wait()
            await gate.wait()
            started = time.process_time()
            # Every message was accepted before this phase: nothing due means all claimed.
            done = await hk_drain_due(inbox, job.tasks, job.claim_batch)
            cpu[1] = time.process_time() - started
            await gate.wait()
    return ScaleResult(done, cpu[0], cpu[1])


def _inbox_states(target: Target) -> tuple[int, int]:
    """(ready rows, completed rows); raises when any row is claimed or dead-lettered."""
    ready = target.count("SELECT count(*) FROM inbox WHERE state = 'ready'")
    completed = target.count("SELECT count(*) FROM inbox WHERE state = 'completed'")
    other = target.count("SELECT count(*) FROM inbox WHERE state NOT IN ('ready', 'completed')")
    _check(f"{target.label} claimed or dead-lettered rows", other, 0)
    return ready, completed


Rates = dict[str, float]
CpuMs = dict[str, tuple[float, float | None]]
Scans = list[tuple[str, int, int, int]]


@dataclass(frozen=True, slots=True)
class ScaleFigure:
    """One figure: msgs/s and CPU ms per message (workers, server) per timed phase, and
    PostgreSQL's work per message over the whole figure (None on SQLite)."""

    rates: Rates
    cpu_ms: CpuMs
    pg_work: dict[str, float] | None
    seq_scans: Scans
    messages: int


def scale_figure(
    pool: WorkerPool[ScaleJob, ScaleResult],
    target: Target,
    processes: int,
    args: argparse.Namespace,
    server: PostgresServer,
) -> ScaleFigure:
    """``processes`` workers on ``target``: warm-up, then accept, then claim+complete."""
    count, tasks = args.scale_count, args.scale_tasks
    warmup = tasks * 2
    jobs = [
        ScaleJob(target, warmup, len(share), tasks, args.claim_batch)
        for share in _shares(count, processes)
    ]
    warm_total = warmup * processes
    # (ready, completed) after each phase: every message accepted, then every one completed.
    expected = [(warm_total, 0), (0, warm_total), (count, warm_total), (0, warm_total + count)]

    def between(phase: int) -> None:
        _check(f"{target.label} (ready, completed)", _inbox_states(target), expected[phase])

    postgres = target.adapter == "postgres"
    before = server.database_stats(target.location) if postgres else None
    figure = pool.run(jobs, between=between, server_cpu=server.cpu_seconds if postgres else None)
    completed = sum(result.completed for result in figure.values)
    _check(f"{target.label} claimed+completed by the workers", completed, count)
    workers = {
        "accept": sum(r.accept_cpu_s for r in figure.values),
        "claim+complete": sum(r.drain_cpu_s for r in figure.values),
    }
    rates, cpu = {}, {}
    for metric, phase in TIMED.items():
        rates[metric] = count / figure.seconds[phase]
        served = figure.server_cpu_s[phase]
        cpu[metric] = (
            workers[metric] * 1000 / count,
            None if served is None else served * 1000 / count,
        )
    messages = count + warm_total
    work, scans = None, []
    if before is not None:
        work = stats_per(before, server.database_stats(target.location), messages)
        scans = server.seq_scans(target.location)
    return ScaleFigure(rates, cpu, work, scans, messages)


async def _migrate(target: Target) -> None:
    async with target.open():
        pass


def scale_main(args: argparse.Namespace) -> None:
    counts = parse_counts(args.processes)
    metrics = tuple(TIMED)
    with (
        PostgresServer.provide(args.postgres_url) as server,
        _fresh(args.dir) as tmp,
        WorkerPool(scale_worker, max(counts), phases=SCALE_PHASES) as pool,
    ):
        settings = server.settings()
        for line in machine_facts({"SQLite files": tmp, **server.paths()}):
            print(line)
        print(load_line("at the start"))
        print(server.describe(settings))
        print(
            "SQLite: one WAL file per figure, RuntimeStore.open(path, synchronous='FULL') in "
            "every process (read back: FULL)"
        )
        print(
            f"\nhostkit ChannelInbox, {args.scale_count} messages per figure split over the "
            f"processes; each process {args.scale_tasks} producer tasks (accept), then "
            f"{args.scale_tasks} consumer tasks (claim_batch({args.claim_batch}) + complete); "
            f"warm-up {args.scale_tasks * 2} messages a process; a fresh database per figure; "
            f"{args.scale_repeats} round(s), median; SQLite then PostgreSQL at each count"
        )
        rates: dict[tuple[str, Adapter, int], list[float]] = {}
        cpus: dict[tuple[str, Adapter, int], list[tuple[float, float | None]]] = {}
        pg_work: dict[int, list[dict[str, float]]] = {}
        last_scans: tuple[Scans, int] | None = None
        for _ in range(args.scale_repeats):
            for n in counts:
                for adapter in ADAPTERS:
                    if adapter == "sqlite":
                        target = Target(adapter, str(Path(tmp) / f"inbox-{new_id('db')}.db"))
                    else:
                        target = Target(adapter, server.create_database())
                    anyio.run(_migrate, target)
                    figure = scale_figure(pool, target, n, args, server)
                    for metric in metrics:
                        rates.setdefault((metric, adapter, n), []).append(figure.rates[metric])
                        cpus.setdefault((metric, adapter, n), []).append(figure.cpu_ms[metric])
                    if figure.pg_work is not None:
                        pg_work.setdefault(n, []).append(figure.pg_work)
                        last_scans = (figure.seq_scans, figure.messages)
                    print(
                        f"  {target.label}, {n} process(es): accept "
                        f"{figure.rates['accept']:,.0f}/s, claim+complete "
                        f"{figure.rates['claim+complete']:,.0f}/s",
                        file=sys.stderr,
                        flush=True,
                    )
                    server.drop_created()
        print()
        print_table("msgs/s", metrics, counts, {k: statistics.median(v) for k, v in rates.items()})
        print()
        print_cpu_table("CPU ms/msg", metrics, counts, {k: median_cpu(v) for k, v in cpus.items()})
        print()
        print_pg_work(
            "PostgreSQL per message",
            counts,
            {
                n: {k: statistics.median(w[k] for w in ws) for k in ws[0]}
                for n, ws in pg_work.items()
            },
        )
        if last_scans:
            print()
            print_seq_scans(
                f"PostgreSQL sequential scans, {counts[-1]} process(es), per message",
                *last_scans,
            )
        print(load_line("at the end"))
        print(SCALE_NOTES)


SCALE_NOTES = """
PG/SQLite: PostgreSQL's figure over SQLite's at the same process count; xN: the figure
over the same adapter's 1-process figure. CPU: the worker processes' CPU time (all
threads) and the PostgreSQL server's (postmaster and every child) over the timed phase,
per message. The workers, the server and the parent share this machine's CPUs.
Writes per message on both: accept, claim, complete (3 transactions; SQLite's group
commit shares one COMMIT among the writes of one process that arrive together;
PostgreSQL commits each on its own connection and shares WAL flushes between them)."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="ChannelInbox vs persist-queue and huey")
    parser.add_argument("--count", type=int, default=5000, help="messages per throughput figure")
    parser.add_argument("--repeats", type=int, default=3, help="throughput rounds (median)")
    parser.add_argument("--producers", type=int, default=50, help="producers = consumers")
    parser.add_argument("--claim-batch", type=int, default=16, help="hostkit claim_batch limit")
    parser.add_argument("--latency-messages", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=200.0, help="latency: accepts per second")
    parser.add_argument("--poll-ms", type=float, default=1.0, help="latency: idle claim poll")
    parser.add_argument("--messages", type=int, default=100_000, help="burn-down messages")
    parser.add_argument("--dir", default=None, help="parent directory for the temporary files")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile hostkit's rounds (event-loop thread)"
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="instead: hostkit on SQLite and on PostgreSQL with 1, 2, 4 worker processes",
    )
    parser.add_argument(
        "--postgres-url",
        default=None,
        help="--postgres on this server (a role that may CREATE DATABASE; password from "
        "PGPASSWORD or ~/.pgpass) instead of a throwaway durable cluster",
    )
    parser.add_argument("--processes", default="1,2,4", help="--postgres: worker process counts")
    parser.add_argument(
        "--scale-count", type=int, default=1000, help="--postgres: messages per figure"
    )
    parser.add_argument(
        "--scale-tasks", type=int, default=16, help="--postgres: producer/consumer tasks a process"
    )
    parser.add_argument("--scale-repeats", type=int, default=1, help="--postgres: rounds (median)")
    parser.add_argument("--burn-down-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--consumers", type=int, default=50, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    options = parse_args()
    if options.burn_down_child:
        with _fresh(options.dir) as tmp:
            result = anyio.run(
                burn_down, Path(tmp), options.messages, options.consumers, options.claim_batch
            )
        print(json.dumps(result))
    elif options.postgres or options.postgres_url:
        scale_main(options)
    else:
        main(options)
