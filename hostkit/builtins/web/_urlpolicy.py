"""The shared URL policy: strict parsing, every DNS answer checked, connections pinned.

Server-side request forgery is the risk of any effect that fetches a URL the
model chose: ``http://169.254.169.254/`` reads cloud credentials and
``http://127.0.0.1:6379/`` talks to a local database. Checking the URL text
is not enough, because a name can resolve to a private address, resolve
differently a second time (DNS rebinding) or redirect there. So:

- one strict parser owns the URL; numeric hosts in any spelling libc accepts
  (``2130706433``, ``0177.0.0.1``, ``0x7f.1``) are normalised the way browsers
  do, and forms that parsers disagree on are refused rather than guessed;
- every DNS answer is checked and one bad answer fails the whole host closed;
- the connection goes to an address that was checked: a pinning network
  backend maps the URL host to its validated addresses, so the URL, Host
  header, TLS SNI and certificate check keep the real name while nothing
  resolves it a second time;
- each redirect hop is validated the same way before it is requested;
- the body is capped while it streams, compressed or not.

Audit views show only the origin and the validated addresses, never the path
or query, which may carry tokens.

Fetching under the policy (the pinning backend, redirects, the capped body)
lives in ``_fetch``, which imports this module; this one never imports it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from hostkit.builtins.web._errors import FetchError, UrlDenied
from hostkit.errors import ConfigError, bounded
from hostkit.freeze import FrozenMap
from hostkit.types import bounded_metadata, is_count, is_seconds

if TYPE_CHECKING:
    import httpx

__all__ = ["CheckedUrl", "Resolver", "UrlPolicy", "ValidatedTarget"]

# httpx loads with the first URL checked (each function below imports it): a Host whose
# agents fetch nothing, or a command line reading its config, never needs it.

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``(host, port) -> addresses``: every answer for the name, as IP address strings."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_DEFAULT_PORTS = {"http": 80, "https": 443}

# Cloud metadata and credential endpoints. Some are public addresses (Azure's
# WireServer), so they are listed by address, and a broad allowlist entry never
# opens them: only an entry naming exactly that address does.
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "169.254.170.23",
        "169.254.42.42",
        "168.63.129.16",
        "100.100.100.200",
        "192.0.0.192",
        "fd00:ec2::254",
        "fd00:ec2::23",
        "fd20:ce::254",
    )
)
# Only global unicast IPv6 is public; NAT64, IPv4-compatible and the rest fail closed.
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
# The IANA IPv4 and IPv6 Special-Purpose Address Registries (as of 2026), as this policy
# reads them: each range with the reason it is refused, or None where IANA marks it
# globally reachable. Ours rather than ipaddress's is_private/is_global, whose tables
# changed in 3.11.10, 3.12.4 and 3.13 (gh-113171): a verdict must not depend on the
# interpreter. The longest matching prefix decides. 6to4 and Teredo are judged by the
# IPv4 addresses they embed (``_embedded``), not by their prefix; NAT64, IPv4-compatible
# and SRv6 space fall outside 2000::/3 and stay "reserved".
_SPECIAL_PURPOSE = tuple(
    sorted(
        (
            (ipaddress.ip_network(net), category)
            for net, category in (
                ("0.0.0.0/8", "private"),  # "this network"
                ("0.0.0.0/32", "unspecified"),
                ("10.0.0.0/8", "private"),
                ("100.64.0.0/10", "non-global"),  # shared address space (carrier-grade NAT)
                ("127.0.0.0/8", "loopback"),
                ("169.254.0.0/16", "link-local"),
                ("172.16.0.0/12", "private"),
                ("192.0.0.0/24", "non-global"),  # IETF protocol assignments
                ("192.0.0.0/29", "private"),  # IPv4 service continuity prefix
                ("192.0.0.9/32", None),  # port control protocol anycast
                ("192.0.0.10/32", None),  # traversal using relays around NAT anycast
                ("192.0.0.170/31", "private"),  # NAT64/DNS64 discovery
                ("192.0.2.0/24", "private"),  # documentation (TEST-NET-1)
                ("192.31.196.0/24", None),  # AS112-v4
                ("192.52.193.0/24", None),  # automatic multicast tunneling
                ("192.88.99.0/24", "non-global"),  # deprecated 6to4 relay anycast
                ("192.168.0.0/16", "private"),
                ("192.175.48.0/24", None),  # direct delegation AS112 service
                ("198.18.0.0/15", "private"),  # benchmarking
                ("198.51.100.0/24", "private"),  # documentation (TEST-NET-2)
                ("203.0.113.0/24", "private"),  # documentation (TEST-NET-3)
                ("224.0.0.0/4", "multicast"),
                ("240.0.0.0/4", "private"),  # reserved for future use
                ("255.255.255.255/32", "private"),  # limited broadcast
                ("::/128", "unspecified"),
                ("::1/128", "loopback"),
                ("100::/64", "private"),  # discard-only
                ("2001::/23", "private"),  # IETF protocol assignments
                ("2001::/32", None),  # Teredo
                ("2001:1::1/128", None),  # port control protocol anycast
                ("2001:1::2/128", None),  # traversal using relays around NAT anycast
                ("2001:1::3/128", None),  # DNS-SD service registration protocol anycast
                ("2001:2::/48", "private"),  # benchmarking
                ("2001:3::/32", None),  # automatic multicast tunneling
                ("2001:4:112::/48", None),  # AS112-v6
                ("2001:10::/28", "private"),  # deprecated ORCHID
                ("2001:20::/28", None),  # ORCHIDv2
                ("2001:30::/28", None),  # drone remote ID protocol entity tags
                ("2001:db8::/32", "private"),  # documentation
                ("2002::/16", None),  # 6to4
                ("2620:4f:8000::/48", None),  # direct delegation AS112 service
                ("3fff::/20", "non-global"),  # documentation
                ("fc00::/7", "private"),  # unique local
                ("fe80::/10", "link-local"),
                ("ff00::/8", "multicast"),
            )
        ),
        key=lambda entry: -entry[0].prefixlen,
    )
)
_ISATAP_MARKERS = (b"\x00\x00\x5e\xfe", b"\x02\x00\x5e\xfe")
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")

_SCHEME_AUTHORITY = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)(.*)$", re.DOTALL)
_AUTHORITY = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[^:\[\]]+))(?::(?P<port>[0-9]{1,5}))?$"
)
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,62})$")
_HEX = frozenset("0123456789abcdef")
_DIGITS = {8: frozenset("01234567"), 10: frozenset("0123456789"), 16: _HEX}


@dataclass(frozen=True, slots=True)
class ValidatedTarget:
    """A URL whose host's every address passed the policy; requests go only there."""

    url: httpx.URL = field(repr=False)
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]

    @property
    def origin(self) -> str:
        return _origin(self.scheme, self.host, self.port)

    def audit_view(self) -> FrozenMap:
        """The origin and the validated addresses: never path, query or credentials."""
        return bounded_metadata({"origin": self.origin, "addresses": list(self.addresses)})


