"""SSRF: the shared URL policy refuses every non-public target, in every spelling and hop.

No test here reaches beyond loopback. Real servers listen on 127.0.0.1; any
other address comes from an injected resolver and is either refused before a
connection or "connected" through a scripted backend. The ``guard`` fixture
is the raw connector under the pinning layer: it connects only to loopback
and fails the test if anything else was attempted.
"""

from __future__ import annotations

import contextlib
import gzip
import ipaddress
import ssl
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpcore
import pytest
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.tls import TLSListener
from hypothesis import given, settings
from hypothesis import strategies as st

from hostkit.builtins.web import FetchError, UrlDenied, UrlPolicy, fetch
from hostkit.errors import ConfigError
from tests.wire import Reply, serve_wire, text_reply

pytestmark = pytest.mark.anyio

PUBLIC = "93.184.216.34"  # a public address; only ever "connected" through a scripted backend


class FakeResolver:
    """Scripted DNS: each name answers the next answer set on each call (the last repeats)."""

    def __init__(self, answers: dict[str, Sequence[Sequence[str]]] | None = None) -> None:
        self.answers = dict(answers or {})
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        script = self.answers[host]
        return script[min(len(self.calls_for(host)) - 1, len(script) - 1)]

    def calls_for(self, host: str) -> list[str]:
        return [call for call in self.calls if call == host]


class LoopbackOnly(httpcore.AsyncNetworkBackend):
    """Connects to loopback addresses only and records every attempt."""

    def __init__(self) -> None:
        self.inner = httpcore.AnyIOBackend()
        self.connected: list[str] = []
        self.refused: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:  # a name reached the connector: pinning did not happen
            loopback = False
        if not loopback:
            self.refused.append(host)
            raise httpcore.ConnectError("test guard: only loopback may be connected")
        self.connected.append(host)
        return await self.inner.connect_tcp(host, port, timeout=timeout)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise AssertionError("no unix sockets in SSRF tests")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class Scripted(httpcore.AsyncMockBackend):
    """A fake network: records the address each connection was made to, answers canned bytes."""

    def __init__(self, buffer: list[bytes]) -> None:
        super().__init__(buffer)
        self.connected: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connected.append(host)
        return await super().connect_tcp(host, port)


@pytest.fixture
def guard() -> Iterator[LoopbackOnly]:
    backend = LoopbackOnly()
    yield backend
    assert backend.refused == [], "a connection outside loopback was attempted"


@pytest.fixture
async def server() -> AsyncIterator[Any]:
    async with serve_wire() as wire:
        yield wire


def _port(base_url: str) -> int:
    return int(base_url.rsplit(":", 1)[1])


def _redirect(location: str, status: int = 302) -> Reply:
    return Reply(status=status, content_type="text/plain", headers={"location": location})


# --- literal hosts: refused before DNS and before any connection -------------------------

