"""MCP in the EffectRuntime: the connect gate, the discovery window, failure backoff, eviction.

Clauses (contract, EffectRuntime; issue 14): connecting is its own effect,
``mcp.connect:<server>``, gated by capability and approval before any client
is constructed; calls use the connection-bound entry; discovery runs through
one runtime-wide window of four; a failure is cached per server for 30 s
while healthy peers stay connected; authority is rechecked per server on
every turn; a declaration change, a timeout, an authority change, an identity
change, removal, session replacement and Host shutdown each close the stale
connection; calls in flight survive prune and sweep; the connection cap holds.

The pool's clauses (every test taking ``kit``) run twice, on the same observations
(``tests/contract/_mcp_connectors.py``): on ``RecordingConnector``, a test adapter
behind the ``McpConnector`` seam, and on the real ``McpClientConnector`` (the MCP SDK
client) starting ``tests/mcp_servers/listing_server.py``'s clock mode in the bubblewrap
sandbox, each connection a process tree seen running or gone with psutil, a call that
hangs past its timeout a real unanswered request. The failure TTL runs on the injected
clock on both. The rest run on the recording adapter only: the catalog's treatment of
what a server lists (name clashes, refused schemas, the window share, declared secrets in
names, schemas, descriptions and results), the broad-glob rule and refused declarations
depend on no connection's lifetime, and the real listings' side of them is in
``tests/security/test_mcp_listing_filter.py`` and ``test_mcp_output_schemas.py``.
``test_clause_mcp_servers.py`` runs the gate, reuse and eviction through a whole Host.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from hostkit.authority import AuthorityResolver
from hostkit.effects import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRuntime,
    EffectPolicy,
    EffectRuntime,
    McpConnections,
    McpServer,
    McpServerDeclaration,
    PreparedEffectCatalog,
    Toolset,
    mcp_call_grant,
    mcp_connect_grant,
    tool,
)
from hostkit.errors import InvalidValue
from hostkit.types import EffectRequest, McpServerStatus, TurnExecutionContext
from tests.contract._mcp_connectors import (
    CONNECTORS,
    ConnectorKit,
    RealKit,
    RecordingConnector,
    RecordingKit,
    declared,
)
from tests.contract.test_context_basic import context_for
from tests.support import facts

pytestmark = pytest.mark.anyio

# Imported by other suites from here.
__all__ = ["RecordingConnector", "declared", "rig"]


@pytest.fixture(params=CONNECTORS)
async def kit(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ConnectorKit]:
    """The recording adapter or real servers; every pool a rig made is closed at the end
    and, on real servers, no server process may outlive it."""
    if request.param == "recording":
        made: ConnectorKit = RecordingKit()
    else:
        made = await anyio.to_thread.run_sync(RealKit, tmp_path / "servers")
    try:
        yield made
    finally:
        await made.aclose()


class Approver:
    def __init__(self, decision: ApprovalDecision = "approve_once") -> None:
        self.decision = decision
        self.seen: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.seen.append(request)
        return self.decision


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Servers:
    """The toolset provider: the declared servers can change between turns."""

    servers: list[McpServer]
    policy: EffectPolicy = field(default_factory=lambda: EffectPolicy(ask=("mcp.connect:*",)))
    static: tuple[Any, ...] = ()

    async def toolset(self, context: TurnExecutionContext) -> Toolset:
        return Toolset(
            tuple((t, "builtin:test") for t in self.static),
            self.policy,
            Path("/tmp"),
            mcp_servers=tuple(self.servers),
        )


@dataclass
class Rig:
    runtime: EffectRuntime
    pool: McpConnections
    servers: Servers
    approver: Approver
    authority: AuthorityResolver
    statuses: list[McpServerStatus]
    clock: Clock
    kit: ConnectorKit | None = None
    snapshot: tuple[str, ...] | None = None
    conversation: str = "mcp"
    prepared: list[PreparedEffectCatalog] = field(default_factory=list)

    async def finish(self) -> None:
        """End the turns prepared so far, as TurnExecution does: their catalogs close."""
        while self.prepared:
            await self.runtime.close_catalog(self.prepared.pop())

    async def turn(
        self,
        conversation: str | None = None,
        *,
        new_session: bool = False,
        agent: str = "",
        window_tokens: int | None = None,
    ) -> tuple[PreparedEffectCatalog, Any]:
        await self.finish()  # one turn after another, as a session's turns run
        scope = await self.authority.for_conversation(
            facts(conversation or self.conversation), session="fresh" if new_session else "bound"
        )
        base = context_for(scope, turn_id=f"turn_{len(self.statuses)}_{id(object())}")
        names = self.snapshot
        if names is None:
            names = tuple(
                grant
                for server in self.servers.servers
                for grant in (mcp_connect_grant(server.name), mcp_call_grant(server.name))
            ) + tuple(t.name for t in self.servers.static)
        fields = {n: getattr(base, n) for n in base.__dataclass_fields__}
        fields["capability_snapshot"] = {"effects": names, "policy": "p"}
        if agent:
            fields["core_id"] = agent
        context = TurnExecutionContext(**fields)
        catalog = await self.runtime.prepare_catalog(context, window_tokens=window_tokens)
        self.prepared.append(catalog)
        if self.kit is not None:
            await self.kit.observe()
        return catalog, context


async def rig(
    authority: AuthorityResolver,
    servers: list[McpServer],
    *,
    decision: ApprovalDecision = "approve_once",
    policy: EffectPolicy | None = None,
    kit: ConnectorKit | None = None,
) -> Rig:
    clock = Clock()
    statuses: list[McpServerStatus] = []

    async def record(status: McpServerStatus) -> None:
        statuses.append(status)

    pool = McpConnections(clock=clock, wall_clock=clock, status=record)
    if kit is not None:
        kit.pool(pool)
    provider = Servers(servers) if policy is None else Servers(servers, policy)
    approver = Approver(decision)
    runtime = EffectRuntime(
        toolsets=provider, approvals=ApprovalRuntime(provider=approver), mcp=pool
    )
    return Rig(runtime, pool, provider, approver, authority, statuses, clock, kit)


def states(catalog: PreparedEffectCatalog) -> dict[str, str]:
    return {d.server: d.state for d in catalog.discoveries}


async def test_clause_connect_is_gated_before_any_client(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    r = await rig(
        authority,
        [McpServer(kit.declared("time"), await kit.connector())],
        decision="deny",
        kit=kit,
    )
    catalog, _ = await r.turn()
    assert await kit.starts("time") == 0, "the connector ran before the connect was approved"
    assert states(catalog) == {"time": "denied"}
    assert [a.effect for a in r.approver.seen] == ["mcp.connect:time"]
    assert r.approver.seen[0].view["arguments"]["command"] == kit.declared("time").command
    assert catalog.definitions == ()

    # No capability in the snapshot: not asked, not connected.
    r.approver.decision = "approve_once"
    r.snapshot = ("mcp.call:time",)
    catalog, _ = await r.turn()
    assert await kit.starts("time") == 0
    assert len(r.approver.seen) == 1
    assert "no mcp.connect:time capability" in catalog.discoveries[0].detail

    # Denied by policy: not asked either.
    r.snapshot = None
    r.servers.policy = EffectPolicy(deny=("mcp.connect:time",))
    catalog, _ = await r.turn()
    assert await kit.starts("time") == 0
    assert len(r.approver.seen) == 1
    assert states(catalog) == {"time": "denied"}
    assert await kit.running("time") == []


async def test_clause_connect_asks_unless_a_rule_names_it(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    server = McpServer(kit.declared("time"), await kit.connector())
    r = await rig(authority, [server], policy=EffectPolicy(), kit=kit)
    await r.turn()
    assert len(r.approver.seen) == 1, "the catch-all allow is no approval to start a server"
    r2 = await rig(
        authority, [server], policy=EffectPolicy(allow=("*", "mcp.connect:time")), kit=kit
    )
    catalog, _ = await r2.turn()
    assert r2.approver.seen == []
    assert states(catalog) == {"time": "connected"}
    assert await kit.running("time") == [True, True]


async def test_clause_calls_use_the_connection_bound_entry(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    one, two = await kit.connector(), await kit.connector()
    r = await rig(
        authority,
        [McpServer(kit.declared("alpha"), one), McpServer(kit.declared("beta"), two)],
        kit=kit,
    )
    catalog, context = await r.turn()
    assert [d.name for d in catalog.definitions] == ["mcp_alpha_get_time", "mcp_beta_get_time"]
    ref = catalog.resolve("mcp_beta_get_time")
    assert ref is not None
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "UTC"}), context)
    assert result.status == "succeeded"
    # The server answers with its own name: the call reached beta's connection.
    assert result.views.model == "beta:get_time:UTC"
    # Provenance names the server for each entry.
    sources = {
        e: catalog.entry(catalog.resolve(e.replace(".", "_"))).source for e in catalog.effects
    }  # type: ignore[union-attr]
    assert sources == {"mcp.alpha.get_time": "mcp:alpha", "mcp.beta.get_time": "mcp:beta"}
    # Without mcp.call:<server> in the snapshot the call is refused before it reaches the server.
    r.snapshot = ("mcp.connect:beta", "mcp.call:alpha", "mcp.connect:alpha")
    other, _context2 = await r.turn()
    assert "mcp_beta_get_time" not in [d.name for d in other.definitions]


async def test_clause_discovery_window_of_four(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    connector = await kit.connector(delay_s=0.2)
    servers = [McpServer(kit.declared(f"s{i}"), connector) for i in range(8)]
    r = await rig(authority, servers, kit=kit)
    catalog, _ = await r.turn()
    assert r.pool.peak_discovering == 4
    assert [await kit.starts(f"s{i}") for i in range(8)] == [1] * 8
    assert set(states(catalog).values()) == {"connected"}
    if isinstance(connector, RecordingConnector):
        assert connector.peak == 4  # seen from the connector's side as well

    # Across sessions too: eight sessions each discovering one server at once.
    r2 = await rig(
        authority, [McpServer(kit.declared("one"), await kit.connector(delay_s=0.2))], kit=kit
    )
    async with anyio.create_task_group() as group:
        for i in range(8):
            group.start_soon(r2.turn, f"window-{i}")
    assert r2.pool.peak_discovering == 4
    assert await kit.starts("one") == 8
    assert await kit.running("one") == [True] * 8


async def test_clause_failure_cached_30s_healthy_peers_stay(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    broken = await kit.connector(fail="exited with status 3")
    servers = [
        McpServer(kit.declared("broken"), broken),
        McpServer(kit.declared("ok"), await kit.connector()),
    ]
    r = await rig(authority, servers, kit=kit)
    catalog, _ = await r.turn()
    assert states(catalog) == {"broken": "failing", "ok": "connected"}
    failing = next(d for d in catalog.discoveries if d.server == "broken")
    assert "exited with status 3" in failing.detail
    assert failing.failing_until == r.clock.now + 30

    r.clock.now += 29
    catalog, _ = await r.turn()
    assert await kit.starts("broken") == 1, "retried inside the 30 s failure TTL"
    assert states(catalog) == {"broken": "failing", "ok": "connected"}
    assert await kit.starts("ok") == 1
    assert await kit.running("ok") == [True]

    r.clock.now += 2
    await kit.change(broken, fail=None)
    catalog, _ = await r.turn()
    assert await kit.starts("broken") == 2
    assert states(catalog) == {"broken": "connected", "ok": "connected"}
    assert [s.state for s in r.statuses if s.server == "broken"] == ["failing", "connected"]
    assert await kit.running("broken") == [True]


async def test_clause_discovery_bounded_by_connect_timeout(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    # A real server must get as far as the listing: its start takes up to a second.
    timeout_s = 0.2 if isinstance(kit, RecordingKit) else 2.0
    server = McpServer(
        kit.declared("slow", connect_timeout_s=timeout_s), await kit.connector(hang_list=True)
    )
    r = await rig(authority, [server], kit=kit)
    with anyio.fail_after(timeout_s + 10):
        catalog, _ = await r.turn()
    assert states(catalog) == {"slow": "failing"}
    assert f"timed out after {timeout_s:g}s" in catalog.discoveries[0].detail
    assert await kit.starts("slow") == 1
    assert not any(await kit.running("slow")), "the half-open connection was left running"


async def test_clause_connections_reused_and_evicted(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    connector = await kit.connector()
    r = await rig(authority, [McpServer(kit.declared("git"), connector)], kit=kit)
    await r.turn()
    await r.turn()
    assert await kit.starts("git") == 1, "a second turn of the session reconnected"

    # A declaration change evicts the old connection before it could be used.
    r.servers.servers = [McpServer(kit.declared("git", env={"GIT_DIR": "/x"}), connector)]
    await r.turn()
    assert await kit.starts("git") == 2
    assert await kit.running("git") == [False, True]

    # An authority change (the policy changed) evicts too.
    r.servers.policy = EffectPolicy(ask=("mcp.connect:*", "mcp.git.*"))
    await r.turn()
    assert await kit.running("git") == [False, False, True]

    # Authority denied on a later turn: closed, and its tools are gone at once.
    r.servers.policy = EffectPolicy(deny=("mcp.connect:git",))
    catalog, _ = await r.turn()
    assert await kit.running("git") == [False, False, False]
    assert catalog.definitions == ()

    # Declaration removal closes the session's connection.
    r.servers.policy = EffectPolicy(ask=("mcp.connect:*",))
    await r.turn()
    assert await kit.running("git") == [False, False, False, True]
    r.servers.servers = []
    await r.turn()
    assert await kit.running("git") == [False] * 4


async def test_clause_timed_out_call_evicts(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    server = McpServer(kit.declared("t", call_timeout_s=0.2), await kit.connector())
    r = await rig(authority, [server], kit=kit)
    catalog, context = await r.turn()
    ref = catalog.resolve("mcp_t_get_time")
    assert ref is not None
    # The server never answers this call.
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "hang"}), context)
    assert result.status == "timed_out"
    assert result.started
    await r.turn()
    assert await kit.running("t") == [False, True]


async def test_clause_session_replacement_and_shutdown_close(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    r = await rig(authority, [McpServer(kit.declared("t"), await kit.connector())], kit=kit)
    await r.turn()
    await r.turn(new_session=True)  # the same conversation moved to a new session
    assert await kit.running("t") == [False, True]
    await r.pool.aclose()
    assert await kit.running("t") == [False, False]
    assert r.statuses[-1].state == "closed"
    # What it listed stays on the record: `hostkit mcp list` after a CLI run names them.
    assert [t.effect for t in r.statuses[-1].tools] == ["mcp.t.get_time"]


async def test_clause_discovered_name_clashes_leave_out_only_the_clashing_tools(
    authority: AuthorityResolver,
) -> None:
    """A name a server chose at run time never takes the agent's other tools down: a tool
    clashing with a static tool, with another server's tool or with a sibling after
    normalization is left out and named in its server's diagnostic."""

    @tool("mcp.t.get_time")
    async def impostor(zone: str) -> str:
        """A static tool with an MCP tool's name."""
        return zone

    clashing = RecordingConnector(tools=("get-date", "get_date", "get_time", "now"))
    r = await rig(
        authority,
        [
            McpServer(declared("t"), clashing),
            McpServer(declared("a_b"), RecordingConnector(tools=("c",))),
            McpServer(declared("a"), RecordingConnector(tools=("b_c",))),
        ],
    )
    r.servers.static = (impostor,)
    catalog, _ = await r.turn()
    names = [d.name for d in catalog.definitions]
    assert names == ["mcp_t_get_time", "mcp_a_b_c", "mcp_t_now"]
    static = catalog.entry(catalog.resolve("mcp_t_get_time"))  # type: ignore[arg-type]
    assert static is not None
    assert static.source == "builtin:test"
    details = {d.server: d.detail for d in catalog.discoveries}
    assert "get-date" in details["t"]
    assert "get_date" in details["t"]
    assert "taken by other tools: get_time" in details["t"]
    assert "taken by other tools: c" in details["a_b"]
    assert details["a"] == ""


