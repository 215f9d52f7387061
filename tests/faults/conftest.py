"""Fixtures of the fault tests that need a PostgreSQL server of their own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.parts import missing
from tests.postgres import PostgresCluster, PostgresUnavailable


@pytest.fixture
def own_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[PostgresCluster]:
    """A durable cluster of this test alone (it is crashed and restarted mid-test)."""
    try:
        cluster = PostgresCluster.start(durable=True)
    except PostgresUnavailable as exc:
        missing("postgres", str(exc))
    monkeypatch.setenv("PGPASSWORD", cluster.password)
    try:
        yield cluster
    finally:
        cluster.stop()