DENIED_LITERALS = [
    ("http://127.0.0.1/", "loopback"),
    ("http://127.255.255.254:8080/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://168.63.129.16/", "metadata"),  # public, but Azure's metadata endpoint
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://169.254.1.1/", "link-local"),
    ("http://[fe80::1]/", "link-local"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://10.0.0.1/", "private"),
    ("http://10.255.255.255/", "private"),
    ("http://172.16.0.1/", "private"),
    ("http://172.31.255.255/", "private"),
    ("http://192.168.0.1/", "private"),
    ("http://[fc00::1]/", "private"),
    ("http://[fdff:ffff::1]/", "private"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://240.0.0.1/", "private"),
    ("http://255.255.255.255/", "private"),
    ("http://100.64.0.1/", "non-global"),  # carrier-grade NAT
    # IANA special-purpose space that Python before 3.11.10 calls global.
    ("http://192.0.0.8/", "non-global"),
    ("http://192.0.0.100/", "non-global"),
    ("http://192.88.99.1/", "non-global"),  # 6to4 relay anycast
    ("http://[3fff::1]/", "non-global"),  # IPv6 documentation
    ("http://[::ffff:127.0.0.1]/", "loopback"),  # IPv4-mapped IPv6
    ("http://[::ffff:169.254.169.254]/", "metadata"),
    ("http://[::ffff:10.0.0.1]/", "private"),
    ("http://[2002:7f00:1::]/", "loopback"),  # 6to4 wrapping 127.0.0.1
    ("http://[2002:a00:1::]/", "private"),  # 6to4 wrapping 10.0.0.1
    # IPv6 addresses a translator or tunnel turns into the IPv4 address they embed.
    ("http://[64:ff9b::a9fe:a9fe]/", "metadata"),  # NAT64 (RFC 6052 well-known prefix)
    ("http://[64:ff9b::7f00:1]/", "loopback"),
    ("http://[64:ff9b:1:7f00:0:100::]/", "loopback"),  # local-use NAT64, a /48 prefix
    ("http://[64:ff9b:1::a00:1]/", "private"),  # local-use NAT64, a /96 prefix
    ("http://[::7f00:1]/", "loopback"),  # IPv4-compatible IPv6
    ("http://[::a9fe:a9fe]/", "metadata"),
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "loopback"),  # Teredo client
    ("http://[64:ff9b::808:808]/", "reserved"),  # NAT64 of a public address
    # Numeric spellings that libc and browsers read as 127.0.0.1 / 169.254.169.254.
    ("http://2130706433/", "loopback"),
    ("http://017700000001/", "loopback"),
    ("http://0x7f000001/", "loopback"),
    ("http://0177.0.0.1/", "loopback"),
    ("http://0177.0000.0000.0001/", "loopback"),
    ("http://0x7f.0x0.0x0.0x1/", "loopback"),
    ("http://0x7f.1/", "loopback"),
    ("http://127.1/", "loopback"),
    ("http://127.0.1/", "loopback"),
    ("http://127.0.0.1./", "loopback"),
    ("http://2852039166/", "metadata"),
    ("http://0xa9.0xfe.0xa9.0xfe/", "metadata"),
    ("http://0251.0376.0251.0376/", "metadata"),
    ("http://0/", "unspecified"),
    ("http://127\u30020\u30020\u30021/", "loopback"),  # ideographic full stops
]


@pytest.mark.parametrize(("url", "reason"), DENIED_LITERALS)
async def test_non_public_literal_is_refused_without_dns(url: str, reason: str) -> None:
    resolver = FakeResolver()
    with pytest.raises(UrlDenied) as caught:
        await UrlPolicy(resolver=resolver).resolve(url)
    assert caught.value.reason == reason
    assert resolver.calls == []


@pytest.mark.parametrize(("url", "reason"), DENIED_LITERALS[:12])
async def test_fetch_of_non_public_literal_never_connects(
    url: str, reason: str, guard: LoopbackOnly
) -> None:
    with pytest.raises(UrlDenied):
        await fetch(url, policy=UrlPolicy(resolver=FakeResolver()), network_backend=guard)
    assert guard.connected == []


MALFORMED = [
    ("file:///etc/passwd", "scheme"),
    ("ftp://example.test/", "scheme"),
    ("gopher://example.test/", "scheme"),
    ("javascript:alert(1)", "invalid"),
    ("http:/example.test/", "invalid"),
    ("//example.test/", "invalid"),
    ("http:///path", "invalid"),
    ("http://user:pw@example.test/", "credentials"),
    ("http://example.test@127.0.0.1/", "credentials"),
    ("http://127.0.0.1\\@example.test/", "invalid"),  # browsers read "\" as "/"
    ("http://example.test\\.127.0.0.1/", "invalid"),
    (" http://example.test/", "invalid"),
    ("http://exa mple.test/", "invalid"),
    ("http://example.test/\r\nHost: 127.0.0.1", "invalid"),
    ("http://%31%32%37.0.0.1/", "invalid"),  # percent-encoded host
    ("http://example.test:0/", "invalid"),
    ("http://example.test:65536/", "invalid"),
    ("http://example.test:/", "invalid"),
    ("http://example.test:\uff18\uff10/", "invalid"),  # fullwidth digits as the port
    ("http://[fe80::1%25eth0]/", "invalid"),  # zone id
    ("http://[::1/", "invalid"),
    ("http://a..b/", "invalid"),
    ("http://\uff11\uff12\uff17.0.0.1/", "invalid"),  # fullwidth digits
    # Hosts that end in a number are IPv4 to browsers; refused unless exactly one reading.
    ("http://08.0.0.1/", "ambiguous-host"),  # 8 is not an octal digit
    ("http://0x/", "ambiguous-host"),
    ("http://1.2.3.4.5/", "ambiguous-host"),
    ("http://256.0.0.1/", "ambiguous-host"),
    ("http://1.2.65536/", "ambiguous-host"),
    ("http://4294967296/", "ambiguous-host"),
    ("http://example.0x1/", "ambiguous-host"),
    ("http://example.123/", "ambiguous-host"),
    ("http://0x0x7f.1/", "ambiguous-host"),
    ("http://1_27.0.0.1/", "ambiguous-host"),
    ("http://0x7g.1/", "ambiguous-host"),
    ("http://127.0.0.-1/", "invalid"),
]


@pytest.mark.parametrize(("url", "reason"), MALFORMED)
async def test_malformed_or_ambiguous_url_is_refused(url: str, reason: str) -> None:
    resolver = FakeResolver()
    with pytest.raises(UrlDenied) as caught:
        await UrlPolicy(resolver=resolver).resolve(url)
    assert caught.value.reason == reason
    assert resolver.calls == []


async def test_overlong_url_is_refused() -> None:
    with pytest.raises(UrlDenied):
        await UrlPolicy(max_url_chars=100).resolve("http://example.test/" + "a" * 100)


@pytest.mark.parametrize(
    ("url", "host", "addresses"),
    [
        ("http://93.184.216.34/", "93.184.216.34", ("93.184.216.34",)),
        ("http://1572395042/", "93.184.216.34", ("93.184.216.34",)),
        ("http://0x5d.0xb8.0xd8.0x22/", "93.184.216.34", ("93.184.216.34",)),
        ("http://0135.0270.0330.042/", "93.184.216.34", ("93.184.216.34",)),
        ("http://[2606:4700:4700::1111]/", "2606:4700:4700::1111", ("2606:4700:4700::1111",)),
    ],
)
async def test_public_literal_is_normalised_to_one_canonical_host(
    url: str, host: str, addresses: tuple[str, ...]
) -> None:
    target = await UrlPolicy(resolver=FakeResolver()).resolve(url)
    assert (target.host, target.addresses) == (host, addresses)
    assert target.url.raw_host.decode() == host


# --- DNS answers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answers",
    [
        [PUBLIC, "10.0.0.5"],
        ["10.0.0.5", PUBLIC],
        [PUBLIC, "127.0.0.1"],
        [PUBLIC, "::1"],
        [PUBLIC, "169.254.169.254"],
        [PUBLIC, "::ffff:192.168.1.1"],
        ["2606:4700:4700::1111", "fd00::1"],
        [PUBLIC, "fe80::1%eth0"],
        [PUBLIC, "not-an-address"],
    ],
)
async def test_name_with_any_non_public_answer_fails_closed(
    answers: list[str], guard: LoopbackOnly
) -> None:
    resolver = FakeResolver({"mixed.test": [answers]})
    policy = UrlPolicy(resolver=resolver)
    with pytest.raises(UrlDenied):
        await policy.resolve("http://mixed.test/")
    with pytest.raises(UrlDenied):
        await fetch("http://mixed.test/", policy=policy, network_backend=guard)
    assert guard.connected == []


