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
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.metadata
import io
import itertools
import math
import pstats
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import agents
import anyio
from agents import Agent, ModelResponse, Runner, SQLiteSession, Usage, function_tool
from agents.items import TResponseStreamEvent
from openai.types import responses as oai

from hostkit.effects import ToolContext, tool
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


def _percentile(samples: list[float], fraction: float) -> float:
    """Nearest rank: the p99 of 200 samples is the 198th smallest."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(len(ordered) * fraction) - 1)]


async def _drive(
    run_turn: RunTurn,
    *,
    sessions: int,
    turns: int,
    prefix: str,
    profiler: cProfile.Profile | None = None,
) -> Figures:
    latencies: list[float] = []

    async def session(key: str) -> None:
        for _ in range(turns):
            start = time.perf_counter()
            await run_turn(key)
            latencies.append(time.perf_counter() - start)

    start, cpu = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    try:
        async with anyio.create_task_group() as tg:
            for index in range(sessions):
                tg.start_soon(session, f"{prefix}-{index}")
    finally:
        if profiler is not None:
            profiler.disable()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    p50, p99 = _percentile(latencies, 0.50), _percentile(latencies, 0.99)
    count = len(latencies)
    return Figures(p50 * 1000, p99 * 1000, count / wall, cpu * 1000 / count)


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

        async def run_turn(key: str) -> None:
            facts = ConversationFacts(channel="bench", conversation_key=key, principal_key=key)
            result = await host.turns.run(
                TurnRequest(input="hi", principal=facts, request_id=new_id("req"))
            )
            statuses = [effect.status for effect in result.effects]
            if result.outcome != "completed" or result.text != "done" or statuses != ["succeeded"]:
                raise RuntimeError(f"unexpected hostkit turn: {result}")

        figures = await _measure(
            run_turn, sessions=sessions, turns=turns, warmup=warmup, profiler=profiler
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
    latency_turns = 10 if args.quick else 30
    agents.set_tracing_disabled(True)
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}"
        for name in ("hostkit", "openai-agents", "openai", "anyio")
    )
    print(f"SQLite {sqlite3.sqlite_version}; {versions}; asyncio backend")
    print("a turn: model -> 1 tool call -> model -> text; ratios vs the peer in the same mode")
    print("cpu ms/turn: process CPU time (all threads) over the measured turns / turns\n")
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
            root,
            sync="FULL",
            sessions=SESSIONS,
            turns=max(2, latency_turns // 5),
            warmup=1,
            delay=delay,
        )
        print(_row("hostkit FULL", "1 session", one, None))
        print(_row("hostkit FULL", f"{SESSIONS} sessions", many, None))
        print("\nsummary (goals from issue 10):")
        cpu = results["1 session"].cpu_ms_per_turn
        print(f"  Host CPU per turn, 1 session, FULL: {cpu:.3f} ms (goal <= 1 ms)")
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="hostkit vs openai-agents turn latency")
    parser.add_argument("--quick", action="store_true", help="30 sequential turns, 50 x 2")
    parser.add_argument("--dir", default=None, help="parent directory for the temporary files")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="model latency, scaling")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of hostkit")
    return parser.parse_args()


if __name__ == "__main__":
    anyio.run(main, parse_args())
