"""``hostkit serve`` under a steady webhook load: accept latency, delivered turns/s, loss.

What is measured: a real ``hostkit serve`` subprocess (scripted model, one
generic webhook channel on 127.0.0.1, port 0) receives ``--rate`` signed
webhooks per second for ``--duration`` seconds, each from its own
conversation, each sent a second time right after its first 200 (a
platform's redelivery; ``--no-resend`` skips it). Every request is its own
task, so requests overlap when the server slows down (an open-loop load, as
platforms send). Answers are delivered, signed, to a receiver in this
process.

Printed:

- accept latency p50/p99/max (ms): from sending a webhook to its 200, for
  first deliveries (``accepted``) and redeliveries (``duplicate``) apart;
- delivered turns/s: answers received per second from the first send to the
  last answer (the whole path: accept, inbox claim, turn, outbox, delivery);
- lost: events accepted but never answered within ``--settle`` seconds after
  the last send; duplicated: answers beyond one per event at the receiver,
  turns beyond one per event, and inbox rows beyond one per event.

Why: the inbox and delivery guarantees (a 200 only after a durable accept,
one turn per event, one delivery per answer) must hold at a rate, not only
one event at a time. Defaults finish in well under a minute::

    python bench/serve_bench.py --rate 20 --duration 10
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing, suppress
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hostkit.channels import sign_webhook

CHANNEL = "bench-hook"
SECRET = "bench-signing-secret"
LISTENING = "hostkit serve: listening on "


class Receiver:
    """Where the channel's answers are POSTed: counts each intent and conversation."""

    def __init__(self) -> None:
        self.by_key: Counter[str] = Counter()
        self.by_conversation: Counter[str] = Counter()
        self.last_at = 0.0
        self.url = ""
        self.app = Starlette(routes=[Route("/deliver", self.deliver, methods=["POST"])])

    async def deliver(self, request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        self.by_key[request.headers.get("idempotency-key", "")] += 1
        self.by_conversation[str(body.get("conversation"))] += 1
        self.last_at = time.monotonic()
        return JSONResponse({"ok": True})

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Receiver]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(256)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/deliver"
        server = uvicorn.Server(
            uvicorn.Config(self.app, lifespan="off", log_config=None, access_log=False)
        )
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve, [sock])
            try:
                yield self
            finally:
                server.should_exit = True


def write_config(root: Path, deliver_url: str, *, turns: int, concurrency: int) -> Path:
    steps = ", ".join(['{reply = "ok"}'] * turns)
    path = root / "hostkit.toml"
    path.write_text(
        f"""[host]
database = {json.dumps(str(root / "hostkit.db"))}
workspace = {json.dumps(str(root / "ws"))}

[providers.bench]
kind = "scripted"
script = [{steps}]

[agents.assistant]
provider = "bench"
memory = false

[channels.{CHANNEL}]
kind = "webhook"
secret_env = "BENCH_HOOK_SECRET"
deliver_url = {json.dumps(deliver_url)}

[serve]
listen = "127.0.0.1"
port = 0
inbox_concurrency = {concurrency}
delivery_concurrency = {concurrency}
"""
    )
    return path


@asynccontextmanager
async def serve(config: Path) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    argv = [sys.executable, "-m", "hostkit", "serve", "--config", str(config)]
    env = {**os.environ, "BENCH_HOOK_SECRET": SECRET}
    process = await anyio.open_process([*argv, "--log-format", "json"], env=env)
    seen = ""
    assert process.stdout is not None
    with anyio.fail_after(60):
        async for chunk in process.stdout:
            seen += chunk.decode()
            if LISTENING in seen and "\n" in seen.split(LISTENING, 1)[1]:
                break
    url = seen.split(LISTENING, 1)[1].split()[0].rstrip("/")

    async def discard(stream: Any) -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            async for _ in stream:
                pass

    async with anyio.create_task_group() as pumps:
        pumps.start_soon(discard, process.stdout)
        pumps.start_soon(discard, process.stderr)
        try:
            yield url, process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(30, shield=True):
                await process.wait()
            if process.returncode is None:
                process.kill()
            pumps.cancel_scope.cancel()


