"""The ``web.extract`` builtin: a URL's readable text under the shared URL policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpcore
from pydantic import Field

from hostkit.builtins.web._extract import web_extract
from hostkit.builtins.web._urlpolicy import UrlPolicy, ValidatedTarget
from hostkit.effects import AuthoredTool, Prepared, ToolContext, ToolOutcome

__all__ = ["MAX_EXTRACT_CHARS", "web_tools"]

# Leaves room in the 8,000-character model view for the URL, title and status.
MAX_EXTRACT_CHARS = 7_000


def web_tools(
    policy: UrlPolicy, *, network_backend: httpcore.AsyncNetworkBackend | None = None
) -> list[AuthoredTool]:
    """``web.extract`` bound to ``policy`` (every DNS answer and redirect hop checked).

    The URL policy runs before approval (the tool's ``prepare`` check):
    parsing, scheme, credentials and port rules, the literal address or every
    DNS answer for the name, all failing closed. A refused URL is ``denied``
    without reaching an approver, and the approver is shown the validated
    origin and addresses; the fetch then connects to exactly those addresses.
    Redirects cannot be known before the request, so each hop is still
    validated the same way at fetch time, before it is requested.
    ``network_backend`` replaces the raw connector under the pinning layer
    (tests use one that never leaves loopback). The result's audit view holds
    every hop's origin and validated addresses (never path or query); the
    runtime persists it with the validated target.
    """

    async def check_url(arguments: Mapping[str, Any]) -> Prepared:
        target = await policy.resolve(arguments["url"])
        return Prepared(view=target.audit_view(), value=target)

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
        target = ctx.prepared if isinstance(ctx.prepared, ValidatedTarget) else None
        page = await web_extract(
            url,
            policy=policy,
            max_chars=max_chars,
            network_backend=network_backend,
            target=target,
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
