"""Shared fixtures: asyncio via anyio, blocking-call detection, a real store per test.

The store matrix: every test of the modules in ``STORE_MATRIX`` runs once on
SQLite and once on PostgreSQL (ids ``[sqlite]`` and ``[postgres]``). On the
postgres leg ``RuntimeStore.open(path)`` opens a fresh database of a
throwaway cluster (tests/postgres.py) instead of the file, one database per
distinct path in a test, so everything that opens its store by path (the
``store`` fixture, ``Host.open``, a test that reopens the same file) follows.
``@pytest.mark.sqlite_only("why")`` keeps a test that is about the SQLite file
itself off the postgres leg.

Fixtures that open an adapter of tests/contract/_store_adapters.py take
``store_adapter`` as the adapter name. Tests parametrized over an ``adapter``
argument themselves (the ADAPTERS tuples, with "memory" for the inbox suite)
are not parametrized again; ``store_adapter`` follows their ``adapter``, so a
``RuntimeStore.open`` they also call lands on the same engine.
"""

from __future__ import annotations

import contextlib
import fnmatch
import inspect
import os
import signal
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
from blockbuster import BlockBuster, blockbuster_ctx

import tests.parts as parts_module
from hostkit._opening import Opening
from hostkit.authority import AuthorityResolver, OperatorIssuer
from hostkit.store import Migration, RuntimeStore
from hostkit.types import PrincipalScope
from tests.cli import warm_up
from tests.parts import MARK as PART_MISSING
from tests.parts import missing, part_of_skip, required_parts, skipped_summary
from tests.postgres import (
    PostgresCluster,
    PostgresUnavailable,
    set_active,
)

# The issue's "store, authority, turns, approvals and inbox contract suites" (issue 18):
# every test in these modules of tests/contract runs on SQLite and on PostgreSQL.
STORE_MATRIX = (
    "test_store_*.py",
    "test_authority.py",
    "test_turns_*.py",
    # Clauses of the turns contract: durable turn state on whatever engine the store opens.
    "test_clause_turns_*.py",
    "test_clause_approvals_*.py",
    "test_effects_approval*.py",
    "test_effects_approvals.py",
    "test_clause_inbox_*.py",
    "test_clause_delivery_store_*.py",
    "test_store_inbox.py",
    "test_store_recent_sessions.py",
    # The delivery suite's recovered-turns clause, written against the store ADAPTERS.
    "test_clause_delivery_recovered_turns.py",
    # Delivery clauses over a Host's durable outbox: claims, retries, routes, and the
    # deliveries of cut and failed turns.
    "test_clause_delivery_claims.py",
    "test_clause_delivery_cut_turns.py",
    "test_clause_delivery_failed_turns.py",
    "test_clause_delivery_retries.py",
    "test_clause_delivery_routes.py",
    # Approvals answered over a channel: durable approval and continuation rows.
    "test_clause_channel_approvals.py",
    # Not here: the CLI modules (test_cli_*, test_clause_cli_*). Their subprocesses open
    # the SQLite file their project names, the durable state they show is the inbox and
    # approvals suites' above, and a postgres leg would add minutes (approvals alone 70 s).
)
# The PostgreSQL adapter's own tests open their databases themselves (postgres_cluster):
# a sqlite leg would run each of them a second time, unchanged.
STORE_MATRIX_EXCEPT = ("test_store_pg_*.py",)
STORE_ADAPTERS = ("sqlite", "postgres")
# The parameter name of the suites that choose their adapter themselves (ADAPTERS tuples).
ADAPTER_PARAM = "adapter"
_CONTRACT = Path(__file__).parent / "contract"
_MISSING_LINE = inspect.getsourcelines(missing)[1]


