"""Bad input to a public Host method gets a typed hostkit error with a bounded message.

Whatever an embedder passes (a wrong type, a value nested past the recursion limit, an
object whose ``__repr__``, ``__eq__`` or ``__hash__`` raises, a ``str`` subclass whose
``__eq__`` raises), every public method of the Host, its sub-objects (``approvals``,
``turns``, ``attachments``, ``cores``), the inspect views, ``TurnRequest`` and ``Agent``
checks the argument's type before it compares, hashes or quotes it: the caller gets a
``HostkitError``, never a raw ``TypeError``, ``RecursionError`` or the value's own
exception.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import hostkit
import hostkit.inspect as views
from hostkit.errors import MESSAGE_LIMIT, HostkitError
from hostkit.testing import Reply, ScriptedModel
from hostkit.types import Attachment, ConversationFacts, TurnRequest

pytestmark = pytest.mark.anyio

# A message may carry a short prefix (``turn rejected: ``) before its bounded text.
MOST_CHARS = MESSAGE_LIMIT + 50


def deep(levels: int = 5_000) -> dict[str, Any]:
    """A dict nested past the recursion limit: its repr alone raises RecursionError."""
    top: dict[str, Any] = {}
    cur = top
    for _ in range(levels):
        cur["a"] = {}
        cur = cur["a"]
    return top


class Hostile:
    """An object every dunder a careless check reaches for raises from."""

    def __repr__(self) -> str:
        raise RuntimeError("repr boom")

    def __str__(self) -> str:
        raise RuntimeError("str boom")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq boom")

    def __hash__(self) -> int:
        raise RuntimeError("hash boom")

    def __bool__(self) -> bool:
        raise RuntimeError("bool boom")


class HostileStr(str):
    """Text whose comparison and quoting raise (and which, so, cannot be hashed)."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("str eq boom")

    def __repr__(self) -> str:
        raise RuntimeError("str repr boom")

    def __str__(self) -> str:
        raise RuntimeError("str str boom")

    __hash__ = None  # type: ignore[assignment]


def hostile_values() -> list[tuple[str, object]]:
    """Values of the wrong type, or hostile ones; the hostile str is no valid name."""
    return [
        ("int", 5),
        ("float", 1.5),
        ("bytes", b"ab"),
        ("list", [1]),
        ("dict", {"a": 1}),
        ("deep dict", deep()),
        ("hostile object", Hostile()),
        ("hostile str", HostileStr("no such name!")),
    ]


FACTS = ConversationFacts(channel="c", conversation_key="k", principal_key="p")

