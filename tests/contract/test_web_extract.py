"""web.extract: a page fetched under the URL policy becomes bounded, readable text.

The page is served by a real loopback server that the policy allowlists
explicitly; everything else about the fetch (pinning, caps, hops) is the
production path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpcore
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostkit.authority import AuthorityResolver
from hostkit.builtins.web import UnsupportedContent, UrlDenied, UrlPolicy, web_extract, web_tools
from hostkit.builtins.web._extract import readable_text
from hostkit.effects import EffectPolicy, EffectRuntime, Toolset
from hostkit.errors import InvalidValue
from hostkit.store import RuntimeStore
from hostkit.types import EffectRequest, EffectResult, TurnExecutionContext
from tests.contract.test_context_basic import context_for
from tests.support import facts
from tests.wire import Reply, serve_wire, text_reply

pytestmark = pytest.mark.anyio

ARTICLE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Owls of the North</title>
<script>window.trackingSecret = "do-not-show";</script>
<style>body { color: red }</style></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a> | <a href="/shop">Shop</a></nav>
<article>
<h1>Owls of the North</h1>
<p>The snowy owl hunts lemmings across the open tundra during the long polar day,
often far from any tree, and may travel thousands of kilometres in a lean year.</p>
<p>Great grey owls listen for voles moving beneath deep snow, then plunge through
the crust to catch prey they have never seen.</p>
</article>
<footer>Copyright Example Corp. All rights reserved.</footer>
</body></html>"""


@pytest.fixture
async def server() -> AsyncIterator[Any]:
    async with serve_wire() as wire:
        yield wire


def _policy(**options: Any) -> UrlPolicy:
    return UrlPolicy(allow_private=frozenset({"127.0.0.1"}), **options)


def _html(body: str, **options: Any) -> Reply:
    return text_reply(body, content_type="text/html; charset=utf-8", **options)


async def test_html_page_becomes_its_readable_article(server: Any) -> None:
    server.script(_html(ARTICLE))
    page = await web_extract(f"{server.base_url}/owls", policy=_policy())
    assert (page.status, page.url, page.content.kind) == (200, f"{server.base_url}/owls", "html")
    assert page.content.title == "Owls of the North"
    assert "snowy owl hunts lemmings" in page.content.text
    assert "plunge through" in page.content.text
    for noise in ("trackingSecret", "do-not-show", "color: red", "<p>"):
        assert noise not in page.content.text
    assert not page.content.truncated
    assert not page.body_truncated
    assert page.bytes_read == len(ARTICLE.encode())


async def test_extracted_text_is_bounded(server: Any) -> None:
    paragraphs = "".join(
        f"<p>Paragraph {n} describes one more owl in careful, readable detail.</p>"
        for n in range(2_000)
    )
    server.script(_html(f"<html><head><title>Many</title></head><body>{paragraphs}</body></html>"))
    page = await web_extract(f"{server.base_url}/long", policy=_policy(), max_chars=1_000)
    assert page.content.truncated
    assert len(page.content.text) <= 1_000 < page.content.total_chars
    assert page.content.text.startswith("Paragraph 0")


async def test_oversized_page_is_capped_before_extraction(server: Any) -> None:
    big = "<html><body>" + "<p>owl</p>" * 100_000 + "</body></html>"
    server.script(_html(big))
    page = await web_extract(f"{server.base_url}/big", policy=_policy(max_body_bytes=50_000))
    assert page.body_truncated
    assert page.bytes_read <= 50_000
    assert "owl" in page.content.text


async def test_short_page_falls_back_to_all_visible_text(server: Any) -> None:
    server.script(_html("<html><body><div>Just one line.</div></body></html>"))
    page = await web_extract(f"{server.base_url}/short", policy=_policy())
    assert page.content.text == "Just one line."


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("text/plain; charset=utf-8", "Plain notes\n\n\n\nwith gaps", "Plain notes\n\nwith gaps"),
        ("application/json", '{"owl": "snowy"}', '{"owl": "snowy"}'),
        ("text/markdown", "# Owls\n\n*snowy*", "# Owls\n\n*snowy*"),
        ("application/ld+json", '{"@type": "Thing"}', '{"@type": "Thing"}'),
    ],
)
async def test_text_types_are_decoded_as_they_are(
    server: Any, content_type: str, body: str, expected: str
) -> None:
    server.script(text_reply(body, content_type=content_type))
    page = await web_extract(f"{server.base_url}/doc", policy=_policy())
    assert (page.content.kind, page.content.text, page.content.title) == ("text", expected, None)


async def test_declared_charset_is_honoured(server: Any) -> None:
    server.script(
        Reply(chunks=("Café crème".encode("latin-1"),), content_type="text/plain; charset=latin-1")
    )
    page = await web_extract(f"{server.base_url}/latin", policy=_policy())
    assert page.content.text == "Café crème"


