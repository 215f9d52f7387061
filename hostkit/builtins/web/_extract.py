"""``web.extract``: fetch a page under the URL policy and turn it into readable text.

A model needs the article, not the navigation, scripts and markup around it,
and every character it is shown costs context. HTML goes through trafilatura
(a maintained main-content extractor) in a worker thread, because parsing
megabytes of markup would stall the event loop; text-like types are decoded
as they are. The output is bounded whatever the page holds.
"""

from __future__ import annotations

import codecs
import contextlib
import re
from dataclasses import dataclass, field
from typing import Literal

import anyio
import httpcore

from hostkit.builtins.web._fetch import FetchResult, fetch
from hostkit.builtins.web._urlpolicy import UrlPolicy, ValidatedTarget
from hostkit.errors import InvalidValue, UserError, bounded
from hostkit.freeze import FrozenMap

__all__ = ["ExtractedPage", "ReadableText", "UnsupportedContent", "readable_text", "web_extract"]

MAX_TEXT_CHARS = 20_000
_MAX_TITLE_CHARS = 300
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/x-ndjson"}
)
_SNIFF_BYTES = 1_024
_BLANK_LINES = re.compile(r"\n{3,}")


class UnsupportedContent(UserError):
    """The response is not text (an image, an archive …); there is nothing to read."""


@dataclass(frozen=True, slots=True)
class ReadableText:
    """Readable text cut to ``max_chars``; ``total_chars`` is the length before the cut."""

    text: str
    title: str | None
    kind: Literal["html", "text"]
    total_chars: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class ExtractedPage:
    """What ``web.extract`` returns: the final URL, status, bounded text and audit view.

    ``body_truncated`` says the response passed the byte cap; ``content.truncated``
    that the extracted text passed ``max_chars``. ``audit`` holds only origins
    and validated addresses.
    """

    url: str
    status: int
    content_type: str
    content: ReadableText
    bytes_read: int
    body_truncated: bool
    audit: FrozenMap = field(repr=False)


async def web_extract(
    url: str,
    *,
    policy: UrlPolicy,
    max_chars: int = MAX_TEXT_CHARS,
    network_backend: httpcore.AsyncNetworkBackend | None = None,
    target: ValidatedTarget | None = None,
) -> ExtractedPage:
    """Fetch ``url`` under ``policy`` and extract its readable text.

    ``target`` is ``url`` as ``policy.resolve`` validated it before (see ``fetch``).

    Raises ``InvalidValue`` for a ``max_chars`` below 1 (before any fetch),
    ``UrlDenied`` (refused URL, address or hop), ``FetchError`` (network
    failure or deadline) and ``UnsupportedContent`` (not text).
    """
    if max_chars < 1:
        raise InvalidValue("max_chars must be positive")
    fetched: FetchResult = await fetch(
        url, policy=policy, network_backend=network_backend, target=target
    )
    content = await readable_text(
        fetched.body, content_type=fetched.content_type, url=fetched.url, max_chars=max_chars
    )
    return ExtractedPage(
        url=fetched.url,
        status=fetched.status,
        content_type=fetched.content_type,
        content=content,
        bytes_read=fetched.bytes_read,
        body_truncated=fetched.truncated,
        audit=fetched.audit_view(),
    )