async def test_name_with_only_public_answers_is_validated_with_every_answer() -> None:
    resolver = FakeResolver({"example.test": [[PUBLIC, PUBLIC, "2606:4700:4700::1111"]]})
    target = await UrlPolicy(resolver=resolver).resolve("https://Example.TEST./a?token=t#frag")
    assert target.addresses == (PUBLIC, "2606:4700:4700::1111")
    assert target.origin == "https://example.test:443"
    assert str(target.url) == "https://example.test/a?token=t"


async def test_name_that_does_not_resolve_is_a_fetch_error() -> None:
    async def nxdomain(host: str, port: int) -> Sequence[str]:
        raise OSError("Name or service not known")

    with pytest.raises(FetchError):
        await UrlPolicy(resolver=nxdomain).resolve("http://missing.test/")
    with pytest.raises(FetchError):
        await UrlPolicy(resolver=FakeResolver({"empty.test": [[]]})).resolve("http://empty.test/")


async def test_slow_resolver_is_bounded_by_the_resolve_timeout() -> None:
    async def hang(host: str, port: int) -> Sequence[str]:
        await anyio.sleep_forever()
        raise AssertionError

    with pytest.raises(FetchError) as caught:
        await UrlPolicy(resolver=hang, resolve_timeout_s=0.05).resolve("http://slow.test/")
    assert caught.value.timed_out


