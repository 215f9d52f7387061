"""Clause: `await nb.serve()` runs the Host's daemon on the kernel's loop with a live status
widget, and `await nb.stop_serving()` drains it.

The Host is real (SQLite, a scripted model whose "slow" message waits for
the test), the webhooks are signed HTTP requests on loopback, the widget is
headless (ipywidgets' dummy comm). The widget's model is read as the kernel
would draw it: the test never refreshes it by hand, the watcher on the loop
does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import hostkit.notebook as hn
from hostkit.channels import sign_webhook
from hostkit.errors import ConfigError, InvalidValue, UserError
from hostkit.host import ConfiguredChannels, parse_config
from hostkit.notebook import NotebookHost, ServeHandle, ServeMonitor
from hostkit.testing import Reply, ScriptedModel, capabilities
from hostkit.types import ModelRequest
from tests.platforms import WebhookReceiver

pytestmark = pytest.mark.anyio

SECRET = "hook-secret-Qx4-0b9e"
ENV = {"HOOK_SECRET": SECRET}


class SlowModel:
    """Answers "echo: <text>"; the message "slow" waits until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.opened = anyio.Event()

    async def __call__(self, request: ModelRequest) -> Reply:
        text = next(m.content for m in reversed(request.messages) if m.role == "user")
        if text == "slow":
            self.entered.set()
            await self.opened.wait()
        return Reply(f"echo: {text}")


@dataclass
class Served:
    nb: NotebookHost
    model: SlowModel
    receiver: WebhookReceiver  # where the channel's answers are delivered


@pytest.fixture
async def notebook(tmp_path: Path) -> AsyncIterator[Served]:
    model = SlowModel()
    async with WebhookReceiver.running(secret=SECRET) as receiver:
        hooks = {"kind": "webhook", "secret_env": "HOOK_SECRET"}
        config = parse_config(
            {
                "host": {"database": str(tmp_path / "hostkit.db"), "workspace": str(tmp_path)},
                "providers": {"test": {"kind": "scripted"}},
                "agents": {"assistant": {"provider": "test", "policy": {"allow": ["*"]}}},
                "channels": {"hooks": {**hooks, "deliver_url": receiver.deliver_url}},
                "serve": {"port": 0, "drain_timeout_s": 10},
            },
            base_dir=tmp_path,
        )
        provider = ScriptedModel([model], repeat_last=True)
        # The Host's own outbound channels (from [channels], secrets from ENV); the model scripted.
        caps = replace(capabilities(provider), channels=ConfiguredChannels(config, ENV))
        nb = await hn.start(config, capabilities=caps)
        try:
            yield Served(nb, model, receiver)
        finally:
            model.opened.set()
            await nb.aclose()


def signed(event_id: str, text: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {"event_id": event_id, "sender": "u1", "conversation": "room", "text": text}
    ).encode()
    return body, {**sign_webhook(SECRET, body, timestamp=int(time.time()))}


async def post(url: str, event_id: str, text: str) -> httpx.Response:
    body, headers = signed(event_id, text)
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        return await client.post("/channels/hooks", content=body, headers=headers)


async def until(predicate: Callable[[], Any]) -> None:
    """Let the loop run, as an idle kernel does, until ``predicate`` holds (at most 10 s)."""
    with anyio.fail_after(10):
        while not predicate():  # noqa: ASYNC110 (the widget is polled as a person looks)
            await asyncio.sleep(0.01)


def serving(nb: NotebookHost) -> ServeHandle | None:
    """``nb.serving`` read afresh (a call, so a type checker does not pin it)."""
    return nb.serving


def figures(monitor: ServeMonitor) -> tuple[int, int, int, int, int]:
    m = monitor.model
    return m.queued, m.running, m.delivered, m.dead_letters, m.troubled