@dataclass(frozen=True, slots=True)
class CheckedUrl:
    """A URL that passed every check needing no network: what an approver is shown.

    ``addresses`` holds the URL's literal address, checked; a name is
    resolved, and every answer checked, only when the fetch runs.
    """

    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...] = ()

    @property
    def origin(self) -> str:
        return _origin(self.scheme, self.host, self.port)

    def audit_view(self) -> FrozenMap:
        """The origin (and a literal address): never path, query or credentials."""
        view: dict[str, object] = {"origin": self.origin}
        if self.addresses:
            view["addresses"] = list(self.addresses)
        return bounded_metadata(view)


async def _system_resolver(host: str, port: int) -> Sequence[str]:
    answers = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(sockaddr[0]) for *_, sockaddr in answers]


@dataclass(frozen=True, slots=True, kw_only=True)
class UrlPolicy:
    """Which URLs an effect may fetch, and every bound on fetching them.

    ``allow_private`` names hosts or addresses/CIDRs that may be non-public
    (a loopback test server, an intranet); a metadata address needs an entry
    naming exactly that address. ``resolver`` replaces the system resolver
    (tests inject one; it must return every answer).
    """

    allowed_schemes: frozenset[str] = frozenset({"http", "https"})
    allow_private: frozenset[str] = frozenset()
    max_redirects: int = 5
    max_body_bytes: int = 2_000_000
    max_url_chars: int = 4_096
    resolve_timeout_s: float = 10.0
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 20.0
    total_timeout_s: float = 60.0
    resolver: Resolver | None = field(default=None, repr=False, compare=False)
    _hosts: frozenset[str] = field(init=False, repr=False, compare=False)
    _networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not self.allowed_schemes or not self.allowed_schemes <= set(_DEFAULT_PORTS):
            raise ConfigError("only http and https can be allowed", key="allowed_schemes")
        # NaN passes a "< 1" check and then bounds nothing; inf waits forever.
        for key in ("max_redirects", "max_body_bytes", "max_url_chars"):
            if not is_count(getattr(self, key), low=0 if key == "max_redirects" else 1):
                raise ConfigError("must be a positive integer bound", key=key)
        for key in ("resolve_timeout_s", "connect_timeout_s", "read_timeout_s", "total_timeout_s"):
            if not is_seconds(getattr(self, key)):
                raise ConfigError("must be a positive, finite number of seconds", key=key)
        hosts, networks = _allowlist(self.allow_private)
        object.__setattr__(self, "_hosts", hosts)
        object.__setattr__(self, "_networks", networks)

    @staticmethod
    def check_allow_private(entries: Iterable[str]) -> None:
        """The syntax check of ``allow_private`` alone (no I/O, no policy built): a
        ``ConfigError`` (key ``allow_private``) naming the first entry that is neither a
        host nor a CIDR. For configuration, refused when it is read rather than at the
        first turn that builds the policy."""
        _allowlist(entries)

    def check(self, url: str) -> CheckedUrl:
        """Every check of ``url`` that asks no one: parsing, scheme, credentials, port, and a
        literal address's category. For before an approval: a DNS lookup already reaches
        whoever serves the name, and a model can spell data into it (``<secret>.evil.example``).

        Raises ``UrlDenied`` for a refused URL, literal address or loopback name.
        """
        scheme, host, port, literal, _ = self._parse(url)
        origin = _origin(scheme, host, port)
        if literal is not None:
            addresses = self._check(origin, host, (str(literal),))
            return CheckedUrl(scheme=scheme, host=host, port=port, addresses=addresses)
        # Names that are loopback by definition (RFC 6761) need no lookup to refuse.
        if (host == "localhost" or host.endswith(".localhost")) and host not in self._hosts:
            raise UrlDenied(
                f"{origin} is a loopback name; only public addresses are allowed unless "
                "allowlisted",
                reason="loopback",
            )
        return CheckedUrl(scheme=scheme, host=host, port=port)

    async def resolve(self, url: str) -> ValidatedTarget:
        """Parse ``url``, resolve its host once and check every answer.

        Raises ``UrlDenied`` for a refused URL or address, ``FetchError`` when
        the name does not resolve in time.
        """
        return await self._validate(url, pins={})

    async def _validate(self, url: str, *, pins: dict[str, tuple[str, ...]]) -> ValidatedTarget:
        scheme, host, port, literal, request_url = self._parse(url)
        if literal is not None:
            answers: Sequence[str] = (str(literal),)
        elif host in pins:
            # Already validated in this fetch: reuse it, never ask DNS twice.
            answers = pins[host]
        else:
            answers = await self._lookup(host, port)
        addresses = self._check(_origin(scheme, host, port), host, answers)
        pins[host] = addresses
        return ValidatedTarget(
            url=request_url, scheme=scheme, host=host, port=port, addresses=addresses
        )

    def _pinned(
        self, url: str, target: ValidatedTarget, *, pins: dict[str, tuple[str, ...]]
    ) -> ValidatedTarget:
        """``target`` (from ``resolve(url)`` earlier) as the first hop, its addresses pinned.

        The URL is parsed again and must be the one that was validated, and
        every address is checked again against this policy: a target from
        another URL or a laxer policy is refused, not trusted.
        """
        _, host, _, _, request_url = self._parse(url)
        if request_url != target.url or host != target.host:
            raise UrlDenied("the validated target is not this URL", reason="invalid")
        addresses = self._check(target.origin, host, target.addresses)
        pins[host] = addresses
        return target

    async def _redirect(
        self, base: ValidatedTarget, location: str, *, hops: int, pins: dict[str, tuple[str, ...]]
    ) -> ValidatedTarget:
        """Validate the hop a redirect from ``base`` to ``location`` names, after ``hops`` hops.

        Refuses it once the policy's ``max_redirects`` are spent.
        """
        if hops > self.max_redirects:
            raise UrlDenied(f"more than {self.max_redirects} redirects", reason="redirects")
        return await self._validate(_join(base.url, location), pins=pins)

    def _parse(self, url: str) -> tuple[str, str, int, IPAddress | None, httpx.URL]:
        """The URL's canonical parts; any text that is not a clear URL is ``UrlDenied``.

        Parsers and codecs below raise ``InvalidURL``, ``ValueError`` or
        ``UnicodeError`` for text nobody anticipated; none of them escapes raw.
        """
        if not isinstance(url, str) or not url or len(url) > self.max_url_chars:
            raise UrlDenied("the URL is empty or too long", reason="invalid")
        # Whitespace, controls and backslashes are where parsers disagree; lone surrogates
        # cannot be encoded at all; refuse them.
        if any(
            ch.isspace() or ch == "\\" or ord(ch) < 0x20 or ord(ch) == 0x7F or _is_surrogate(ch)
            for ch in url
        ):
            raise UrlDenied(
                "the URL contains whitespace, control, backslash or unencodable characters",
                reason="invalid",
            )
        import httpx

        try:
            return self._parse_parts(url)
        except (httpx.InvalidURL, ValueError) as exc:  # UnicodeError is a ValueError
            raise UrlDenied("the URL is malformed", reason="invalid") from exc

    def _parse_parts(self, url: str) -> tuple[str, str, int, IPAddress | None, httpx.URL]:
        import httpx

        match = _SCHEME_AUTHORITY.match(url)
        if match is None:
            raise UrlDenied("the URL must be absolute (scheme://host/...)", reason="invalid")
        scheme, authority, rest = match.group(1).lower(), match.group(2), match.group(3)
        if scheme not in self.allowed_schemes:
            raise UrlDenied(f"the {bounded(scheme, 20)!r} scheme is not allowed", reason="scheme")
        if "@" in authority:
            raise UrlDenied("URLs with credentials are not allowed", reason="credentials")
        parts = _AUTHORITY.match(authority)
        if parts is None:
            raise UrlDenied("the URL's host or port is malformed", reason="invalid")
        port = int(parts["port"]) if parts["port"] else _DEFAULT_PORTS[scheme]
        if not 0 < port < 65_536:
            raise UrlDenied("the URL's port is out of range", reason="invalid")
        host, literal = _canonical_host(parts["v6"], parts["name"])
        netloc = f"[{host}]" if ":" in host else host
        if port != _DEFAULT_PORTS[scheme]:
            netloc = f"{netloc}:{port}"
        try:
            request_url = httpx.URL(f"{scheme}://{netloc}{rest.partition('#')[0]}")
        except httpx.InvalidURL as exc:
            raise UrlDenied("the URL's path or query is malformed", reason="invalid") from exc
        # The request is built from our canonical parts; make sure httpx kept them.
        if request_url.raw_host.decode("ascii") != host or request_url.scheme != scheme:
            raise UrlDenied("the URL could not be represented unambiguously", reason="invalid")
        return scheme, host, port, literal, request_url

    async def _lookup(self, host: str, port: int) -> Sequence[str]:
        resolver = self.resolver or _system_resolver
        try:
            with anyio.fail_after(self.resolve_timeout_s):
                answers = list(await resolver(host, port))
        except TimeoutError as exc:
            raise FetchError(f"resolving {host} timed out", timed_out=True) from exc
        except OSError as exc:
            raise FetchError(f"{host} did not resolve") from exc
        if not answers:
            raise FetchError(f"{host} has no addresses")
        return answers

    def _check(self, origin: str, host: str, answers: Iterable[str]) -> tuple[str, ...]:
        """Every answer must be public or allowlisted; one bad answer refuses the host."""
        checked: list[str] = []
        for answer in answers:
            try:
                address = ipaddress.ip_address(answer)
            except ValueError as exc:
                raise UrlDenied(
                    f"{origin} resolved to a malformed address", reason="invalid"
                ) from exc
            if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
                raise UrlDenied(f"{origin} resolved to a scoped address", reason="link-local")
            for category, subject in _categories(address):
                if not self._allowed(subject, host, category):
                    raise UrlDenied(
                        f"{origin} resolves to a {category} address; only public addresses "
                        "are allowed unless allowlisted",
                        reason=category,
                    )
            if str(address) not in checked:
                checked.append(str(address))
        return tuple(checked)

    def _allowed(self, address: IPAddress, host: str, category: str) -> bool:
        plain = _unmapped(address)
        if category == "metadata":
            return any(
                net.num_addresses == 1 and plain == net.network_address for net in self._networks
            )
        if host in self._hosts:
            return True
        return any(plain.version == net.version and plain in net for net in self._networks)