async def test_clause_declared_env_values_never_reach_a_view(authority: AuthorityResolver) -> None:
    token = "tok-declared-9f8e7d6c5b4a"
    connector = RecordingConnector(
        descriptions={"get_time": f"Helper. token={token}"},
        output=f"connection string is postgres://app:{token}@db/prod",
    )
    r = await rig(authority, [McpServer(declared("db", env={"DB_TOKEN": token}), connector)])
    catalog, context = await r.turn()
    assert token not in repr(catalog.definitions)
    assert "[redacted:mcp.db.DB_TOKEN]" in catalog.definitions[0].description
    ref = catalog.resolve("mcp_db_get_time")
    assert ref is not None
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "UTC"}), context)
    assert result.status == "succeeded"
    assert token not in repr(result)
    assert "[redacted:mcp.db.DB_TOKEN]" in result.views.model


async def test_clause_a_declared_secret_in_a_schema_or_a_tool_name_never_reaches_a_view(
    authority: AuthorityResolver,
) -> None:
    """The schema goes to the model as the description does; a tool named by the secret
    is left out and named only as such (its name would carry the secret everywhere)."""
    token = "tok-declared-9f8e7d6c5b4a"
    property_ = {
        "type": "string",
        "description": f"the zone; token {token}",
        "default": token,
        "examples": [token],
    }
    schema = {"type": "object", "properties": {"zone": property_}, "required": ["zone"]}
    connector = RecordingConnector(tools=("get_time", token), schemas={"get_time": schema})
    r = await rig(authority, [McpServer(declared("db", env={"DB_TOKEN": token}), connector)])
    catalog, context = await r.turn()
    assert [d.name for d in catalog.definitions] == ["mcp_db_get_time"]
    (definition,) = catalog.definitions
    shown = repr(definition.parameters)
    assert token not in shown
    assert "9f8e7d6c" not in shown
    assert "[redacted:mcp.db.DB_TOKEN]" in shown
    (discovery,) = catalog.discoveries
    assert "a tool whose name holds a declared secret" in discovery.detail
    for text in (discovery.detail, repr(r.statuses), repr(catalog.definitions)):
        assert "9f8e7d6c" not in text
    # The argument names stay: the call reaches the server as before.
    ref = catalog.resolve("mcp_db_get_time")
    assert ref is not None
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "UTC"}), context)
    assert result.status == "succeeded"
    assert connector.calls == [("db", "get_time", {"zone": "UTC"})]