# --- the allowlist ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allow", "url", "allowed"),
    [
        ({"127.0.0.1"}, "http://127.0.0.1/", True),
        ({"127.0.0.1"}, "http://2130706433/", True),
        ({"127.0.0.1"}, "http://127.0.0.2/", False),
        ({"127.0.0.1"}, "http://[::1]/", False),
        ({"10.0.0.0/8"}, "http://10.9.8.7/", True),
        ({"10.0.0.0/8"}, "http://[::ffff:10.9.8.7]/", True),
        ({"10.0.0.0/8"}, "http://192.168.0.1/", False),
        ({"169.254.0.0/16"}, "http://169.254.1.1/", True),
        # A broad entry never opens a metadata endpoint; only the exact address does.
        ({"169.254.0.0/16"}, "http://169.254.169.254/", False),
        ({"169.254.169.254"}, "http://169.254.169.254/", True),
        # An IPv6-only host behind DNS64 allowlists NAT64: public IPv4 sites through it,
        # never what it would reach on the translator's side but for its own entry.
        ({"64:ff9b::/96"}, "http://[64:ff9b::808:808]/", True),
        ({"64:ff9b::/96"}, "http://[64:ff9b::a9fe:a9fe]/", False),
        ({"64:ff9b::/96"}, "http://[64:ff9b::7f00:1]/", False),
        ({"64:ff9b::/96", "127.0.0.1"}, "http://[64:ff9b::7f00:1]/", True),
        ({"64:ff9b:1::/48"}, "http://[64:ff9b:1::808:808]/", True),
        ({"64:ff9b:1::/48"}, "http://[64:ff9b:1:808:8:800::]/", True),
        ({"::/0"}, "http://[::a9fe:a9fe]/", False),
        ({"::/0"}, "http://[::7f00:1]/", False),
        ({"::/0"}, "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", False),
        # An address embedding two IPv4 ones (6to4 with an ISATAP interface id, a Teredo
        # server and client): an entry for one never opens the other.
        ({"10.0.0.0/8"}, "http://[2002:a00:1::5efe:a9fe:a9fe]/", False),
        ({"10.0.0.0/8"}, "http://[2002:a00:1::5efe:7f00:1]/", False),
        ({"10.0.0.0/8"}, "http://[2001:0:a00:1::80ff:fffe]/", False),
        ({"intranet.test"}, "http://intranet.test/", True),
        ({"intranet.test"}, "http://other.test/", False),
    ],
)
async def test_allowlist_opens_exactly_what_it_names(
    allow: set[str], url: str, allowed: bool
) -> None:
    resolver = FakeResolver({"intranet.test": [["10.1.1.1"]], "other.test": [["10.1.1.2"]]})
    policy = UrlPolicy(allow_private=frozenset(allow), resolver=resolver)
    if allowed:
        await policy.resolve(url)
    else:
        with pytest.raises(UrlDenied):
            await policy.resolve(url)


