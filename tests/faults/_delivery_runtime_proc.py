"""A delivery runtime process for the delivery crash tests (run as a script, not collected).

``python _delivery_runtime_proc.py '<json>'`` opens the store at ``db`` and
serves its outbox with a ``DeliveryRuntime`` (lease ``lease_s``) whose
channel writes ``marker`` when a send starts and never answers: the test
SIGKILLs the process while it holds the intent's claim mid-send.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import anyio

from hostkit.delivery import DeliveryPolicy, DeliveryRuntime
from hostkit.store import RuntimeStore

OPTIONS: dict[str, Any] = json.loads(sys.argv[1])


class Stalling:
    """A platform that takes the send and never answers."""

    async def send(
        self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
    ) -> None:
        part = anyio.Path(f"{OPTIONS['marker']}.part")
        await part.write_text(idempotency_key)
        await part.rename(OPTIONS["marker"])
        await anyio.sleep_forever()


async def main() -> None:
    async with RuntimeStore.open(OPTIONS["db"]) as store:
        runtime = DeliveryRuntime(
            store.delivery,
            lambda alias: Stalling(),
            policy=DeliveryPolicy(lease_s=OPTIONS["lease_s"]),
            send_timeout_s=600.0,
            idle_poll_s=0.05,
        )
        with anyio.fail_after(120.0):
            await runtime.run()


if __name__ == "__main__":
    anyio.run(main)
