"""hostkit on SQLite and on PostgreSQL with 1, 2 and 4 worker processes on one database.

What ``--postgres`` in bench/inbox_bench.py and bench/turn_bench.py shares.

A figure runs N real OS processes (multiprocessing ``spawn``: each imports
hostkit afresh and opens its own store, as N Hosts would) on one database: a
fresh SQLite file (WAL, ``synchronous=FULL``) that every process opens, or a
fresh PostgreSQL database that every process connects to with its own pool.
The parent times each phase between two barriers: from the moment every
worker may start (all of them have opened their store) to the moment the last
one is done, so starting, importing, opening, migrating and warming up are
outside the figures. Between phases the parent counts the stored rows.

PostgreSQL is a throwaway cluster started here with durable settings (fsync,
synchronous_commit and full_page_writes on: every COMMIT is on disk when it
returns, as SQLite's FULL has it; the test fixture turns them off for speed),
or an existing server named by ``--postgres-url`` (a role that may CREATE
DATABASE; each figure gets its own database, dropped afterwards; the password
from ``PGPASSWORD`` or ``~/.pgpass``). The server's settings are read back and
printed; figures from a server that is not durable are labelled so.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import multiprocessing
import multiprocessing.synchronize
import os
import platform
import queue
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
import psutil

from hostkit._opening import Opening
from hostkit.store import RuntimeStore

__all__ = [
    "ADAPTERS",
    "PROCESS_COUNTS",
    "Figure",
    "Gate",
    "PostgresServer",
    "Target",
    "WorkerPool",
    "load_line",
    "machine_facts",
    "median_cpu",
    "parse_counts",
    "percentile",
    "print_cpu_table",
    "print_pg_work",
    "print_seq_scans",
    "print_table",
    "stats_per",
]

Adapter = Literal["sqlite", "postgres"]
J = TypeVar("J")
R = TypeVar("R")

PROCESS_COUNTS = (1, 2, 4)
ADAPTERS: tuple[Adapter, ...] = ("sqlite", "postgres")
# What makes a COMMIT durable on PostgreSQL; the bench refuses to call a server durable
# unless all three read back "on".
DURABLE_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes")
SHOWN_SETTINGS = (
    *DURABLE_SETTINGS,
    "wal_sync_method",
    "commit_delay",
    "shared_buffers",
    "max_connections",
)
# How long a worker or the parent waits at one barrier: a phase, or a worker's start-up.
PHASE_TIMEOUT_S = 600.0
_JOIN_TIMEOUT_S = 30.0
_ERROR_CHARS = 4000


@dataclass(frozen=True, slots=True)
class Target:
    """One database a figure runs on: a SQLite file path or a PostgreSQL URL (no password)."""

    adapter: Adapter
    location: str

    @property
    def label(self) -> str:
        return "SQLite" if self.adapter == "sqlite" else "PostgreSQL"

    def open(self) -> Opening[RuntimeStore]:
        """Open this target's store as every worker does (SQLite: WAL, synchronous=FULL)."""
        if self.adapter == "sqlite":
            return RuntimeStore.open(self.location, synchronous="FULL")
        return RuntimeStore.open_postgres(self.location)

    def count(self, sql: str) -> int:
        """``SELECT count(*) ...`` on this database, from the parent (no event loop runs)."""
        if self.adapter == "sqlite":
            with contextlib.closing(sqlite3.connect(self.location)) as conn:
                value = conn.execute(sql).fetchone()[0]
        else:
            import psycopg

            with psycopg.connect(self.location, connect_timeout=10) as conn:
                row = conn.execute(sql).fetchone()
                value = row[0] if row else None
        return int(value)


# -- PostgreSQL --------------------------------------------------------------------------


