"""The Host's judge of each listed MCP tool is bounded, off the loop, and not fooled.

The connection takes each tool entry the Host cannot use out of its ``tools/list``
page before the SDK parses the page as one piece (``hostkit/builtins/mcp/_listing``).
A hostile server chooses what that judge reads, so:

- judging is bounded and never on the event loop: pages of entries that fail the
  protocol's schema at thousands of places each (pydantic built an error per place, on
  the loop: a listing of such pages froze every session for most of a minute) leave the
  loop running, and the listing ends soon, with those tools refused or the listing
  failed once it takes out more entries than a server may list tools;
- an entry the filter keeps never fails its page: it applies every check the SDK
  applies to a page (the SDK's version-free tool type too, and the 2026-07-28
  ``x-mcp-header`` rules under which the SDK drops a tool unnamed) to that entry alone;
- a listing page or call result of MiBs is read as JSON once (pydantic-core holds the
  GIL for a whole parse, on a worker thread too: only less work spares the loop);
- an answer is matched to its request as the SDK matches it (a server echoing id 7 as
  ``"7"``), and a late answer to an abandoned listing never names the next listing's
  tools refused.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from hostkit.builtins.mcp import McpClientConnector, McpProtocolError
from hostkit.builtins.process import SandboxPolicy
from hostkit.builtins.web import UrlPolicy
from hostkit.effects import McpConnection, McpServerDeclaration, McpToolSpec, ToolOutcome
from tests.stalls import longest_stall

pytestmark = pytest.mark.anyio

SERVER = Path(__file__).parent.parent / "mcp_servers" / "listing_server.py"
# The Host's work on one 3.6 MiB message: its JSON parse holds the loop 0.05 to 0.1 s here,
# the SDK's parse 0.3 to 0.5 s.
BULK_STALL_S = 0.2
# What judging pages of failing entries may hold the loop: their messages' parse, about
# 0.2 s of CPU a page here (pydantic-core holds the GIL for a whole parse, on the loop or
# a worker thread alike: hostkit/builtins/mcp/_stdio.py ``_parse``), stretched by a loaded
# full run (0.50 s seen on two cores); judging them on the loop, or an error per place,
# holds it for seconds a page.
JUDGING_STALL_S = 1.0
ENV = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(SERVER, root / "listing_server.py")
    return root


@pytest.fixture(params=["legacy", "modern"])
def era(request: pytest.FixtureRequest) -> str:
    """The protocol the server speaks: the handshake era, or 2026-07-28 (``server/discover``)."""
    return str(request.param)


@asynccontextmanager
async def connected(workspace: Path, era: str, mode: str) -> AsyncIterator[McpConnection]:
    connector = McpClientConnector(
        workspace=workspace,
        sandbox=SandboxPolicy(mode="none"),
        url_policy=UrlPolicy(),
        environ=ENV,
    )
    declaration = McpServerDeclaration(
        name="lister", transport="stdio", command=(sys.executable, "listing_server.py", era, mode)
    )
    opened = await connector.connect(declaration)
    try:
        yield opened
    finally:
        await opened.aclose()


async def list_watching_the_loop(
    connection: McpConnection,
) -> tuple[Sequence[McpToolSpec] | McpProtocolError, float, float]:
    """The listing (or its failure), how long it took, and the Host's longest stall of the
    event loop meanwhile (``longest_stall``)."""
    outcome: Sequence[McpToolSpec] | McpProtocolError

    async def listing() -> None:
        nonlocal outcome
        try:
            outcome = await connection.list_tools()
        except McpProtocolError as exc:
            outcome = exc

    started = time.monotonic()
    with anyio.fail_after(30):
        stall = await longest_stall(listing())
    return outcome, time.monotonic() - started, stall


def refusals(specs: Sequence[McpToolSpec]) -> dict[str, str | None]:
    return {spec.name: spec.refusal for spec in specs}


async def test_pages_of_entries_failing_everywhere_fail_the_listing_soon_and_off_the_loop(
    workspace: Path,
) -> None:
    """64 entries a page, each failing the protocol's schema at 3,000 places, the same
    names on 16 pages: the loop keeps running, and past 128 entries taken out the
    listing fails as a malformed one does, in seconds, not most of a minute."""
    async with connected(workspace, "legacy", "wide") as connection:
        outcome, took, stall = await list_watching_the_loop(connection)
        assert stall < JUDGING_STALL_S, f"the event loop stalled {stall:.2f} s"
        assert isinstance(outcome, McpProtocolError)
        assert "lists more than 128 tool entries the Host cannot use" in str(outcome)
        assert took < 10, f"the listing took {took:.1f} s"
        assert connection.alive


async def test_an_entry_failing_at_a_million_places_is_refused_at_its_first(
    workspace: Path, era: str
) -> None:
    """One entry of a million bad icons on each of 4 pages: judged up to its first error
    (an error each would hold the loop, or the interpreter on a worker thread, for
    seconds a page), refused with that place, and its sibling listed and called."""
    async with connected(workspace, era, "dense") as connection:
        outcome, took, stall = await list_watching_the_loop(connection)
        assert stall < JUDGING_STALL_S, f"the event loop stalled {stall:.2f} s"
        assert not isinstance(outcome, McpProtocolError), outcome
        reasons = refusals(outcome)
        assert reasons["good"] is None
        assert (reasons["dense"] or "").startswith("its entry does not fit protocol 20")
        assert (reasons["dense"] or "").endswith(" at icons.0")
        assert took < 10, f"the listing took {took:.1f} s"
        called = await connection.call_tool("good", {"n": 1})
        assert called.status == "succeeded", called.error


async def test_a_listing_and_a_result_of_mibs_are_read_without_stalling_the_loop(
    workspace: Path, era: str
) -> None:
    """A listing page and a call result of 3.6 MiB (1.9 million numbers in a field no
    client reads): each line is parsed as JSON once, not once per member of the message
    union the SDK's parse tries (0.3 to 0.5 s of the loop's time here, for each)."""
    async with connected(workspace, era, "bulk") as connection:
        outcome, _, stall = await list_watching_the_loop(connection)
        assert stall < BULK_STALL_S, f"the listing stalled the event loop {stall:.2f} s"
        assert not isinstance(outcome, McpProtocolError), outcome
        assert refusals(outcome) == {"good": None}
        called: list[ToolOutcome] = []

        async def call() -> None:
            called.append(await connection.call_tool("good", {"n": 1}))

        with anyio.fail_after(30):
            stall = await longest_stall(call())
        assert stall < BULK_STALL_S, f"the result stalled the event loop {stall:.2f} s"
        assert called[0].status == "succeeded", called[0].error
        assert called[0].output == "called good"


async def test_an_entry_only_the_sdks_tool_type_refuses_is_refused_alone(
    workspace: Path, era: str
) -> None:
    """2026-07-28's schema ignores ``execution``; the SDK's version-free ``Tool`` still
    parses it, and refused the whole page: the entry is refused alone, its siblings offered."""
    async with connected(workspace, era, "sdk") as connection:
        reasons = refusals(await connection.list_tools())
        assert reasons["good"] is None
        for name in ("tasky", "timed"):
            assert (reasons[name] or "").startswith("its entry does not fit "), reasons
        assert (reasons["tasky"] or "").endswith(" at execution.taskSupport")
        assert "bogus" not in (reasons["tasky"] or ""), "where, never the value"
        called = await connection.call_tool("good", {"n": 1})
        assert called.status == "succeeded", called.error
        refused = await connection.call_tool("tasky", {})
        assert refused.status == "failed"
        assert "was not called" in (refused.error or "")


async def test_a_tool_the_sdk_would_drop_unnamed_is_named_refused(workspace: Path) -> None:
    """On 2026-07-28 the SDK drops a tool whose ``x-mcp-header`` annotation it refuses,
    silently: the filter refuses it first, so the operator sees it named with why."""
    async with connected(workspace, "modern", "sdk") as connection:
        reasons = refusals(await connection.list_tools())
        assert "x-mcp-header" in (reasons.get("headed") or ""), reasons


async def test_an_answer_whose_id_comes_back_as_a_string_is_still_filtered(
    workspace: Path, era: str
) -> None:
    """The SDK matches an answer with id ``"7"`` to request 7; so does the filter: one
    bad entry is refused alone, not the listing failed, again on the next listing."""
    async with connected(workspace, era, "strid") as connection:
        for _ in range(2):
            reasons = refusals(await connection.list_tools())
            assert reasons == {
                "good": None,
                "shaped": "its input schema is not a JSON object schema",
            }


async def test_a_late_answer_to_an_abandoned_listing_is_not_the_next_listings(
    workspace: Path, era: str
) -> None:
    """The first listing is abandoned on its deadline; its answer, refusing ``ghost`` and
    ``twin``, arrives while the next listing runs: that listing names neither refused,
    and ``twin``, which its own second page lists, is usable."""
    async with connected(workspace, era, "late") as connection:
        with anyio.move_on_after(0.5) as waited:
            await connection.list_tools()
        assert waited.cancelled_caught
        reasons = refusals(await connection.list_tools())
        assert reasons == {"good": None, "twin": None}
        called = await connection.call_tool("twin", {})
        assert called.status == "succeeded", called.error