def counts(database: Path) -> tuple[int, int, int]:
    """(inbox rows, turns, turns beyond one per request id) after the run."""
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        inbox = conn.execute("SELECT count(*) FROM inbox").fetchone()[0]
        turns = conn.execute("SELECT count(*) FROM turns").fetchone()[0]
        extra = conn.execute(
            "SELECT coalesce(sum(n - 1), 0) FROM "
            "(SELECT count(*) AS n FROM turns GROUP BY request_id)"
        ).fetchone()[0]
    return int(inbox), int(turns), int(extra)


def percentiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50 {statistics.median(ordered) * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms  "
        f"max {ordered[-1] * 1000:7.1f} ms  (n={len(ordered)})"
    )


async def run(rate: int, duration: float, *, resend: bool, settle: float, concurrency: int) -> int:
    events = int(rate * duration)
    latency: dict[str, list[float]] = {"accepted": [], "duplicate": []}
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="hostkit-serve-bench-") as tmp:
        root = Path(tmp)
        receiver = Receiver()
        limits = httpx.Limits(max_connections=512, max_keepalive_connections=64)
        async with (
            receiver.running(),
            httpx.AsyncClient(limits=limits, timeout=30) as client,
        ):
            config = write_config(root, receiver.url, turns=events, concurrency=concurrency)
            async with serve(config) as (url, process):

                async def post(event: int) -> None:
                    body = json.dumps(
                        {
                            "event_id": f"ev-{event}",
                            "sender": "bench",
                            "conversation": f"c{event}",
                            "text": f"question {event}",
                        }
                    ).encode()
                    for _ in range(2 if resend else 1):
                        headers = sign_webhook(SECRET, body, timestamp=int(time.time()))
                        headers["content-type"] = "application/json"
                        began = time.monotonic()
                        try:
                            response = await client.post(
                                f"{url}/channels/{CHANNEL}", content=body, headers=headers
                            )
                        except httpx.HTTPError as exc:
                            failed.append(type(exc).__name__)
                            return
                        took = time.monotonic() - began
                        if response.status_code != 200:
                            failed.append(str(response.status_code))
                            return
                        latency.setdefault(response.json().get("status", "?"), []).append(took)

                start = time.monotonic()
                async with anyio.create_task_group() as senders:
                    for event in range(events):
                        await anyio.sleep(max(0.0, start + event / rate - time.monotonic()))
                        senders.start_soon(post, event)
                sent_for = time.monotonic() - start
                with anyio.move_on_after(settle):
                    while len(receiver.by_key) < events - len(failed):  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                answered_for = max(receiver.last_at - start, 1e-9)
                if process.returncode is not None:
                    print(f"hostkit serve exited early with status {process.returncode}")
        inbox, turns, extra_turns = counts(root / "hostkit.db")

    delivered = len(receiver.by_key)
    lost = len(latency["accepted"]) - len(receiver.by_conversation)
    duplicated_answers = sum(n - 1 for n in receiver.by_key.values()) + sum(
        n - 1 for n in receiver.by_conversation.values()
    )
    print(f"hostkit serve: {rate} webhooks/s for {duration:g} s = {events} events")
    print(f"  sent over {sent_for:.2f} s; redeliveries: {'yes' if resend else 'no'}")
    print(f"  accept latency (first)     {percentiles(latency['accepted'])}")
    if resend:
        print(f"  accept latency (duplicate) {percentiles(latency['duplicate'])}")
    print(f"  delivered turns/s          {delivered / answered_for:7.1f} ({delivered} answers)")
    print(f"  refused or failed requests {len(failed)} {dict(Counter(failed)) or ''}")
    print(f"  lost (accepted, never answered within {settle:g} s): {lost}")
    print(
        f"  duplicated: answers {duplicated_answers}, turns {extra_turns}, "
        f"inbox rows {inbox - events} (turns {turns}, inbox rows {inbox})"
    )
    return 0 if not (lost or duplicated_answers or extra_turns or failed) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20, help="webhooks per second")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of sending")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds to wait for answers")
    parser.add_argument("--concurrency", type=int, default=8, help="[serve] inbox/delivery")
    parser.add_argument("--no-resend", action="store_true", help="send each event once")
    args = parser.parse_args()
    if args.rate < 1 or args.duration <= 0:
        parser.error("--rate must be at least 1 and --duration positive")
    sys.exit(
        anyio.run(
            lambda: run(
                args.rate,
                args.duration,
                resend=not args.no_resend,
                settle=args.settle,
                concurrency=args.concurrency,
            )
        )
    )


if __name__ == "__main__":
    main()