class PostgresServer:
    """Where the PostgreSQL figures run: a durable throwaway cluster, or ``--postgres-url``."""

    def __init__(self, admin_url: str, *, started_here: bool, data_dir: str | None) -> None:
        self.admin_url = admin_url
        self.started_here = started_here
        self.data_dir = data_dir
        self._names = itertools.count()
        self._created: list[str] = []

    @classmethod
    @contextlib.contextmanager
    def provide(cls, url: str | None) -> Iterator[PostgresServer]:
        """The server at ``url``, else a throwaway cluster with durable settings, stopped
        and removed at the end. ``PGPASSWORD`` is set to its password meanwhile, so every
        worker process (spawned with this environment) authenticates as production does."""
        if url is not None:
            server = cls(url, started_here=False, data_dir=None)
            try:
                yield server
            finally:
                server.drop_created()
            return
        try:
            from tests.postgres import PostgresCluster, PostgresUnavailable
        except ImportError as exc:
            raise SystemExit(
                "--postgres starts a throwaway cluster with tests/postgres.py: run from the "
                f"repository root with PYTHONPATH=$PWD, or pass --postgres-url ({exc})"
            ) from None
        try:
            cluster = PostgresCluster.start(durable=True)
        except PostgresUnavailable as exc:
            raise SystemExit(f"--postgres: cannot start PostgreSQL here: {exc}") from None
        previous = os.environ.get("PGPASSWORD")
        os.environ["PGPASSWORD"] = cluster.password
        server = cls(cluster.url(), started_here=True, data_dir=str(cluster.data))
        try:
            yield server
        finally:
            try:
                server.drop_created()
            finally:
                if previous is None:
                    os.environ.pop("PGPASSWORD", None)
                else:
                    os.environ["PGPASSWORD"] = previous
                cluster.stop()

    def _admin(self) -> Any:
        import psycopg

        return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=10)

    def settings(self) -> dict[str, str]:
        """The server version and the settings the figures depend on, read back."""
        with self._admin() as conn:
            shown = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in SHOWN_SETTINGS}
            version = conn.execute("SELECT version()").fetchone()[0]
        return {"version": str(version), **{k: str(v) for k, v in shown.items()}}

    def cpu_seconds(self) -> float | None:
        """CPU seconds (user + system) the server's processes have used so far: the
        postmaster and its children, when this bench started it (else None)."""
        if self.data_dir is None:
            return None
        try:
            pid = int((Path(self.data_dir) / "postmaster.pid").read_text().split()[0])
            postmaster = psutil.Process(pid)
            own = postmaster.cpu_times()
            # Backends and workers that exited were reaped by the postmaster: their CPU
            # time is in its children_* counters; the live ones are counted one by one.
            total = own.user + own.system + own.children_user + own.children_system
            for child in postmaster.children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    times = child.cpu_times()
                    total += times.user + times.system
            return total
        except (OSError, ValueError, IndexError, psutil.Error):
            return None

    def database_stats(self, url: str, *, settle_s: float = 10.0) -> dict[str, int]:
        """Cumulative counters of the database at ``url`` (pg_stat_database): commits,
        rollbacks, rows read, once no client is connected to it (a backend flushes its
        counters as it exits; while it runs, only every second or so), waiting at most
        ``settle_s`` for that."""
        name = urlsplit(url).path.lstrip("/")
        query = (
            "SELECT numbackends, xact_commit, xact_rollback, tup_returned "
            "FROM pg_stat_database WHERE datname = %s"
        )
        deadline = time.monotonic() + settle_s
        with self._admin() as conn:
            while True:
                conn.execute("SELECT pg_stat_clear_snapshot()")
                row = conn.execute(query, (name,)).fetchone()
                if row is None:
                    raise RuntimeError(f"no statistics for database {name!r}")
                if row[0] == 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        # tup_returned: live rows read by sequential scans plus entries index scans returned.
        keys = ("backends", "commits", "rollbacks", "rows")
        return dict(zip(keys, (int(v) for v in row[:4]), strict=True))

    def seq_scans(self, url: str, *, limit: int = 6) -> list[tuple[str, int, int, int]]:
        """(table, sequential scans, rows they read, index scans) of the tables of the
        database at ``url`` with the most rows read by sequential scans. Under
        SERIALIZABLE a sequential scan takes a predicate lock on the whole table, so any
        concurrent write to it is a read/write conflict: these are the tables to index."""
        import psycopg

        query = (
            "SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0) "
            "FROM pg_stat_user_tables WHERE seq_tup_read > 0 "
            "ORDER BY seq_tup_read DESC LIMIT %s"
        )
        with psycopg.connect(url, connect_timeout=10) as conn:
            rows = conn.execute(query, (limit,)).fetchall()
        return [(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows]

    def paths(self) -> dict[str, str]:
        """Where the server keeps its files, when this bench started it."""
        return {"PostgreSQL data": self.data_dir} if self.data_dir else {}

    def describe(self, settings: dict[str, str]) -> str:
        """Lines saying which server this is, its settings, and whether COMMIT is durable."""
        from hostkit.store._pg_url import redact_url  # imports psycopg: only with --postgres

        where = (
            "a throwaway cluster started by this bench (tests/postgres.py, loopback TCP, "
            "SCRAM), stopped and removed at the end"
            if self.started_here
            else f"the existing server at {redact_url(self.admin_url)}"
        )
        shown = ", ".join(f"{name}={settings[name]}" for name in SHOWN_SETTINGS)
        durable = all(settings[name] == "on" for name in DURABLE_SETTINGS)
        verdict = (
            "durable: every COMMIT returns after its WAL is fsynced, like SQLite's FULL"
            if durable
            else "NOT DURABLE: a COMMIT may return before it is on disk; these PostgreSQL "
            "figures are not comparable with SQLite's FULL"
        )
        return (
            f"PostgreSQL: {settings['version']}\n  {where}\n  settings read back: {shown}\n"
            f"  {verdict}\n  hostkit: RuntimeStore.open_postgres(url) in every process (a pool "
            "of up to 8 connections each; writes SERIALIZABLE, claims READ COMMITTED + FOR "
            "UPDATE SKIP LOCKED)"
        )

    def create_database(self) -> str:
        """A new empty database on this server; its URL (the admin URL's, another dbname)."""
        name = f"hostkit_bench_{os.getpid()}_{next(self._names)}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self._created.append(name)
        parts = urlsplit(self.admin_url)
        return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))

    def drop_created(self) -> None:
        """Drop every database ``create_database`` made (FORCE: a failed worker's pool)."""
        names, self._created = self._created, []
        if not names:
            return
        with self._admin() as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- worker processes --------------------------------------------------------------------