async def test_clause_a_tool_with_a_refused_schema_is_left_out_with_its_reason(
    authority: AuthorityResolver,
) -> None:
    """A tool the connection refuses to call (its output schema failed the Host's checks)
    is left out as one whose input schema fails them is: never offered, named in the
    server's diagnostic with its reason (declared secrets masked), its siblings offered."""
    token = "tok-declared-9f8e7d6c5b4a"
    lookaround = {
        "type": "object",
        "properties": {"zone": {"type": "string", "pattern": "^(?=a)a$"}},
    }
    connector = RecordingConnector(
        tools=("check", "get_time", "lookaround"),
        schemas={"lookaround": lookaround},
        refusals={"check": f"its output schema refers to 'https://x/{token}': only references"},
    )
    r = await rig(authority, [McpServer(declared("db", env={"DB_TOKEN": token}), connector)])
    catalog, context = await r.turn()
    assert [d.name for d in catalog.definitions] == ["mcp_db_get_time"]
    (discovery,) = catalog.discoveries
    assert discovery.state == "connected"
    assert discovery.detail.startswith(
        "tools left out (no usable name or schema): check, lookaround; "
        "check: its output schema refers to 'https://x/[redacted:mcp.db.DB_TOKEN]'"
    ), discovery.detail
    assert "; lookaround: its input schema's pattern '^(?=a)a$' is not supported" in (
        discovery.detail
    )
    assert len(discovery.detail) <= 300
    assert r.statuses[-1].detail == discovery.detail
    assert [row.name for row in r.statuses[-1].tools] == ["get_time"]
    for text in (discovery.detail, repr(r.statuses)):
        assert "9f8e7d6c" not in text
    ref = catalog.resolve("mcp_db_get_time")
    assert ref is not None
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "UTC"}), context)
    assert result.status == "succeeded"
    assert catalog.resolve("mcp_db_check") is None
    # A reused connection says the same, without asking the server again.
    again, _ = await r.turn()
    assert [d.detail for d in again.discoveries] == [discovery.detail]
    assert len(connector.connections) == 1


