"""Turn latency and throughput of a hostkit Host against the OpenAI Agents SDK.

What is measured: wall-clock latency of whole turns (p50/p99 in ms) and turns
per second, for one session running turns back to back and for 50 sessions
running concurrently (each session's turns in order, as a chat would). Every
turn is the same workload on both sides: a scripted model asks for one tool
call, an async tool returns a short string, the model is called again and
answers "done" (two model steps, one tool call), with the conversation kept
in a SQLite file under one temporary directory. No network is involved.

Why: with the model scripted, the figures are the runtime's own overhead per
turn (bookkeeping, persistence, scheduling), which is what a user choosing a
runtime pays on top of their model. The two sides do not persist the same
things, so the output says what each one writes; read the ratios with that.

Each figure uses a fresh database file and is preceded by a warm-up of the
same shape in other sessions; afterwards the stored rows are counted.

``--postgres`` measures something else, in place of all the above: hostkit's
turns/s on SQLite and on PostgreSQL with 1, 2 and 4 worker processes, each a
Host on the one shared database running ``--scale-sessions`` sessions of
``--scale-turns`` turns (the zero-latency model, so the figures are the
runtime's and the store's own cost). PostgreSQL is a throwaway cluster with
durable settings started for the run, or ``--postgres-url``; bench/_scaleout.py
says how processes are started and timed.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import importlib.metadata
import io
import itertools
import os
import pstats
import queue
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import agents
import anyio
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
from agents import Agent, ModelResponse, Runner, SQLiteSession, Usage, function_tool
from agents.items import TResponseStreamEvent
from openai.types import responses as oai

from hostkit.effects import ToolContext, tool
from hostkit.errors import TurnInfrastructureError, TurnRejected
from hostkit.host import Host, parse_config
from hostkit.testing import CallTools, Reply, ScriptedModel, capabilities
from hostkit.types import ConversationFacts, ModelRequest, TurnRequest, new_id

SESSIONS = 50
INSTRUCTIONS = "You are a helpful assistant. Answer briefly."
PEER_ITEMS_PER_TURN = 4  # user input, function_call, function_call_output, assistant message
Sync = Literal["FULL", "NORMAL"]
RunTurn = Callable[[str], Awaitable[None]]
PERSISTED = """
tps/peer: hostkit turns/s over the peer's; p50/p99 p/h: peer latency over hostkit's
(higher is better for hostkit in all three).
What each side persists per turn (WAL-mode SQLite file):
  hostkit: turn row (idempotency key, lease, terminal result) and the session lease,
    6 turn events, 4 transcript messages, 2 context decisions, 2 usage observations, in
    4 write transactions: admission (binding, session lease, turn row, turn.started, the
    input), the tool-calling answer with its step's decision, usage and calibration, the
    tool's result, and the terminal commit with the final answer and its observation;
    concurrent ones share a
    COMMIT. FULL syncs the WAL at every COMMIT; NORMAL only at checkpoints (survives a
    process crash, not a power loss). Each turn reads only the history rows it has not
    seen (a per-session window cache) and estimates each message once.
  openai-agents SQLiteSession: 4 session items (JSON) and the session row's
    updated_at, in 3 commits (input; tool call + output; final message), after
    reading the session's whole history. It sets no synchronous pragma, so it
    runs at the build's WAL default: here {build}
    (2 = FULL: it also syncs on every commit, like hostkit FULL).
