"""A Host process on a PostgreSQL store whose own wall clock steps (run as a script, not
collected).

``python host_clock_worker.py '<json>'`` patches ``time.time`` before hostkit is imported,
so everything in this process that reads this machine's wall clock reads this one. It
opens the store at ``url`` (the open-time skew check sees the true clock), then steps
the wall clock by ``step_s``: NTP after a boot with a wrong RTC, a resumed or migrated
VM, ``date -s``. Then, by ``role``:

- ``drain``: drain the outbox once with a ``DeliveryRuntime`` on its defaults (every
  alias's channel counts its sends); with ``reply`` set, first write the reply to
  command inbound ``reply`` (pending, due now by the database).
- ``admit``: admit one turn of conversation ``conversation`` as a Host of its own (a
  peer that looks at the session once).

Prints one JSON line: what the role found.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

OPTIONS: dict[str, Any] = json.loads(sys.argv[1])

_true_time = time.time
_step = [0.0]


def _stepped_time() -> float:
    """This process's wall clock: ``step_s`` off from the moment it steps."""
    return _true_time() + _step[0]


time.time = _stepped_time  # before hostkit reads (or binds) it

import anyio  # noqa: E402

from hostkit.authority import AuthorityResolver  # noqa: E402
from hostkit.delivery import DeliveryPolicy, DeliveryRuntime  # noqa: E402
from hostkit.store import LeaseOwner, RuntimeStore  # noqa: E402
from tests.contract.test_store_turns import admission, conversation  # noqa: E402


class Counted:
    """A channel that accepts at once and counts what it sent."""

    sent = 0

    async def send(self, route: Any, payload: Any, *, idempotency_key: str) -> None:
        Counted.sent += 1


async def drain(store: RuntimeStore) -> dict[str, Any]:
    if OPTIONS.get("reply"):
        await store.delivery.reply(
            inbound_id=OPTIONS["reply"], session_id="ses_clock", route={"channel": "c"}, text="hi"
        )
    runtime = DeliveryRuntime(
        store.delivery, lambda alias: Counted(), policy=DeliveryPolicy(jitter=0.0)
    )
    with anyio.fail_after(30):
        settled = await runtime.drain()
    return {"settled": settled, "sent": Counted.sent}


async def admit(store: RuntimeStore) -> dict[str, Any]:
    owner = await anyio.to_thread.run_sync(LeaseOwner.current, "stepped-clock-host")
    async with AuthorityResolver.bind(store) as resolver:
        scope = await conversation(resolver, OPTIONS["conversation"])
        outcome = await store.turns.admit(admission(scope), owner=owner, ttl_s=2.0)
    return {"outcome": type(outcome).__name__}


async def main() -> None:
    async with RuntimeStore.open_postgres(OPTIONS["url"]) as store:
        _step[0] = float(OPTIONS.get("step_s", 0.0))
        found = await (drain if OPTIONS["role"] == "drain" else admit)(store)
    print(json.dumps(found), flush=True)


anyio.run(main)