async def test_allowlisted_address_does_not_excuse_other_answers() -> None:
    resolver = FakeResolver({"localhost": [["127.0.0.1", "::1"]]})
    policy = UrlPolicy(allow_private=frozenset({"127.0.0.1"}), resolver=resolver)
    with pytest.raises(UrlDenied) as caught:
        await policy.resolve("http://localhost/")
    assert caught.value.reason == "loopback"


@pytest.mark.parametrize(
    "options",
    [
        {"allowed_schemes": frozenset({"ftp"})},
        {"allowed_schemes": frozenset()},
        {"allow_private": frozenset({"not a host!"})},
        {"max_redirects": -1},
        {"max_body_bytes": 0},
        {"read_timeout_s": 0},
    ],
)
def test_policy_rejects_unsafe_configuration(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        UrlPolicy(**options)


def test_policy_defaults_are_the_safe_ones() -> None:
    policy = UrlPolicy()
    assert policy.allowed_schemes == {"http", "https"}
    assert policy.allow_private == frozenset()
    assert (policy.max_redirects, policy.max_body_bytes) == (5, 2_000_000)


# --- redirects, against a real loopback server --------------------------------------------


def _loopback_policy(**options: Any) -> UrlPolicy:
    return UrlPolicy(allow_private=frozenset({"127.0.0.1"}), **options)


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.2:{port}/",  # loopback, but not the allowlisted address
        "http://[::1]:{port}/",
        "http://10.0.0.1/",
        "http://192.168.1.10:8080/admin",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://2130706434/",
        "http://0x7f.2/",
        "http://internal.test/",  # a name whose only answer is private
        "file:///etc/passwd",
        "http://user@127.0.0.1:{port}/",
    ],
)
async def test_redirect_to_a_private_address_is_refused_at_the_hop(
    location: str, server: Any, guard: LoopbackOnly
) -> None:
    port = _port(server.base_url)
    server.script(_redirect(location.format(port=port)), text_reply("never"))
    resolver = FakeResolver({"internal.test": [["192.168.1.1"]]})
    with pytest.raises(UrlDenied):
        await fetch(
            f"{server.base_url}/start",
            policy=_loopback_policy(resolver=resolver),
            network_backend=guard,
        )
    assert [seen.path for seen in server.requests] == ["/start"]
    assert set(guard.connected) == {"127.0.0.1"}


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_redirects_within_the_limit_are_followed_and_each_hop_validated(
    status: int, server: Any, guard: LoopbackOnly
) -> None:
    hops = [f"{server.base_url}/hop/{n}" for n in range(1, 6)]
    server.script(
        *(_redirect(hop, status) for hop in hops), text_reply("end", content_type="text/plain")
    )
    result = await fetch(
        f"{server.base_url}/start", policy=_loopback_policy(), network_backend=guard
    )
    assert (result.status, result.body, result.url) == (200, b"end", hops[-1])
    assert len(result.hops) == 6
    assert [seen.path for seen in server.requests][-1] == "/hop/5"


async def test_redirect_chain_longer_than_max_redirects_is_refused(
    server: Any, guard: LoopbackOnly
) -> None:
    server.script(*(_redirect(f"{server.base_url}/hop/{n}") for n in range(1, 10)))
    with pytest.raises(UrlDenied) as caught:
        await fetch(
            f"{server.base_url}/start",
            policy=_loopback_policy(max_redirects=3),
            network_backend=guard,
        )
    assert caught.value.reason == "redirects"
    assert len(server.requests) == 4  # the first request and three followed hops


