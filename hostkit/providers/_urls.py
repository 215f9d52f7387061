"""The one check of an ``http(s)://`` URL the Host will send requests to.

A provider's ``base_url``, a channel's ``deliver_url`` and ``api_base``, an MCP
server's ``url``, a telemetry ``endpoint`` and a base URL taken from the
environment all end up in an HTTP client, which parses them only when the
first request goes out: a port past 65535 is then an ``OverflowError`` deep in
the transport, ``[::1`` a bare ``ValueError``, a host IDNA cannot encode an
``InvalidURL``. Each is a turn that fails as an internal error, or a delivery
retried until it is dead-lettered. This check refuses them where the URL is
written down, with a sentence the caller puts after the key.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from urllib.parse import urlsplit

import idna

__all__ = ["MAX_URL_CHARS", "http_url_problem"]

# Far past any real endpoint; a longer value is a mistake, not a URL.
MAX_URL_CHARS = 2_048
_HOST_CHARS = 253
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,63}")
_DOTTED_NUMBERS = re.compile(r"[0-9]+(\.[0-9]+){3}")
# Controls (a newline forges a header line), format characters, surrogates, separators.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def http_url_problem(url: object, *, limit: int = MAX_URL_CHARS) -> str | None:
    """Why ``url`` cannot be an endpoint an HTTP client reaches; None when it can.

    It must be text of at most ``limit`` characters with no whitespace or
    control character, the scheme ``http`` or ``https``, a host (an IP
    address, or an ASCII name: an international one in its ``xn--`` form) and,
    if it has one, a port from 1 to 65535.
    """
    if not isinstance(url, str) or not url:
        return "must be an http:// or https:// URL"
    if len(url) > limit:
        return f"is longer than {limit} characters"
    if any(char.isspace() or unicodedata.category(char) in _UNPRINTABLE for char in url):
        return "contains whitespace or a control character"
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:  # an unclosed or invalid IPv6 literal: "http://[::1"
        return "has a malformed host"
    if parts.scheme not in ("http", "https"):
        return "must be an http:// or https:// URL"
    if not host:
        return "must name a host"
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        return "has a port that is not a number from 1 to 65535"
    if "[" in parts.netloc.rpartition("@")[2]:
        # Bracketed: an IPv6 address (its zone id aside); urlsplit also lets IPvFuture
        # ("[v1.fe]") through, which no HTTP client connects to.
        try:
            ipaddress.IPv6Address(host.partition("%")[0])
        except ValueError:
            return "has a bracketed host that is not an IPv6 address"
        return None
    return _host_problem(host)


def _host_problem(host: str) -> str | None:
    if _DOTTED_NUMBERS.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"has the host {host[:40]!r}, which is not an IPv4 address"
        return None
    if not host.isascii():
        # An international name goes out IDNA-encoded (IDNA 2008, as httpx encodes it).
        try:
            host = idna.encode(host).decode("ascii")
        except (idna.IDNAError, UnicodeError):
            return "has a host that is not a valid international name (IDNA 2008)"
    name = host.removesuffix(".")
    if len(name) > _HOST_CHARS or not all(_LABEL.fullmatch(label) for label in name.split(".")):
        return (
            f"has the host {host[:40]!r}, which is not a host name (labels of 1 to 63 "
            "letters, digits, '-' or '_', separated by dots)"
        )
    for label in name.split("."):
        if label.lower().startswith("xn--"):
            try:
                label.encode("ascii").decode("idna")
            except UnicodeError:
                return f"has the host {host[:40]!r}, whose {label[:40]!r} is not a valid xn-- name"
    return None