hostkit's provider path streams (ScriptedModel.stream); Runner.run does not. p99 over a
few hundred turns on a shared machine is noisy: compare p50 and turns/s first."""


@dataclass(frozen=True, slots=True)
class Figures:
    """One measured run: latency percentiles over all its turns, and total throughput."""

    p50_ms: float
    p99_ms: float
    turns_per_s: float
    cpu_ms_per_turn: float
    # Of cpu_ms_per_turn, what the event loop's own thread spent; the rest ran on other
    # threads (for hostkit: its SQLite connections' threads, where statements and
    # commits run).
    loop_cpu_ms_per_turn: float


async def _sessions(
    run_turn: RunTurn,
    *,
    sessions: int,
    turns: int,
    prefix: str,
    failures: list[str] | None = None,
) -> list[float]:
    """``sessions`` concurrent sessions of ``turns`` turns each, in order; seconds per turn.

    With ``failures``, a turn the store failed (``TurnRejected``: not admitted;
    ``TurnInfrastructureError``: no terminal record could be written) is recorded there,
    and its session runs no more turns (its lease may still be held); otherwise every
    exception propagates.
    """
    latencies: list[float] = []

    async def session(key: str) -> None:
        for _ in range(turns):
            start = time.perf_counter()
            try:
                await run_turn(key)
            except (TurnInfrastructureError, TurnRejected) as exc:
                if failures is None:
                    raise
                failures.append(f"{type(exc).__name__} <- {_root_cause(exc)}")
                return
            latencies.append(time.perf_counter() - start)

    async with anyio.create_task_group() as tg:
        for index in range(sessions):
            tg.start_soon(session, f"{prefix}-{index}")
    return latencies


async def _drive(
    run_turn: RunTurn,
    *,
    sessions: int,
    turns: int,
    prefix: str,
    profiler: cProfile.Profile | None = None,
) -> Figures:
    start, cpu, loop_cpu = time.perf_counter(), time.process_time(), time.thread_time()
    if profiler is not None:
        profiler.enable()
    try:
        latencies = await _sessions(run_turn, sessions=sessions, turns=turns, prefix=prefix)
    finally:
        if profiler is not None:
            profiler.disable()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    loop_cpu = time.thread_time() - loop_cpu
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    count = len(latencies)
    return Figures(
        p50 * 1000, p99 * 1000, count / wall, cpu * 1000 / count, loop_cpu * 1000 / count
    )


async def _measure(
    run_turn: RunTurn,
    *,
    sessions: int,
    turns: int,
    warmup: int,
    profiler: cProfile.Profile | None = None,
) -> Figures:
    await _drive(run_turn, sessions=sessions, turns=warmup, prefix="warm")
    return await _drive(run_turn, sessions=sessions, turns=turns, prefix="bench", profiler=profiler)


def _check(label: str, found: object, expected: int) -> None:
    if found != expected:
        raise RuntimeError(f"{label}: found {found} stored rows, expected {expected}")


@tool("bench_echo", description="Echo the text back.")
async def hostkit_echo(ctx: ToolContext, text: str) -> str:
    return f"echo: {text}"


def decide(request: ModelRequest) -> Reply | CallTools:
    """Call the tool once, then answer: works for any number of turns and sessions."""
    if request.messages[-1].role == "tool":
        return Reply("done")
    return CallTools(("bench_echo", {"text": "ping"}))


def slow_decide(delay: float) -> Callable[[ModelRequest], Awaitable[Reply | CallTools]]:
    """``decide`` after a model latency of ``delay`` seconds per call."""

    async def decider(request: ModelRequest) -> Reply | CallTools:
        await anyio.sleep(delay)
        return decide(request)

    return decider


def _root_cause(exc: BaseException) -> str:
    """The innermost ``__cause__`` of ``exc``, bounded: what made the turn fail."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    first = (str(exc).splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:200]}"


def _turn_runner(host: Host) -> RunTurn:
    """One turn of the bench workload in the session of conversation ``key``, checked."""

    async def run_turn(key: str) -> None:
        facts = ConversationFacts(channel="bench", conversation_key=key, principal_key=key)
        result = await host.turns.run(
            TurnRequest(input="hi", principal=facts, request_id=new_id("req"))
        )
        statuses = [effect.status for effect in result.effects]
        if result.outcome != "completed" or result.text != "done" or statuses != ["succeeded"]:
            raise RuntimeError(f"unexpected hostkit turn: {result}")

    return run_turn


