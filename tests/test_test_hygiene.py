"""Rules the test files themselves keep, so the suite means the same on every supported Python."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent

# A connection used as its own context manager commits or rolls back but never closes: Python 3.13
# warns when such a connection is freed (a ResourceWarning, an error under the suite's
# filterwarnings), and the failure lands on whichever test runs when the collector frees it.
UNCLOSED_CONNECTION = re.compile(r"\bwith\s+sqlite3\.connect\(")


def test_no_test_opens_a_sqlite_connection_it_never_closes() -> None:
    offenders = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in sorted(TESTS.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if UNCLOSED_CONNECTION.search(line)
    ]
    assert offenders == [], (
        "write `with closing(sqlite3.connect(...)) as db, db:` (contextlib.closing): "
        + ", ".join(offenders)
    )