def _origin(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _join(base: httpx.URL, location: str) -> str:
    import httpx

    try:
        return str(base.join(location))
    except (httpx.InvalidURL, ValueError) as exc:
        raise UrlDenied("the redirect location is malformed", reason="invalid") from exc


def _is_surrogate(ch: str) -> bool:
    return 0xD800 <= ord(ch) <= 0xDFFF


def _allowlist(
    entries: Iterable[str],
) -> tuple[frozenset[str], tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]]:
    """``allow_private`` as host names and networks; ``ConfigError`` for any other entry."""
    hosts: set[str] = set()
    networks = []
    for entry in entries:
        network = _network(entry)
        if network is not None:
            networks.append(network)
            continue
        name = entry.strip().lower().removesuffix(".")
        if not _is_hostname(name):
            # Bounded: the entry comes from configuration, and ends up in logs.
            raise ConfigError(
                f"{bounded(repr(entry), 120)} is neither a host nor a CIDR", key="allow_private"
            )
        hosts.add(name)
    return frozenset(hosts), tuple(networks)


def _network(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """``entry`` as a CIDR, or None when it is none (a host name).

    Strict: ``10.1.2.3/8`` is refused, not widened to ``10.0.0.0/8``: the operator
    meant one address or the whole network, and guessing the wider one would let
    ``web.extract`` reach addresses nobody listed (``/0``: every private address).
    """
    text = entry.strip()
    try:
        return ipaddress.ip_network(text)
    except ValueError:
        pass
    try:
        widened = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    address = ipaddress.ip_interface(text).ip
    raise ConfigError(
        f"{bounded(repr(entry), 120)} has host bits set; did you mean {widened} "
        f"or {address}/{address.max_prefixlen}?",
        key="allow_private",
    )


def _is_hostname(name: str) -> bool:
    labels = name.split(".")
    return 0 < len(name) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def _canonical_host(v6: str | None, name: str | None) -> tuple[str, IPAddress | None]:
    """The host as it will be requested, and its address when it is a literal."""
    if v6 is not None:
        try:
            literal = ipaddress.IPv6Address(v6)
        except ValueError as exc:
            raise UrlDenied("the URL's IPv6 host is malformed", reason="invalid") from exc
        return str(literal), literal
    assert name is not None
    if not name.isascii():
        import httpx

        try:
            name = httpx.URL("http://placeholder/").copy_with(host=name).raw_host.decode("ascii")
        except (httpx.InvalidURL, UnicodeError) as exc:
            raise UrlDenied("the URL's host is not a valid name", reason="invalid") from exc
    name = name.lower().removesuffix(".")
    if not _is_hostname(name):
        raise UrlDenied("the URL's host is not a valid name", reason="invalid")
    last = name.rsplit(".", 1)[-1]
    if last.isdigit() or (last.startswith("0x") and set(last[2:]) <= _HEX):
        # A host that ends in a number is an IPv4 address to every browser and to
        # inet_aton, never a name: normalise it or refuse it, never resolve it.
        address = _parse_ipv4(name)
        if address is None:
            raise UrlDenied("the URL's numeric host is ambiguous", reason="ambiguous-host")
        return str(address), address
    return name, None


def _parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The WHATWG/inet_aton IPv4 reading of ``host``, or None where it is not exact.

    Parts are decimal, ``0x`` hex or leading-zero octal; the last part fills
    the remaining bytes. Empty parts, a bare ``0x``, bad digits and overflow
    are refused instead of guessed.
    """
    parts = host.split(".")
    if len(parts) > 4:
        return None
    numbers = []
    for part in parts:
        if part[:2] == "0x":
            digits, base = part[2:], 16
        elif len(part) > 1 and part[0] == "0":
            digits, base = part[1:], 8
        else:
            digits, base = part, 10
        # int() alone would also take "0x0x1", "1_0" and signs; only plain digits count.
        if not digits or len(digits) > 32 or not set(digits) <= _DIGITS[base]:
            return None
        numbers.append(int(digits, base))
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        return None
    value = last + sum(n << (8 * (3 - i)) for i, n in enumerate(head))
    return ipaddress.IPv4Address(value)


def _unmapped(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _embedded(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address reaches through a translator or tunnel: 6to4,
    ISATAP, Teredo (server and client), NAT64 (RFC 6052, every prefix length the
    local-use prefix may use) and the deprecated IPv4-compatible form."""
    packed = address.packed
    inner = [address.sixtofour] if address.sixtofour is not None else []
    if packed[8:12] in _ISATAP_MARKERS:
        inner.append(ipaddress.IPv4Address(packed[12:]))
    if address.teredo is not None:
        inner.extend(address.teredo)
    if address in _NAT64_WELL_KNOWN or (address in _IPV4_COMPATIBLE and int(address) > 1):
        inner.append(ipaddress.IPv4Address(packed[12:]))
    elif address in _NAT64_LOCAL:
        # RFC 6052: the IPv4 bits skip bits 64-71; where they start depends on the prefix
        # length, which only the translator knows. Every reading is judged, but the zero
        # padding of another length (0.0.0.0/8, no destination) is no reading.
        spread = packed[:8] + packed[9:]
        readings = (ipaddress.IPv4Address(spread[at : at + 4]) for at in (6, 7, 8, 11))
        inner.extend(reading for reading in readings if reading not in _THIS_NETWORK)
    return inner


def _categories(address: IPAddress) -> list[tuple[str, IPAddress]]:
    """Each reason ``address`` is not public, with the address an allowlist entry must
    name for it; empty for a public address. Its own category, and that of every IPv4
    address it embeds, judged by that address (a broad NAT64 entry opens public IPv4
    sites, never their loopback), all of which must be allowed; an embedded metadata
    address is opened only by an entry naming the IPv6 address itself."""
    address = _unmapped(address)
    if address in _METADATA:
        return [("metadata", address)]
    found: list[tuple[str, IPAddress]] = []
    if isinstance(address, ipaddress.IPv6Address):
        for inner in _embedded(address):
            for category, subject in _categories(inner):
                if category == "metadata":
                    return [(category, address)]
                found.append((category, subject))
    own = _category(address)
    if own is not None:
        found.append((own, address))
    return found


def _category(address: IPAddress) -> str | None:
    """The category that makes ``address`` itself not public, or None: its longest match
    in ``_SPECIAL_PURPOSE``; IPv6 outside global unicast that no entry names is reserved."""
    for network, category in _SPECIAL_PURPOSE:
        if address.version == network.version and address in network:
            return category
    if isinstance(address, ipaddress.IPv6Address) and address not in _GLOBAL_UNICAST_V6:
        return "reserved"
    return None