# Each public call, with X where the hostile value goes; None where None is wrong too.
Call = Callable[[hostkit.Host, Any, Any], Any]
CALLS: dict[str, tuple[Call, bool]] = {
    "host.pin(core_id)": (lambda h, ops, x: h.pin(x, None), True),
    "host.pin(revision)": (lambda h, ops, x: h.pin("assistant", x), False),
    "host.release(core)": (lambda h, ops, x: h.release(x), True),
    "host.apply_config(capabilities)": (
        lambda h, ops, x: h.apply_config(h.declared_config, capabilities=x),
        False,
    ),
    "host.run_turn(agent)": (lambda h, ops, x: h.run_turn(x, "hi"), True),
    "host.run_turn(message)": (lambda h, ops, x: h.run_turn("assistant", x), True),
    "host.run_turn(conversation)": (
        lambda h, ops, x: h.run_turn("assistant", "hi", conversation=x),
        False,
    ),
    "host.run_turn(principal)": (
        lambda h, ops, x: h.run_turn("assistant", "hi", principal=x),
        True,
    ),
    "host.run_turn(channel)": (lambda h, ops, x: h.run_turn("assistant", "hi", channel=x), True),
    "host.inbox_worker(agent)": (lambda h, ops, x: h.inbox_worker(agent=x), False),
    "host.inbox_worker(route)": (lambda h, ops, x: h.inbox_worker(route=x), False),
    "host.inbox_worker(inbox)": (lambda h, ops, x: h.inbox_worker(inbox=x), False),
    "host.tool_catalog(agent)": (lambda h, ops, x: h.tool_catalog(x), True),
    "host.tool_catalog(session_id)": (
        lambda h, ops, x: h.tool_catalog("assistant", session_id=x),
        False,
    ),
    "host.operator(operator_id)": (lambda h, ops, x: h.operator(x, reason="r"), True),
    "host.approvals.list(status)": (lambda h, ops, x: h.approvals.list(ops, status=x), False),
    "host.approvals.list(limit)": (lambda h, ops, x: h.approvals.list(ops, limit=x), True),
    "host.approvals.get(approval_id)": (lambda h, ops, x: h.approvals.get(ops, x), True),
    "host.approvals.answer(approval_id)": (
        lambda h, ops, x: h.approvals.answer(x, "deny", by=ops),
        True,
    ),
    "host.approvals.answer(decision)": (
        lambda h, ops, x: h.approvals.answer("ap", x, by=ops),
        True,
    ),
    "host.approvals.resume(approval_id)": (lambda h, ops, x: h.approvals.resume(x, by=ops), True),
    "host.approvals.revoke(session_id)": (lambda h, ops, x: h.approvals.revoke(ops, x), True),
    "host.approvals.revoke(reason)": (
        lambda h, ops, x: h.approvals.revoke(ops, "s", reason=x),
        True,
    ),
    "host.turns.cancel(turn_id)": (lambda h, ops, x: h.turns.cancel(x, ops), True),
    "host.turns.cancellation_token(turn_id)": (
        lambda h, ops, x: h.turns.cancellation_token(x, ops),
        True,
    ),
    "host.attachments.add(media_type)": (
        lambda h, ops, x: h.attachments.add(FACTS, b"hi", name="a.txt", media_type=x),
        True,
    ),
    "host.attachments.add_file(path)": (lambda h, ops, x: h.attachments.add_file(FACTS, x), True),
    "host.attachments.add_file(media_type)": (
        lambda h, ops, x: h.attachments.add_file(FACTS, "notes.txt", media_type=x),
        False,
    ),
    "host.attachments.read(attachment)": (lambda h, ops, x: h.attachments.read(FACTS, x), True),
    "host.cores.status(core_id)": (lambda h, ops, x: h.cores.status(x), True),
    "host.cores.history(core_id)": (lambda h, ops, x: h.cores.history(x), True),
    "inspect.context_view(session_id)": (
        lambda h, ops, x: views.context_view(h, ops, session_id=x),
        False,
    ),
    "inspect.effect_audit_rows(session_id)": (
        lambda h, ops, x: views.effect_audit_rows(h, ops, x),
        True,
    ),
    "inspect.terminal_run_rows(session_id)": (
        lambda h, ops, x: views.terminal_run_rows(h, ops, session_id=x),
        False,
    ),
    "inspect.budget_view(session_id)": (lambda h, ops, x: views.budget_view(h, ops, x), True),
    "inspect.budget_view(prices)": (
        lambda h, ops, x: views.budget_view(h, ops, "s", prices=x),
        False,
    ),
    "inspect.catalog_view(agent)": (lambda h, ops, x: views.catalog_view(h, x), True),
    "inspect.mcp_server_view(agent)": (
        lambda h, ops, x: views.mcp_server_view(h, h.config, agent=x),
        False,
    ),
    "TurnRequest(core_id)": (
        lambda h, ops, x: hostkit.TurnRequest(
            input="hi", principal=FACTS, request_id="r", core_id=x
        ),
        True,
    ),
    "TurnRequest(session)": (
        lambda h, ops, x: hostkit.TurnRequest(
            input="hi", principal=FACTS, request_id="r", session=x
        ),
        True,
    ),
    "TurnRequest(core_revision)": (
        lambda h, ops, x: hostkit.TurnRequest(
            input="hi", principal=FACTS, request_id="r", core_revision=x
        ),
        False,
    ),
    "TurnRequest(attachments)": (
        lambda h, ops, x: hostkit.TurnRequest(
            input="hi", principal=FACTS, request_id="r", attachments=x
        ),
        True,
    ),
    "TurnRequest(metadata)": (
        lambda h, ops, x: hostkit.TurnRequest(
            input="hi", principal=FACTS, request_id="r", metadata=x
        ),
        True,
    ),
    "Agent(name)": (lambda h, ops, x: hostkit.Agent(x), True),
}

