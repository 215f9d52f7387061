"""PostgreSQL URLs: checked before use, shown without secrets, split from their password."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

from hostkit.errors import InvalidValue

__all__ = ["check_url", "redact_url", "without_password"]


def redact_url(url: str) -> str:
    """``url`` without its password and query (which may carry secrets), for messages.

    The host list is kept as written (libpq accepts ``h1:5432,h2:5433``).
    """
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit((parts.scheme, f"{user}{hosts}", parts.path, "", ""))


def without_password(url: str) -> tuple[str, str | None]:
    """``url`` with its password taken out, and that password (for a child's environment)."""
    parts = urlsplit(url)
    user, at, hosts = parts.netloc.rpartition("@")
    if not at:
        return url, None
    name, colon, password = user.partition(":")
    if not colon:
        return url, None
    return urlunsplit((parts.scheme, f"{name}@{hosts}", parts.path, parts.query, "")), unquote(
        password
    )


def check_url(url: object) -> str:
    """A ``postgresql://`` URL libpq can parse, or ``InvalidValue`` (never echoing it).

    Called by the adapter, which has psycopg imported already: the rest of this
    module (redaction) needs no driver, so configuration can use it.
    """
    import psycopg

    if not isinstance(url, str) or len(url) > 2048:
        raise InvalidValue("a PostgreSQL URL is a string of at most 2048 characters")
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise InvalidValue("a PostgreSQL URL starts with postgresql://")
        ports = str(psycopg.conninfo.conninfo_to_dict(url).get("port") or "")
    except (ValueError, psycopg.ProgrammingError):
        raise InvalidValue(
            "the PostgreSQL URL is malformed (see libpq's connection URIs)"
        ) from None
    for port in filter(None, ports.split(",")):
        if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65_535:
            raise InvalidValue("a port in the PostgreSQL URL is not a number 1-65535")
    return url
