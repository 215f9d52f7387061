"""The finished rows' tallies (SQLite v28, PostgreSQL v15): PostgreSQL's fold.

Triggers append a delta row per change of a finished inbound or intent; a
count reads the tallies and the deltas not yet folded into them. SQLite's
trigger folds every ``TALLY_FOLD``-th delta itself (one writer: no delta id is
ever skipped). PostgreSQL folds in the claims instead, at READ COMMITTED
(``hostkit_fold_tallies``): each claim calls ``fold_tallies`` first, and work
that finishes rows claims them first, so the next claim folds a fold's worth.
Retention deletes finished rows without a claim: its passes fold after them
(``fold_alone``), so a database that only retention touches folds too.
"""

from __future__ import annotations

import sqlite3

from hostkit.store._dialect import claim_isolation, is_postgres

__all__ = ["fold_alone", "fold_tallies"]

_FOLD = "SELECT hostkit_fold_tallies()"


def fold_tallies(conn: sqlite3.Connection) -> None:
    """On PostgreSQL, fold the deltas into the tallies once a fold's worth waits (one
    claimer at a time; the check is two index probes). A no-op on SQLite."""
    if is_postgres(conn):
        conn.execute(_FOLD).fetchall()


def fold_alone(conn: sqlite3.Connection) -> None:
    """``fold_tallies`` as a transaction of its own, at READ COMMITTED (as in a claim:
    a SERIALIZABLE fold conflicts with concurrent completions)."""
    claim_isolation(conn)
    fold_tallies(conn)
