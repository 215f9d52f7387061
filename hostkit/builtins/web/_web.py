"""The ``web.extract`` builtin: a URL's readable text under the shared URL policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpcore
from pydantic import Field

from hostkit.builtins.web._extract import web_extract
from hostkit.builtins.web._urlpolicy import UrlPolicy
from hostkit.effects import AuthoredTool, Prepared, ToolContext, ToolOutcome

__all__ = ["MAX_EXTRACT_CHARS", "web_tools"]

# Leaves room in the 8,000-character model view for the URL, title and status.
MAX_EXTRACT_CHARS = 7_000


def web_tools(
    policy: UrlPolicy, *, network_backend: httpcore.AsyncNetworkBackend | None = None
) -> list[AuthoredTool]:
    """``web.extract`` bound to ``policy`` (every DNS answer and redirect hop checked).

    Before approval only what asks no one is checked (the tool's ``prepare``):
    parsing, scheme, credentials and port rules, and a literal address, all
    failing closed. A refused URL is ``denied`` without reaching an approver,
    who is shown the checked origin. The name is resolved only when the fetch
    runs, after any approval: a lookup already reaches whoever serves the
    name, and a model can spell what it read into one (``<secret>.evil.example``).
    Every answer is then checked and the connection pinned to them, and each
    redirect hop is validated the same way before it is requested; a refused
    address is ``denied`` then. ``network_backend`` replaces the raw
    connector under the pinning layer (tests use one that never leaves
    loopback). The result's audit view holds every hop's origin and
    validated addresses (never path or query).
    """

    async def check_url(arguments: Mapping[str, Any]) -> Prepared:
        return Prepared(view=policy.check(arguments["url"]).audit_view())

    async def extract(
        ctx: ToolContext,
        url: str = Field(min_length=1, max_length=policy.max_url_chars, description="http(s) URL"),
        max_chars: int = Field(
            default=MAX_EXTRACT_CHARS,
            ge=1,
            le=MAX_EXTRACT_CHARS,
            description="at most this many characters of readable text",
        ),
    ) -> ToolOutcome:
        page = await web_extract(
            url, policy=policy, max_chars=max_chars, network_backend=network_backend
        )
        output = {
            "url": page.url,
            "status": page.status,
            "title": page.content.title,
            "text": page.content.text,
            "truncated": page.content.truncated or page.body_truncated,
        }
        return ToolOutcome("succeeded", output, audit=page.audit)

    return [
        AuthoredTool(
            "web.extract",
            extract,
            description=(
                "Fetch a public web page and return its readable text. Private, loopback "
                "and cloud-metadata addresses are refused, including through redirects."
            ),
            timeout_s=policy.total_timeout_s + 5,
            prepare=check_url,
        )
    ]
