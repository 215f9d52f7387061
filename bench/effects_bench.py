"""EffectRuntime costs on the Host: what running a loud command costs the Host process.

Output flood: a child (``python -c``, 1 MiB writes) prints 1 GiB to stdout
through ``run_process``. Measured: wall time from spawn to outcome, and the
Host process's resident memory, sampled every 5 ms by a thread so the event
loop's own scheduling cannot hide a peak. ``run_process`` keeps a
12,000-character tail per stream and writes the full stream to a private
artifact file (fsync'd before the outcome), so its time includes that disk
write.

For scale, the same child is also timed writing straight to /dev/null (the
floor: what the child costs by itself) and run through
``subprocess.run(capture_output=True)`` in a worker thread, the usual way a
tool captures output before truncating it (peer; ``--no-peer`` skips it).

Execute overhead: ``EffectRuntime.execute()`` of a no-op authored tool (the
whole pipeline: catalog binding, capability snapshot, argument validation,
policy, deadline, bounded views) against awaiting the same function directly,
p50/p99 in microseconds over ``--calls`` invocations.

Each section is one coroutine taking the parsed options; ``main`` runs the
sections in ``SECTIONS`` order, so a new measurement is one more function.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import psutil

from hostkit.authority import AuthorityResolver
from hostkit.builtins.process import ProcessOutcome, ProcessSupervisor, run_process
from hostkit.effects import EffectPolicy, EffectRuntime, ToolContext, Toolset, tool
from hostkit.store import RuntimeStore
from hostkit.types import (
    ConversationFacts,
    EffectRequest,
    TurnExecutionContext,
    TurnToken,
    new_id,
)

MIB = 1024 * 1024
SAMPLE_INTERVAL_S = 0.005
FLOOD_DEADLINE_S = 600.0


@dataclass(frozen=True, slots=True)
class Figures:
    """One measured run: wall time and the Host's resident memory around it."""

    seconds: float
    baseline_rss: int
    peak_rss: int

    @property
    def growth(self) -> int:
        return self.peak_rss - self.baseline_rss

    def row(self, label: str, size: int) -> str:
        rate = size / MIB / self.seconds
        growth = self.growth / MIB
        return (
            f"{label:<34}{self.seconds:>8.2f}{rate:>9.0f}"
            f"{self.peak_rss / MIB:>11.1f}{growth:>10.1f}"
        )


@contextmanager
def rss_sampler() -> Iterator[Callable[[], tuple[int, int]]]:
    """Sample this process's RSS in a thread; yield a function returning (baseline, peak)."""
    host = psutil.Process()
    baseline = host.memory_info().rss
    peak = baseline
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.wait(SAMPLE_INTERVAL_S):
            peak = max(peak, host.memory_info().rss)

    thread = threading.Thread(target=sample, name="rss-sampler", daemon=True)
    thread.start()
    try:
        yield lambda: (baseline, peak)
    finally:
        stop.set()
        thread.join()


def flood_argv(size: int) -> list[str]:
    blocks = size // MIB
    code = (
        f"import sys\nblock = b'y' * {MIB}\n"
        f"for _ in range({blocks}): sys.stdout.buffer.write(block)\n"
    )
    return [sys.executable, "-c", code]


async def measure(action: Callable[[], Awaitable[None]]) -> Figures:
    with rss_sampler() as rss:
        started = time.perf_counter()
        await action()
        seconds = time.perf_counter() - started
        baseline, peak = rss()
    return Figures(seconds, baseline, max(peak, psutil.Process().memory_info().rss))


async def output_flood(args: argparse.Namespace) -> None:
    """Section: a child printing ``--flood-mib`` MiB, through run_process, the floor and a peer."""
    size = args.flood_mib * MIB
    argv = flood_argv(size)
    print(f"output flood: the child prints {args.flood_mib} MiB to stdout in 1 MiB writes")
    header = f"{'':<34}{'time s':>8}{'MiB/s':>9}{'peak RSS':>11}{'growth':>10}"
    print(header + "   (RSS in MiB)")
    print("-" * len(header))

    async def floor() -> None:
        await anyio.run_process(argv, stdout=subprocess.DEVNULL, check=True)

    print((await measure(floor)).row("floor: child to /dev/null", size))

    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        outcomes: list[ProcessOutcome] = []

        async def hostkit_run() -> None:
            async with ProcessSupervisor() as supervisor:
                outcomes.append(
                    await run_process(
                        argv,
                        supervisor=supervisor,
                        cwd=Path(scratch),
                        env={},
                        deadline_s=FLOOD_DEADLINE_S,
                        artifact_dir=Path(scratch) / "artifacts",
                    )
                )

        figures = await measure(hostkit_run)
        [outcome] = outcomes
        if outcome.status != "exited" or outcome.stdout.total_bytes != size:
            raise SystemExit(f"run_process did not capture the flood: {outcome}")
        print(figures.row("hostkit run_process (tail+artifact)", size))
        artifact = outcome.stdout.artifact
        assert artifact is not None
        print(f"  artifact: {os.stat(artifact).st_size / MIB:.0f} MiB on disk under {scratch}")

    if args.no_peer:
        return

    async def peer() -> None:
        done = await anyio.to_thread.run_sync(
            lambda: subprocess.run(argv, capture_output=True, check=True)
        )
        if len(done.stdout) != size:
            raise SystemExit("the peer lost output")

    peer_figures = await measure(peer)
    print(peer_figures.row("peer: subprocess.run(capture)", size))
    growth = _ratio(peer_figures.growth, figures.growth)
    print(
        f"  peer/hostkit: RSS growth {growth}, time {peer_figures.seconds / figures.seconds:.2f}x"
    )