@pytest.mark.parametrize(
    "location", ["http:127.0.0.1:1/", "https:example.test", "http:foo", "http:\\\\127.0.0.1/"]
)
async def test_a_redirect_to_no_valid_url_is_a_refusal_with_its_audit(
    location: str, server: Any, guard: LoopbackOnly
) -> None:
    """httpx reads the Location while answering: a malformed one must not escape raw, and
    the request already made stays in the audit."""
    server.script(_redirect(location), text_reply("never"))
    with pytest.raises(UrlDenied) as caught:
        await fetch(f"{server.base_url}/start", policy=_loopback_policy(), network_backend=guard)
    assert caught.value.reason == "invalid"
    assert [hop["origin"] for hop in caught.value.audit["hops"]] == [
        f"http://127.0.0.1:{_port(server.base_url)}"
    ]
    assert [seen.path for seen in server.requests] == ["/start"]


async def test_relative_redirect_is_resolved_against_the_hop(
    server: Any, guard: LoopbackOnly
) -> None:
    server.script(_redirect("../next?x=1"), text_reply("ok", content_type="text/plain"))
    result = await fetch(f"{server.base_url}/a/b", policy=_loopback_policy(), network_backend=guard)
    assert result.body == b"ok"
    assert server.requests[-1].path == "/next"


# --- pinning and DNS rebinding -------------------------------------------------------------


async def test_connection_is_pinned_to_the_validated_address(
    server: Any, guard: LoopbackOnly
) -> None:
    port = _port(server.base_url)
    resolver = FakeResolver({"pinned.test": [["127.0.0.1"]]})
    server.script(text_reply("pinned", content_type="text/plain"))
    result = await fetch(
        f"http://pinned.test:{port}/",
        policy=_loopback_policy(resolver=resolver),
        network_backend=guard,
    )
    assert result.body == b"pinned"
    # The name was never resolved by the system: the socket went to the pinned address,
    # while the request still names the host it asked for.
    assert guard.connected == ["127.0.0.1"]
    assert server.requests[0].headers["host"] == f"pinned.test:{port}"


async def test_dns_rebinding_to_private_cannot_happen_on_loopback(
    server: Any, guard: LoopbackOnly
) -> None:
    port = _port(server.base_url)
    # First answer allowed; a second lookup would see a private address.
    resolver = FakeResolver({"rebind.test": [["127.0.0.1"], ["10.0.0.1"]]})
    server.script(
        _redirect(f"http://rebind.test:{port}/again"), text_reply("same", content_type="text/plain")
    )
    result = await fetch(
        f"http://rebind.test:{port}/",
        policy=_loopback_policy(resolver=resolver),
        network_backend=guard,
    )
    assert result.body == b"same"
    assert resolver.calls == ["rebind.test"]
    assert set(guard.connected) == {"127.0.0.1"}


async def test_dns_rebinding_from_public_to_private_does_not_matter() -> None:
    """Public first, private second: only one resolution happens, the socket goes to it."""
    resolver = FakeResolver({"rebind.test": [[PUBLIC], ["127.0.0.1"]]})
    network = Scripted(
        [
            b"HTTP/1.1 200 OK\r\n",
            b"Content-Type: text/plain\r\n",
            b"Content-Length: 2\r\n\r\n",
            b"ok",
        ]
    )
    result = await fetch(
        "http://rebind.test/", policy=UrlPolicy(resolver=resolver), network_backend=network
    )
    assert result.body == b"ok"
    assert resolver.calls == ["rebind.test"]
    assert network.connected == [PUBLIC]