class Gate:
    """A worker's side of the phase barriers: ``await gate.wait()`` before and after each
    phase. The barrier wait blocks, so it runs in a worker thread, with a deadline."""

    def __init__(self, barrier: multiprocessing.synchronize.Barrier, timeout_s: float) -> None:
        self._barrier = barrier
        self._timeout_s = timeout_s

    async def wait(self) -> None:
        await anyio.to_thread.run_sync(self._barrier.wait, self._timeout_s)


Entry = Callable[[J, int, Gate], Awaitable[R]]
Report = tuple[int, Any, str | None]
# What a worker reads from its queue besides a job: sit this figure out, or exit.
_IDLE, _STOP = "idle", "stop"


def _serve(
    entry: Entry[J, R],
    index: int,
    jobs: multiprocessing.Queue[Any],
    barrier: multiprocessing.synchronize.Barrier,
    results: multiprocessing.Queue[Report],
    phases: int,
    timeout_s: float,
) -> None:
    """A worker process: run each job it is sent, until told to stop. An idle worker still
    passes every barrier of the figure, so one barrier serves figures of any size."""
    try:
        while (job := jobs.get(timeout=timeout_s)) != _STOP:
            if job == _IDLE:
                for _ in range(2 * phases):
                    barrier.wait(timeout_s)
                continue
            value = anyio.run(entry, job, index, Gate(barrier, timeout_s))
            results.put((index, value, None))
    except BaseException:
        barrier.abort()  # the parent and the other workers stop waiting at once
        results.put((index, None, traceback.format_exc()[-_ERROR_CHARS:]))
        sys.exit(1)