async def bench_hostkit(
    root: Path,
    *,
    sync: Sync,
    sessions: int,
    turns: int,
    warmup: int,
    delay: float = 0.0,
    profiler: cProfile.Profile | None = None,
) -> Figures:
    database = root / f"hostkit-{sync}-{sessions}-{new_id('db')}.db"
    section = {"database": str(database), "workspace": str(root), "synchronous": sync}
    agent = {"provider": "bench", "instructions": INSTRUCTIONS, "memory": False}
    providers = {"bench": {"kind": "scripted"}}
    config = parse_config(
        {"host": section, "providers": providers, "agents": {"assistant": agent}}, base_dir=root
    )
    model = ScriptedModel([slow_decide(delay) if delay else decide], repeat_last=True)
    async with Host.open(config, capabilities=capabilities(model, tools=[hostkit_echo])) as host:
        figures = await _measure(
            _turn_runner(host), sessions=sessions, turns=turns, warmup=warmup, profiler=profiler
        )
    with closing(sqlite3.connect(database)) as conn:  # the loop is idle: blocking is fine
        (count,) = conn.execute("SELECT count(*) FROM turns WHERE status = 'completed'").fetchone()
    _check(f"hostkit {sync}", count, sessions * (turns + warmup))
    return figures


class BenchModel(agents.Model):
    """The SDK's Model interface, scripted like ``decide``: one tool call, then "done"."""

    def __init__(self) -> None:
        self._ids = itertools.count()

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[agents.TResponseInputItem],
        model_settings: agents.ModelSettings,
        tools: list[agents.Tool],
        output_schema: agents.AgentOutputSchemaBase | None,
        handoffs: list[agents.Handoff],
        tracing: agents.ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> ModelResponse:
        n = next(self._ids)  # call ids must be unique per invocation (see Model's docstring)
        last: Any = input[-1] if isinstance(input, list) and input else {}
        item: oai.ResponseOutputMessage | oai.ResponseFunctionToolCall
        if last.get("type") == "function_call_output":
            text = oai.ResponseOutputText(text="done", type="output_text", annotations=[])
            item = oai.ResponseOutputMessage(
                id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
            )
        else:
            item = oai.ResponseFunctionToolCall(
                id=f"fc_{n}",
                call_id=f"call_{n}",
                type="function_call",
                name="bench_echo",
                arguments='{"text":"ping"}',
            )
        usage = Usage(requests=1, input_tokens=20, output_tokens=5, total_tokens=25)
        return ModelResponse(output=[item], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the benchmark uses Runner.run, which does not stream")


@function_tool(name_override="bench_echo")
async def peer_echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


async def bench_peer(root: Path, *, sessions: int, turns: int, warmup: int) -> Figures:
    database = root / f"peer-{sessions}.db"
    model = BenchModel()
    agent = Agent(name="assistant", instructions=INSTRUCTIONS, model=model, tools=[peer_echo])
    # One SQLiteSession per conversation, as an application would keep it.
    open_sessions: dict[str, SQLiteSession] = {}

    async def run_turn(key: str) -> None:
        session = open_sessions.get(key)
        if session is None:
            session = open_sessions[key] = SQLiteSession(key, database)
        result = await Runner.run(agent, "hi", session=session)
        if result.final_output != "done":
            raise RuntimeError(f"unexpected peer turn: {result.final_output!r}")

    try:
        figures = await _measure(run_turn, sessions=sessions, turns=turns, warmup=warmup)
    finally:
        for session in open_sessions.values():
            session.close()
    with closing(sqlite3.connect(database)) as conn:  # the loop is idle: blocking is fine
        (count,) = conn.execute("SELECT count(*) FROM agent_messages").fetchone()
    _check("peer", count, PEER_ITEMS_PER_TURN * sessions * (turns + warmup))
    return figures


def _row(label: str, mode: str, f: Figures, peer: Figures | None) -> str:
    cells = (
        f"{label:<16}{mode:<14}{f.p50_ms:>9.2f}{f.p99_ms:>9.2f}{f.turns_per_s:>10.1f}"
        f"{f.cpu_ms_per_turn:>10.3f}"
    )
    if peer is None:
        return cells
    ratios = (
        f"{f.turns_per_s / peer.turns_per_s:>9.2f}x"
        f"{peer.cpu_ms_per_turn / f.cpu_ms_per_turn:>9.2f}x"
    )
    return cells + ratios


def _commit_cpu_ms(root: Path, commits: int = 300) -> float:
    """CPU (ms, this thread, system time included) of one synchronous=FULL WAL commit.

    One small row per transaction, on the filesystem the figures ran on: the
    floor under each of a turn's write transactions, whatever the runtime does.
    """
    with closing(sqlite3.connect(root / "commit-floor.db", isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, value TEXT)")
        start = time.thread_time()
        for _ in range(commits):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO floor (value) VALUES (?)", ("x" * 100,))
            conn.execute("COMMIT")
        return (time.thread_time() - start) * 1000 / commits


async def _hop_cpu_ms(cpus: tuple[int, int] | None, trips: int = 2000) -> float:
    """CPU (ms, all threads) of one round trip: event loop -> a thread -> event loop.

    The thread does nothing. This is what handing work to a thread and
    awaiting its answer costs here (aiosqlite's way: a queue, then
    ``call_soon_threadsafe``), whatever the work and whatever the runtime.
    It depends on where the scheduler put the two threads (waking a thread
    on another, idle CPU costs several times more), so ``cpus`` pins the loop's
    thread and the other one to these two CPUs for the measurement.
    """
    loop = asyncio.get_running_loop()
    inbox: queue.SimpleQueue[asyncio.Future[None] | None] = queue.SimpleQueue()

    def worker() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, {cpus[1]})
        while (future := inbox.get()) is not None:
            loop.call_soon_threadsafe(future.set_result, None)

    allowed = os.sched_getaffinity(0) if cpus is not None else set()
    if cpus is not None:
        os.sched_setaffinity(0, {cpus[0]})
    thread = threading.Thread(target=worker, name="bench-hop", daemon=True)
    thread.start()
    try:
        start = time.process_time()
        for _ in range(trips):
            future = loop.create_future()
            inbox.put(future)
            await future
        return (time.process_time() - start) * 1000 / trips
    finally:
        inbox.put(None)
        await anyio.to_thread.run_sync(thread.join)
        if cpus is not None:
            os.sched_setaffinity(0, allowed)


def _two_cpus() -> tuple[int, int] | None:
    """Two CPUs this process may run on, if it can pin threads to them (Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return (allowed[0], allowed[1]) if len(allowed) >= 2 else None


async def _profile(root: Path, *, turns: int) -> None:
    """cProfile of the event-loop thread over ``turns`` sequential turns (FULL)."""
    profiler = cProfile.Profile()
    await bench_hostkit(root, sync="FULL", sessions=1, turns=turns, warmup=5, profiler=profiler)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(18)
    print(f"\nprofile of {turns} turns (event-loop thread, sorted by own time):")
    print("\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip()))


async def main(args: argparse.Namespace) -> None:
    sequential, per_session, warmup = (30, 2, 1) if args.quick else (200, 6, 2)
    # Scaling: each of the 50 sessions runs two thirds as many turns as the one session,
    # so their common start (all admitted in the same instant) is a small part of it.
    latency_turns = 10 if args.quick else 30
    many_turns = max(2, latency_turns * 2 // 3)
    if not args.no_freeze:
        # What `hostkit serve` does once it listens: the objects of the imports and the
        # startup leave the collector's scans (both runtimes benefit alike).
        gc.collect()
        gc.freeze()
    agents.set_tracing_disabled(True)
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}"
        for name in ("hostkit", "openai-agents", "openai", "anyio")
    )
    print(f"SQLite {sqlite3.sqlite_version}; {versions}; asyncio backend")
    print("a turn: model -> 1 tool call -> model -> text; ratios vs the peer in the same mode")
    print("cpu ms/turn: process CPU time (all threads) over the measured turns / turns")
    print(
        "startup heap: "
        + ("left to the collector (--no-freeze)" if args.no_freeze else "frozen after the imports")
        + ", as hostkit serve freezes it once it listens\n"
    )
    header = (
        f"{'runtime':<16}{'mode':<14}{'p50 ms':>9}{'p99 ms':>9}{'turns/s':>10}"
        f"{'cpu ms/t':>10}{'tps/peer':>10}{'cpu p/h':>10}"
    )
    with tempfile.TemporaryDirectory(prefix="hostkit-turn-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        print(f"-- zero-latency model: 1 session x {sequential}, {SESSIONS} x {per_session}")
        print(header)
        print("-" * len(header))
        results: dict[str, Figures] = {}
        for mode, sessions, turns, warm in (
            ("1 session", 1, sequential, warmup * 5),
            (f"{SESSIONS} sessions", SESSIONS, per_session, warmup),
        ):
            peer = await bench_peer(root, sessions=sessions, turns=turns, warmup=warm)
            full, normal = [
                await bench_hostkit(root, sync=sync, sessions=sessions, turns=turns, warmup=warm)
                for sync in ("FULL", "NORMAL")
            ]
            results[mode] = full
            print(_row("hostkit FULL", mode, full, peer))
            print(_row("hostkit NORMAL", mode, normal, peer))
            print(_row("openai-agents", mode, peer, None))
        delay = args.latency_ms / 1000
        print(f"\n-- model sleeping {args.latency_ms:g} ms per call (FULL): scaling with sessions")
        print(header[: len(header) - 20])
        print("-" * (len(header) - 20))
        one = await bench_hostkit(
            root, sync="FULL", sessions=1, turns=latency_turns, warmup=2, delay=delay
        )
        many = await bench_hostkit(
            root, sync="FULL", sessions=SESSIONS, turns=many_turns, warmup=1, delay=delay
        )
        print(_row("hostkit FULL", f"1 x {latency_turns}", one, None))
        print(_row("hostkit FULL", f"{SESSIONS} x {many_turns}", many, None))
        print("\nsummary (goals from issue 10):")
        single = results["1 session"]
        cpu, loop_cpu = single.cpu_ms_per_turn, single.loop_cpu_ms_per_turn
        print(f"  Host CPU per turn, 1 session, FULL: {cpu:.3f} ms (goal <= 1 ms)")
        print(
            f"    event-loop thread {loop_cpu:.3f} ms, SQLite connection threads "
            f"{cpu - loop_cpu:.3f} ms (statements and commits)"
        )
        commit = await anyio.to_thread.run_sync(_commit_cpu_ms, root)
        print(
            f"    one FULL commit of one small row here: {commit:.3f} ms of CPU; "
            "a turn makes 4 write transactions"
        )
        cpus = _two_cpus()
        if cpus is not None:
            near = await _hop_cpu_ms((cpus[0], cpus[0]))
            far = await _hop_cpu_ms(cpus)
            print(
                "    one round trip event loop -> thread -> event loop here: "
                f"{near:.3f} ms of CPU with both threads on one CPU, {far:.3f} ms on two; "
                "a turn makes 5 to its SQLite threads (4 writes, 1 read)"
            )
            print(
                f"    so {4 * commit + 5 * near:.3f} to {4 * commit + 5 * far:.3f} ms of a "
                "turn's CPU is commits and thread hops at their floor, before any statement "
                "or turn logic runs"
            )
        ratio = many.turns_per_s / one.turns_per_s
        print(
            f"  {SESSIONS} sessions / 1 session turns/s at {args.latency_ms:g} ms model latency: "
            f"{ratio:.1f}x (goal >= 40x)"
        )
        if args.profile:
            await _profile(root, turns=sequential)
    with closing(sqlite3.connect(":memory:")) as conn:
        options = [row[0] for row in conn.execute("PRAGMA compile_options")]
    build = ", ".join(option for option in options if "SYNCHRONOUS" in option)
    print(PERSISTED.format(build=build))


# -- SQLite and PostgreSQL across worker processes (--postgres) --------------------------

# Phases of a worker process: warm-up turns, timed turns.
SCALE_PHASES = 2
TIMED_PHASE = 1
TURN_STATUSES = (
    "completed",
    "running",
    "needs_user",
    "failed",
    "cancelled",
    "lost",
    "indeterminate",
)


@dataclass(frozen=True, slots=True)
class ScaleJob:
    """What one worker process of a figure does: a Host on ``target`` running its sessions."""

    target: Target
    root: str  # this process's own directory: workspace, artifacts, cores
    sessions: int
    turns: int
    warmup: int


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """What one worker process reports: seconds per timed turn that completed, CPU
    seconds over the timed phase, and why each failed turn (warm-up or timed) failed."""

    latencies_s: tuple[float, ...]
    cpu_s: float
    failures: tuple[str, ...]
    completed: int  # turns that returned completed, warm-up included


def _scale_config(job: ScaleJob) -> Any:
    root = Path(job.root)
    section: dict[str, Any] = {"workspace": str(root / "workspace"), "synchronous": "FULL"}
    document: dict[str, Any] = {
        "host": section,
        "providers": {"bench": {"kind": "scripted"}},
        "agents": {
            "assistant": {"provider": "bench", "instructions": INSTRUCTIONS, "memory": False}
        },
    }
    if job.target.adapter == "sqlite":
        section["database"] = job.target.location
    else:
        document["store"] = {"url": job.target.location}
    return parse_config(document, base_dir=root)


async def scale_worker(job: ScaleJob, index: int, gate: Gate) -> ScaleResult:
    """One process: a Host on the shared database, its own sessions (``p{index}-...``)."""
    model = ScriptedModel([decide], repeat_last=True)
    tools = capabilities(model, tools=[hostkit_echo])
    failures: list[str] = []
    async with Host.open(_scale_config(job), capabilities=tools) as host:
        run_turn = _turn_runner(host)
        await gate.wait()
        warm = await _sessions(
            run_turn,
            sessions=job.sessions,
            turns=job.warmup,
            prefix=f"warm-p{index}",
            failures=failures,
        )
        await gate.wait()
        await gate.wait()
        cpu = time.process_time()
        latencies = await _sessions(
            run_turn,
            sessions=job.sessions,
            turns=job.turns,
            prefix=f"bench-p{index}",
            failures=failures,
        )
        cpu = time.process_time() - cpu
        await gate.wait()
    return ScaleResult(tuple(latencies), cpu, tuple(failures), len(warm) + len(latencies))


@dataclass(frozen=True, slots=True)
class TurnFigure:
    """One figure: rates and latencies, CPU ms per turn (workers, server), failures."""

    rates: dict[str, float]
    cpu_ms: tuple[float, float | None]
    failures: tuple[str, ...]
    states: dict[str, int]  # turn rows by status at the end
    pg_work: dict[str, float] | None  # pg_stat_database per completed turn
    seq_scans: list[tuple[str, int, int, int]]  # PostgreSQL: the most-scanned tables


def _turn_states(target: Target) -> dict[str, int]:
    return {
        status: target.count(f"SELECT count(*) FROM turns WHERE status = '{status}'")
        for status in TURN_STATUSES
    }


def scale_figure(
    pool: WorkerPool[ScaleJob, ScaleResult],
    target: Target,
    processes: int,
    root: Path,
    args: argparse.Namespace,
    server: PostgresServer,
) -> TurnFigure:
    """``processes`` Hosts on ``target``, each running its sessions."""
    sessions, turns, warmup = args.scale_sessions, args.scale_turns, 1
    jobs = []
    for index in range(processes):
        home = root / f"p{index}"
        home.mkdir()
        jobs.append(ScaleJob(target, str(home), sessions, turns, warmup))
    postgres = target.adapter == "postgres"
    before = server.database_stats(target.location) if postgres else None
    figure = pool.run(jobs, server_cpu=server.cpu_seconds if postgres else None)
    latencies = [s for result in figure.values for s in result.latencies_s]
    failures = tuple(f for result in figure.values for f in result.failures)
    states = _turn_states(target)
    # Every turn that returned has its one terminal record; a session stops at its first
    # failed turn, so fewer turns ran than were planned only when some failed.
    completed = sum(result.completed for result in figure.values)
    _check(f"{target.label} completed turns", states["completed"], completed)
    if not failures:
        _check(f"{target.label} turns", completed, len(jobs) * sessions * (warmup + turns))
    count = len(latencies)
    if count == 0:
        raise RuntimeError(f"{target.label}: no timed turn completed: {failures[:3]}")
    served = figure.server_cpu_s[TIMED_PHASE]
    rates = {
        "turns/s": count / figure.seconds[TIMED_PHASE],
        "p50 ms": percentile(latencies, 0.50) * 1000,
        "p99 ms": percentile(latencies, 0.99) * 1000,
    }
    workers = sum(result.cpu_s for result in figure.values) * 1000 / count
    work, scans = None, []
    if before is not None:
        work = stats_per(before, server.database_stats(target.location), states["completed"])
        scans = server.seq_scans(target.location)
    cpu = (workers, None if served is None else served * 1000 / count)
    return TurnFigure(rates, cpu, failures, states, work, scans)


async def _migrate(target: Target) -> None:
    async with target.open():
        pass


def scale_main(args: argparse.Namespace) -> None:
    counts = parse_counts(args.processes)
    metrics = ("turns/s", "p50 ms", "p99 ms")
    with (
        PostgresServer.provide(args.postgres_url) as server,
        tempfile.TemporaryDirectory(prefix="hostkit-turn-bench-", dir=args.dir) as tmp,
        WorkerPool(scale_worker, max(counts), phases=SCALE_PHASES) as pool,
    ):
        settings = server.settings()
        for line in machine_facts({"SQLite files": tmp, **server.paths()}):
            print(line)
        print(load_line("at the start"))
        print(server.describe(settings))
        print(
            "SQLite: one WAL file per figure, every process's Host on it with "
            "[host] synchronous = 'FULL'"
        )
        print(
            f"\nhostkit Host.turns.run, {args.scale_sessions} concurrent sessions of "
            f"{args.scale_turns} turns in each process (warm-up: 1 turn a session), a turn: "
            "zero-latency scripted model -> 1 tool call -> model -> text; a fresh database per "
            f"figure; {args.scale_repeats} round(s), median; SQLite then PostgreSQL at each "
            "count"
        )
        figures: dict[tuple[str, Adapter, int], list[float]] = {}
        cpus: dict[tuple[str, Adapter, int], list[tuple[float, float | None]]] = {}
        failed: dict[tuple[Adapter, int], list[TurnFigure]] = {}
        pg_work: dict[int, list[dict[str, float]]] = {}
        last_scans: tuple[list[tuple[str, int, int, int]], int] | None = None
        for repeat in range(args.scale_repeats):
            for n in counts:
                for adapter in ADAPTERS:
                    root = Path(tmp) / f"{adapter}-{n}-{repeat}"
                    root.mkdir()
                    if adapter == "sqlite":
                        target = Target(adapter, str(root / "hostkit.db"))
                    else:
                        target = Target(adapter, server.create_database())
                    anyio.run(_migrate, target)
                    figure = scale_figure(pool, target, n, root, args, server)
                    progress(target, n, figure)
                    for metric in metrics:
                        figures.setdefault((metric, adapter, n), []).append(figure.rates[metric])
                    cpus.setdefault(("cpu", adapter, n), []).append(figure.cpu_ms)
                    if figure.failures:
                        failed.setdefault((adapter, n), []).append(figure)
                    if figure.pg_work is not None:
                        pg_work.setdefault(n, []).append(figure.pg_work)
                        last_scans = (figure.seq_scans, figure.states["completed"])
                    server.drop_created()
        medians = {key: statistics.median(values) for key, values in figures.items()}
        print()
        print_table("turns/s", metrics[:1], counts, medians, decimals=1)
        print()
        print_table("latency ms", metrics[1:], counts, medians, decimals=1)
        print()
        cpu_ms = {("turn", a, n): median_cpu(v) for (_, a, n), v in cpus.items()}
        print_cpu_table("CPU ms/turn", ("turn",), counts, cpu_ms)
        print()
        print_pg_work(
            "PostgreSQL per turn",
            counts,
            {
                n: {k: statistics.median(w[k] for w in ws) for k in ws[0]}
                for n, ws in pg_work.items()
            },
        )
        if last_scans:
            print()
            print_seq_scans(
                f"PostgreSQL sequential scans, {counts[-1]} process(es), per completed turn",
                last_scans[0],
                last_scans[1],
            )
        report_failures(failed, args)
        print(load_line("at the end"))
        print(SCALE_NOTES)


def progress(target: Target, processes: int, figure: TurnFigure) -> None:
    """One line per figure on stderr as it completes, so a long run shows where it is."""
    print(
        f"  {target.label}, {processes} process(es): {figure.rates['turns/s']:.1f} turns/s, "
        f"{len(figure.failures)} failed",
        file=sys.stderr,
        flush=True,
    )


def report_failures(
    failed: dict[tuple[Adapter, int], list[TurnFigure]], args: argparse.Namespace
) -> None:
    """Say loudly which figures had turns without a terminal record, and why."""
    if not failed:
        print("\nevery turn completed with its one terminal record (rows counted)")
        return
    planned = args.scale_sessions * (1 + args.scale_turns)
    print("\nFAILED TURNS (TurnRejected: the store could not admit it; TurnInfrastructureError:")
    print("no trustworthy terminal record); a session stops at its first failure, so its later")
    print("turns did not run; the figures above are over the turns that completed:")
    for (adapter, n), figures in sorted(failed.items()):
        for figure in figures:
            causes: dict[str, int] = {}
            for cause in figure.failures:
                causes[cause] = causes.get(cause, 0) + 1
            states = ", ".join(f"{k} {v}" for k, v in figure.states.items() if v)
            print(
                f"  {adapter}, {n} process(es): {len(figure.failures)} failed of "
                f"{n * planned} planned; turn rows: {states}"
            )
            for cause, times in sorted(causes.items(), key=lambda item: -item[1]):
                print(f"    {times} x {cause}")


SCALE_NOTES = """
PG/SQLite: PostgreSQL's figure over SQLite's at the same process count (for latency,
above 1 is slower); xN: the figure over the same adapter's 1-process figure. CPU: the
worker processes' CPU time (all threads) and the PostgreSQL server's (postmaster and
every child) over the timed turns, per turn. The workers, the server and the parent
share this machine's CPUs. Per turn both adapters write the same rows in 4 write
transactions (admission, the tool-calling answer, the tool's result, the terminal
commit) and hold the session's durable lease while it runs; SQLite's group commit
shares a COMMIT among one process's concurrent writes, PostgreSQL commits each on its
own pooled connection (SERIALIZABLE) and shares WAL flushes between them."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="hostkit vs openai-agents turn latency")
    parser.add_argument("--quick", action="store_true", help="30 sequential turns, 50 x 2")
    parser.add_argument("--dir", default=None, help="parent directory for the temporary files")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="model latency, scaling")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of hostkit")
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="leave the startup heap to the collector (hostkit serve freezes it)",
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
        "--scale-sessions", type=int, default=4, help="--postgres: concurrent sessions a process"
    )
    parser.add_argument(
        "--scale-turns", type=int, default=4, help="--postgres: timed turns a session"
    )
    parser.add_argument("--scale-repeats", type=int, default=1, help="--postgres: rounds (median)")
    return parser.parse_args()


if __name__ == "__main__":
    options = parse_args()
    if options.postgres or options.postgres_url:
        scale_main(options)
    else:
        anyio.run(main, options)