def in_store_matrix(path: Path) -> bool:
    """True for a test module of tests/contract named in ``STORE_MATRIX``, not in ``..._EXCEPT``."""
    return (
        path.parent == _CONTRACT
        and any(fnmatch.fnmatch(path.name, p) for p in STORE_MATRIX)
        and not any(fnmatch.fnmatch(path.name, p) for p in STORE_MATRIX_EXCEPT)
    )


def _chooses_its_adapter(metafunc: pytest.Metafunc) -> bool:
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
        if isinstance(names, str):
            names = [name.strip() for name in names.split(",")]
        if ADAPTER_PARAM in names:
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not in_store_matrix(metafunc.definition.path):
        return
    if "store_adapter" not in metafunc.fixturenames or _chooses_its_adapter(metafunc):
        return
    only = metafunc.definition.get_closest_marker("sqlite_only")
    if only is not None and not (only.args and isinstance(only.args[0], str) and only.args[0]):
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: sqlite_only needs a reason: "
            '@pytest.mark.sqlite_only("what about the SQLite file this test checks")'
        )
    legs = ("sqlite",) if only is not None else STORE_ADAPTERS
    metafunc.parametrize("store_adapter", legs, ids=legs)


# A skip for want of a system part (tests/parts.py) is reported at the test's own line, or a
# fixture's; moved to one place, the same reason folds into one line of the short summary
# (the postgres leg alone is hundreds of skips).
@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and part_of_skip(longrepr[2]):
        report.longrepr = (parts_module.__file__, _MISSING_LINE, longrepr[2])
    return report