@dataclass(frozen=True, slots=True)
class Figure(Generic[R]):
    """One figure's phases: wall seconds, the server's CPU seconds (None: not known, or
    SQLite, which has no server), and what each worker returned."""

    seconds: list[float]
    server_cpu_s: list[float | None]
    values: list[R]


class WorkerPool(Generic[J, R]):
    """``size`` worker processes (multiprocessing ``spawn``), started once for a whole run.

    ``run(jobs)`` hands one job to each of the first ``len(jobs)`` workers; the job's
    ``entry(job, index, gate)`` awaits ``gate.wait()`` twice per phase, before and after
    it, and a phase's seconds run from the first barrier opening to the second. Starting
    the processes (each imports hostkit afresh, seconds on a small machine) is paid once.
    """

    def __init__(
        self, entry: Entry[J, R], size: int, *, phases: int, timeout_s: float = PHASE_TIMEOUT_S
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._phases = phases
        self._timeout_s = timeout_s
        self._barrier = ctx.Barrier(size + 1)
        self._results: multiprocessing.Queue[Report] = ctx.Queue()
        self._jobs: list[multiprocessing.Queue[Any]] = [ctx.Queue() for _ in range(size)]
        self._workers = [
            ctx.Process(
                target=_serve,
                args=(entry, i, self._jobs[i], self._barrier, self._results, phases, timeout_s),
                name=f"bench-worker-{i}",
                daemon=True,
            )
            for i in range(size)
        ]

    def __enter__(self) -> WorkerPool[J, R]:
        for worker in self._workers:
            worker.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        for jobs in self._jobs:
            jobs.put(_STOP)
        for worker in self._workers:
            worker.join(_JOIN_TIMEOUT_S)
            if worker.is_alive():
                worker.terminate()
                worker.join(_JOIN_TIMEOUT_S)
        for q in (*self._jobs, self._results):
            q.close()

    def run(
        self,
        jobs: Sequence[J],
        *,
        between: Callable[[int], None] | None = None,
        server_cpu: Callable[[], float | None] | None = None,
    ) -> Figure[R]:
        """Run one figure: ``jobs[i]`` in worker ``i``; what each phase took.

        ``between(phase)`` runs here after each phase while the workers wait (row
        counts). ``server_cpu()`` (the database server's CPU seconds so far, or None) is
        read as each phase starts and ends. A worker's exception breaks the barrier and
        is raised here as ``RuntimeError`` with its traceback; the pool is unusable then.
        """
        if not 1 <= len(jobs) <= len(self._workers):
            raise ValueError(f"1-{len(self._workers)} jobs, not {len(jobs)}")
        for index, queue_ in enumerate(self._jobs):
            queue_.put(jobs[index] if index < len(jobs) else _IDLE)
        seconds: list[float] = []
        server: list[float | None] = []
        sample = server_cpu or (lambda: None)
        try:
            for phase in range(self._phases):
                self._barrier.wait(self._timeout_s)
                started, cpu = time.perf_counter(), sample()
                self._barrier.wait(self._timeout_s)
                seconds.append(time.perf_counter() - started)
                ended = sample()
                # Negative when a server process's time was lost between the samples (it
                # exited and was not yet counted as reaped): unknown rather than wrong.
                spent = None if cpu is None or ended is None else ended - cpu
                server.append(None if spent is None or spent < 0 else spent)
                if between is not None:
                    between(phase)
            values = self._collect(len(jobs))
        except threading.BrokenBarrierError:
            raise RuntimeError(self._failures()) from None
        except BaseException:
            self._barrier.abort()
            raise
        return Figure(seconds, server, values)

    def _collect(self, count: int) -> list[R]:
        values: dict[int, R] = {}
        for _ in range(count):
            index, value, error = self._results.get(timeout=self._timeout_s)
            if error is not None:
                raise RuntimeError(f"worker {index} failed:\n{error}")
            values[index] = value
        return [values[index] for index in range(count)]

    def _failures(self) -> str:
        """What the workers reported after the barrier broke (one failed or timed out)."""
        errors: list[str] = []
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and len(errors) < len(self._workers):
            try:
                index, _, error = self._results.get(timeout=0.5)
            except queue.Empty:
                if not any(worker.is_alive() for worker in self._workers):
                    break
                continue
            if error is not None:
                errors.append(f"worker {index}:\n{error}")
        if not errors:
            codes = [worker.exitcode for worker in self._workers]
            return f"a phase timed out or a worker died without a report (exit codes {codes})"
        return "a worker failed:\n" + "\n".join(errors)


# -- report ------------------------------------------------------------------------------


def parse_counts(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4): the process counts of a run."""
    counts = tuple(int(part) for part in text.split(",") if part.strip())
    if not counts or any(not 1 <= n <= 64 for n in counts):
        raise ValueError("process counts are 1-64, comma-separated")
    return counts


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest rank: the p99 of 200 samples is the 198th smallest."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(len(ordered) * fraction) - 1)]


def machine_facts(paths: dict[str, str]) -> list[str]:
    """Lines describing where the figures were taken: cores, memory, disks, versions."""
    import importlib.metadata

    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = psutil.virtual_memory().total / 2**30
    lines = [
        f"machine: {psutil.cpu_count(logical=True)} logical CPUs "
        f"({psutil.cpu_count(logical=False)} physical), {model}, {memory:.0f} GiB RAM, "
        f"{platform.system()} {platform.release()}",
        f"Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, "
        + ", ".join(
            f"{name} {importlib.metadata.version(name)}"
            for name in ("hostkit", "anyio", "psycopg", "psycopg-pool")
        ),
    ]
    for label, path in paths.items():
        lines.append(f"{label}: {path} ({_filesystem(path)})")
    for path in dict.fromkeys(str(Path(p).parent) for p in paths.values()):
        median, worst = fsync_latency(path)
        lines.append(
            f"fdatasync of an 8 KiB write under {path}: median {median * 1000:.2f} ms, max "
            f"{worst * 1000:.2f} ms over {_FSYNC_SAMPLES} (what a durable COMMIT waits for)"
        )
    return lines


_FSYNC_SAMPLES = 50


def fsync_latency(directory: str) -> tuple[float, float]:
    """(median, max) seconds of write + fdatasync of 8 KiB in a scratch file there."""
    samples: list[float] = []
    block = os.urandom(8192)
    fd, name = tempfile.mkstemp(prefix="hostkit-fsync-", dir=directory)
    try:
        for _ in range(_FSYNC_SAMPLES):
            started = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(name)
    return statistics.median(samples), max(samples)


def _filesystem(path: str) -> str:
    best: Any = None
    for part in psutil.disk_partitions(all=True):
        if path.startswith(part.mountpoint) and (
            best is None or len(part.mountpoint) > len(best.mountpoint)
        ):
            best = part
    if best is None:
        return "filesystem unknown"
    return f"{best.fstype} on {best.device}, mounted at {best.mountpoint}"


def print_table(
    unit: str,
    metrics: Sequence[str],
    counts: Sequence[int],
    figures: dict[tuple[str, Adapter, int], float],
    *,
    decimals: int = 0,
) -> None:
    """One row per (metric, process count): SQLite, PostgreSQL, their ratio, and each
    adapter's scaling over its own 1-process figure (when 1 is among the counts)."""
    header = (
        f"{unit:<18}{'procs':>6}{'SQLite':>11}{'PostgreSQL':>12}{'PG/SQLite':>11}"
        f"{'SQLite xN':>11}{'PG xN':>9}"
    )
    print(header)
    print("-" * len(header))
    for metric in metrics:
        for n in counts:
            lite, pg = figures[(metric, "sqlite", n)], figures[(metric, "postgres", n)]
            row = (
                f"{metric:<18}{n:>6}{lite:>11,.{decimals}f}{pg:>12,.{decimals}f}{pg / lite:>10.2f}x"
            )
            if 1 in counts:
                lite_1, pg_1 = figures[(metric, "sqlite", 1)], figures[(metric, "postgres", 1)]
                row += f"{lite / lite_1:>10.2f}x{pg / pg_1:>8.2f}x"
            print(row)


def print_cpu_table(
    unit: str,
    metrics: Sequence[str],
    counts: Sequence[int],
    cpu: dict[tuple[str, Adapter, int], tuple[float, float | None]],
) -> None:
    """CPU milliseconds per unit of work: the worker processes' (all their threads), and
    the PostgreSQL server's (n/a: not known, e.g. a server process exited mid-phase, or
    a server this bench did not start). Less disturbed than wall-clock rates by other
    load on the machine, and what sizing a deployment needs."""
    header = (
        f"{unit:<18}{'procs':>6}{'SQLite':>11}{'PG workers':>12}{'PG server':>11}"
        f"{'PG total':>10}{'PG/SQLite':>11}"
    )
    print(header)
    print("-" * len(header))
    for metric in metrics:
        for n in counts:
            lite, _ = cpu[(metric, "sqlite", n)]
            workers, server = cpu[(metric, "postgres", n)]
            if server is None:
                tail = f"{'n/a':>11}{'n/a':>10}{'n/a':>11}"
            else:
                total = workers + server
                tail = f"{server:>11.2f}{total:>10.2f}{total / lite:>10.2f}x"
            print(f"{metric:<18}{n:>6}{lite:>11.2f}{workers:>12.2f}{tail}")


def median_cpu(samples: Sequence[tuple[float, float | None]]) -> tuple[float, float | None]:
    """The median of each part of (workers, server) CPU figures over rounds (the
    server's over the rounds where it is known)."""
    servers = [server for _, server in samples if server is not None]
    return (
        statistics.median(workers for workers, _ in samples),
        statistics.median(servers) if servers else None,
    )


def load_line(when: str) -> str:
    """The load averages now: other work on the machine lowers and scatters the figures."""
    one, five, fifteen = psutil.getloadavg()
    return (
        f"load average {when}: {one:.1f} (1 min), {five:.1f} (5 min), {fifteen:.1f} "
        f"(15 min) on {psutil.cpu_count()} CPUs"
    )


def print_pg_work(unit: str, counts: Sequence[int], work: dict[int, dict[str, float]]) -> None:
    """What PostgreSQL did per unit of work at each process count (pg_stat_database over
    the whole figure, warm-up and opening the stores included)."""
    header = f"{unit:<22}{'procs':>6}{'commits':>10}{'rollbacks':>11}{'rows scanned':>14}"
    print(header)
    print("-" * len(header))
    for n in counts:
        w = work[n]
        print(f"{'':<22}{n:>6}{w['commits']:>10.1f}{w['rollbacks']:>11.2f}{w['rows']:>14.0f}")


def stats_per(before: dict[str, int], after: dict[str, int], units: int) -> dict[str, float]:
    """(after - before) / units for each counter."""
    return {key: (after[key] - before[key]) / units for key in after if key != "backends"}


def print_seq_scans(title: str, scans: list[tuple[str, int, int, int]], units: int) -> None:
    """The tables PostgreSQL read by sequential scan in one figure, per unit of work."""
    if not scans:
        print(f"{title}: no sequential scans")
        return
    print(f"{title} (per unit of work; under SERIALIZABLE each locks the whole table):")
    for table, scans_, rows, index in scans:
        print(
            f"  {table:<24} seq scans {scans_ / units:>7.2f}  rows read {rows / units:>9.1f}  "
            f"index scans {index / units:>7.2f}"
        )