ODD_CHARSETS = [
    *("rot13", "base64", "zlib", "hex", "idna", "bz2", "nope"),
    # Text codecs Python knows that no web page is written in; punycode's decoding time
    # grows with the square of the body (two megabytes held the event loop for minutes).
    *("punycode", "utf-7", "unicode_escape", "raw_unicode_escape"),
]


@pytest.mark.parametrize("charset", ODD_CHARSETS)
@pytest.mark.parametrize("kind", ["plain", "html"])
async def test_a_charset_that_is_no_web_text_encoding_reads_as_utf8(
    server: Any, charset: str, kind: str
) -> None:
    """The page names the charset: only the web's own text encodings are taken; any
    other codec is an unknown charset."""
    body = (
        "<html><body><p>Café crème, s'il vous plaît.</p></body></html>"
        if kind == "html"
        else ("Café crème")
    )
    server.script(Reply(chunks=(body.encode(),), content_type=f"text/{kind}; charset={charset}"))
    page = await web_extract(f"{server.base_url}/odd", policy=_policy())
    assert "Café crème" in page.content.text


async def test_a_page_in_punycode_is_read_as_utf8_not_decoded(server: Any) -> None:
    """Valid punycode input, which the codec would decode in time growing with the square
    of its length (on the event loop, past the tool's deadline), reads as plain UTF-8."""
    body = b"-" + b"a" * 2_000
    server.script(Reply(chunks=(body,), content_type="text/plain; charset=punycode"))
    page = await web_extract(f"{server.base_url}/slow", policy=_policy())
    assert page.content.text == body.decode()


async def test_binary_content_is_not_text(server: Any) -> None:
    server.script(Reply(chunks=(b"\x89PNG\r\n\x1a\n\x00\x00",), content_type="image/png"))
    with pytest.raises(UnsupportedContent):
        await web_extract(f"{server.base_url}/owl.png", policy=_policy())


async def test_untyped_body_is_sniffed() -> None:
    html = await readable_text(
        b"<!DOCTYPE html><html><body><p>sniffed</p></body></html>", content_type=""
    )
    assert (html.kind, html.text) == ("html", "sniffed")
    plain = await readable_text(b"just text", content_type="application/octet-stream")
    assert (plain.kind, plain.text) == ("text", "just text")
    with pytest.raises(UnsupportedContent):
        await readable_text(b"\x00\x01\x02", content_type="")
    with pytest.raises(InvalidValue):
        await readable_text(b"x", content_type="text/plain", max_chars=0)


async def test_error_pages_keep_their_status(server: Any) -> None:
    server.script(_html("<html><body><p>No owls here.</p></body></html>", status=404))
    page = await web_extract(f"{server.base_url}/missing", policy=_policy())
    assert page.status == 404
    assert "No owls here." in page.content.text


async def test_audit_view_holds_only_origins_and_addresses(server: Any) -> None:
    server.script(_html(ARTICLE))
    page = await web_extract(f"{server.base_url}/owls?key=s3cret", policy=_policy())
    assert [dict(hop) for hop in page.audit["hops"]] == [
        {"origin": server.base_url, "addresses": ("127.0.0.1",)}
    ]
    assert "s3cret" not in repr(page.audit)


async def test_loopback_is_refused_unless_allowlisted(server: Any) -> None:
    server.script(_html(ARTICLE))
    with pytest.raises(UrlDenied):
        await web_extract(f"{server.base_url}/owls", policy=UrlPolicy())
    assert server.requests == []


# -- the web.extract effect through the pipeline: bad input is a typed result -------------


class NoNetwork(httpcore.AsyncNetworkBackend):
    """The raw connector under the pinning layer: refuses every connection, counts them."""

    def __init__(self) -> None:
        self.attempts = 0

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.attempts += 1
        raise httpcore.ConnectError("test: no network")


async def _loopback_answers(host: str, port: int) -> list[str]:
    return ["127.0.0.1"]  # every name is refused as loopback: nothing leaves the machine


async def web_context(authority: AuthorityResolver) -> TurnExecutionContext:
    scope = await authority.for_conversation(facts("web"))
    base = context_for(scope)
    return TurnExecutionContext(
        **{
            name: getattr(base, name)
            for name in base.__dataclass_fields__
            if name != "capability_snapshot"
        },
        capability_snapshot={"effects": ("web.extract",)},
    )


@asynccontextmanager
async def web_pipeline(
    context: TurnExecutionContext,
) -> AsyncIterator[Callable[[dict[str, Any]], Awaitable[EffectResult]]]:
    (extract,) = web_tools(UrlPolicy(resolver=_loopback_answers), network_backend=NoNetwork())

    class Tools:
        async def toolset(self, context: TurnExecutionContext) -> Toolset:
            return Toolset(((extract, "builtin"),), EffectPolicy(), Path("/tmp"))

    runtime = EffectRuntime(toolsets=Tools())
    catalog = await runtime.prepare_catalog(context)
    ref = catalog.resolve("web_extract")
    assert ref is not None

    async def run(arguments: dict[str, Any]) -> EffectResult:
        return await runtime.execute(EffectRequest("c1", ref, arguments), context)

    yield run
    await runtime.close_catalog(catalog)