async def test_clause_the_connections_reason_names_a_tool_and_one_with_no_name_is_said_so(
    authority: AuthorityResolver,
) -> None:
    """The connection's verdict on a listed entry (``McpToolSpec.refusal``: its input schema
    is no object schema, it has no name) is the reason the diagnostic gives; a tool with no
    name is called so, not an empty name; the sibling is offered."""
    connector = RecordingConnector(
        tools=("", "get_time", "scan"),
        schemas={"": {"type": "object"}, "scan": {"type": "object", "properties": 5}},
        refusals={"": "it has no name", "scan": "its input schema is not a JSON object schema"},
    )
    r = await rig(authority, [McpServer(declared("db"), connector)])
    catalog, _ = await r.turn()
    assert [d.name for d in catalog.definitions] == ["mcp_db_get_time"]
    (discovery,) = catalog.discoveries
    assert discovery.state == "connected"
    assert discovery.detail == (
        "tools left out (no usable name or schema): a tool with no name, scan; "
        "scan: its input schema is not a JSON object schema"
    )


async def test_clause_a_servers_tools_take_at_most_its_share_of_the_model_window(
    authority: AuthorityResolver,
) -> None:
    """One server listing many large tools, hostile or only large, cannot leave the turn
    no room or crowd out another server's tools: past its share they are left out, named."""
    wide = {
        "type": "object",
        "properties": {"zone": {"type": "string", "description": "z" * 6_000}},
    }
    many = tuple(f"tool_{n:02}" for n in range(40))
    big = RecordingConnector(tools=many, schemas=dict.fromkeys(many, wide))
    small = RecordingConnector(tools=("get_time",))
    servers = [McpServer(declared("big"), big), McpServer(declared("small"), small)]
    r = await rig(authority, servers)
    catalog, _ = await r.turn(window_tokens=8_192)
    names = [d.name for d in catalog.definitions]
    # Half the window (8,192 tokens x 4 characters / 2) split between two servers.
    assert names == ["mcp_big_tool_00", "mcp_small_get_time"]
    details = {d.server: d.detail for d in catalog.discoveries}
    assert details["big"].startswith(
        "39 left out, past this server's share of the model's context window: tool_01, "
    )
    assert details["small"] == ""
    # Where the window is not known (a direct caller), nothing is left out for size.
    whole, _ = await r.turn(window_tokens=None)
    assert len(whole.definitions) == 41


