"""SQLite spellings -> PostgreSQL spellings, once per distinct statement text.

The row functions are written once. Where SQLite and PostgreSQL spell the same
thing differently, the SQLite spelling is rewritten here, by an exact rule per
construct (never a general SQL parser), and the result is cached by statement
text. ``tests/contract/test_store_pg_translate.py`` holds every rule to an
example.

- ``?`` parameters become ``%s`` (psycopg's), and a literal ``%`` becomes ``%%``;
- ``/*pg: CLAUSE */`` becomes ``CLAUSE`` (a comment, so ignored, on SQLite):
  how a claim adds ``FOR UPDATE SKIP LOCKED`` to its candidate query;
- the database clock as ISO text or epoch seconds, and the epoch seconds of an
  ISO text column;
- ``json_extract(col, '$.key')`` and ``json_each(?)``;
- the two-argument scalar ``MAX(a, b)`` / ``MIN(a, b)`` (``GREATEST`` / ``LEAST``);
- SQLite's ``INDEXED BY`` planner hint (PostgreSQL plans without it).
"""

from __future__ import annotations

import functools
import re

__all__ = ["ends_transaction", "translate"]

# Statements that begin, end or split a transaction: the store runs those itself.
_CONTROL = re.compile(
    r"\s*(?:/\*.*?\*/\s*)*(BEGIN|COMMIT|ROLLBACK|END|ABORT|START|SAVEPOINT|RELEASE|PREPARE|SET\s+"
    r"(?:SESSION\s+CHARACTERISTICS|TRANSACTION))\b",
    re.IGNORECASE | re.DOTALL,
)

_ISO_NOW = "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
_EPOCH_NOW = "extract(epoch FROM clock_timestamp())::float8"

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"/\*pg: (.*?) \*/"), r"\1"),
    (re.compile(re.escape("strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")), _ISO_NOW),
    (
        re.compile(re.escape("round((julianday('now') - 2440587.5) * 86400.0, 3)")),
        f"round({_EPOCH_NOW}::numeric, 3)::float8",
    ),
    (
        re.compile(r"\(julianday\(([\w.]+)\) - 2440587\.5\) \* 86400\.0"),
        r"extract(epoch FROM (\1)::timestamptz)::float8",
    ),
    (re.compile(r"json_extract\((\w+), '\$\.(\w+)'\)"), r"((\1)::json ->> '\2')"),
    (re.compile(r"json_each\(\?\)"), "json_array_elements_text(?::json) AS value"),
    (re.compile(r"\bMAX\(([^(),]+), ([^(),]+)\)"), r"GREATEST(\1, \2)"),
    (re.compile(r"\bMIN\(([^(),]+), ([^(),]+)\)"), r"LEAST(\1, \2)"),
    (re.compile(r"\bINDEXED BY \w+ "), ""),
)


@functools.lru_cache(maxsize=2048)
def translate(sql: str) -> str:
    """The PostgreSQL text of one statement written for SQLite (see the module doc)."""
    for pattern, replacement in _RULES:
        sql = pattern.sub(replacement, sql)
    return _placeholders(sql.replace("%", "%%"))


@functools.lru_cache(maxsize=2048)
def ends_transaction(sql: str) -> bool:
    """True for a statement that would begin, end or split the store's transaction.

    SQLite's writer refuses those with an authorizer; a PostgreSQL row function
    gets the same refusal from ``PgConnection``. A second statement after a
    ``;`` counts too: one ``execute`` is one statement.
    """
    return _CONTROL.match(sql) is not None or _has_second_statement(sql)


def _has_second_statement(sql: str) -> bool:
    quote: str | None = None
    for index, char in enumerate(sql):
        if quote is not None:
            if char == quote:
                quote = None
        elif char in ("'", '"'):
            quote = char
        elif char == ";" and sql[index + 1 :].strip():
            return True
    return False


def _placeholders(sql: str) -> str:
    """``?`` -> ``%s`` outside single-quoted literals and double-quoted names."""
    out: list[str] = []
    quote: str | None = None
    for char in sql:
        if quote is not None:
            if char == quote:
                quote = None
            out.append(char)
        elif char in ("'", '"'):
            quote = char
            out.append(char)
        elif char == "?":
            out.append("%s")
        else:
            out.append(char)
    return "".join(out)