def pytest_runtest_setup(item: pytest.Item) -> None:
    # tests.parts.needs(part, reason): a reason means the part is missing here.
    for mark in item.iter_markers(PART_MISSING):
        part, reason = mark.args
        if reason is not None:
            missing(part, reason)


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C is answered as from a terminal, however the run was started. A shell starts
    a background job of a script (``make test &``) with SIGINT ignored, every process it
    starts inherits that, and Python keeps an ignored SIGINT ignored: the tests that press
    Ctrl-C in a command they start saw it ignored (and hostkit, by design, keeps a SIGINT
    it was started ignoring ignored, as ``nohup`` asks)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config: pytest.Config) -> str:
    required = sorted(required_parts())
    return (
        f"hostkit system parts required ({parts_module.REQUIRE}): "
        f"{', '.join(required) or 'none'}; any other missing part skips its tests"
    )


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    # The legs a missing part skipped, said once at the end (a green run is not a full one).
    reasons = [
        report.longrepr[2]
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple)
    ]
    lines = skipped_summary(reasons)
    if lines:
        terminalreporter.section("system parts missing: tests skipped", sep="=", yellow=True)
        for line in lines:
            terminalreporter.line(line, yellow=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A fixture of a matrix module parametrized over the adapters itself would cross them
    # with store_adapter (sqlite x postgres, four legs, two of them on the wrong engine).
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "store_adapter" not in params:
            continue
        crossed = [k for k, v in params.items() if k != "store_adapter" and v in STORE_ADAPTERS]
        if crossed:
            raise pytest.UsageError(
                f"{item.nodeid}: {crossed[0]} is parametrized over the store adapters and so is "
                "store_adapter; let the fixture take store_adapter instead"
            )
    # A sqlite_only test of a suite with its own adapter parameter loses its postgres item.
    dropped = [
        item
        for item in items
        if item.get_closest_marker("sqlite_only") is not None
        and getattr(getattr(item, "callspec", None), "params", {}).get(ADAPTER_PARAM) == "postgres"
    ]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


@pytest.fixture
def anyio_backend() -> str:
    # aiosqlite and the Jupyter kernel are asyncio; hostkit runs on anyio's asyncio backend.
    return "asyncio"


@pytest.fixture(autouse=True)
def blockbuster() -> Iterator[BlockBuster]:
    """Fail any test in which hostkit makes a blocking call on the event loop thread."""
    with blockbuster_ctx("hostkit") as bb:
        yield bb


@pytest.fixture(scope="session", autouse=True)
def _warm_cli() -> None:
    """Each worker's warm ``hostkit`` (tests/cli.py) starts before its first test, so no
    test's timing counts the CLI's import."""
    warm_up()


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL on loopback for this test process, started on first use.

    Where this machine has no PostgreSQL server binaries, skips or fails (when
    required) saying what is missing and how to install it (tests/parts.py). Sets
    ``PGPASSWORD``: URLs carry no password.
    """
    try:
        cluster = PostgresCluster.start()
    except PostgresUnavailable as exc:
        missing("postgres", str(exc))

    previous = os.environ.get("PGPASSWORD")
    os.environ["PGPASSWORD"] = cluster.password
    set_active(cluster)
    try:
        yield cluster
    finally:
        set_active(None)
        if previous is None:
            os.environ.pop("PGPASSWORD", None)
        else:
            os.environ["PGPASSWORD"] = previous
        cluster.stop()


@pytest.fixture
def store_adapter(request: pytest.FixtureRequest) -> str:
    """The engine under ``RuntimeStore.open`` in this test: "sqlite" unless the store
    matrix parametrizes it, or the test's own ``adapter`` parameter says "postgres"."""
    callspec = getattr(request.node, "callspec", None)
    chosen = callspec.params.get(ADAPTER_PARAM) if callspec is not None else None
    return "postgres" if chosen == "postgres" else "sqlite"


@pytest.fixture(autouse=True)
def _store_engine(store_adapter: str, request: pytest.FixtureRequest) -> Iterator[None]:
    """On the postgres leg, ``RuntimeStore.open(path)`` opens a fresh PostgreSQL database
    per distinct path (the same one again when the test reopens that path)."""
    if store_adapter != "postgres":
        yield
        return
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")

    async def open_database(path: str | Path) -> RuntimeStore:
        return await RuntimeStore.open_postgres(await cluster.database_for(path))

    def open_on_postgres(
        cls: type[RuntimeStore],
        path: str | Path,
        *,
        synchronous: str = "FULL",
        busy_timeout_s: float = 5.0,
        max_batch: int = 64,
        lock_timeout_s: float = 30.0,
        migrations: Sequence[Migration] | None = None,
    ) -> Opening[RuntimeStore]:
        # synchronous, busy_timeout_s, max_batch and lock_timeout_s tune the SQLite file
        # only; the PostgreSQL adapter has no such knobs, so they are accepted and ignored.
        if migrations is not None:
            pytest.fail(
                "RuntimeStore.open(migrations=...) builds an old SQLite schema: mark this test "
                '@pytest.mark.sqlite_only("...")',
                pytrace=False,
            )
        return Opening(lambda: open_database(path))

    # A MonkeyPatch of its own: a test's monkeypatch.undo() must not put SQLite back.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RuntimeStore, "open", classmethod(open_on_postgres))
        try:
            yield
        finally:
            patch.undo()
            cluster.drop_created()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "hostkit.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[RuntimeStore]:
    async with await RuntimeStore.open(db_path) as opened:
        yield opened


@pytest.fixture
async def authority(store: RuntimeStore) -> AsyncIterator[AuthorityResolver]:
    async with AuthorityResolver.bind(store) as resolver:
        yield resolver


@pytest.fixture
def issuer(authority: AuthorityResolver) -> OperatorIssuer:
    return authority.operator_issuer()


@pytest.fixture
async def operator(issuer: OperatorIssuer) -> PrincipalScope:
    return await issuer.issue("ops", reason="test fixture: inspect every owned row")


@pytest.fixture
def reaper() -> Iterator[list[Any]]:
    """Processes a test recorded (tests.security.test_process_tree.Record); any still
    running at teardown are killed, so a failing test never leaks a process tree."""
    from tests.security.test_process_tree import survivors

    records: list[Any] = []
    yield records
    for pid in survivors(records):
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).send_signal(signal.SIGKILL)
