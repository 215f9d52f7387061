"""SQLite spellings -> PostgreSQL spellings (hostkit/store/_pg_translate.py), rule by rule.

Each rule is held to the real row SQL it exists for, imported from the row
modules, so a row module that changes a spelling the rule depends on fails
here rather than on a PostgreSQL server. The last test walks every string
constant of the row modules (module constants and the literals inside their
functions) and checks that no SQLite-only construct survives translation.
No database is needed.
"""

from __future__ import annotations

import importlib
import re
import types
from collections.abc import Iterator

import pytest

from hostkit.store import _delivery_rows, _inbox_rows
from hostkit.store._pg_translate import translate

ISO_NOW = "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
EPOCH_NOW = "extract(epoch FROM clock_timestamp())::float8"

# Modules whose SQL runs on PostgreSQL through PgConnection. The SQLite-only ones
# (_schema, _migrate, _sqlite, _writer, _connection, _transaction) never reach translate.
ROW_MODULES = (
    "_approval_rows",
    "_approvals",
    "_attachments",
    "_context",
    "_context_rows",
    "_cores",
    "_cores_sql",
    "_delivery",
    "_delivery_rows",
    "_delivery_sql",
    "_inbox",
    "_inbox_rows",
    "_inbox_sql",
    "_inspect",
    "_lease",
    "_lease_rows",
    "_mcp",
    "_memory",
    "_owned",
    "_row_store",
    "_scopes",
    "_sessions",
    "_terminal_runs",
    "_turn_rows",
    "_turns",
)
# Constructs PostgreSQL does not have; translate must leave none of them behind.
SQLITE_ONLY = (
    re.compile(r"\bjulianday\("),
    re.compile(r"\bstrftime\("),
    re.compile(r"\bjson_extract\("),
    re.compile(r"\bjson_each\("),
    re.compile(r"\bINDEXED BY\b"),
    re.compile(r"/\*pg:"),
    re.compile(r"\bINSERT OR (IGNORE|REPLACE)\b", re.IGNORECASE),
)
# A statement keyword at the start of a string: the string is SQL (or a fragment of it).
SQL_START = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|FROM|WHERE|AND|OR|ORDER|LIMIT|SET|VALUES|ON)\b"
)
# Memory search: SQLite's FTS5 text, chosen only when the connection is SQLite
# (_dialect.is_postgres); its PostgreSQL twin is a tsvector query beside it.
FTS_ONLY = re.compile(r"\bmemory_fts\b|\bMATCH\b|\bbm25\(")


# -- placeholders and percent -----------------------------------------------------------


def test_question_marks_become_psycopg_placeholders() -> None:
    sql = _inbox_rows._EXISTING
    assert sql.count("?") == 2
    assert translate(sql) == (
        "SELECT inbound_id FROM inbox WHERE channel_instance_id = %s AND platform_event_key = %s"
    )


def test_question_marks_inside_quotes_are_untouched() -> None:
    assert translate("SELECT '?', \"a?b\" FROM t WHERE x = ?") == (
        "SELECT '?', \"a?b\" FROM t WHERE x = %s"
    )
    # A doubled quote inside a literal closes and reopens it: the ? stays literal text.
    assert translate("SELECT 'it''s ?' WHERE y = ?") == "SELECT 'it''s ?' WHERE y = %s"
    # A double quote inside a single-quoted literal does not open a quoted name.
    assert translate("SELECT 'say \"?' WHERE z = ?") == "SELECT 'say \"?' WHERE z = %s"


def test_a_literal_percent_is_escaped_for_psycopg() -> None:
    # The audit filter of effect rows (hostkit/store/_sessions.py) is a LIKE with %.
    sql = "SELECT id FROM audit WHERE kind LIKE 'effect.%' AND session_id = ?"
    assert translate(sql) == "SELECT id FROM audit WHERE kind LIKE 'effect.%%' AND session_id = %s"
    # A %s already in the text is literal text, not a placeholder: escaped too.
    assert translate("SELECT '%s' WHERE a = ?") == "SELECT '%%s' WHERE a = %s"


# -- the /*pg: ... */ hint --------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "tail"),
    [
        (_inbox_rows.DUE_ROWS, "ORDER BY due_at, id LIMIT %s FOR UPDATE SKIP LOCKED"),
        (_delivery_rows.DUE_ROWS, "ORDER BY next_attempt_at, id LIMIT %s FOR UPDATE SKIP LOCKED"),
    ],
    ids=["inbox", "outbox"],
)
def test_the_pg_hint_becomes_the_clause_it_holds(sql: str, tail: str) -> None:
    assert sql.endswith("/*pg: FOR UPDATE SKIP LOCKED */")
    out = translate(sql)
    assert out.endswith(tail)
    assert "/*" not in out
    assert "*/" not in out


def test_an_ordinary_comment_is_not_a_hint() -> None:
    assert translate("SELECT 1 /* pg: not a hint */") == "SELECT 1 /* pg: not a hint */"


# -- the database clock --------------------------------------------------------------


def test_sqlite_iso_now_becomes_utc_text_with_milliseconds() -> None:
    sql = "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"  # hostkit/store/_owned.py
    assert translate(sql) == f"SELECT {ISO_NOW}"
    assert "%" not in translate(sql)


def test_sqlite_epoch_now_becomes_postgres_epoch_rounded_to_milliseconds() -> None:
    clock = _delivery_rows._CLOCK
    assert clock == "round((julianday('now') - 2440587.5) * 86400.0, 3)"
    assert translate(clock) == f"round({EPOCH_NOW}::numeric, 3)::float8"
    # In the real insert, both clocks are rewritten and the placeholders too.
    out = translate(_delivery_rows._INSERT)
    assert out.count(f"round({EPOCH_NOW}::numeric, 3)::float8") == 2
    assert "julianday" not in out
    assert "?" not in out