async def execute_overhead(args: argparse.Namespace) -> None:
    @tool("bench.noop")
    async def noop(ctx: ToolContext, value: int = 0) -> str:
        """Does nothing."""
        return "ok"

    class OneTool:
        async def toolset(self, context: TurnExecutionContext) -> Toolset:
            return Toolset(((noop, "bench"),), EffectPolicy(), Path(tempfile.gettempdir()))

    with tempfile.TemporaryDirectory() as tmp:
        async with await RuntimeStore.open(Path(tmp) / "bench.db") as store:
            scope = await AuthorityResolver.bind(store).for_conversation(
                ConversationFacts(channel="bench", conversation_key="c", principal_key="p")
            )
    session = scope.session_id or ""

    def token(kind: str) -> TurnToken:
        return TurnToken(kind, "req", "turn", session, new_id("n"))  # type: ignore[arg-type]

    context = TurnExecutionContext(
        request_id="req",
        turn_id="turn",
        principal=scope,
        session_id=session,
        core_id="bench",
        core_revision="r",
        capability_snapshot={"effects": ("bench.noop",)},
        workspace_scope=tempfile.gettempdir(),
        route_token=token("route"),
        admission_lease_token=token("admission"),
        cancellation_token=token("cancellation"),
        trace_ids=("t",),
        interaction_metadata={},
    )
    runtime = EffectRuntime(toolsets=OneTool())
    catalog = await runtime.prepare_catalog(context)
    ref = catalog.resolve("bench_noop")
    assert ref is not None
    request = EffectRequest("call", ref, {"value": 1})
    tool_context = ToolContext("turn", session, "bench", scope.principal_id, Path("/tmp"))

    async def through_runtime() -> None:
        result = await runtime.execute(request, context)
        assert result.status == "succeeded"

    async def direct() -> None:
        await noop.fn(tool_context, value=1)

    rows = []
    for label, call in (("EffectRuntime.execute", through_runtime), ("direct await", direct)):
        for _ in range(min(1000, args.calls)):
            await call()
        samples = []
        for _ in range(args.calls):
            started = time.perf_counter_ns()
            await call()
            samples.append((time.perf_counter_ns() - started) / 1000)
        samples.sort()
        rows.append((label, samples[len(samples) // 2], samples[int(len(samples) * 0.99) - 1]))
    print(f"execute() overhead, no-op authored tool, {args.calls} calls")
    print(f"{'path':<24}{'p50 us':>10}{'p99 us':>10}")
    for label, p50, p99 in rows:
        print(f"{label:<24}{p50:>10.1f}{p99:>10.1f}")
    print(f"pipeline overhead at p50: {rows[0][1] - rows[1][1]:.1f} us")


def _ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.0f}x" if denominator > 0 else "n/a (no growth)"


SECTIONS: tuple[Callable[[argparse.Namespace], Awaitable[None]], ...] = (
    execute_overhead,
    output_flood,
)


async def main(args: argparse.Namespace) -> None:
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}" for name in ("anyio", "psutil")
    )
    print(f"Python {sys.version.split()[0]}, {versions}; {os.cpu_count()} CPUs\n")
    for section in SECTIONS:
        await section(args)
        print()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="EffectRuntime costs on the Host process")
    parser.add_argument("--flood-mib", type=int, default=1024, help="MiB the child prints")
    parser.add_argument("--no-peer", action="store_true", help="skip subprocess.run(capture)")
    parser.add_argument("--dir", default=None, help="parent directory for the artifact files")
    parser.add_argument("--calls", type=int, default=20_000, help="execute() calls to time")
    return parser.parse_args()


if __name__ == "__main__":
    anyio.run(main, parse_args())