@asynccontextmanager
async def _serve_tls(certified_for: str) -> AsyncIterator[tuple[int, ssl.SSLContext, list[str]]]:
    """A loopback HTTPS server whose certificate names only ``certified_for``.

    Yields its port, a client context trusting its CA, and the SNI names it saw.
    """
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(certified_for).configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    sni: list[str] = []

    def record_sni(_sock: object, name: str, _context: object) -> None:
        sni.append(name)

    server_context.sni_callback = record_sni

    async def answer(stream: ByteStream) -> None:
        async with stream:
            request = b""
            try:
                while b"\r\n\r\n" not in request:
                    request += await stream.receive()
                await stream.send(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                    b"Content-Length: 3\r\nConnection: close\r\n\r\ntls"
                )
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return

    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = tcp.extra(SocketAttribute.local_port)
    listener = TLSListener(tcp, server_context, standard_compatible=False)
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, answer)
        yield port, client_context, sni
        tasks.cancel_scope.cancel()


async def test_tls_connection_is_pinned_but_verified_against_the_hostname(
    guard: LoopbackOnly,
) -> None:
    resolver = FakeResolver({"pinned.test": [["127.0.0.1"]]})
    async with _serve_tls("pinned.test") as (port, client_context, sni):
        result = await fetch(
            f"https://pinned.test:{port}/",
            policy=_loopback_policy(resolver=resolver),
            network_backend=guard,
            ssl_context=client_context,
        )
    assert result.body == b"tls"
    # The socket went to the validated address; SNI and the certificate check used the name.
    assert guard.connected == ["127.0.0.1"]
    assert sni == ["pinned.test"]


async def test_tls_certificate_for_another_name_is_refused(guard: LoopbackOnly) -> None:
    resolver = FakeResolver({"pinned.test": [["127.0.0.1"]]})
    async with _serve_tls("someone-else.test") as (port, client_context, _sni):
        with pytest.raises(FetchError) as caught:
            await fetch(
                f"https://pinned.test:{port}/",
                policy=_loopback_policy(resolver=resolver),
                network_backend=guard,
                ssl_context=client_context,
            )
    assert "certificate" in repr(caught.value.__cause__).lower()


async def test_audit_view_shows_only_origin_and_addresses(server: Any, guard: LoopbackOnly) -> None:
    server.script(text_reply("ok", content_type="text/plain"))
    result = await fetch(
        f"{server.base_url}/private/path?token=s3cret-value",
        policy=_loopback_policy(),
        network_backend=guard,
    )
    audit = result.audit_view()
    assert set(audit) == {"hops", "status"}
    assert [dict(hop) for hop in audit["hops"]] == [
        {"origin": server.base_url, "addresses": ("127.0.0.1",)}
    ]
    assert "s3cret" not in repr(audit)
    assert "/private" not in repr(audit)


# --- bounded bodies ----------------------------------------------------------------------------


async def test_body_larger_than_the_cap_is_truncated_while_streaming(
    server: Any, guard: LoopbackOnly
) -> None:
    chunk = b"x" * 65_536
    server.script(Reply(chunks=(chunk,) * 64, content_type="text/plain"))  # 4 MiB
    cap = 100_000
    result = await fetch(
        f"{server.base_url}/big", policy=_loopback_policy(max_body_bytes=cap), network_backend=guard
    )
    assert result.truncated
    assert result.bytes_read == len(result.body) <= cap


async def test_gzip_bomb_is_cut_at_the_cap(server: Any, guard: LoopbackOnly) -> None:
    bomb = gzip.compress(b"\0" * 50_000_000, compresslevel=9)
    assert len(bomb) < 100_000
    server.script(
        Reply(chunks=(bomb,), content_type="text/plain", headers={"content-encoding": "gzip"})
    )
    cap = 200_000
    result = await fetch(
        f"{server.base_url}/bomb",
        policy=_loopback_policy(max_body_bytes=cap),
        network_backend=guard,
    )
    assert result.truncated
    assert result.bytes_read == len(result.body) <= cap


async def test_body_within_the_cap_is_complete(server: Any, guard: LoopbackOnly) -> None:
    server.script(
        Reply(
            chunks=(gzip.compress(b"hello " * 100),),
            content_type="text/plain",
            headers={"content-encoding": "gzip"},
        )
    )
    result = await fetch(f"{server.base_url}/", policy=_loopback_policy(), network_backend=guard)
    assert (result.body, result.truncated) == (b"hello " * 100, False)