TYPED = {"invalid", "denied"}
RAW_ERRORS = ("InvalidURL", "ValueError", "OverflowError", "UnicodeError", "UnicodeEncodeError")


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("http://[::1", "denied"),
        ("http://exa mple.com", "denied"),
        ("http://host:99999/", "denied"),
        ("http://example.com/" + "a" * 5_000, "invalid"),
        ("http://ex\u00e4mple.com:/\udcff", "invalid"),
        ("http://\u2488.com/", "denied"),
        ("http://xn--a.com/", "denied"),
        ("http://example.com/\udcff", "invalid"),
        ("http://[v1.x]/", "denied"),
        ("javascript:alert(1)", "denied"),
        ("", "invalid"),
    ],
)
async def test_a_malformed_url_is_a_typed_refusal_never_a_raw_error(
    authority: AuthorityResolver, url: str, status: str
) -> None:
    async with web_pipeline(await web_context(authority)) as run:
        result = await run({"url": url})
    assert result.status == status, result.error
    assert result.error
    assert not result.error.startswith(RAW_ERRORS)
    result.views.model.encode("utf-8")


@pytest.mark.parametrize("max_chars", [0, -1, 7_001, 2**63, 10**30, 1.5, "many", None])
async def test_an_out_of_range_number_is_invalid_before_any_fetch(
    authority: AuthorityResolver, max_chars: Any
) -> None:
    async with web_pipeline(await web_context(authority)) as run:
        result = await run({"url": "http://example.com/", "max_chars": max_chars})
    assert (result.status, result.started) == ("invalid", False)
    assert result.error
    assert "max_chars" in result.error


async def test_web_extract_refuses_a_non_positive_max_chars_before_fetching() -> None:
    backend = NoNetwork()
    with pytest.raises(InvalidValue):
        await web_extract(
            "http://93.184.216.34/", policy=UrlPolicy(), max_chars=0, network_backend=backend
        )
    assert backend.attempts == 0


ANY_CHARACTER = st.characters(blacklist_categories=())  # surrogates and controls included
URLISH = st.builds(
    lambda scheme, sep, host, rest: f"{scheme}{sep}{host}{rest}",
    st.sampled_from(["http", "https", "HTTP", "javascript", "file", "ftp", "", "h\u0442tp"]),
    st.sampled_from(["://", ":", ":/", "//", ""]),
    st.one_of(
        st.text(ANY_CHARACTER, max_size=30),
        st.from_regex(r"\[[0-9a-fA-F:.%]{0,20}\]?(:[0-9]{0,7})?", fullmatch=True),
        st.from_regex(r"[0-9x.]{1,20}(:[0-9]{0,7})?", fullmatch=True),
    ),
    st.text(ANY_CHARACTER, max_size=40),
)


@pytest.fixture(scope="module")
def plain_context(tmp_path_factory: pytest.TempPathFactory) -> TurnExecutionContext:
    """A turn context (a frozen value), made once: the pipeline itself needs no store."""

    async def make() -> TurnExecutionContext:
        path = tmp_path_factory.mktemp("web") / "hostkit.db"
        async with await RuntimeStore.open(path) as store, AuthorityResolver.bind(store) as auth:
            return await web_context(auth)

    return anyio.run(make)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(url=st.one_of(st.text(ANY_CHARACTER, max_size=80), URLISH))
def test_any_text_as_a_url_gives_a_typed_result(
    plain_context: TurnExecutionContext, url: str
) -> None:
    """Property: whatever the text, web.extract answers with a typed status and never raises."""

    async def scenario() -> EffectResult:
        async with web_pipeline(plain_context) as run:
            return await run({"url": url})

    result = anyio.run(scenario)
    # A public literal passes the policy and then meets NoNetwork: a typed FetchError.
    assert result.status in TYPED or (
        result.status == "failed" and "FetchError" in (result.error or "")
    )
    assert result.error
    assert not result.error.startswith(RAW_ERRORS)
    result.views.model.encode("utf-8")


async def test_a_page_slow_to_parse_ends_at_the_callers_deadline() -> None:
    """The parse runs in a worker thread; the tool's deadline must end the call even when a
    hostile page keeps the parser busy for seconds (the parse finishes on its own)."""
    page = b"<html><body>" + b"<p>word " * 50_000 + b"</body></html>"
    started = anyio.current_time()
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.3):
            await readable_text(page, content_type="text/html")
    assert anyio.current_time() - started < 1.5