def test_epoch_of_an_iso_text_column_becomes_extract_epoch() -> None:
    # hostkit/store/_cores_sql.py: session_pins reads a turn's start as epoch seconds.
    sql = "SELECT t.session_id, (julianday(t.started_at) - 2440587.5) * 86400.0 AS at FROM turns t"
    assert translate(sql) == (
        "SELECT t.session_id, extract(epoch FROM (t.started_at)::timestamptz)::float8 AS at "
        "FROM turns t"
    )


# -- JSON ------------------------------------------------------------------------------


def test_json_extract_of_a_key_becomes_json_text_access() -> None:
    # hostkit/store/_approvals.py: the operator issuance row of a grant. json, not jsonb:
    # jsonb refuses a stored \u0000, which SQLite and json keep.
    sql = "AND principal_id = ? AND json_extract(detail, '$.grant_id') = ? "
    assert translate(sql) == "AND principal_id = %s AND ((detail)::json ->> 'grant_id') = %s "


def test_json_each_of_a_parameter_becomes_json_array_elements_text_named_value() -> None:
    # hostkit/store/_mcp.py: forget the servers not in a JSON list of names.
    sql = (
        "DELETE FROM mcp_servers WHERE agent = ? AND server NOT IN (SELECT value FROM json_each(?))"
    )
    assert translate(sql) == (
        "DELETE FROM mcp_servers WHERE agent = %s "
        "AND server NOT IN (SELECT value FROM json_array_elements_text(%s::json) AS value)"
    )


# -- scalar MAX / MIN ------------------------------------------------------------------


def test_two_argument_max_becomes_greatest() -> None:
    out = translate(_inbox_rows._RELEASE)
    assert "attempt = GREATEST(attempt - 1, 0)" in out
    assert "MAX(" not in out
    assert "attempts = GREATEST(attempts - 1, 0)" in translate(_delivery_rows._RELEASE)


def test_two_argument_min_becomes_least() -> None:
    assert translate("SELECT MIN(due_at, ?) FROM inbox") == "SELECT LEAST(due_at, %s) FROM inbox"


def test_aggregate_max_and_min_are_untouched() -> None:
    assert translate(_inbox_rows._LAST_SERVED) == "SELECT MAX(served_seq) FROM inbox_channels"
    sql = "SELECT MIN(id), MAX(id) FROM turns WHERE core_id = ? GROUP BY session_id"
    assert (
        translate(sql)
        == "SELECT MIN(id), MAX(id) FROM turns WHERE core_id = %s GROUP BY session_id"
    )


# -- planner hints ---------------------------------------------------------------------


def test_indexed_by_is_dropped() -> None:
    sql = _inbox_rows._PRUNE_PAYLOADS
    assert "INDEXED BY inbox_payloads " in sql
    out = translate(sql)
    assert "INDEXED BY" not in out
    assert "SELECT id FROM inbox WHERE state = 'completed' AND payload IS NOT NULL" in out


# -- the cache ------------------------------------------------------------------------


def test_translation_is_stable_and_idempotent_on_postgres_only_text() -> None:
    sql = _inbox_rows.DUE_ROWS
    assert translate(sql) is translate(sql)  # cached by statement text
    # Text with no SQLite construct, no ? and no % passes through unchanged.
    plain = "SELECT id FROM inbox WHERE state = 'completed'"
    assert translate(plain) == plain


# -- every string of the row modules ----------------------------------------------------


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, types.CodeType):
        for constant in value.co_consts:
            yield from _strings(constant)
    elif isinstance(value, tuple | frozenset):
        for item in value:
            yield from _strings(item)


def _row_sql() -> Iterator[tuple[str, str]]:
    for name in ROW_MODULES:
        module = importlib.import_module(f"hostkit.store.{name}")
        found: set[str] = set()
        for value in vars(module).values():
            if isinstance(value, str):
                found.add(value)
            elif isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                found.update(_strings(value.__code__))
            elif isinstance(value, type) and value.__module__ == module.__name__:
                for member in vars(value).values():
                    function = getattr(member, "__func__", member)
                    function = getattr(function, "fget", function)
                    if isinstance(function, types.FunctionType):
                        found.update(_strings(function.__code__))
        for text in sorted(found):
            if SQL_START.match(text.lstrip("( ")):
                yield name, text


def _two_argument_scalars(sql: str) -> list[str]:
    """Each ``MAX(`` / ``MIN(`` call in ``sql`` with a comma at its own depth."""
    found = []
    for match in re.finditer(r"\b(MAX|MIN)\(", sql, re.IGNORECASE):
        depth, index = 1, match.end()
        while index < len(sql) and depth:
            char = sql[index]
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
            elif char == "," and depth == 1:
                found.append(sql[match.start() : index + 1])
                break
            index += 1
    return found


def test_the_row_modules_hold_sql_to_scan() -> None:
    # Guards the scan below against finding nothing (a renamed module, a changed filter).
    by_module = {name for name, _ in _row_sql()}
    assert {"_inbox_rows", "_delivery_rows", "_approvals", "_mcp", "_sessions"} <= by_module
    assert sum(1 for _ in _row_sql()) > 100


def test_no_sqlite_only_construct_survives_translation() -> None:
    leftovers = []
    for module, sql in _row_sql():
        if FTS_ONLY.search(sql):
            continue
        out = translate(sql)
        problems = [p.pattern for p in SQLITE_ONLY if p.search(out)]
        problems += _two_argument_scalars(out)
        if "?" in re.sub(r"'[^']*'|\"[^\"]*\"", "", out):
            problems.append("? left outside quotes")
        if problems:
            leftovers.append(f"{module}: {sql[:120]!r}: {problems}")
    assert leftovers == []
