"""The web family: the shared URL policy, fetching under it, and ``web.extract``.

``UrlPolicy`` decides which URLs an effect may reach (strict parsing, every
DNS answer checked, metadata addresses closed); ``fetch`` makes a request go
only to the addresses the policy validated, hop by hop, with a capped body;
``PinnedConnections`` does the same for a long-lived client that sends many
requests (MCP over streamable HTTP); ``web_extract`` turns a fetched page
into bounded readable text; and
``web_tools(policy)`` is the ``web.extract`` effect bound to a policy.

Inside, modules import one way only: ``_web`` (the tool) → ``_extract`` →
``_fetch`` → ``_urlpolicy`` → ``_errors``.
"""

import typing

from hostkit import _lazy
from hostkit.builtins.web._errors import FetchError, UrlDenied
from hostkit.builtins.web._urlpolicy import CheckedUrl, Resolver, UrlPolicy, ValidatedTarget

if typing.TYPE_CHECKING:
    from hostkit.builtins.web._extract import (
        ExtractedPage,
        ReadableText,
        UnsupportedContent,
        web_extract,
    )
    from hostkit.builtins.web._fetch import FetchResult, PinnedConnections, fetch
    from hostkit.builtins.web._web import web_tools

# Fetching (httpx, httpcore) loads on first use: a config naming a URL policy needs none.
_FETCHING = {
    "ExtractedPage": "hostkit.builtins.web._extract",
    "ReadableText": "hostkit.builtins.web._extract",
    "UnsupportedContent": "hostkit.builtins.web._extract",
    "web_extract": "hostkit.builtins.web._extract",
    "FetchResult": "hostkit.builtins.web._fetch",
    "PinnedConnections": "hostkit.builtins.web._fetch",
    "fetch": "hostkit.builtins.web._fetch",
    "web_tools": "hostkit.builtins.web._web",
}

__all__ = [
    "CheckedUrl",
    "ExtractedPage",
    "FetchError",
    "FetchResult",
    "PinnedConnections",
    "ReadableText",
    "Resolver",
    "UnsupportedContent",
    "UrlDenied",
    "UrlPolicy",
    "ValidatedTarget",
    "fetch",
    "web_extract",
    "web_tools",
]


__getattr__, __dir__ = _lazy.attributes(__name__, _FETCHING)
