"""The author-facing ``ctx`` reaches no authority: what slots and tools are handed, walked.

Clause: slots and tools "do not receive PrincipalScope, route internals,
admission leases, Host stores, or operator authority". The objects a real
turn hands authored code are walked through everything reachable as data —
public attributes, ``__dict__``, closures, defaults, bound ``__self__``,
partials and containers — and none of those types may turn up. (Private
slots and module globals are out of reach of the interface, not of Python:
the default runtime is not a sandbox, and docs/slots.md says so.)
"""

from __future__ import annotations

import functools
import sqlite3
import types
from collections import deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from hostkit.authority import AuthorityResolver, OperatorIssuer
from hostkit.cores import AuthorContext, AuthorTurn, StateRuntime
from hostkit.effects import ApprovalRuntime, EffectRuntime, ToolContext, tool
from hostkit.host import Host
from hostkit.store import RuntimeStore, SessionLease
from hostkit.testing import CallTools, Reply, ScriptedModel
from hostkit.turns import TurnExecution
from hostkit.types import PrincipalScope, TurnExecutionContext, TurnToken
from tests.hosts import open_host, request

pytestmark = pytest.mark.anyio

FORBIDDEN: tuple[type, ...] = (
    PrincipalScope,
    SessionLease,
    TurnToken,
    TurnExecutionContext,
    RuntimeStore,
    AuthorityResolver,
    OperatorIssuer,
    Host,
    TurnExecution,
    EffectRuntime,
    ApprovalRuntime,
    sqlite3.Connection,
)
_LEAVES = (str, bytes, int, float, bool, type(None), Path, type, types.ModuleType)


def reachable(root: object) -> Iterator[tuple[str, object]]:
    """(path, object) for everything reachable from ``root`` as data, each object once."""
    seen: set[int] = set()
    queue: deque[tuple[str, object]] = deque([("ctx", root)])
    while queue:
        path, obj = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield path, obj
        if isinstance(obj, _LEAVES):
            continue
        children: list[tuple[str, Any]] = []
        if isinstance(obj, Mapping):
            children += [(f"{path}[{key!r}]", value) for key, value in obj.items()]
            children += [(f"{path}.key", key) for key in obj]
        elif isinstance(obj, list | tuple | set | frozenset):
            children += [(f"{path}[{i}]", value) for i, value in enumerate(obj)]
        if isinstance(obj, types.FunctionType):
            cells = obj.__closure__ or ()
            children += [(f"{path}.<closure>", cell.cell_contents) for cell in cells]
            children += [(f"{path}.<defaults>", obj.__defaults__ or ())]
            children += [(f"{path}.<kwdefaults>", obj.__kwdefaults__ or {})]
        if isinstance(obj, types.MethodType):
            children += [(f"{path}.__self__", obj.__self__), (f"{path}.__func__", obj.__func__)]
        if isinstance(obj, functools.partial):
            children += [(f"{path}.func", obj.func), (f"{path}.args", obj.args)]
            children += [(f"{path}.keywords", obj.keywords)]
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            children.append((f"{path}.__wrapped__", wrapped))
        if hasattr(obj, "__dict__") and not isinstance(obj, types.FunctionType):
            children += [(f"{path}.{key}", value) for key, value in vars(obj).items()]
        for name in dir(obj):
            if name.startswith("_"):
                continue
            try:
                value = getattr(obj, name)
            except Exception:
                continue
            children.append((f"{path}.{name}", value))
        queue.extend(children)


def leaks(root: object) -> list[str]:
    return [
        f"{path}: {type(obj).__name__}"
        for path, obj in reachable(root)
        if isinstance(obj, FORBIDDEN)
    ]


async def test_a_tools_ctx_and_a_slots_ctx_reach_no_authority(tmp_path: Path) -> None:
    handed: dict[str, Any] = {}

    @tool("probe.capture")
    async def capture(ctx: ToolContext) -> str:
        handed["tool"] = ctx
        # The slot ctx of this very turn, built the way TurnExecution builds it, with the
        # turn's real lease and the Host's real store behind it.
        lease = await host.store.turns.session_lease(ctx.session_id)
        assert lease is not None
        handed["slot"] = AuthorTurn(
            StateRuntime(host.store),
            turn_id=ctx.turn_id,
            session_id=ctx.session_id,
            core_id=ctx.core_id,
            core_revision=ctx.core_revision,
            request_id=ctx.request_id,
            lease=lease,
            sink=lambda kind, data: None,
        ).context
        return "captured"

    model = ScriptedModel([CallTools(("probe_capture", {})), Reply("ok")])
    async with open_host(tmp_path, model, tools=[capture]) as host:
        result = await host.turns.run(request())
    assert result.outcome == "completed"
    tool_ctx: ToolContext = handed["tool"]
    slot_ctx: AuthorContext = handed["slot"]
    # The walk does reach the SDK (so it would see a forbidden object behind it).
    walked = [type(obj).__name__ for _, obj in reachable(tool_ctx)]
    assert {"StateHandle", "Emitter"} <= set(walked)
    assert leaks(tool_ctx) == []
    assert leaks(slot_ctx) == []
    assert tool_ctx.state is not None
    assert tool_ctx.core_revision == result.core_revision
    assert tool_ctx.request_id == result.request_id


def test_the_walk_finds_authority_hidden_in_a_closure_or_a_default() -> None:
    marker = ApprovalRuntime()

    def hidden() -> object:
        return marker

    def defaulted(x: object = marker) -> object:
        return x

    assert leaks({"emit": hidden}) == ["ctx['emit'].<closure>: ApprovalRuntime"]
    assert leaks([defaulted]) == ["ctx[0].<defaults>[0]: ApprovalRuntime"]


def test_a_slots_ctx_has_exactly_the_documented_fields() -> None:
    assert set(AuthorContext.__dataclass_fields__) == {
        "turn_id",
        "session_id",
        "core_id",
        "core_revision",
        "request_id",
        "state",
        "core_state",
        "emit",
    }
    # Slotted and frozen: no per-instance __dict__ to hang anything else on.
    assert "__slots__" in vars(AuthorContext)