async def test_a_gzip_body_cut_short_is_an_error_not_a_whole_body(
    server: Any, guard: LoopbackOnly
) -> None:
    whole = gzip.compress(bytes(range(256)) * 2000)
    server.script(
        Reply(
            chunks=(whole[: len(whole) // 2],),
            content_type="text/plain",
            headers={"content-encoding": "gzip"},
        )
    )
    with pytest.raises(FetchError) as caught:
        await fetch(f"{server.base_url}/", policy=_loopback_policy(), network_backend=guard)
    assert "ended before its end" in str(caught.value)


async def test_every_member_of_a_gzip_body_is_read_and_trailing_bytes_are_refused(
    server: Any, guard: LoopbackOnly
) -> None:
    members = gzip.compress(b"FIRST\n") + gzip.compress(b"SECOND\n")
    encoded = {"content-encoding": "gzip"}
    server.script(
        # Split inside the second member's header: a member may start in any chunk.
        Reply(chunks=(members[:30], members[30:]), content_type="text/plain", headers=encoded),
        Reply(chunks=(gzip.compress(b"x") + b"trailing",), headers=encoded),
    )
    result = await fetch(f"{server.base_url}/", policy=_loopback_policy(), network_backend=guard)
    assert (result.body, result.truncated) == (b"FIRST\nSECOND\n", False)
    with pytest.raises(FetchError) as caught:
        await fetch(f"{server.base_url}/", policy=_loopback_policy(), network_backend=guard)
    assert "corrupt" in str(caught.value)


async def test_encoding_that_cannot_be_bounded_is_refused(server: Any, guard: LoopbackOnly) -> None:
    server.script(Reply(chunks=(b"\x00" * 10,), headers={"content-encoding": "br"}))
    with pytest.raises(FetchError):
        await fetch(f"{server.base_url}/", policy=_loopback_policy(), network_backend=guard)


async def test_silent_server_is_bounded_by_the_read_timeout(guard: LoopbackOnly) -> None:
    async def silent(stream: Any) -> None:
        async with stream:
            await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, silent)
        with pytest.raises(FetchError) as caught:
            await fetch(
                f"http://127.0.0.1:{port}/",
                policy=_loopback_policy(read_timeout_s=0.2),
                network_backend=guard,
            )
        tasks.cancel_scope.cancel()
    assert caught.value.timed_out


ANY_TEXT = st.text(st.characters(blacklist_categories=()), max_size=120)  # surrogates too


@settings(max_examples=400, deadline=None)
@given(
    url=st.one_of(
        ANY_TEXT,
        st.builds(lambda rest: "http://" + rest, ANY_TEXT),
        st.builds(lambda rest: "https://[" + rest, ANY_TEXT),
    )
)
def test_the_policy_answers_any_text_with_a_target_or_a_refusal(url: str) -> None:
    """Property: no parser or codec error escapes the URL policy, whatever the text."""

    async def resolve() -> None:
        policy = UrlPolicy(resolver=lambda host, port: _answers(host))
        with contextlib.suppress(UrlDenied, FetchError):
            target = await policy.resolve(url)
            target.url.raw_path.decode("ascii")  # what the request line will carry
            assert target.host.isascii()

    anyio.run(resolve)


async def _answers(host: str) -> Sequence[str]:
    return [PUBLIC]


@pytest.mark.parametrize(
    "url",
    ["http://example.com/\udcff", "http://\udcff.example/", "http://[::1\udcff]/", "\ud800"],
)
async def test_a_url_with_a_lone_surrogate_is_refused(url: str) -> None:
    with pytest.raises(UrlDenied) as caught:
        await UrlPolicy(resolver=FakeResolver()).resolve(url)
    assert caught.value.reason == "invalid"
