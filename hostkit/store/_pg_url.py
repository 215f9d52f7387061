"""PostgreSQL URLs: checked before use, shown without secrets, split from their password."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

from hostkit.errors import InvalidValue

__all__ = ["carries_password", "check_url", "redact_url", "without_password"]

# Query keys whose value is a secret libpq uses: the password, and the client key's.
_SECRET_KEYS = frozenset({"password", "sslpassword"})


def _split(url: str) -> tuple[str, str | None, str]:
    """``(scheme://, user info or None, the rest: hosts, path, query)``.

    libpq ends the user info at the first ``@`` before any ``/``, where
    ``urlsplit`` ends the netloc at ``?`` or ``#`` too: a password holding
    either (valid for libpq) would be missed, kept in the URL and shown in
    part. The user info here ends at the later of libpq's end and the last
    ``@`` before the query, so what an operator meant as a password (one
    holding ``/``, which libpq cannot read) is never shown either.
    """
    scheme, separator, after = url.partition("://")
    if not separator:  # not a URL: nothing of it is shown
        return "", None, ""
    query = after.find("?")
    end = after.rfind("@", 0, len(after) if query < 0 else query)
    first, slash = after.find("@"), after.find("/")
    if first >= 0 and (slash < 0 or first < slash):
        end = max(end, first)
    if end < 0:
        return scheme + separator, None, after
    return scheme + separator, after[:end], after[end + 1 :]


def carries_password(url: str) -> bool:
    """Whether libpq would read a password (or a client key's) from ``url`` itself."""
    _, user, rest = _split(url)
    if user is not None and ":" in user:
        return True
    query = rest.partition("?")[2]
    return any(key.lower() in _SECRET_KEYS for key in parse_qs(query, keep_blank_values=True))


def redact_url(url: str) -> str:
    """``url`` without its password and query (which may carry secrets), for messages.

    The host list is kept as written (libpq accepts ``h1:5432,h2:5433``).
    """
    start, user, rest = _split(url)
    name = "" if user is None else user.partition(":")[0]
    where = rest.partition("?")[0].partition("#")[0]
    return f"{start}{name}@{where}" if name else f"{start}{where}"


def without_password(url: str) -> tuple[str, str | None]:
    """``url`` with its password taken out, and that password (for a child's environment)."""
    start, user, rest = _split(url)
    if user is None:
        return url, None
    name, colon, password = user.partition(":")
    if not colon:
        return url, None
    return f"{start}{name}@{rest}", unquote(password)


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