@pytest.mark.parametrize(
    ("declaration", "label"),
    [
        (
            declared("db", command=("mcp-server", "--api-key", "argv-key-7f3a9c2e51")),
            "mcp.db.argv.1",
        ),
        (
            declared(
                "db", command=("sh", "-c", "exec srv --header 'X-Api-Key: argv-key-7f3a9c2e51'")
            ),
            "mcp.db.argv.1",
        ),
        (
            declared(
                "db", transport="http", command=(), url="https://h/mcp?api_key=argv-key-7f3a9c2e51"
            ),
            "mcp.db.url.1",
        ),
        (
            declared(
                "db", command=("npx", "mcp-remote", "https://h/mcp?token=argv-key-7f3a9c2e51")
            ),
            "mcp.db.argv.1",
        ),
        # A token in the URL's path, or under a name that says nothing (Azure's ?code=).
        (
            declared("db", transport="http", command=(), url="https://h/s/argv-key-7f3a9c2e51/mcp"),
            "mcp.db.url.1",
        ),
        (
            declared(
                "db", transport="http", command=(), url="https://h/mcp?code=argv-key-7f3a9c2e51"
            ),
            "mcp.db.url.1",
        ),
        (
            declared(
                "db", command=("sh", "-c", "exec mcp-remote 'https://h/s/argv-key-7f3a9c2e51/mcp'")
            ),
            "mcp.db.argv.1",
        ),
    ],
)
async def test_clause_credentials_on_a_servers_command_line_or_url_never_reach_a_view(
    authority: AuthorityResolver, declaration: McpServerDeclaration, label: str
) -> None:
    """What a server's view hides of its declaration is masked wherever the server echoes
    it (an error quoting its own key), as its env values are."""
    key = "argv-key-7f3a9c2e51"
    assert key not in repr(declaration.view())
    assert dict(declaration.secret_values()) == {label: key}
    connector = RecordingConnector(output=f"GET /status?key={key} returned 401")
    r = await rig(authority, [McpServer(declaration, connector)])
    catalog, context = await r.turn()
    ref = catalog.resolve("mcp_db_get_time")
    assert ref is not None
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "UTC"}), context)
    assert key not in repr(result)
    assert f"[redacted:{label}]" in result.views.model