async def test_the_widget_follows_webhooks_on_the_kernels_loop_and_one_daemon_per_kernel(
    notebook: Served,
) -> None:
    nb, model = notebook.nb, notebook.model
    served = await nb.serve(port=0, env=ENV, every_s=0.05, display=False)
    monitor = served.monitor
    assert monitor is not None
    assert served.url.startswith("http://127.0.0.1:")
    assert not served.url.endswith(":0")
    # The daemon is a task of this very loop: no thread, no second loop.
    assert served._task.get_loop() is asyncio.get_running_loop()
    assert serving(nb) is served
    assert {d.name: d.state for d in monitor.model.daemons} == {
        "delivery": "running",
        "inbox": "running",
        "retention": "running",
        "webhooks": "running",
    }
    assert figures(monitor) == (0, 0, 0, 0, 0)
    assert [monitor.watching] == [True]  # (a list: the later check is not narrowed away)
    assert f"listening on {served.url} (ready)" in monitor.text()

    with pytest.raises(UserError, match=r"already serves on .* await nb.stop_serving"):
        await nb.serve(port=0, env=ENV)

    assert (await post(served.url, "evt-1", "slow")).status_code == 200
    await model.entered.wait()
    await until(lambda: monitor.model.running == 1)  # the watcher saw the turn start
    assert "running 1" in monitor.text()
    assert ">running</span> <code>1</code>" in monitor.html()
    model.opened.set()
    await until(lambda: monitor.model.delivered == 1)  # the answer reached the channel
    assert figures(monitor) == (0, 0, 1, 0, 0)
    assert "delivered 1" in monitor.text()
    assert [body["text"] for body in notebook.receiver.bodies()] == ["echo: slow"]
    drawn = monitor.refreshes

    # A refused deadline leaves the daemon serving and still stoppable through nb.
    for deadline_s in (-1, float("nan"), "30"):
        with pytest.raises(InvalidValue, match="deadline_s"):
            await nb.stop_serving(deadline_s=deadline_s)  # type: ignore[arg-type]
    assert served.running
    assert serving(nb) is served

    exit_ = await nb.stop_serving()
    assert exit_ is not None
    assert exit_.code == 0
    assert not served.running
    assert serving(nb) is None
    assert not monitor.watching
    assert {d.state for d in monitor.model.daemons} == {"stopped"}
    assert monitor.refreshes > drawn  # the end is drawn
    # Not "listening (not ready)": it listens no more.
    assert f"hostkit serve: stopped (it listened on {served.url})" in monitor.text()
    assert await nb.stop_serving() is None  # idempotent
    assert await served.stop() is exit_
    with pytest.raises(httpx.ConnectError):
        await post(served.url, "evt-2", "hello")


async def test_stop_serving_refuses_new_webhooks_and_drains_the_turn_in_flight(
    notebook: Served,
) -> None:
    nb, model = notebook.nb, notebook.model
    served = await nb.serve(port=0, env=ENV, every_s=0.05, display=False)
    accepted = await post(served.url, "evt-1", "slow")
    inbound_id = accepted.json()["inbound_id"]
    await model.entered.wait()

    stopping = asyncio.get_running_loop().create_task(nb.stop_serving(deadline_s=10))
    async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
        with anyio.fail_after(10):
            while (await client.get("/readyz")).status_code != 503:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        refused = await post(served.url, "evt-2", "hello")
    assert refused.status_code == 503
    assert not stopping.done()  # still draining: the turn has not finished
    model.opened.set()
    exit_ = await stopping
    assert exit_ is not None
    assert (exit_.code, exit_.cut) == (0, ())
    record = await nb.host.inbox.record(inbound_id)
    assert record is not None
    assert record.state == "completed"  # finished, not released
    assert served.monitor is not None
    assert {d.state for d in served.monitor.model.daemons} == {"stopped"}


async def test_a_daemon_that_cannot_start_is_raised_and_nothing_keeps_serving(
    notebook: Served,
) -> None:
    nb = notebook.nb
    with pytest.raises(ConfigError, match="HOOK_SECRET"):
        await nb.serve(port=0, env={}, display=False)
    assert serving(nb) is None
    with pytest.raises(UserError, match="every_s"):
        await nb.serve(port=0, env=ENV, every_s=0, display=False)
    assert serving(nb) is None
    served = await nb.serve(port=0, env=ENV, display=False)  # nothing was left holding it
    assert [served.exit] == [None]
    await nb.aclose()  # closing the notebook's Host stops serving first
    assert not served.running
    assert served.exit is not None
    assert served.exit.code == 0
