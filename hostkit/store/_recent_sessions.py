"""The scope's sessions by their last activity, read without walking every session.

A session's last activity is its newest turn's end (or start, while it runs),
else its creation. No index holds that time, and sorting every session by it
cost a read of every session and every turn (a second on 100,000 sessions, on
the reader a notebook's Host shares). The sessions that can come first are
few, and two index walks find them:

- the sessions of the newest turns, walking ``turns`` newest first and
  skipping the sessions already taken (the newest turn of the others is older);
- the newest sessions, walking ``sessions`` newest first: a session without
  turns is ranked by its creation, and ``limit`` sessions created after it
  (ids follow creation) each have at least that much activity.

- the sessions of the turns that ended last, walking ``turns_ended`` newest
  first: a session whose one long turn ended after many short ones of other
  sessions started. A session's turns run one at a time, so its newest turn
  began after each of its others ended, and its activity is at least theirs.

Only those candidates (at most three times ``limit``) are ranked by last
activity (ties: newest session first), and only the sessions shown have
their turns counted.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from hostkit.store._context_rows import rows

__all__ = ["recent_session_rows"]

_SESSION_WALK = (
    "SELECT s.session_id FROM sessions s JOIN session_owners o ON o.session_id = s.session_id "
    "WHERE {where} ORDER BY s.id DESC LIMIT ?"
)
_TURN_WALK = (
    "SELECT t.{key}, t.session_id FROM turns t "
    "JOIN session_owners o ON o.session_id = t.session_id "
    "WHERE {where}{after}{skip} ORDER BY t.{key} DESC LIMIT ?"
)
# The keys a walk follows: start order (ids follow it) and end order; the bound that pages
# on: ids are unique, an end time may be shared (its sessions taken are skipped instead).
_AFTER = {"id": " AND t.id < ?", "ended_at": " AND t.ended_at <= ?"}
# The candidates ranked; the count of turns is taken for the rows that are shown.
_RANKED = (
    "SELECT r.*, (SELECT COUNT(*) FROM turns c WHERE c.session_id = r.session_id) AS turns "
    "FROM (SELECT s.id, s.session_id, s.created_at, s.status, s.title, o.owner_kind, "
    "o.parent_session_id, o.parent_turn_id, lt.core_id AS agent, "
    "lt.turn_id AS last_turn_id, lt.status AS last_outcome, "
    "COALESCE(lt.ended_at, lt.started_at, s.created_at) AS last_activity "
    "FROM sessions s JOIN session_owners o ON o.session_id = s.session_id "
    "LEFT JOIN turns lt ON lt.id = "
    "(SELECT MAX(n.id) FROM turns n WHERE n.session_id = s.session_id) "
    "WHERE s.session_id IN ({candidates}) AND {where} "
    "ORDER BY last_activity DESC, s.id DESC LIMIT ?) AS r "
    "ORDER BY r.last_activity DESC, r.id DESC"
)


def recent_session_rows(
    conn: sqlite3.Connection, where: str, params: list[Any], limit: int
) -> list[sqlite3.Row]:
    """At most ``limit`` of the sessions ``where`` (an ``owner_predicate`` over
    ``session_owners o``) allows, most recent activity first (see the module doc)."""
    candidates = dict.fromkeys(_sessions_of_newest_turns(conn, where, params, limit, "id"))
    candidates.update(
        dict.fromkeys(_sessions_of_newest_turns(conn, where, params, limit, "ended_at"))
    )
    newest = conn.execute(_SESSION_WALK.format(where=where), [*params, limit]).fetchall()
    candidates.update(dict.fromkeys(row[0] for row in newest))
    if not candidates:
        return []
    marks = ", ".join("?" * len(candidates))
    return rows(
        conn,
        _RANKED.format(candidates=marks, where=where),
        [*candidates, *params, limit],
    )


def _sessions_of_newest_turns(
    conn: sqlite3.Connection, where: str, params: list[Any], limit: int, key: str
) -> list[str]:
    """Up to ``limit`` sessions by their newest turn in ``key`` order (``id``: started,
    ``ended_at``: ended), newest first.

    Each page is ``limit`` turns of sessions not taken yet, not newer than the page
    before: at least one new session a page, and the turns of the sessions
    taken are skipped inside the query.
    """
    taken: dict[str, None] = {}
    before: Any = None
    ended = " AND t.ended_at IS NOT NULL" if key == "ended_at" else ""
    while len(taken) < limit:
        after = ended + ("" if before is None else _AFTER[key])
        skip = f" AND t.session_id NOT IN ({', '.join('?' * len(taken))})" if taken else ""
        page = conn.execute(
            _TURN_WALK.format(key=key, where=where, after=after, skip=skip),
            [*params, *([] if before is None else [before]), *taken, limit],
        ).fetchall()
        if not page:
            break
        for mark, session_id in page:
            taken.setdefault(session_id)
            before = mark
            if len(taken) == limit:
                break
    return list(taken)