# The hostile values an argument rightly takes: any text, a count, any mapping (bounded).
VALID = {
    "host.approvals.list(limit)": {"int"},
    "host.approvals.revoke(reason)": {"hostile str"},
    "host.operator(operator_id)": {"hostile str"},
    "host.run_turn(conversation)": {"hostile str"},
    "host.run_turn(message)": {"hostile str"},
    "host.run_turn(principal)": {"hostile str"},
    "host.tool_catalog(session_id)": {"hostile str"},
    "inspect.terminal_run_rows(session_id)": {"hostile str"},
    "TurnRequest(core_id)": {"hostile str"},
    "TurnRequest(core_revision)": {"hostile str"},
    "TurnRequest(metadata)": {"dict", "deep dict"},
}


async def call(host: hostkit.Host, ops: Any, name: str, value: object) -> None:
    outcome = CALLS[name][0](host, ops, value)
    if hasattr(outcome, "__await__"):
        await outcome


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_a_wrong_argument_is_a_typed_error_with_a_bounded_message(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("notes")
    agent = hostkit.Agent("assistant", model=ScriptedModel([Reply("ok")], repeat_last=True))
    async with hostkit.Host.open(agents=[agent]) as host:
        ops = await host.operator("me", reason="argument checks")
        _, none_is_wrong = CALLS[name]
        values = [(label, v) for label, v in hostile_values() if label not in VALID.get(name, ())]
        if none_is_wrong:
            values.append(("None", None))
        for label, value in values:
            with pytest.raises(HostkitError) as raised:
                await call(host, ops, name, value)
            message = str(raised.value)
            assert len(message) <= MOST_CHARS, (name, label)
            assert "boom" not in message, (name, label)


async def test_refused_capabilities_leave_the_host_applying_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    agent = hostkit.Agent("assistant", model=ScriptedModel([Reply("ok")], repeat_last=True))
    async with hostkit.Host.open(agents=[agent]) as host:
        with pytest.raises(hostkit.InvalidValue, match="capabilities must be"):
            await host.apply_config(host.declared_config, capabilities=1.5)  # type: ignore[arg-type]
        before = host.generation
        assert await host.apply_config(host.declared_config) == before + 1
        assert await host.run_turn("assistant", "hi") == "ok"


async def test_hostile_text_is_used_as_the_text_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A str subclass that is valid text works as that text: its own methods never run."""
    monkeypatch.chdir(tmp_path)
    agent = hostkit.Agent("assistant", model=ScriptedModel([Reply("ok")], repeat_last=True))
    async with hostkit.Host.open(agents=[agent]) as host:
        ops = await host.operator(HostileStr("me"), reason=HostileStr("argument checks"))
        assert await host.run_turn(HostileStr("assistant"), HostileStr("hi")) == "ok"
        catalog = await host.tool_catalog(HostileStr("assistant"), session_id=HostileStr("s"))
        assert type(catalog.agent) is str
        assert type(catalog.session_id) is str
        assert await host.approvals.list(ops, status=HostileStr("pending")) == []
        named = hostkit.Agent(HostileStr("helper"))
        assert type(named.name) is str
        # An empty media type still means "as its suffix says".
        await anyio.Path(tmp_path / "notes.txt").write_text("hi")
        added = await host.attachments.add_file(FACTS, tmp_path / "notes.txt", media_type="")
        assert added.media_type == "text/plain"


class CountlessStr(str):
    """Valid text whose length and hash raise: only str's own methods may read it."""

    def __len__(self) -> int:
        raise RuntimeError("len boom")

    def __hash__(self) -> int:
        raise RuntimeError("hash boom")


def test_turn_request_text_inside_its_lists_is_used_as_plain_text() -> None:
    ref = "sha256:" + "a" * 64
    attachment = Attachment(
        name=CountlessStr("a.txt"),
        media_type=CountlessStr("text/plain"),
        size=3,
        ref=CountlessStr(ref),
    )
    assert type(attachment.ref) is str
    turn = TurnRequest(
        input="hi",
        principal=ConversationFacts(channel="cli", conversation_key="k", principal_key="p"),
        request_id="req-1",
        injected_context=[CountlessStr("remember the milk")],
        attachments=[attachment],
    )
    assert [type(item) for item in turn.injected_context] == [str]
    assert turn.injected_context == ("remember the milk",)