async def test_clause_identity_change_evicts_and_failures_are_per_agent(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    connector = await kit.connector()
    r = await rig(authority, [McpServer(kit.declared("t"), connector)], kit=kit)
    await r.turn()
    # The agent's sandbox (the connector's identity) changed: not reused.
    r.servers.servers = [McpServer(kit.declared("t"), kit.reidentified(connector))]
    await r.turn()
    assert await kit.running("t") == [False, True]

    # One agent's failure does not block another agent declaring the same server.
    broken = await kit.connector(fail="no such script in this workspace")
    r2 = await rig(authority, [McpServer(kit.declared("u"), broken)], kit=kit)
    catalog, _ = await r2.turn(agent="first")
    assert states(catalog) == {"u": "failing"}
    await kit.change(broken, fail=None)
    catalog, _ = await r2.turn("other-conversation", agent="second")
    assert states(catalog) == {"u": "connected"}
    assert [(s.agent, s.state) for s in r2.statuses] == [
        ("first", "failing"),
        ("second", "connected"),
    ]


async def test_clause_calls_in_flight_survive_prune_and_sweep(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    r = await rig(authority, [McpServer(kit.declared("t"), await kit.connector())], kit=kit)
    catalog, context = await r.turn()
    ref = catalog.resolve("mcp_t_get_time")
    assert ref is not None
    results = []

    async def call() -> None:
        # The server answers this one after a second.
        results.append(await r.runtime.execute(EffectRequest("c1", ref, {"zone": "slow"}), context))

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await anyio.sleep(0.2)
        r.clock.now += 10_000  # far past the idle TTL
        await r.pool.sweep()
        assert await kit.running("t") == [True], "the idle sweep closed a busy connection"
        await r.pool.prune(set())  # a configuration apply removed the declaration
        assert r.pool.connections() == ()
        assert await kit.running("t") == [True], "prune killed a call in flight"
    assert [result.status for result in results] == ["succeeded"]
    assert results[0].views.model == "t:get_time:slow"
    assert await kit.running("t") == [True], "closed while its turn still held it"
    await r.finish()
    assert await kit.running("t") == [False], "the retired connection outlived its turn"


async def test_clause_prune_is_per_agent_and_connections_are_capped(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    r = await rig(authority, [McpServer(kit.declared("t"), await kit.connector())], kit=kit)
    await r.turn(agent="a")
    await r.turn("b-conversation", agent="b")
    digest = kit.declared("t").digest()
    await r.pool.prune({("b", "t", digest)})  # agent a was removed, b still declares it
    assert await kit.running("t") == [False, True]

    small = kit.pool(McpConnections(max_connections=2))
    r3 = await rig(authority, [McpServer(kit.declared("u"), await kit.connector())], kit=kit)
    r3.runtime = EffectRuntime(
        toolsets=r3.servers, approvals=ApprovalRuntime(provider=r3.approver), mcp=small
    )
    for n in range(3):
        await r3.turn(f"conversation-{n}")
    assert len(small.connections()) == 2
    # The least recently used one made room: its server is gone.
    assert await kit.running("u") == [False, True, True]


async def test_clause_broad_globs_are_no_connect_approval(authority: AuthorityResolver) -> None:
    for allow, asked in ((("*", "mcp.*"), 1), (("*", "mcp.connect:*"), 0), (("m*",), 1)):
        r = await rig(
            authority,
            [McpServer(declared("t"), RecordingConnector())],
            policy=EffectPolicy(allow=allow),
        )
        await r.turn()
        assert len(r.approver.seen) == asked, allow


async def test_clause_bad_declarations_are_refused() -> None:
    stdio = {"name": "ok", "transport": "stdio", "command": ("x",)}
    for bad in (
        {**stdio, "name": "Bad-Name"},
        {**stdio, "name": 7},
        {**stdio, "transport": "stdoi"},
        {"name": "ok", "transport": "stdio"},
        {"name": "ok", "transport": "http"},
        {**stdio, "connect_timeout_s": float("nan")},
        {**stdio, "call_timeout_s": float("inf")},
        {**stdio, "call_timeout_s": 0},
        {**stdio, "connect_timeout_s": "30"},
    ):
        with pytest.raises(InvalidValue, match=r"MCP server|needs a"):
            McpServerDeclaration(**bad)  # type: ignore[arg-type]
    for options in ({"window": 0}, {"window": 2.5}, {"max_connections": float("nan")}):
        with pytest.raises(InvalidValue, match="McpConnections"):
            McpConnections(**options)  # type: ignore[arg-type]
    secret = declared("s", env={"API_TOKEN": "tok-123456789"})
    assert "tok-123456789" not in repr(secret.view())
    assert secret.digest() != declared("s", env={"API_TOKEN": "other-12345678"}).digest()


async def test_clause_eviction_closes_only_the_connection_it_chose(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    """A prune that is still closing one session's old connection must not close the
    connection another session made meanwhile under the new declaration."""
    connector = await kit.connector(close_delay_s=0.3)
    r = await rig(authority, [McpServer(kit.declared("t"), connector)], kit=kit)
    await r.turn("one")
    await r.turn("two")
    await r.finish()
    changed = kit.declared("t", env={"MODE": "new"})
    new_digest = changed.digest()
    async with anyio.create_task_group() as group:
        group.start_soon(r.pool.prune, {("assistant", "t", new_digest)})
        await anyio.sleep(0.05)  # the prune is closing session one's old connection
        r.servers.servers = [McpServer(changed, connector)]
        await r.turn("two")  # session two reconnects under the new declaration
    assert await kit.running("t") == [False, False, True], (
        "the prune closed the connection that replaced its target"
    )
    (key,) = r.pool.connections()
    assert r.pool.session_tools(key[0], "assistant")["t"][0] == new_digest


async def test_clause_a_prepared_turn_keeps_its_connections(
    authority: AuthorityResolver, kit: ConnectorKit
) -> None:
    """The connection cap and the idle sweep never take a connection from a turn that was
    offered its tools (it may still be asking an approver), and concurrent connects cannot
    pass the cap together."""
    r = await rig(authority, [McpServer(kit.declared("t"), await kit.connector())], kit=kit)
    r.pool = kit.pool(McpConnections(max_connections=1, clock=r.clock))
    r.runtime = EffectRuntime(
        toolsets=r.servers, approvals=ApprovalRuntime(provider=r.approver), mcp=r.pool
    )
    first, context = await r.turn("first")
    r.prepared.clear()  # the first turn is still running: its catalog stays open
    r.clock.now += 10_000
    second, _ = await r.turn("second")
    assert states(second) == {"t": "failing"}
    assert "all in use" in second.discoveries[0].detail
    ref = first.resolve("mcp_t_get_time")
    assert ref is not None
    result = await r.runtime.execute(EffectRequest("c1", ref, {"zone": "UTC"}), context)
    assert result.status == "succeeded"
    await r.runtime.close_catalog(first)
    assert await kit.running("t") == [True]

    capped = kit.pool(McpConnections(max_connections=1))
    r2 = await rig(
        authority, [McpServer(kit.declared("u"), await kit.connector(delay_s=0.2))], kit=kit
    )
    r2.runtime = EffectRuntime(
        toolsets=r2.servers, approvals=ApprovalRuntime(provider=r2.approver), mcp=capped
    )
    r2.finish = _no_finish  # type: ignore[method-assign]
    async with anyio.create_task_group() as group:
        for n in range(3):
            group.start_soon(r2.turn, f"concurrent-{n}")
    assert len(capped.connections()) == 1
    assert (await kit.running("u")).count(True) == 1


async def _no_finish() -> None:
    """Concurrent turns of different sessions: none ends before the others prepared."""