async def readable_text(
    body: bytes, *, content_type: str, url: str | None = None, max_chars: int = MAX_TEXT_CHARS
) -> ReadableText:
    """The readable text of ``body``: main content for HTML, decoded text otherwise.

    Raises ``UnsupportedContent`` for binary media. Parsing runs in a worker
    thread; ``body`` is already bounded by the fetch, so the parse is too. A
    cancelled caller (the tool's deadline) returns at once and leaves the
    parse to finish on its own: a hostile page can make it take many seconds.
    """
    if max_chars < 1:
        raise InvalidValue("max_chars must be positive")
    media_type, charset = _media_type(content_type)
    kind = _kind(media_type, body)
    if kind == "html":
        text, title = await anyio.to_thread.run_sync(
            _html_to_text, body, charset, url, abandon_on_cancel=True
        )
    else:
        # In a thread too: even a linear decode of a capped body is no work for the loop.
        text = await anyio.to_thread.run_sync(_decode, body, charset, abandon_on_cancel=True)
        title = None
    text = _BLANK_LINES.sub("\n\n", text.replace("\r\n", "\n")).strip()
    if title is not None:
        title = bounded(title, _MAX_TITLE_CHARS) or None
    truncated = len(text) > max_chars
    return ReadableText(
        text=text[:max_chars],
        title=title,
        kind=kind,
        total_chars=len(text),
        truncated=truncated,
    )


def _media_type(content_type: str) -> tuple[str, str | None]:
    media_type, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip("\"'") or None
    return media_type.strip().lower(), charset


def _kind(media_type: str, body: bytes) -> Literal["html", "text"]:
    if media_type in _HTML_TYPES:
        return "html"
    if media_type.startswith("text/") or media_type in _TEXT_TYPES:
        return "text"
    if media_type.endswith(("+json", "+xml")):
        return "text"
    if media_type in ("", "application/octet-stream"):
        # No usable type: sniff the way browsers do for the two cases that matter here.
        head = body[:_SNIFF_BYTES].lstrip().lower()
        if head.startswith((b"<!doctype html", b"<html")):
            return "html"
        if b"\x00" not in head:
            return "text"
    raise UnsupportedContent(f"content type {bounded(media_type or 'unknown', 80)!r} is not text")


# The text encodings web pages are written in (the WHATWG Encoding Standard's, by the
# names Python's codecs give them). The page chooses its charset, so only these are
# taken: Python also knows codecs that are no text encoding (``base64``, ``zlib``), that
# cannot replace what they cannot read (``idna``), or whose decoding time grows with the
# square of the input (``punycode``: two megabytes held the event loop for minutes).
_WEB_CHARSETS = frozenset(
    {
        "ascii",
        "big5",
        "big5hkscs",
        "cp866",
        "cp874",
        "cp932",
        "cp949",
        "euc_jp",
        "euc_kr",
        "gb18030",
        "gb2312",
        "gbk",
        "iso2022_jp",
        "koi8-r",
        "koi8-u",
        "mac-cyrillic",
        "mac-roman",
        "shift_jis",
        "tis-620",
        "utf-16",
        "utf-16-be",
        "utf-16-le",
        "utf-8",
        *(f"cp{number}" for number in range(1250, 1259)),
        *(f"iso8859-{part}" for part in (*range(1, 12), 13, 14, 15, 16)),
    }
)


def _decode(body: bytes, charset: str | None) -> str:
    """The body as text in its declared charset when that is a web text encoding, else
    UTF-8: an unknown or unusable charset is not a failed fetch."""
    # A capped body can end mid-character; replacement beats failing the whole page.
    if charset:
        with contextlib.suppress(LookupError, UnicodeError, ValueError):
            name = codecs.lookup(charset).name
            if name in _WEB_CHARSETS:
                return body.decode(name, errors="replace")
    return body.decode("utf-8", errors="replace")


def _html_to_text(body: bytes, charset: str | None, url: str | None) -> tuple[str, str | None]:
    """Main content via trafilatura, else all visible text; runs in a worker thread.

    trafilatura is imported here, not at module import, so loading hostkit
    stays cheap and the import never runs on the event loop.
    """
    import trafilatura

    source: bytes | str = _decode(body, charset) if charset else body
    document = trafilatura.bare_extraction(
        source, url=url, with_metadata=True, include_comments=False, include_tables=True
    )
    text = getattr(document, "text", None) or ""
    title = getattr(document, "title", None)
    if not text.strip():
        # Pages too short or too unusual for main-content detection still have text.
        text = trafilatura.html2txt(source) or ""
    return text, title
